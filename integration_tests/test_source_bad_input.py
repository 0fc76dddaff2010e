"""gtkafka's errors on bad input, against the real broker and Spark: each names its cause."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from harness.ports import free_port
from integration_tests.source_support import (
    gtkafka_options,
    query_error,
    recreate_after_reads,
    run_to_end,
)


def load_error(spark: Any, streaming: bool, options: dict[str, str]) -> str:
    reader = spark.readStream if streaming else spark.read  # a new reader each time
    with pytest.raises(Exception) as info:
        reader.format("gtkafka").options(**options).load()
    return str(info.value)


@pytest.mark.timeout(180)
def test_malformed_and_conflicting_options_fail_at_load(spark: Any) -> None:
    base = {"kafka.bootstrap.servers": "127.0.0.1:9", "subscribe": "t"}
    for streaming in (True, False):
        text = load_error(spark, streaming, {**base, "startingOffsets": '{"t": {"0": 5}'})
        assert "startingOffsets" in text and '{"topic": {"0": 42' in text
        text = load_error(spark, streaming, {**base, "assign": '{"t": [0]}'})
        assert "exactly one of 'subscribe', 'subscribePattern', 'assign'" in text
        text = load_error(spark, streaming, {**base, "kafka.enable.auto.commit": "true"})
        assert "kafka.enable.auto.commit" in text and "never commits" in text
        text = load_error(spark, streaming, {**base, "maxOffsetPerTrigger": "5"})
        assert "unknown option(s) 'maxoffsetpertrigger'" in text.lower()


@pytest.mark.timeout(180)
def test_batch_only_options_fail_a_streaming_query(spark: Any, kafka: Any, tmp_path: Path) -> None:
    topic = kafka.create_topic()
    opts = gtkafka_options(
        kafka.bootstrap, topic, f"file://{tmp_path / 'state'}", endingOffsets="latest"
    )
    text = query_error(spark, opts, tmp_path / "c1")
    assert "endingOffsets" in text and "batch reads only" in text
    opts = gtkafka_options(kafka.bootstrap, topic, f"file://{tmp_path / 'state'}")
    del opts["pipeline.id"]
    assert "pipeline.id" in query_error(spark, opts, tmp_path / "c2")


@pytest.mark.timeout(180)
def test_unknown_topic(spark: Any, kafka: Any, tmp_path: Path) -> None:
    missing = f"no-such-topic-{free_port()}"
    opts = gtkafka_options(kafka.bootstrap, missing, f"file://{tmp_path / 'state'}")
    text = query_error(spark, opts, tmp_path / "checkpoint")
    assert f"'{missing}' does not exist on Kafka at {kafka.bootstrap}" in text
    with pytest.raises(Exception) as info:
        spark.read.format("gtkafka").options(
            **{"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": missing}
        ).load().count()
    assert f"'{missing}' does not exist" in str(info.value)


@pytest.mark.timeout(180)
def test_unreachable_broker_fails_within_the_poll_timeout(spark: Any, tmp_path: Path) -> None:
    dead = f"127.0.0.1:{free_port()}"
    opts = {
        "kafka.bootstrap.servers": dead,
        "subscribe": "t",
        "kafkaConsumer.pollTimeoutMs": "4000",
        "fetchOffset.numRetries": "1",
        "fetchOffset.retryIntervalMs": "100",
    }
    started = time.monotonic()
    with pytest.raises(Exception) as info:
        spark.read.format("gtkafka").options(**opts).load().count()
    elapsed = time.monotonic() - started
    assert "SourceUnavailable" in str(info.value) and dead in str(info.value)
    # the 4 s poll timeout plus Spark's planning overhead (the default timeout is 120 s)
    assert elapsed < 4 + 30
    streaming = {**opts, "pipeline.id": "dead", "state.uri": f"file://{tmp_path / 'state'}"}
    started = time.monotonic()
    text = query_error(spark, streaming, tmp_path / "checkpoint")
    assert "SourceUnavailable" in text and dead in text
    assert time.monotonic() - started < 4 + 45


@pytest.mark.timeout(300)
def test_recreated_topic_is_data_loss_or_skipped(
    spark: Any, kafka: Any, tmp_path: Path, read_client: str
) -> None:
    """The real "offsets out of range": Tansu has no DeleteRecords, so the topic is deleted
    and created again with fewer records; the query's offsets are then past its end. The
    restarted query knows the topic id its frontier was computed under from the epoch
    log, and Tansu gives the new topic another."""
    topic = kafka.create_topic(partitions=2)
    kafka.produce(topic, [(None, b"old%d" % i, None, i % 2) for i in range(100)], batch_size=50)
    opts = gtkafka_options(
        kafka.bootstrap,
        topic,
        f"file://{tmp_path / 'state'}",
        **{"kafkaConsumer.client": read_client},
    )
    checkpoint = tmp_path / "checkpoint"
    rows: list[Any] = []
    run_to_end(spark, opts, checkpoint, lambda df, _: rows.extend(df.select("value").collect()))
    assert len(rows) == 100

    recreate_after_reads(kafka, topic, partitions=2)
    kafka.produce(topic, [(None, b"new%d" % i, None, i % 2) for i in range(30)], batch_size=50)

    text = query_error(spark, opts, checkpoint)
    assert "DataLossError" in text and f"topic '{topic}' was deleted and created again" in text
    assert f"frontier {topic}-0=50, {topic}-1=50" in text  # the frontier the epoch log recorded
    assert f"it now ends at {topic}-0=15, {topic}-1=15" in text
    assert "failOnDataLoss=false" in text

    rows.clear()
    run_to_end(
        spark,
        {**opts, "failOnDataLoss": "false"},
        checkpoint,
        lambda df, _: rows.extend(df.select("value").collect()),
    )
    assert sorted(r.value for r in rows) == sorted(b"new%d" % i for i in range(30))


@pytest.mark.timeout(180)
def test_batch_range_past_the_end_fails_or_is_skipped(spark: Any, kafka: Any) -> None:
    topic = kafka.create_topic()
    kafka.produce_values(topic, [b"v%d" % i for i in range(30)], partition=0)
    opts = {
        "kafka.bootstrap.servers": kafka.bootstrap,
        "subscribe": topic,
        "startingOffsets": f'{{"{topic}": {{"0": 10}}}}',
        "endingOffsets": f'{{"{topic}": {{"0": 80}}}}',
    }
    with pytest.raises(Exception) as info:
        spark.read.format("gtkafka").options(**opts).load().count()
    assert "DataLossError" in str(info.value)
    assert f"records [30, 80) of {topic}-0" in str(info.value)
    df = spark.read.format("gtkafka").options(**opts, failOnDataLoss="false").load()
    assert sorted(r.offset for r in df.select("offset").collect()) == list(range(10, 30))


class RawHeaderKey(str):
    """A header key that kafka-python's producer writes as the given bytes (it encodes
    every key with ``key.encode("utf-8")``): the only way to send a key that is not
    UTF-8, which Kafka allows (keys are bytes on the wire; Java clients decode them
    leniently)."""

    raw: bytes

    def __new__(cls, raw: bytes) -> RawHeaderKey:
        key = super().__new__(cls, raw.decode("latin-1"))
        key.raw = raw
        return key

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return self.raw


@pytest.mark.timeout(300)
def test_header_keys_that_are_not_utf8_are_replaced_or_never_decoded(
    spark: Any, kafka: Any, tmp_path: Path, read_client: str
) -> None:
    """Every third record has a header whose key is the bytes ff fe 68: with
    includeHeaders=true the key reads with replacement characters, as Spark's Kafka
    source (the Java client) gives it; with includeHeaders=false headers are not decoded
    at all. The records sit in the partition's last batch, which the driver's end probe
    fetches too."""
    topic = kafka.create_topic(partitions=1)
    records = [
        (
            b"k%d" % i,
            b"v%d" % i,
            [(RawHeaderKey(b"\xff\xfeh"), b"x%d" % i)] * (i % 3 == 0) + [("i", b"%d" % i)],
            0,
        )
        for i in range(30)
    ]
    kafka.produce(topic, records, batch_size=100)
    state = f"file://{tmp_path / 'state'}"
    expected = [
        [("\ufffd\ufffdh", b"x%d" % i)] * (i % 3 == 0) + [("i", b"%d" % i)] for i in range(30)
    ]

    if read_client == "confluent":
        refused = gtkafka_options(
            kafka.bootstrap,
            topic,
            state,
            includeHeaders="true",
            **{"kafkaConsumer.client": "confluent"},
        )
        text = load_error(spark, True, refused)
        assert "includeHeaders" in text and "kafkaConsumer.client=kafka-python" in text, text
    # librdkafka: without headers only (above)
    includes = ("false", "true") if read_client == "kafka-python" else ("false",)
    for include in includes:
        opts = gtkafka_options(
            kafka.bootstrap,
            topic,
            state,
            includeHeaders=include,
            **{"pipeline.id": include, "kafkaConsumer.client": read_client},
        )
        rows = streamed_rows(spark, opts, tmp_path / f"checkpoint-{include}")
        assert [r.value for r in rows] == [b"v%d" % i for i in range(30)], include
        if include == "true":
            assert [[(h.key, h.value) for h in r.headers] for r in rows] == expected
        else:
            assert "headers" not in rows[0]

    if read_client == "confluent":
        return
    batch = (
        spark.read.format("gtkafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", "true")
        .option("kafkaConsumer.client", read_client)
        .load()
        .select("offset", "headers")
        .collect()
    )
    got = [[(h.key, h.value) for h in r.headers] for r in sorted(batch, key=lambda r: r.offset)]
    assert got == expected


def streamed_rows(spark: Any, opts: dict[str, str], checkpoint: Path) -> list[Any]:
    """Every row a streaming query of ``opts`` reads (all columns but ``gt``), by offset."""
    rows: list[Any] = []
    run_to_end(spark, opts, checkpoint, lambda df, _: rows.extend(df.drop("gt").collect()))
    return sorted(rows, key=lambda r: r.offset)
