"""Spark's floor for Python data sources: a streaming source and sink that do no I/O.

``python_floor`` (registered by :func:`register`) is a Python ``DataSource`` whose
stream reader makes ``rowsPerBatch`` rows (``key``, ``value``: 100 bytes each) per
micro-batch in one input partition, and whose Arrow stream writer consumes its input and
commits nothing. Everything a micro-batch of ``python_floor -> python_floor`` costs is
Spark's cost of a Python source and a Python sink: the source's driver hooks in its
Python process, one read and one write Python worker per task, the commit in a further
Python worker. :mod:`benchmarks.fixed_cost` measures it next to ``rate-micro-batch ->
noop`` and ``gtkafka -> barrier``, so the fixed cost splits into Spark's and ours, and
its source alone (``python_floor -> noop``) and its sink alone (``rate-micro-batch ->
python_floor``), so Spark's share splits into a Python source's and a Python sink's.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamArrowWriter,
    DataSourceStreamReader,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

NAME = "python_floor"
SCHEMA = "key binary, value binary"


@dataclass(frozen=True)
class FloorPartition(InputPartition):
    batch: int
    rows: int


class FloorSource(DataSource):
    """``python_floor``: options ``rowsPerBatch`` (default 100), ``maxBatches`` (default
    none: a new batch at every trigger)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return SCHEMA

    def streamReader(self, schema: Any) -> DataSourceStreamReader:
        batches = self.options.get("maxBatches")
        return FloorReader(
            int(self.options.get("rowsPerBatch", "100")), int(batches) if batches else None
        )

    def streamWriter(self, schema: Any, overwrite: bool) -> DataSourceStreamArrowWriter:
        return FloorWriter()


class FloorReader(DataSourceStreamReader):
    """One batch more at every ``latestOffset``, up to ``max_batches`` (then no new data:
    the query idles, so that it can be stopped between batches); ``rows`` rows per batch."""

    def __init__(self, rows: int, max_batches: int | None = None) -> None:
        self.rows = rows
        self.max_batches = max_batches

    def initialOffset(self) -> dict[str, Any]:
        return {"batch": 0}

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxRows(self.rows)

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        batch = int(start["batch"])
        if isinstance(limit, ReadAllAvailable) or (
            self.max_batches is not None and batch >= self.max_batches
        ):
            return start  # no new data
        return {"batch": batch + 1}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        return [FloorPartition(b, self.rows) for b in range(int(start["batch"]), int(end["batch"]))]

    def read(self, partition: InputPartition) -> Iterator[Any]:
        import pyarrow as pa

        assert isinstance(partition, FloorPartition)
        payload = b"x" * 100
        keys = [b"%d-%d" % (partition.batch, i) for i in range(partition.rows)]
        yield pa.RecordBatch.from_arrays(
            [pa.array(keys, pa.binary()), pa.array([payload] * partition.rows, pa.binary())],
            names=["key", "value"],
        )

    def commit(self, end: dict[str, Any]) -> None:
        pass


@dataclass(frozen=True)
class FloorMessage(WriterCommitMessage):
    rows: int


class FloorWriter(DataSourceStreamArrowWriter):
    """Reads its input to the end; commits and aborts nothing."""

    def write(self, iterator: Iterator[Any]) -> WriterCommitMessage:
        return FloorMessage(sum(batch.num_rows for batch in iterator))

    def commit(self, messages: Sequence[Any], batchId: int) -> None:
        pass

    def abort(self, messages: Sequence[Any], batchId: int) -> None:
        pass


def register(spark: Any) -> None:
    spark.dataSource.register(FloorSource)
