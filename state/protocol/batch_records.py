"""Batch records: which epoch each Spark micro-batch read (docs/PROTOCOL.md, "Batch records").

``<pipeline>/batches/<queryId>/<batchId>.json`` (:class:`~state.records.batch.BatchRecord`)
is written once per batch, by the one read task of the batch that the source marks, before
that task yields its first row (:func:`write_batch_record`). The sink's commit reads it
(:func:`~state.protocol.epoch_log.epoch_of_batch`, which finds it in an epoch segment
too, once its epoch is compacted) to learn the bundle's global time, which is how output
that carries no ``gt`` column (aggregates) gets one. No record for a batch means Spark
ran a *no-data* batch, whose output is not replay-stable.

A record never changes once written: a create that finds the same record is fine (another
attempt of the task, or a second branch of the query reading the same source), a different
one is :class:`~state.errors.EpochLogConflict`. A Python worker remembers the records it
created or found (:class:`~state.process_cache.ProcessCache`), so its later writes of the
same record cost no request.
"""

from __future__ import annotations

from collections.abc import Hashable

from state.errors import EpochLogConflict, KeyExists
from state.layout import PipelineLayout
from state.process_cache import ProcessCache
from state.records.batch import BatchRecord
from state.records.codec import decode
from state.stores import StateStore

#: The batch records this process wrote or found, by store configuration and key.
_RECORDED: ProcessCache[Hashable, BatchRecord] = ProcessCache("batch records", capacity=256)


def write_batch_record(
    store: StateStore, layout: PipelineLayout, query_id: str, batch_id: int, epoch: int
) -> None:
    """Record that batch ``batch_id`` of query ``query_id`` reads epoch ``epoch``.

    An identical existing record is fine, a different one raises
    :class:`EpochLogConflict`. The store retries its own requests (a create whose answer
    was lost included), so a ``KeyExists`` means the record was there.
    """
    key = layout.batch(query_id, batch_id)
    record = BatchRecord(query_id=query_id, batch_id=batch_id, epoch=epoch)
    cache_key = (store.config, key)
    if _RECORDED.get(cache_key) == record:
        return
    try:
        store.create_json(key, record.to_json())
    except KeyExists:
        existing = read_batch_record(store, layout, query_id, batch_id)
        if existing != record:
            recorded = None if existing is None else existing.to_json()
            raise EpochLogConflict(
                f"{store.uri}/{key}: batch {batch_id} of query {query_id} is recorded as "
                f"{recorded}, but this task reads epoch {epoch}"
            ) from None
    _RECORDED.put(cache_key, record)


def read_batch_record(
    store: StateStore, layout: PipelineLayout, query_id: str, batch_id: int
) -> BatchRecord | None:
    """The batch's record, or ``None`` (a no-data batch, or not read yet)."""
    key = layout.batch(query_id, batch_id)
    hit = store.get_or_none(key)
    return None if hit is None else decode(hit.data, BatchRecord.from_json, f"{store.uri}/{key}")


def batch_record_keys(store: StateStore, layout: PipelineLayout) -> list[str]:
    """The keys of every batch record of the pipeline, of every query (one list request)."""
    return [k for k in store.list(layout.batches_prefix()) if k.endswith(".json")]


def read_batch_record_at(store: StateStore, key: str) -> BatchRecord | None:
    """The batch record stored at ``key`` (one of :func:`batch_record_keys`), or None if
    it is gone."""
    hit = store.get_or_none(key)
    return None if hit is None else decode(hit.data, BatchRecord.from_json, f"{store.uri}/{key}")
