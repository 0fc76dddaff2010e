"""gtkafka with ``readMode=driver`` (datasource/driver_reader.py) into the barrier's file
consumer, in the test's own SparkSession: exactly once across a failed batch run again on
the same checkpoint (its rows read by ``readBetweenOffsets``) and across a new checkpoint;
the rows are executor mode's; ``maxOffsetsPerTrigger`` is the reader's own;
``Trigger.AvailableNow`` reads to the end; without a readable ``checkpointLocation`` the
barrier refuses the first batch before anything is delivered."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from integration_tests.sink_helpers import read_bundles
from state.layout import PipelineLayout
from state.protocol.batch_records import read_batch_record
from state.stores import StoreConfig, open_store

QUERY_TIMEOUT = 300.0
PER_TRIGGER = 100


def produce(kafka: Any, topic: str, first: int, n: int, partitions: int) -> None:
    kafka.produce(
        topic,
        ((b"k%d" % i, b"%d" % i, None, i % partitions) for i in range(first, first + n)),
        batch_size=5000,
    )


def source(spark: Any, kafka: Any, topic: str, pipeline: str, state: str, *, mode: str) -> Any:
    return (
        spark.readStream.format("gtkafka")
        .options(
            **{
                "kafka.bootstrap.servers": kafka.bootstrap,
                "subscribe": topic,
                "startingOffsets": "earliest",
                "pipeline.id": pipeline,
                "state.uri": state,
                "maxOffsetsPerTrigger": str(PER_TRIGGER),
                "readMode": mode,
            }
        )
        .load()
    )


def failing_once(df: Any, flag: Path) -> Any:
    """``df``'s rows, whose write fails on a value in [100, 200) while ``flag`` exists:
    the batch of epoch 1 fails after Spark logged its offsets, before its commit (a
    filter keeps every row; unlike a column nobody selects, it is never pruned)."""
    from pyspark.sql import functions as sf
    from pyspark.sql.types import BooleanType

    path = str(flag)

    def keep(value: bytes) -> bool:
        import os

        n = int(value)
        if 100 <= n < 200 and os.path.exists(path):
            raise RuntimeError(f"injected failure of value {n}")
        return True

    return df.where(sf.udf(keep, BooleanType(), useArrow=False)(sf.col("value"))).select(
        "key", "value", "gt"
    )


def run(df: Any, out: Path, state: str, pipeline: str, checkpoint: Path | None) -> Any:
    writer = (
        df.writeStream.format("barrier")
        .options(
            **{
                "pipeline.id": pipeline,
                "state.uri": state,
                "consumer": "file",
                "consumer.path": str(out),
            }
        )
        .trigger(availableNow=True)
    )
    if checkpoint is not None:
        writer = writer.option("checkpointLocation", str(checkpoint))
    query = writer.start()
    try:
        finished = query.awaitTermination(QUERY_TIMEOUT)
    finally:
        if query.isActive:
            query.stop()
    if query.exception() is not None:
        raise query.exception()
    assert finished
    return query


def delivered(out: Path) -> list[tuple[int, str, int, int, bytes]]:
    """(epoch, topic, partition, offset, value) of every delivered row, in file order."""
    table: pa.Table = read_bundles(out)
    gt = table.column("gt").combine_chunks()
    return list(
        zip(
            gt.field("epoch").to_pylist(),
            gt.field("topic").to_pylist(),
            gt.field("partition").to_pylist(),
            gt.field("offset").to_pylist(),
            table.column("value").to_pylist(),
            strict=True,
        )
    )


def bundle_sizes(out: Path) -> list[int]:
    import pyarrow.parquet as pq

    return [pq.read_metadata(p).num_rows for p in sorted(out.glob("bundle-*.parquet"))]


def check_exactly_once(rows: list[tuple[int, str, int, int, bytes]], n: int) -> None:
    keys = [r[:4] for r in rows]
    assert keys == sorted(keys), "rows are not in gt order"
    assert len({(r[2], r[3]) for r in rows}) == len(rows), "duplicate rows"
    assert sorted(int(r[4]) for r in rows) == list(range(n))


@pytest.mark.timeout(900)
def test_driver_mode_is_exactly_once_across_a_rerun_batch_and_a_new_checkpoint(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    partitions = 2
    topic = kafka.create_topic(partitions=partitions)
    produce(kafka, topic, 0, 300, partitions)
    state = f"file://{tmp_path}/state"
    out, flag = tmp_path / "out", tmp_path / "fail"
    flag.write_text("fail epoch 1")

    # 1. epoch 0 is delivered, epoch 1's batch fails after Spark logged its offsets
    df = failing_once(source(spark, kafka, topic, "drv", state, mode="driver"), flag)
    with pytest.raises(Exception, match="injected failure"):
        run(df, out, state, "drv", tmp_path / "cp1")
    assert bundle_sizes(out) == [PER_TRIGGER]
    assert (tmp_path / "cp1" / "offsets" / "1").exists()

    # 2. the same checkpoint: batch 1 runs again (its rows not cached in this new
    # reader: readBetweenOffsets in a read task), then AvailableNow reads to the end
    flag.unlink()
    query = run(df, out, state, "drv", tmp_path / "cp1")
    rows = delivered(out)
    check_exactly_once(rows, 300)
    # maxOffsetsPerTrigger is the reader's own: one epoch of 100 records per batch
    assert bundle_sizes(out) == [PER_TRIGGER] * 3
    assert sorted({r[0] for r in rows}) == [0, 1, 2]
    store = open_store(StoreConfig(state))
    record = read_batch_record(store, PipelineLayout("drv"), query.id, 2)
    assert record is not None and record.epoch == 2

    # 3. a new checkpoint (a new query id, batch ids from 0): epochs 0-2 are replayed
    # and skipped, the new records delivered once
    produce(kafka, topic, 300, 150, partitions)
    run(df, out, state, "drv", tmp_path / "cp2")
    rows = delivered(out)
    check_exactly_once(rows, 450)
    assert bundle_sizes(out) == [PER_TRIGGER] * 4 + [50]
    pointer = json.loads((out / "_last_bundle.json").read_text())
    assert pointer["bundle_id"] == 4

    # 4. executor mode, on a pipeline of its own, delivers the same rows, in the same
    # epochs, with the same gt
    out_exec = tmp_path / "out-exec"
    executors = source(
        spark, kafka, topic, "exe", f"file://{tmp_path}/state-exec", mode="executors"
    )
    run(
        executors.select("key", "value", "gt"),
        out_exec,
        f"file://{tmp_path}/state-exec",
        "exe",
        tmp_path / "cp-exec",
    )
    assert delivered(out_exec) == rows


@pytest.mark.timeout(300)
def test_driver_mode_without_a_checkpoint_location_option_fails_before_delivery(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    from pyspark.errors import StreamingQueryException

    topic = kafka.create_topic(partitions=1)
    produce(kafka, topic, 0, 10, 1)
    state = f"file://{tmp_path}/state"
    out = tmp_path / "out"
    df = source(spark, kafka, topic, "nocp", state, mode="driver")
    conf = "spark.sql.streaming.checkpointLocation"
    spark.conf.set(conf, str(tmp_path / "cps"))
    try:
        with pytest.raises(StreamingQueryException) as info:
            run(df.select("key", "value", "gt"), out, state, "nocp", None)
    finally:
        spark.conf.unset(conf)
    text = str(info.value)
    assert "checkpointLocation" in text
    assert "readMode=executors" in text
    assert not list(out.glob("bundle-*.parquet"))
