"""gtkafka -> Spark -> barrier through Spark Connect: a client session
(``SparkSession.builder.remote``) against a local Connect server (``spark_connect_server``).

The client registers the sources with ``gtbarrier.register_all`` (the classes travel to the
server pickled by reference: its Python workers import them from the repository on their
``PYTHONPATH``). Checked: exactly once and gt order at a file consumer across a restart on
the same checkpoint, and the snapshot coordinator run from the client (its listener is a
client-side Connect listener; the checkpoint directory is on the server's host, which is
this host).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from gtbarrier import SnapshotCoordinator
from harness.process import wait_until
from integration_tests.sink_helpers import read_bundles

QUERY_TIMEOUT = 300.0
PARTITIONS = 2


def produce_range(kafka: Any, topic: str, start: int, stop: int) -> None:
    """Records ``start..stop-1``: key ``k<i>``, value ``<i>``, partition ``i % PARTITIONS``."""
    kafka.produce(
        topic,
        ((b"k%d" % i, b"%d" % i, None, i % PARTITIONS) for i in range(start, stop)),
        batch_size=5000,
    )


def expected_survivors(n: int) -> set[tuple[int, int]]:
    """(partition, offset) of the records ``0..n-1`` whose number is not a multiple of 3."""
    out = set()
    counters = [0] * PARTITIONS
    for i in range(n):
        p = i % PARTITIONS
        if i % 3:
            out.add((p, counters[p]))
        counters[p] += 1
    return out


def check_exactly_once_in_gt_order(table: pa.Table, n: int) -> None:
    gt = table.column("gt").combine_chunks()
    keys = list(
        zip(
            gt.field("epoch").to_pylist(),
            gt.field("partition").to_pylist(),
            gt.field("offset").to_pylist(),
            strict=True,
        )
    )
    assert keys == sorted(keys), "items are not in gt order"
    pairs = [(k[1], k[2]) for k in keys]
    assert len(pairs) == len(set(pairs)), f"{len(pairs) - len(set(pairs))} duplicate item(s)"
    assert set(pairs) == expected_survivors(n)


def pipeline_query(
    spark: Any,
    kafka: Any,
    s3: Any,
    topic: str,
    *,
    pipeline: str,
    out: Path,
    checkpoint: Path,
    token: int | None = None,
    available_now: bool = True,
) -> Any:
    """Start gtkafka (state in S3) -> drop multiples of 3 -> barrier (file consumer)."""
    from pyspark.sql import functions as sf

    state = s3.uri("state")
    df = (
        spark.readStream.format("gtkafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "1000")
        .option("pipeline.id", pipeline)
        .option("state.uri", state)
        .options(**s3.options())
        .load()
    )
    kept = df.where(sf.col("value").cast("string").cast("long") % 3 != 0).select(
        "key", "value", "gt"
    )
    writer = (
        kept.writeStream.format("barrier")
        .option("pipeline.id", pipeline)
        .option("state.uri", state)
        .options(**s3.options())
        .option("consumer", "file")
        .option("consumer.path", str(out))
        .option("checkpointLocation", str(checkpoint))
    )
    if token is not None:
        writer = writer.option("fencing.token", str(token))
    if available_now:
        return writer.trigger(availableNow=True).start()
    return writer.trigger(processingTime="500 milliseconds").start()


def await_finished(query: Any) -> None:
    try:
        finished = query.awaitTermination(QUERY_TIMEOUT)
    finally:
        if query.isActive:
            query.stop()
    error = query.exception()
    if error is not None:
        raise error
    assert finished


def bundle_files(out: Path) -> list[str]:
    return sorted(p.name for p in out.glob("bundle-*.parquet"))


@pytest.mark.timeout(300)
def test_register_all_through_connect(spark_remote: Any) -> None:
    """Registration and the session setting the sink needs both reach the server's session."""
    assert type(spark_remote).__module__.startswith("pyspark.sql.connect")
    assert spark_remote.conf.get("spark.sql.streaming.noDataMicroBatches.enabled") == "false"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_gtkafka_to_barrier_through_connect_exactly_once_across_restart(
    spark_remote: Any, kafka: Any, s3: Any, tmp_path: Path
) -> None:
    topic = kafka.create_topic(partitions=PARTITIONS)
    produce_range(kafka, topic, 0, 3000)
    out, cp = tmp_path / "out", tmp_path / "cp"

    first = pipeline_query(
        spark_remote, kafka, s3, topic, pipeline="connect", out=out, checkpoint=cp
    )
    await_finished(first)
    check_exactly_once_in_gt_order(read_bundles(out), 3000)
    assert len(first.recentProgress) == 3  # 1000 records per batch
    assert bundle_files(out) == [f"bundle-{e:012d}.parquet" for e in range(3)]

    # Stopped; more records; the same checkpoint: the query continues, nothing twice.
    produce_range(kafka, topic, 3000, 5000)
    second = pipeline_query(
        spark_remote, kafka, s3, topic, pipeline="connect", out=out, checkpoint=cp
    )
    await_finished(second)
    check_exactly_once_in_gt_order(read_bundles(out), 5000)
    assert bundle_files(out) == [f"bundle-{e:012d}.parquet" for e in range(5)]


