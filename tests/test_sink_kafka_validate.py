"""``consumer=kafka``'s row validation (``KafkaTopicKind.validate``) over pure tables.

The size rule is checked against kafka-python's own estimator (the function the producer
calls before it refuses a record, ``DefaultRecordBatchBuilder.estimate_size_in_bytes``) as
the oracle, with the sink's four headers at their largest; the real producer and broker at
the limit are in integration_tests/test_kafka_consumer_rows.py.
"""

from __future__ import annotations

import pickle
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest
from kafka.record.default_records import DefaultRecordBatchBuilder
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
)

from sink.consumers.consumer_kind import RowRejection
from sink.consumers.kafka import kafka_kind
from sink.consumers.kafka.kafka_kind import KAFKA_TOPIC
from sink.consumers.kafka.kafka_options import KafkaTopicSettings
from sink.consumers.kafka.kafka_rows import H_BUNDLE, H_COUNT, H_GT, H_INDEX, messages
from sink.options import SinkOptions
from state.errors import ConfigError

HEADER = pa.struct([("key", pa.string()), ("value", pa.binary())])
HEADERS = pa.list_(HEADER)
LARGEST = b"9" * 19  # an int64 printed in decimal takes at most 19 digits


def settings(limit: int | None = None, partitions: int | None = None) -> KafkaTopicSettings:
    config = () if limit is None else (("max.request.size", str(limit)),)
    return KafkaTopicSettings(bootstrap="h:9092", topic="out", config=config, partitions=partitions)


def oracle(
    key: bytes | None, value: bytes | None, headers: Sequence[tuple[str, bytes | None]]
) -> int:
    """What kafka-python's producer compares with max.request.size for the message the sink
    would send, its own headers holding 19-digit numbers."""
    sink = [(name, LARGEST) for name in (H_BUNDLE, H_GT, H_INDEX, H_COUNT)]
    size: int = DefaultRecordBatchBuilder.estimate_size_in_bytes(key, value, [*headers, *sink])
    return size


def table(**columns: Any) -> pa.Table:
    return pa.table(columns)


def value_for(size: int, key: bytes | None = None, headers: Any = ()) -> bytes:
    """A value that makes the message exactly ``size`` bytes by the oracle."""
    n = size - oracle(key, b"", list(headers))
    while oracle(key, b"x" * n, list(headers)) > size:
        n -= 1
    assert oracle(key, b"x" * n, list(headers)) == size, "no value length hits it exactly"
    return b"x" * n


def validate(t: pa.Table, s: KafkaTopicSettings | None = None) -> list[RowRejection]:
    return KAFKA_TOPIC.validate(s or settings(), t)


# --- size -----------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", [266, 1_000, 8_395, 8_397, 20_000])
def test_a_message_exactly_at_max_request_size_is_accepted_one_byte_more_is_not(
    limit: int,
) -> None:
    """Also where the value's length takes one byte more (63 -> 64, 8,191 -> 8,192 bytes:
    the message one byte longer grows by two)."""
    at = value_for(limit)
    over = at + b"x"
    t = table(value=pa.array([at, over], pa.binary()))
    assert oracle(None, at, []) == limit and oracle(None, over, []) > limit
    (rejection,) = validate(t, settings(limit))
    assert rejection.row == 1 and rejection.column is None
    size = oracle(None, over, [])
    assert f"record of {size:,} bytes" in rejection.reason
    assert f"max.request.size {limit:,}" in rejection.reason


def test_the_size_counts_key_and_headers_and_the_sink_headers() -> None:
    limit = 5_000
    key = b"k" * 300
    hdrs = [("trace", b"t" * 100), ("gtb.bundle", b"999")]
    at = value_for(limit, key, hdrs)
    t = table(
        key=pa.array([key, key, None], pa.binary()),
        value=pa.array([at, at + b"x", at + b"x" * 300], pa.binary()),
        headers=pa.array([hdrs, hdrs, []], HEADERS),
    )
    # the third row has neither key nor headers: 300 bytes more of value still fit
    assert oracle(None, at + b"x" * 300, []) <= limit
    assert [r.row for r in validate(t, settings(limit))] == [1]


def test_many_headers_widen_the_header_count() -> None:
    """60 item headers and the sink's 4 make 64: their count takes two bytes."""
    limit = 4_000
    hdrs = [(f"h{i:02d}", b"") for i in range(60)]
    at = value_for(limit, None, hdrs)
    assert oracle(None, at, hdrs[:59]) < limit - 4  # one header less is 4+ bytes less
    t = table(
        value=pa.array([at, at + b"x"], pa.binary()),
        headers=pa.array([hdrs, hdrs], HEADERS),
    )
    assert [r.row for r in validate(t, settings(limit))] == [1]


