"""Fakes for the coordinator's unit tests: Spark-like checkpoint directories, queries, sessions."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from state.coordinator.batches import CompletedBatch
from state.coordinator.snapshot.write import SnapshotWriter
from state.records.manifest import Manifest

if TYPE_CHECKING:
    from pyspark.sql import SparkSession


def write_checkpoint(
    root: Path, last_batch: int, *, query_id: str = "q-1", partitions: int = 2, first_batch: int = 0
) -> Path:
    """A directory shaped like Spark 4.3's checkpoint after ``last_batch`` committed (HDFS store).

    ``offsets/k`` and ``commits/k`` for ``first_batch <= k <= last_batch``, state deltas
    ``1 .. last_batch + 1`` per partition, plus the files Spark keeps beside them.
    """
    root.mkdir(parents=True, exist_ok=True)
    (root / "metadata").write_text(json.dumps({"id": query_id}))
    for sub in ("offsets", "commits", "sources/0"):
        (root / sub).mkdir(parents=True, exist_ok=True)
    (root / "sources/0/0").write_text("v1\n0")
    for k in range(first_batch, last_batch + 1):
        add_batch(root, k, partitions=partitions)
    (root / "state/0/_metadata").mkdir(parents=True, exist_ok=True)
    (root / "state/0/_metadata/metadata").write_text("op metadata")
    return root


def add_batch(root: Path, k: int, *, partitions: int = 2) -> None:
    """Batch ``k`` completes: its offsets, commit, state version ``k + 1`` and Hadoop crc files."""
    (root / "offsets" / str(k)).write_text(f'v1\n{{"batchWatermarkMs":0}}\n{{"epoch":{k + 1}}}')
    (root / "offsets" / f".{k}.crc").write_bytes(b"crc")
    (root / "commits" / str(k)).write_text('v1\n{"nextBatchWatermarkMs":0}')
    for p in range(partitions):
        d = root / "state" / "0" / str(p)
        d.mkdir(parents=True, exist_ok=True)
        (d / f"{k + 1}.delta").write_bytes(f"delta {k + 1} of partition {p} ".encode() * 20)
        (d / f".{k + 1}.delta.crc").write_bytes(b"crc")


def write_snapshot(writer: SnapshotWriter, cp: Path, batch_id: int, **kw: Any) -> Manifest:
    """A snapshot of ``cp`` after ``batch_id`` (epoch ``batch_id + 10``, as :func:`batch`)."""
    return writer.write(
        cp,
        batch_id=batch_id,
        epoch=batch_id + 10,
        frontier={"epoch": batch_id + 11},
        generation=0,
        token=1,
        query_id="q-1",
        **kw,
    )


def batch(
    k: int, *, query_id: str = "q-1", run_id: str = "run-1", epoch: int | None = None
) -> CompletedBatch:
    e = k + 10 if epoch is None else epoch
    return CompletedBatch(
        query_id=query_id,
        run_id=run_id,
        batch_id=k,
        epoch=e,
        frontier={"epoch": e + 1, "offsets": {"t": {"0": 100 * (k + 1)}}},
        num_input_rows=10,
        duration_ms=5,
        gtkafka=True,
    )


class FakeQuery:
    """Enough of a StreamingQuery for the coordinator (id, isActive, stop)."""

    def __init__(self, query_id: str = "q-1") -> None:
        self.id = query_id
        self.runId = str(uuid.uuid4())
        self.isActive = True
        self.stopped = 0
        self.lastProgress: dict[str, Any] | None = None

    def stop(self) -> None:
        self.isActive = False
        self.stopped += 1


class FakeStreams:
    def __init__(self) -> None:
        self.listeners: list[Any] = []

    def addListener(self, listener: Any) -> None:
        self.listeners.append(listener)

    def removeListener(self, listener: Any) -> None:
        self.listeners.remove(listener)


class FakeSpark:
    def __init__(self) -> None:
        self.streams = FakeStreams()


def fake_spark() -> SparkSession:
    """A :class:`FakeSpark` where a SparkSession is expected (the coordinator only uses
    ``spark.streams``)."""
    return cast("SparkSession", FakeSpark())
