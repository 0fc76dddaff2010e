"""Batch records: which epoch Spark's micro-batch read (docs/PROTOCOL.md, "Batch records").

One read task of each streaming batch (its partition marked ``records_batch``) creates
``<pipeline>/batches/<queryId>/<batchId>.json`` (:class:`~state.records.batch.BatchRecord`)
before it yields its first row. The sink's
commit looks the record up to learn the global time of output that carries no ``gt`` column.

A query whose branches read the same source has one marked task per branch, all writing
the same record; a Python worker remembers the records it created or found (a record
never changes once written), so its later writes of the same record cost no request.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Hashable
from dataclasses import dataclass

from state.errors import EpochLogConflict, KeyExists
from state.layout import PipelineLayout
from state.records.batch import BatchRecord
from state.records.codec import decode
from state.stores import StateStore, StoreConfig, open_store

QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"


@dataclass(frozen=True)
class BatchContext:
    """The streaming query and batch a task runs for (from TaskContext local properties)."""

    query_id: str
    batch_id: int

    @classmethod
    def current(cls) -> BatchContext | None:
        """The context of the running Spark task; ``None`` outside a streaming batch."""
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is None:
            return None
        query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY)
        batch_id = ctx.getLocalProperty(BATCH_ID_PROPERTY)
        if not query_id or batch_id is None:
            return None
        return cls(query_id, int(batch_id))

    def record(self, epoch: int) -> BatchRecord:
        return BatchRecord(query_id=self.query_id, batch_id=self.batch_id, epoch=epoch)


def write_batch_record(
    store: StateStore, layout: PipelineLayout, context: BatchContext, epoch: int
) -> None:
    """Create the batch record; an identical existing one is fine, a different one is not.

    The store retries its own requests (a create whose answer was lost included), so a
    ``KeyExists`` means the record was there: written by another attempt of this task or
    by another task of the batch.
    """
    key = layout.batch(context.query_id, context.batch_id)
    record = context.record(epoch)
    if _RECORDED.has(store, key, record):
        return
    try:
        store.create_json(key, record.to_json())
    except KeyExists:
        existing = read_batch(store, layout, context.query_id, context.batch_id)
        if existing != record:
            recorded = None if existing is None else existing.to_json()
            raise EpochLogConflict(
                f"{store.uri}/{key}: batch {context.batch_id} of query {context.query_id} is "
                f"recorded as {recorded}, but this task reads epoch {epoch}"
            ) from None
    _RECORDED.add(store, key, record)


class PendingBatchRecord:
    """A batch record being written on a thread of its own, so that the store's round
    trip overlaps the task's first Kafka fetch; :meth:`wait` before the first row."""

    def __init__(
        self, store: StateStore, layout: PipelineLayout, context: BatchContext, epoch: int
    ) -> None:
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._write,
            args=(store, layout, context, epoch),
            name="gtkafka-batch-record",
            daemon=True,
        )
        self._thread.start()

    def _write(
        self, store: StateStore, layout: PipelineLayout, context: BatchContext, epoch: int
    ) -> None:
        try:
            write_batch_record(store, layout, context, epoch)
        except BaseException as err:  # handed to the task's thread by wait()
            self._error = err

    def wait(self) -> None:
        """Return once the record is written; raise what the write raised."""
        self._thread.join()
        if self._error is not None:
            raise self._error


def read_batch(
    store: StateStore, layout: PipelineLayout, query_id: str, batch_id: int
) -> BatchRecord | None:
    """The batch's record, or ``None`` (a no-data batch, or not read yet)."""
    key = layout.batch(query_id, batch_id)
    hit = store.get_or_none(key)
    return None if hit is None else decode(hit.data, BatchRecord.from_json, f"{store.uri}/{key}")


def read_batch_record(
    store: StateStore | StoreConfig, layout: PipelineLayout, query_id: str, batch_id: int
) -> int | None:
    """The epoch recorded for a batch, or ``None`` (a no-data batch, or not yet read)."""
    if isinstance(store, StoreConfig):
        store = open_store(store)
    record = read_batch(store, layout, query_id, batch_id)
    return None if record is None else record.epoch


class _Recorded:
    """The batch records this process wrote or found in a store (bounded, fork-safe)."""

    CAPACITY = 256

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._records: dict[Hashable, BatchRecord] = {}

    def has(self, store: StateStore, key: str, record: BatchRecord) -> bool:
        with self._lock:
            self._forget_if_forked()
            return self._records.get((store.config, key)) == record

    def add(self, store: StateStore, key: str, record: BatchRecord) -> None:
        with self._lock:
            self._forget_if_forked()
            self._records[(store.config, key)] = record
            while len(self._records) > self.CAPACITY:
                del self._records[next(iter(self._records))]

    def _forget_if_forked(self) -> None:
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._records = {}

    def after_fork_in_child(self) -> None:
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._records = {}


_RECORDED = _Recorded()
os.register_at_fork(after_in_child=_RECORDED.after_fork_in_child)