def test_the_default_limit_is_the_producers() -> None:
    from kafka import KafkaProducer

    limit = KafkaProducer.DEFAULT_CONFIG["max_request_size"]
    assert limit == 1_048_576
    at = value_for(limit)
    t = table(value=pa.array([at, at + b"x"], pa.binary()))
    assert [r.row for r in validate(t)] == [1]


def test_string_columns_count_their_bytes_and_large_types_are_read_alike() -> None:
    limit = 2_000
    at = value_for(limit, "é".encode())
    text = at.decode()
    t = pa.table(
        {
            "key": pa.array(["é", "é"], pa.large_string()),
            "value": pa.array([text, text + "é"], pa.large_string()),
        }
    )
    assert [r.row for r in validate(t, settings(limit))] == [1]


def test_a_malformed_max_request_size_is_refused_when_parsed() -> None:
    raw = {
        "pipeline.id": "p",
        "state.uri": "memory://v",
        "consumer": "kafka",
        "consumer.kafka.bootstrap.servers": "h:9092",
        "consumer.topic": "out",
        "consumer.kafka.max.request.size": "1mb",
    }
    with pytest.raises(ConfigError) as info:
        SinkOptions.parse(raw)
    assert info.value.option == "consumer.kafka.max.request.size"
    assert "'1mb'" in str(info.value) and "bytes" in str(info.value)


# --- partition ------------------------------------------------------------------------------


def test_a_partition_outside_the_topic_is_rejected() -> None:
    t = table(
        value=pa.array([b"a"] * 6, pa.binary()),
        partition=pa.array([0, 2, 3, -1, None, 7], pa.int32()),
    )
    rejections = validate(t, settings(partitions=3))
    assert [(r.row, r.column) for r in rejections] == [
        (2, "partition"),
        (3, "partition"),
        (5, "partition"),
    ]
    assert "partition 3" in rejections[0].reason
    assert "'out' has 3 partitions (0-2)" in rejections[0].reason


def test_without_a_recorded_partition_count_only_negative_partitions_are_rejected() -> None:
    t = table(
        value=pa.array([b"a"] * 3, pa.binary()), partition=pa.array([5, -2, None], pa.int32())
    )
    assert [(r.row, r.column) for r in validate(t, settings())] == [(1, "partition")]


# --- nulls and encodings ------------------------------------------------------------------


def test_nulls_the_kafka_consumer_sends_as_they_are() -> None:
    """A null value is a tombstone, with or without a key; no key; no headers."""
    t = table(
        key=pa.array([b"k", None, None], pa.binary()),
        value=pa.array([None, None, b"v"], pa.binary()),
        headers=pa.array([None, [], None], HEADERS),
        partition=pa.array([None, None, None], pa.int32()),
    )
    assert validate(t, settings(partitions=1)) == []


def test_headers_with_a_null_entry_key_or_value_are_rejected() -> None:
    t = table(
        value=pa.array([b"a"] * 4, pa.binary()),
        headers=pa.array(
            [
                [{"key": "ok", "value": b"1"}],
                [{"key": "ok", "value": b"1"}, None],
                [{"key": None, "value": b"1"}],
                [{"key": "trace", "value": None}],
            ],
            HEADERS,
        ),
    )
    rejections = validate(t)
    assert [(r.row, r.column) for r in rejections] == [
        (1, "headers"),
        (2, "headers"),
        (3, "headers"),
    ]
    assert "header 2 is null" in rejections[0].reason
    assert "header 1 has a null key" in rejections[1].reason
    assert "header 'trace' has a null value" in rejections[2].reason


def _invalid_utf8(values: list[bytes | None]) -> pa.Array:
    """A string array holding bytes that are not UTF-8, as Spark hands over a string made
    from arbitrary bytes (``CAST(binary AS STRING)``)."""
    return pa.array(values, pa.binary()).view(pa.string())


def test_text_that_is_not_utf8_is_sent_as_bytes_but_a_header_key_must_be_utf8() -> None:
    bad = b"\xff\xfeh"
    keys = _invalid_utf8([b"ok", bad])
    entries = pa.StructArray.from_arrays(
        [keys, pa.array([b"1", b"2"], pa.binary())], fields=list(HEADER)
    )
    headers = pa.ListArray.from_arrays(pa.array([0, 1, 2], pa.int32()), entries)
    t = pa.table(
        {
            "key": _invalid_utf8([bad, bad]),
            "value": _invalid_utf8([bad, b"v"]),
            "headers": headers,
            "topic": _invalid_utf8([bad, None]),
        }
    )
    (rejection,) = validate(t)
    assert (rejection.row, rejection.column) == (1, "headers")
    assert "header 1 has a key that is not UTF-8" in rejection.reason
    assert "ff fe 68" in rejection.reason


