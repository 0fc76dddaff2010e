"""gtkafka against the real broker, S3 and Spark: replay, discovery, triggers, batch reads."""

from __future__ import annotations

import shutil
import threading
from pathlib import Path
from typing import Any

import pytest
from kafka import TopicPartition

from harness.process import wait_until
from integration_tests.source_support import gtkafka_options, run_to_end
from state.layout import PipelineLayout
from state.protocol.epoch_log import epoch_of_batch
from state.stores import StoreConfig, open_store


def keyed(n: int, partitions: int) -> list[tuple[bytes, bytes, list[tuple[str, bytes]], int]]:
    return [(b"k%d" % i, b"v%d" % i, [("i", str(i).encode())], i % partitions) for i in range(n)]


class Capture:
    """foreachBatch target keeping ``(batch_id, rows)``; runs on the driver."""

    def __init__(self, *columns: str) -> None:
        self.columns = columns or ("gt", "key")
        self.batches: list[tuple[int, list[Any]]] = []
        self.lock = threading.Lock()

    def __call__(self, df: Any, batch_id: int) -> None:
        rows = df.select(*self.columns).collect()
        with self.lock:
            self.batches.append((batch_id, rows))

    def rows(self) -> list[Any]:
        with self.lock:
            return [r for _, rows in self.batches for r in rows]


def gt_of(rows: list[Any]) -> dict[tuple[str, int, int], int]:
    return {(r.gt.topic, r.gt.partition, r.gt.offset): r.gt.epoch for r in rows}


@pytest.mark.timeout(300)
def test_replay_on_a_new_checkpoint_reproduces_epochs_and_gt(
    spark: Any, kafka: Any, s3: Any, tmp_path: Path, *, read_client: str, read_mode: str
) -> None:
    topic = kafka.create_topic(partitions=4)
    kafka.produce(topic, keyed(2000, 4), batch_size=250)
    opts = gtkafka_options(
        kafka.bootstrap,
        topic,
        s3.uri("state"),
        maxOffsetsPerTrigger="300",
        **s3.options(),
        **{"kafkaConsumer.client": read_client, "readMode": read_mode},
    )
    checkpoint = tmp_path / "checkpoint"

    first = Capture()
    q1 = run_to_end(spark, opts, checkpoint, first)
    shutil.rmtree(checkpoint)
    # A new checkpoint and another rate limit: the epoch log decides the batches.
    second = Capture()
    q2 = run_to_end(spark, {**opts, "maxOffsetsPerTrigger": "1000"}, checkpoint, second)
    assert q1.id != q2.id

    gt1, gt2 = gt_of(first.rows()), gt_of(second.rows())
    assert len(first.rows()) == len(second.rows()) == 2000
    assert len(gt1) == 2000 and gt1 == gt2  # the same gt for every record
    for capture in (first, second):
        epochs = [{r.gt.epoch for r in rows} for _, rows in capture.batches]
        assert all(len(e) == 1 for e in epochs)  # one epoch per batch
        assert [e.pop() for e in epochs] == list(range(len(capture.batches)))
        assert max(len(rows) for _, rows in capture.batches) <= 300
        assert all(r.key == b"k%d" % int(r.key[1:]) for r in capture.rows())

    store = open_store(StoreConfig.from_options(opts))
    layout = PipelineLayout(opts["pipeline.id"])
    assert len(store.list(layout.epochs_prefix)) == len(first.batches)
    for query, capture in ((q1, first), (q2, second)):
        for batch_id, rows in capture.batches:
            recorded = epoch_of_batch(store, layout, query.id, batch_id)
            # On the driver no read task records the batch: the barrier does, from
            # Spark's offset log, and this query has no barrier.
            assert recorded == (rows[0].gt.epoch if read_mode == "executors" else None)


