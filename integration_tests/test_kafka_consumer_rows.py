"""``consumer=kafka`` and the rows it is given, against the real broker (Tansu) and the real
kafka-python producer: the size limit that ``validate`` applies is the producer's, and
what the sink sends is what the rows hold.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from kafka import KafkaProducer
from kafka.errors import MessageSizeTooLargeError

from sink.consumers import open_consumer
from sink.consumers.kafka.kafka_kind import KAFKA_TOPIC
from sink.consumers.kafka.kafka_options import KafkaTopicSettings, producer_config
from sink.consumers.kafka.kafka_rows import H_BUNDLE, H_COUNT, H_GT, H_INDEX
from sink.faults import FaultInjector
from sink.options import SinkOptions
from state.errors import ConfigError
from state.stores import open_store
from tests.sink_helpers import Pipeline, gt_batch

pytestmark = pytest.mark.timeout(180)

LARGEST = b"9" * 19  # the sink's headers hold decimal int64s: at most 19 digits


def kafka_settings(bootstrap: str, topic: str, **extra: str) -> KafkaTopicSettings:
    options = SinkOptions.parse(
        {
            "pipeline.id": "rows",
            "state.uri": "memory://rows",
            "consumer": "kafka",
            "consumer.kafka.bootstrap.servers": bootstrap,
            "consumer.topic": topic,
            **extra,
        }
    )
    assert isinstance(options.settings, KafkaTopicSettings)
    return options.settings


def largest_accepted(settings: KafkaTopicSettings, key: bytes, headers: list[Any]) -> bytes:
    """The longest value ``validate`` accepts with ``key`` and ``headers`` (by bisection)."""

    def accepted(n: int) -> bool:
        row = pa.table(
            {
                "key": pa.array([key], pa.binary()),
                "value": pa.array([b"v" * n], pa.binary()),
                "headers": pa.array(
                    [[{"key": k, "value": v} for k, v in headers]],
                    pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
                ),
            }
        )
        return not KAFKA_TOPIC.validate(settings, row)

    low, high = 0, 64 << 20
    assert accepted(low) and not accepted(high)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if accepted(mid) else (low, mid)
    return b"v" * low


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"consumer.kafka.max.request.size": "10000"},
        {"consumer.kafka.max.request.size": "10000", "consumer.kafka.compression.type": "gzip"},
    ],
    ids=["default", "10000", "10000-gzip"],
)
def test_the_real_producer_refuses_what_validate_rejects_at_the_limit(
    kafka: Any, extra: dict[str, str]
) -> None:
    """The longest value validate accepts, sent by a producer with the sink's settings and
    the sink's headers at their largest, reaches the broker; one byte more is what the
    producer refuses (MessageSizeTooLargeError), as validate said."""
    topic = kafka.create_topic(partitions=1)
    settings = kafka_settings(kafka.bootstrap, topic, **extra)
    key = b"order-17"
    item_headers = [("trace", b"t" * 40), ("gtb.bundle", b"999")]
    at = largest_accepted(settings, key, item_headers)
    sink_headers = [(name, LARGEST) for name in (H_BUNDLE, H_GT, H_INDEX, H_COUNT)]
    headers = [*item_headers, *sink_headers]
    config = producer_config(settings, 10.0, "rows")  # the sink's: transactional
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, **config)
    try:
        producer.init_transactions()
        producer.begin_transaction()
        with pytest.raises(MessageSizeTooLargeError):
            producer.send(topic, key=key, value=at + b"v", headers=headers, partition=0)
        sent = producer.send(topic, key=key, value=at, headers=headers, partition=0)
        producer.flush(timeout=30)
        assert sent.get(timeout=30).offset == 0
        producer.commit_transaction()
    finally:
        producer.close(timeout=5)
    (record,) = kafka.consume_all(topic)
    assert (record.key, len(record.value), record.headers) == (key, len(at), headers)


def test_the_start_check_records_the_topics_partitions_when_rows_choose_them(kafka: Any) -> None:
    """With a partition column the start check asks the broker (rows for partition 3 of a
    3-partition topic are then rejected); a topic that does not exist is named before any
    data moves. (Partitions added to a topic are seen by the next micro-batch's planning;
    Tansu cannot add partitions: tests/test_sink_kafka_validate.py.)"""
    from pyspark.sql.types import BinaryType, IntegerType, StructField, StructType

    topic = kafka.create_topic(partitions=3)
    schema = StructType(
        [StructField("value", BinaryType()), StructField("partition", IntegerType())]
    )
    raw = {
        "pipeline.id": "rows",
        "state.uri": "memory://rows",
        "consumer": "kafka",
        "consumer.kafka.bootstrap.servers": kafka.bootstrap,
        "ack.timeoutMs": "5000",
    }
    started = SinkOptions.parse({**raw, "consumer.topic": topic}).check_at_start(schema)
    settings = started.settings
    assert isinstance(settings, KafkaTopicSettings) and settings.partitions == 3
    rows = pa.table({"value": pa.array([b"a", b"b"]), "partition": pa.array([2, 3], pa.int32())})
    assert [(r.row, r.column) for r in KAFKA_TOPIC.validate(settings, rows)] == [(1, "partition")]

    missing = f"{topic}-missing"
    with pytest.raises(ConfigError) as info:
        SinkOptions.parse({**raw, "consumer.topic": missing}).check_at_start(schema)
    assert info.value.option == "consumer.topic" and repr(missing) in str(info.value)
    assert kafka.bootstrap in str(info.value)


# --- what the sink sends --------------------------------------------------------------


def kafka_pipeline(bootstrap: str, topic: str) -> Pipeline:
    raw = {
        "pipeline.id": "rows",
        "consumer": "kafka",
        "consumer.kafka.bootstrap.servers": bootstrap,
        "consumer.topic": topic,
    }
    p = Pipeline(SinkOptions.parse({**raw, "state.uri": "memory://unused"}))
    p.options = SinkOptions.parse({**raw, "state.uri": f"memory://{p.query_id}"})
    p.store = open_store(p.options.store)
    p.consumer = open_consumer(p.options, p.store, FaultInjector())  # type: ignore[assignment]
    p.staging = p.consumer.staging
    return p


def commit_rows(p: Pipeline, epoch: int, columns: dict[str, pa.Array]) -> Any:
    """One bundle of the given rows (with a ``gt`` column in row order) through the barrier."""
    n = len(next(iter(columns.values())))
    batch = gt_batch(epoch, 0, range(n))
    rows = pa.RecordBatch.from_arrays(
        [*columns.values(), batch.column("gt")], names=[*columns, "gt"]
    )
    p.record_batch(epoch, epoch)
    try:
        return p.barrier().commit([p.write(epoch, [rows])], epoch)
    finally:
        p.consumer.close()


def test_text_that_is_not_utf8_is_sent_as_its_bytes(kafka: Any) -> None:
    """Strings Spark made from arbitrary bytes reach the topic as those bytes (as Spark's
    Kafka sink sends them) instead of failing the delivery when decoded."""
    topic = kafka.create_topic(partitions=1)
    p = kafka_pipeline(kafka.bootstrap, topic)
    bad = b"\xff\xfeh"

    def text(*values: bytes) -> pa.Array:
        return pa.array(values, pa.binary()).view(pa.string())

    header = pa.struct([("key", pa.string()), ("value", pa.string())])
    headers = pa.ListArray.from_arrays(
        pa.array([0, 1, 1], pa.int32()),
        pa.StructArray.from_arrays([text(b"h"), text(bad)], fields=list(header)),
    )
    assert (
        commit_rows(
            p, 1, {"key": text(bad, b"k"), "value": text(b"v", bad), "headers": headers}
        ).action
        == "delivered"
    )
    records = kafka.consume_all(topic)
    assert [(r.key, r.value) for r in records] == [(bad, b"v"), (b"k", bad)]
    assert records[0].headers[0] == ("h", bad)


def test_null_values_stay_null_and_a_null_header_value_is_never_sent_empty(kafka: Any) -> None:
    """A null value is a tombstone (compaction deletes its key), with or without a key: the
    broker must hold null, not empty bytes. A null header value cannot be sent by
    kafka-python's producer: the row is refused, never sent with an empty value."""
    topic = kafka.create_topic(partitions=1)
    p = kafka_pipeline(kafka.bootstrap, topic)
    outcome = commit_rows(
        p,
        1,
        {
            "key": pa.array([b"k1", None, b"k3"], pa.binary()),
            "value": pa.array([None, None, b"v3"], pa.binary()),
        },
    )
    assert outcome.action == "delivered"
    records = kafka.consume_all(topic)
    assert [(r.key, r.value) for r in records] == [(b"k1", None), (None, None), (b"k3", b"v3")]

    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    row = {
        "key": pa.array([b"k4"], pa.binary()),
        "value": pa.array([b"v4"], pa.binary()),
        "headers": pa.array([[{"key": "trace", "value": None}]], pa.list_(header)),
    }
    (rejection,) = KAFKA_TOPIC.validate(p.options.settings, pa.table(row))  # type: ignore[arg-type]
    assert rejection.column == "headers" and "'trace' has a null value" in rejection.reason
    with pytest.raises(Exception, match="null"):
        commit_rows(p, 2, row)
    assert [(r.key, r.value) for r in kafka.consume_all(topic)][3:] == []
