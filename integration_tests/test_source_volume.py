"""Correctness at volume: every record read exactly once, in offset order per partition.

Records over 8 partitions with keys and headers, read by a rate-limited streaming query
and by a batch read. Checks run inside Spark (nothing large is collected): per batch and
partition the offsets are contiguous and ascending in read order, keys and headers match
the offsets, and the batches of each partition chain up to exactly the produced count.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from integration_tests.source_support import gtkafka_options, run_to_end

PARTITIONS = 8


def records(n: int) -> Iterator[tuple[bytes, bytes, list[tuple[str, bytes]], int]]:
    """Record i goes to partition i % 8 at offset i // 8."""
    pad = b"." * 64
    for i in range(n):
        p, off = i % PARTITIONS, i // PARTITIONS
        yield b"k%d-%d" % (p, off), b"value-%d-" % i + pad, [("offset", b"%d" % off)], p


def partition_stats(df: Any) -> list[Any]:
    """Per partition: min/max offset, count, and the rows that break order, key or header."""
    from pyspark.sql import Window
    from pyspark.sql import functions as sf

    in_read_order = Window.partitionBy("partition").orderBy("rn")
    expected_key = sf.concat(
        sf.lit("k"),
        sf.col("partition").cast("string"),
        sf.lit("-"),
        sf.col("offset").cast("string"),
    )
    checked = (
        df.withColumn("rn", sf.monotonically_increasing_id())
        .withColumn("prev", sf.lag("offset").over(in_read_order))
        .withColumn(
            "bad_order",
            (sf.col("prev").isNotNull() & (sf.col("prev") + 1 != sf.col("offset"))).cast("int"),
        )
        .withColumn("bad_key", (sf.col("key").cast("string") != expected_key).cast("int"))
        .withColumn(
            "bad_header",
            (
                (sf.size("headers") != 1)
                | (sf.col("headers")[0]["value"].cast("string") != sf.col("offset").cast("string"))
            ).cast("int")
            if "headers" in df.columns
            else sf.lit(0),  # a read without headers (kafkaConsumer.client=confluent)
        )
        .withColumn("bad_gt", (sf.col("gt.offset") != sf.col("offset")).cast("int"))
    )
    stats: list[Any] = (
        checked.groupBy("partition")
        .agg(
            sf.min("offset").alias("lo"),
            sf.max("offset").alias("hi"),
            sf.count("*").alias("n"),
            sf.sum("bad_order").alias("bad_order"),
            sf.sum("bad_key").alias("bad_key"),
            sf.sum("bad_header").alias("bad_header"),
            sf.sum("bad_gt").alias("bad_gt"),
            sf.countDistinct("gt.epoch").alias("epochs"),
        )
        .collect()
    )
    return stats


def assert_exactly_once(batches: list[list[Any]], n: int) -> None:
    per_partition = n // PARTITIONS
    next_offset = dict.fromkeys(range(PARTITIONS), 0)
    for stats in batches:
        for s in stats:
            assert (s.bad_order, s.bad_key, s.bad_header, s.bad_gt) == (0, 0, 0, 0), s
            assert s.epochs == 1
            assert s.lo == next_offset[s.partition], s  # batches chain without gap or overlap
            assert s.n == s.hi - s.lo + 1, s  # contiguous, no duplicates
            next_offset[s.partition] = s.hi + 1
    assert next_offset == dict.fromkeys(range(PARTITIONS), per_partition)


def check_volume(spark: Any, kafka: Any, tmp_path: Path, n: int, client: str) -> None:
    """``n`` records read exactly once, in order, by a streaming and a batch query with the
    read client ``client`` (with headers, but for librdkafka, which does not read them)."""
    headers = "true" if client == "kafka-python" else "false"
    topic = kafka.create_topic(partitions=PARTITIONS)
    kafka.produce(topic, records(n), batch_size=20_000)

    batches: list[list[Any]] = []
    lock = threading.Lock()

    def on_batch(df: Any, _batch_id: int) -> None:
        stats = partition_stats(df)
        with lock:
            batches.append(stats)

    opts = gtkafka_options(
        kafka.bootstrap,
        topic,
        f"file://{tmp_path / 'state'}",
        includeHeaders=headers,
        maxOffsetsPerTrigger=str(n // 4 + 7),  # uneven: partitions end mid-batch
        **{"kafkaConsumer.client": client},
    )
    run_to_end(spark, opts, tmp_path / "checkpoint", on_batch, timeout=900)
    assert len(batches) >= 4
    assert_exactly_once(batches, n)

    df = (
        spark.read.format("gtkafka")
        .option("kafka.bootstrap.servers", kafka.bootstrap)
        .option("subscribe", topic)
        .option("includeHeaders", headers)
        .option("kafkaConsumer.client", client)
        .load()
    )
    assert_exactly_once([partition_stats(df)], n)


@pytest.mark.timeout(600)
def test_100k_records_exactly_once_in_order(
    spark: Any, kafka: Any, tmp_path: Path, read_client: str
) -> None:
    check_volume(spark, kafka, tmp_path, 100_000, read_client)


@pytest.mark.volume
@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_1m_records_exactly_once_in_order(
    spark: Any, kafka: Any, tmp_path: Path, read_client: str
) -> None:
    check_volume(spark, kafka, tmp_path, 1_000_000, read_client)
