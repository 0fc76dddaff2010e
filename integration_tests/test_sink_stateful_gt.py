"""Stateful output that carries a ``gt`` column older than its batch's epoch.

A window emitted after the watermark passes it carries ``max(gt)`` of its records, an
epoch *older* than the batch that emits it. The barrier decides what a replay is by the
batch's epoch (the bundle id), never by a row's ``gt``: such rows were never delivered
and must reach the consumer exactly once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from integration_tests.sink_helpers import read_bundles
from integration_tests.test_sink_pipeline import produce_events, run_available_now, source


def windows_with_max_gt(df: Any) -> Any:
    from pyspark.sql import functions as sf

    return (
        df.groupBy(sf.window("event_time", "10 seconds"), "k")
        .agg(sf.count("*").alias("count"), sf.max("gt").alias("gt"))
        .select(sf.col("window.start").cast("long").alias("start"), "k", "count", "gt")
    )


def parse_events_with_gt(df: Any) -> Any:
    from pyspark.sql import functions as sf

    parts = sf.split(sf.col("value").cast("string"), ",")
    return df.select(
        parts.getItem(0).cast("int").alias("k"),
        sf.timestamp_seconds(parts.getItem(1).cast("long")).alias("event_time"),
        "gt",
    )


@pytest.mark.timeout(300)
def test_closed_windows_carrying_max_gt_are_delivered_exactly_once(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    partitions = 2
    topic = kafka.create_topic(partitions=partitions)
    events = [(i % 3, i // 10) for i in range(2000)]  # 200 s of event time, 10 events/s
    produce_events(kafka, topic, [*events, (0, 10_000)], partitions)  # + a watermark push
    state = f"file://{tmp_path}/state"
    out = tmp_path / "out"
    opts = {"pipeline.id": "windows-gt", "state.uri": state, "consumer.path": str(out)}

    def query() -> Any:
        df = parse_events_with_gt(
            source(spark, kafka, topic, "windows-gt", state, maxOffsetsPerTrigger="700")
        )
        return windows_with_max_gt(df.withWatermark("event_time", "30 seconds"))

    run_available_now(query(), opts, tmp_path / "cp")
    # no-data batches are off, so windows closed by the last watermark wait for more data
    kafka.produce(topic, [(None, b"1,10001", None, 0)])
    run_available_now(query(), opts, tmp_path / "cp")

    got = read_bundles(out).to_pylist()
    keys = [(r["start"], r["k"]) for r in got]
    assert len(keys) == len(set(keys)), "a window was delivered twice"
    batch = windows_with_max_gt(
        parse_events_with_gt(
            spark.read.format("gtkafka")
            .options(**{"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic})
            .load()
        )
    ).where("start < 10000")
    expected = {(r["start"], r["k"], r["count"]) for r in batch.collect()}
    assert len(expected) == 20 * 3
    assert {(r["start"], r["k"], r["count"]) for r in got} == expected
    # The case under test happened: windows delivered in a bundle whose epoch is above
    # their own max(gt).epoch (their records arrived in earlier epochs).
    older = 0
    for path in sorted(out.glob("bundle-*.parquet")):
        bundle_epoch = int(path.stem.split("-")[1])
        older += sum(r["gt"]["epoch"] < bundle_epoch for r in read_bundles(path).to_pylist())
    assert older > 0
