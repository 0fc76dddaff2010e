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

``python_floor_driver`` makes the same rows with PySpark's
:class:`~pyspark.sql.datasource.SimpleDataSourceStreamReader`: they are made on the driver
inside ``latestOffset`` and reach the tasks through Spark's block manager, with no Python
worker for the read. ``python_floor_driver -> noop`` is Spark's cost of a source read on
the driver, the other way a Python source can read.
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
    SimpleDataSourceStreamReader,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxRows

NAME = "python_floor"
DRIVER_NAME = "python_floor_driver"
SCHEMA = "key binary, value binary"
PAYLOAD = b"x" * 100


def floor_options(options: Any) -> tuple[int, int | None]:
    """(``rowsPerBatch``, default 100; ``maxBatches``, default none) of either source."""
    batches = options.get("maxBatches")
    return int(options.get("rowsPerBatch", "100")), int(batches) if batches else None


def floor_keys(batch: int, rows: int) -> list[bytes]:
    """The keys of batch ``batch``'s rows (each row's value is :data:`PAYLOAD`)."""
    return [b"%d-%d" % (batch, i) for i in range(rows)]


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
        return FloorReader(*floor_options(self.options))

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
        keys = floor_keys(partition.batch, partition.rows)
        yield pa.RecordBatch.from_arrays(
            [pa.array(keys, pa.binary()), pa.array([PAYLOAD] * partition.rows, pa.binary())],
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


class DriverFloorSource(DataSource):
    """``python_floor_driver``: ``python_floor``'s rows and options, read on the driver."""

    @classmethod
    def name(cls) -> str:
        return DRIVER_NAME

    def schema(self) -> str:
        return SCHEMA

    def simpleStreamReader(self, schema: Any) -> SimpleDataSourceStreamReader:
        return DriverFloorReader(*floor_options(self.options))


class DriverFloorReader(SimpleDataSourceStreamReader):
    """One batch more at every ``read``, up to ``max_batches`` (then no new data), its rows
    made where ``read`` runs: on the driver."""

    def __init__(self, rows: int, max_batches: int | None = None) -> None:
        self.rows = rows
        self.max_batches = max_batches

    def initialOffset(self) -> dict[str, Any]:
        return {"batch": 0}

    def read(self, start: dict[str, Any]) -> tuple[Iterator[tuple[bytes, bytes]], dict[str, Any]]:
        batch = int(start["batch"])
        if self.max_batches is not None and batch >= self.max_batches:
            return iter(()), start  # no new data
        return self.readBetweenOffsets(start, {"batch": batch + 1}), {"batch": batch + 1}

    def readBetweenOffsets(
        self, start: dict[str, Any], end: dict[str, Any]
    ) -> Iterator[tuple[bytes, bytes]]:
        return iter(
            [
                (key, PAYLOAD)
                for b in range(int(start["batch"]), int(end["batch"]))
                for key in floor_keys(b, self.rows)
            ]
        )

    def commit(self, end: dict[str, Any]) -> None:
        pass


def register(spark: Any) -> None:
    spark.dataSource.register(FloorSource)
    spark.dataSource.register(DriverFloorSource)