@pytest.mark.timeout(300)
def test_running_query_discovers_new_topics_and_commits_to_group(
    spark: Any, kafka: Any, tmp_path: Path, read_client: str, read_mode: str
) -> None:
    headers = read_client == "kafka-python"  # librdkafka reads no headers
    a = kafka.create_topic(partitions=2)
    prefix = a.rsplit("-", 1)[0]
    group = f"lag-{a}"
    opts = gtkafka_options(
        kafka.bootstrap,
        a,
        f"file://{tmp_path / 'state'}",
        includeHeaders=str(headers).lower(),
        commitOffsetsToGroup=group,
        **{
            "fetchOffset.refreshIntervalMs": "200",
            "kafkaConsumer.client": read_client,
            "readMode": read_mode,
        },
    )
    del opts["subscribe"]
    opts["subscribePattern"] = prefix.replace(".", r"\.") + "-.*"
    capture = Capture("gt", "key", *(["headers"] if headers else []))
    df = spark.readStream.format("gtkafka").options(**opts).load()
    query = (
        df.writeStream.foreachBatch(capture)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        kafka.produce(a, keyed(500, 2), batch_size=100)
        wait_until(lambda: len(capture.rows()) >= 500, timeout=120, what="500 rows of topic a")
        b = kafka.create_topic(partitions=2)  # matches the pattern: read from earliest
        kafka.produce(b, keyed(300, 2), batch_size=100)
        wait_until(lambda: len(capture.rows()) >= 800, timeout=120, what="300 rows of topic b")
        admin = kafka.admin()
        try:

            def committed() -> dict[tuple[str, int], int]:
                answer = admin.list_group_offsets(group)
                return {
                    (tp.topic, tp.partition): om.offset
                    for tp, om in answer.get(group, {}).items()
                    if isinstance(tp, TopicPartition)
                }

            # commit(end) arrives one batch late: topic a's end is committed by now
            wait_until(
                lambda: (
                    {k: v for k, v in committed().items() if k[0] == a}
                    == {(a, 0): 250, (a, 1): 250}
                ),
                timeout=60,
                what=f"group {group} to show topic a's end offsets",
            )
        finally:
            admin.close()
    finally:
        query.stop()
    assert query.exception() is None
    rows = capture.rows()
    assert len(rows) == 800
    seen = {(r.gt.topic, r.gt.partition, r.gt.offset) for r in rows}
    assert seen == {(a, p, o) for p in (0, 1) for o in range(250)} | {
        (b, p, o) for p in (0, 1) for o in range(150)
    }
    if headers:
        assert all([tuple(h) for h in r.headers] == [("i", r.key[1:])] for r in rows)


@pytest.mark.timeout(240)
def test_trigger_once_reads_everything_in_one_batch(
    spark: Any, kafka: Any, tmp_path: Path, read_client: str, read_mode: str
) -> None:
    topic = kafka.create_topic(partitions=3)
    kafka.produce(topic, keyed(600, 3), batch_size=200)
    opts = gtkafka_options(
        kafka.bootstrap,
        topic,
        f"file://{tmp_path / 'state'}",
        maxOffsetsPerTrigger="100",
        **{"kafkaConsumer.client": read_client, "readMode": read_mode},
    )
    capture = Capture()
    run_to_end(spark, opts, tmp_path / "checkpoint", capture, trigger={"once": True})
    assert len(capture.batches) == 1
    # Spark tells a simple reader nothing of the trigger: on the driver, the one batch
    # is one epoch under the reader's own limit (docs/source.md, readMode=driver)
    assert len(gt_of(capture.rows())) == (600 if read_mode == "executors" else 100)


@pytest.mark.timeout(240)
def test_batch_read_between_offsets(spark: Any, kafka: Any, read_client: str) -> None:
    headers = read_client == "kafka-python"  # librdkafka reads no headers
    topic = kafka.create_topic(partitions=2)
    kafka.produce(topic, keyed(1000, 2), batch_size=300)
    df = (
        spark.read.format("gtkafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", f'{{"{topic}": {{"0": 100, "1": -2}}}}')
        .option("endingOffsets", f'{{"{topic}": {{"0": 400, "1": -1}}}}')
        .option("minPartitions", "6")
        .option("includeHeaders", str(headers).lower())
        .option("kafkaConsumer.client", read_client)
        .load()
    )
    assert df.columns == [
        "key",
        "value",
        "topic",
        "partition",
        "offset",
        "timestamp",
        "timestampType",
        *(["headers"] if headers else []),
        "gt",
    ]
    assert df.rdd.getNumPartitions() >= 6
    rows = df.select("partition", "offset", "key", "gt").collect()
    got = sorted((r.partition, r.offset) for r in rows)
    assert got == [(0, o) for o in range(100, 400)] + [(1, o) for o in range(500)]
    assert {r.gt.epoch for r in rows} == {0}
    assert all(r.gt.offset == r.offset and r.gt.partition == r.partition for r in rows)
    # keys were produced round-robin: partition p offset o holds record 2 * o + p
    assert all(r.key == b"k%d" % (2 * r.offset + r.partition) for r in rows)
    empty = kafka.create_topic(partitions=2)
    df = (
        spark.read.format("gtkafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("subscribe", empty)
        .load()
    )
    assert df.count() == 0


@pytest.mark.timeout(240)
def test_a_user_schema_reads_only_its_columns(spark: Any, kafka: Any, tmp_path: Path) -> None:
    topic = kafka.create_topic(partitions=2)
    kafka.produce(topic, keyed(400, 2), batch_size=200)

    def read(schema: str | None) -> Any:
        reader = spark.read.format("gtkafka")
        if schema is not None:
            reader = reader.schema(schema)
        return (
            reader.option("kafka.bootstrap.servers", kafka.bootstrap)
            .option("subscribe", topic)
            .load()
        )

    narrow = read("offset long, value binary, partition int")
    assert narrow.columns == ["offset", "value", "partition"]
    got = sorted(tuple(r) for r in narrow.collect())
    assert got == sorted(tuple(r) for r in read(None).select(*narrow.columns).collect())
    assert len(got) == 400
    with pytest.raises(Exception, match="'vlaue'"):
        read("vlaue binary").collect()
    # A streaming query gets the narrow columns too (the epoch log works the same).
    opts = gtkafka_options(kafka.bootstrap, topic, f"file://{tmp_path / 'state'}")
    capture = Capture("value", "offset")
    run_to_end(
        spark,
        opts,
        tmp_path / "checkpoint",
        capture,
        trigger={"availableNow": True},
        schema="value binary, offset long",
    )
    assert sorted(r.value for r in capture.rows()) == sorted(b"v%d" % i for i in range(400))
