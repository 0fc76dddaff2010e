"""Smoke tests: the local SparkSession runs streaming queries and Python data sources."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql.datasource import DataSource, DataSourceReader, InputPartition
from pyspark.sql.types import LongType, StructField, StructType

pytestmark = pytest.mark.timeout(180)


def test_streaming_query_with_foreach_batch(spark: Any) -> None:
    """A deterministic micro-batch source (100 rows per batch) through foreachBatch."""
    seen: dict[int, list[int]] = {}
    three = threading.Event()

    def collect(df: Any, batch_id: int) -> None:
        seen[batch_id] = sorted(r.value for r in df.select("value").collect())
        if len(seen) >= 3:
            three.set()

    query = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", 100)
        .option("numPartitions", 2)
        .load()
        .writeStream.foreachBatch(collect)
        .trigger(processingTime="200 milliseconds")
        .start()
    )
    try:
        assert three.wait(90), f"only {len(seen)} batches in 90 s: {query.lastProgress}"
    finally:
        query.stop()
    assert query.exception() is None
    values = [v for b in sorted(seen) for v in seen[b]]
    assert values[:300] == list(range(300))
    assert all(len(seen[b]) == 100 for b in sorted(seen)[:3])


class _SquaresReader(DataSourceReader):
    def __init__(self, n: int) -> None:
        self.n = n

    def partitions(self) -> list[InputPartition]:
        return [InputPartition(i) for i in range(2)]

    def read(self, partition: InputPartition) -> Iterator[tuple[int, int]]:
        start = partition.value
        for i in range(start, self.n, 2):
            yield (i, i * i)


class _SquaresSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "smoke_squares"

    def schema(self) -> StructType:
        return StructType([StructField("i", LongType()), StructField("sq", LongType())])

    def reader(self, schema: StructType) -> DataSourceReader:
        return _SquaresReader(int(self.options.get("n", "10")))


def test_python_data_source_runs_in_python_workers(spark: Any) -> None:
    spark.dataSource.register(_SquaresSource)
    rows = spark.read.format("smoke_squares").option("n", "1000").load()
    assert rows.count() == 1000
    assert rows.agg({"sq": "sum"}).collect()[0][0] == sum(i * i for i in range(1000))
