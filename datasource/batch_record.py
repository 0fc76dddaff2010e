"""Batch records: which epoch Spark's micro-batch read (docs/PROTOCOL.md, "Batch records").

Every read task of a streaming batch creates ``<pipeline>/batches/<queryId>/<batchId>.json``
= ``{"batch_id", "epoch", "query_id"}`` before it yields its first row. The sink's commit
looks the record up to learn the global time of output that carries no ``gt`` column.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from state.errors import EpochLogConflict, KeyExists
from state.layout import PipelineLayout
from state.retry import Retry
from state.store import StateStore, StoreConfig, open_store

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


def batch_record(context: BatchContext, epoch: int) -> dict[str, Any]:
    return {"batch_id": context.batch_id, "epoch": epoch, "query_id": context.query_id}


def write_batch_record(
    store: StateStore,
    layout: PipelineLayout,
    context: BatchContext,
    epoch: int,
    *,
    retry: Retry | None = None,
) -> None:
    """Create the batch record; an identical existing one is fine, a different one is not."""
    retry = retry or Retry(max_attempts=6, base_delay=0.1, max_delay=2.0, deadline=30.0)
    key = layout.batch(context.query_id, context.batch_id)
    doc = batch_record(context, epoch)
    try:
        retry(lambda: store.create_json(key, doc))
    except KeyExists:
        existing, _ = retry(lambda: store.get_json(key))
        if existing != doc:
            raise EpochLogConflict(
                f"{store.uri}/{key}: batch {context.batch_id} of query {context.query_id} is "
                f"recorded as {existing}, but this task reads epoch {epoch}"
            ) from None


def read_batch_record(
    store: StateStore | StoreConfig, layout: PipelineLayout, query_id: str, batch_id: int
) -> int | None:
    """The epoch recorded for a batch, or ``None`` (a no-data batch, or not yet read)."""
    if isinstance(store, StoreConfig):
        store = open_store(store)
    hit = store.get_json_or_none(layout.batch(query_id, batch_id))
    return None if hit is None else int(hit[0]["epoch"])