def test_header_values_may_be_strings() -> None:
    string_headers = pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))
    t = table(
        value=pa.array([b"a"], pa.binary()),
        headers=pa.array([[{"key": "k", "value": "v"}]], string_headers),
    )
    assert validate(t) == []


def test_the_topic_column_is_not_sent_and_never_rejected() -> None:
    t = table(value=pa.array([b"a", b"b"], pa.binary()), topic=pa.array([None, "x"], pa.string()))
    assert validate(t) == []


def test_a_table_without_value_is_not_a_row_problem() -> None:
    with pytest.raises(ConfigError) as info:
        validate(table(key=pa.array([b"k"], pa.binary())))
    assert info.value.option == "value"


# --- the result -----------------------------------------------------------------------------


def test_one_rejection_per_row_in_row_order_across_chunks() -> None:
    """A row with several faults is named once, by the first in column order (headers,
    then partition, then size); rows are numbered across the table's chunks."""
    limit = 1_000
    big = value_for(limit) + b"x"
    first = pa.record_batch(
        {
            "value": pa.array([b"a", big], pa.binary()),
            "headers": pa.array([None, [{"key": "k", "value": None}]], HEADERS),
            "partition": pa.array([0, 9], pa.int32()),
        }
    )
    second = pa.record_batch(
        {
            "value": pa.array([big, b"b"], pa.binary()),
            "headers": pa.array([None, None], HEADERS),
            "partition": pa.array([9, 0], pa.int32()),
        }
    )
    t = pa.Table.from_batches([first, second])
    assert t.column("value").num_chunks == 2
    rejections = validate(t, settings(limit, partitions=2))
    assert [(r.row, r.column) for r in rejections] == [(1, "headers"), (2, "partition")]
    assert validate(t, settings(limit, partitions=2)) == rejections  # a pure function


def test_settings_with_a_partition_count_stay_small_and_picklable() -> None:
    s = settings(2_000, partitions=12)
    assert pickle.loads(pickle.dumps(s)) == s


# --- what the start check records -------------------------------------------------------------


def _options(**extra: str) -> SinkOptions:
    raw = {
        "pipeline.id": "p",
        "state.uri": "memory://v",
        "consumer": "kafka",
        "consumer.kafka.bootstrap.servers": "h:9092",
        "consumer.topic": "out",
        **extra,
    }
    return SinkOptions.parse(raw)


def _schema(*extra: StructField) -> StructType:
    return StructType([StructField("value", BinaryType()), *extra])


def test_the_start_check_records_the_partition_count_when_rows_choose_partitions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    asked: list[tuple[str, str]] = []

    def partitions(s: KafkaTopicSettings, timeout: float) -> int:
        asked.append((s.bootstrap, s.topic))
        return 6

    monkeypatch.setattr(kafka_kind, "topic_partitions", partitions)
    options = _options()
    started = options.check_at_start(_schema(StructField("partition", IntegerType())))
    assert isinstance(started.settings, KafkaTopicSettings)
    assert started.settings.partitions == 6 and asked == [("h:9092", "out")]
    # no partition column: the producer's partitioner chooses, nothing to ask
    plain = options.check_at_start(_schema(StructField("key", StringType())))
    assert isinstance(plain.settings, KafkaTopicSettings)
    assert plain.settings.partitions is None and len(asked) == 1


# --- what the sink sends --------------------------------------------------------------------


def test_messages_keep_nulls_and_bytes_as_the_rows_hold_them() -> None:
    bad = b"\xff\xfeh"
    string_headers = pa.list_(pa.struct([("key", pa.string()), ("value", pa.string())]))
    t = pa.table(
        {
            "key": pa.array([b"k", None, bad], pa.binary()).view(pa.string()),
            "value": pa.array([None, None, bad], pa.binary()),
            "headers": pa.array([None, [], [{"key": "h", "value": "é"}]], string_headers),
            "partition": pa.array([None, 1, None], pa.int32()),
        }
    )
    assert list(messages(t)) == [
        (None, b"k", [], None),
        (None, None, [], 1),
        (bad, bad, [("h", "é".encode())], None),
    ]


@pytest.mark.parametrize(
    "entry",
    [{"key": "trace", "value": None}, {"key": None, "value": b"1"}, None],
    ids=["null-value", "null-key", "null-entry"],
)
def test_a_header_the_producer_cannot_send_is_never_sent_otherwise(entry: Any) -> None:
    t = table(value=pa.array([b"v"], pa.binary()), headers=pa.array([[entry]], HEADERS))
    with pytest.raises(ConfigError) as info:
        list(messages(t))
    assert info.value.option == "headers"
    assert len(validate(t)) == 1  # validation rejects the row before delivery