@pytest.mark.timeout(420)
def test_snapshot_coordinator_from_a_connect_client(
    spark_remote: Any, kafka: Any, s3: Any, tmp_path: Path
) -> None:
    """The coordinator takes a Connect session: its listener is a client-side listener
    (events stream from the server), and it reads the checkpoint directory the server
    writes, which a client on the server's host sees. A restore onto a fresh checkpoint
    replays batches after the snapshot; the barrier drops what was delivered."""
    topic = kafka.create_topic(partitions=PARTITIONS)
    produce_range(kafka, topic, 0, 4000)
    out, cp = tmp_path / "out", tmp_path / "cp"

    def coordinator(checkpoint: Path) -> SnapshotCoordinator:
        return SnapshotCoordinator(
            spark_remote,
            pipeline_id="connect-coord",
            state_uri=s3.uri("state"),
            checkpoint_location=checkpoint,
            snapshot_period="1s",
            drain_timeout="60s",
            reset_timeout="60s",
            state_options=s3.options(),
        )

    coord = coordinator(cp)
    try:
        assert coord.recover().action == "keep"
        query = pipeline_query(
            spark_remote,
            kafka,
            s3,
            topic,
            pipeline="connect-coord",
            out=out,
            checkpoint=cp,
            token=coord.fencing_token,
            available_now=False,
        )
        coord.watch(query)
        wait_until(
            lambda: coord.accepted >= 1,
            timeout=120,
            what="a snapshot accepted from a listener event",
            interval=0.5,
        )
        wait_until(
            lambda: len(bundle_files(out)) >= 4,
            timeout=120,
            what="4 bundles delivered",
            interval=0.5,
        )
        point = coord.request_snapshot(wait="60s")
        assert point is not None
        query.stop()
        delivered = len(bundle_files(out))
    finally:
        coord.close()
    check_exactly_once_in_gt_order(read_bundles(out), 4000)

    produce_range(kafka, topic, 4000, 5000)
    cp2 = tmp_path / "cp-restored"
    coord2 = coordinator(cp2)
    try:
        result = coord2.recover()
        assert result.action == "materialise", result
        assert (cp2 / "commits" / str(point["batch_id"])).is_file()
        query = pipeline_query(
            spark_remote,
            kafka,
            s3,
            topic,
            pipeline="connect-coord",
            out=out,
            checkpoint=cp2,
            token=coord2.fencing_token,
        )
        await_finished(query)
    finally:
        coord2.close()
    check_exactly_once_in_gt_order(read_bundles(out), 5000)
    assert len(bundle_files(out)) == delivered + 1
