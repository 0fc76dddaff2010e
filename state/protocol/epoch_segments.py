"""Epoch segments: the one module that reads, creates and deletes
``<pipeline>/epochs/segments/<first>-<end>-<digest>.json`` (docs/PROTOCOL.md, "Epoch
segments").

A segment (:class:`~state.records.epoch_segment.EpochSegment`) holds epochs ``[first,
end)`` and the batch records that read them, copied from their objects one each. Its name
carries the digest of its bytes, so an object is never written twice with different
contents, and a segment is immutable: a process keeps those it has read (:data:`_READ`),
and a lookup in the compacted part of the log costs one request per segment and process.

Which segments make up the log is the floor record's to say
(:class:`~state.records.floor.FloorRecord`, :mod:`state.protocol.epoch_floor`): a segment
the floor does not name is never read, whatever the store holds.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Hashable, Iterable

from state.errors import KeyExists, MalformedRecord, SegmentGone
from state.layout import PipelineLayout
from state.process_cache import ProcessCache
from state.records.codec import decode
from state.records.epoch_segment import EpochSegment
from state.records.floor import SegmentRef
from state.stores import StateStore

_SEGMENT_KEY = re.compile(r"/epochs/segments/(\d+)-(\d+)-([0-9a-f]{16})\.json\Z")

#: Segments this process read or wrote, by store configuration and key.
_READ: ProcessCache[Hashable, EpochSegment] = ProcessCache("epoch segments", capacity=64)


def read_segment(store: StateStore, layout: PipelineLayout, ref: SegmentRef) -> EpochSegment:
    """The segment that the floor names by ``ref``.

    :class:`~state.errors.SegmentGone` if it is missing: a floor never names a segment
    before it is written, so a compaction or pruning since the floor was read removed it.
    """
    key = layout.epoch_segment(ref.first, ref.end, ref.digest)
    cache_key = (store.config, key)
    cached = _READ.get(cache_key)
    if cached is not None:
        return cached
    hit = store.get_or_none(key)
    if hit is None:
        raise SegmentGone(
            f"{store.uri}/{key}: the epoch segment named by the floor of pipeline "
            f"'{layout.pipeline_id}' is gone (compacted or pruned since the floor was read)"
        )
    found = decode(hit.data, EpochSegment.from_json, f"{store.uri}/{key}")
    if found.ref != ref:
        raise MalformedRecord(
            f"{store.uri}/{key}: the epoch segment's bytes are not the ones named "
            f"({found.ref} instead of {ref})"
        )
    _READ.put(cache_key, found)
    return found


def write_segment(store: StateStore, layout: PipelineLayout, segment: EpochSegment) -> SegmentRef:
    """Create ``segment``'s object (one of that name holds the same bytes); its ref."""
    ref = segment.ref
    key = layout.epoch_segment(ref.first, ref.end, ref.digest)
    # Named by the digest of its bytes: an object of that name holds this segment.
    with contextlib.suppress(KeyExists):
        store.create(key, segment.to_bytes())
    _READ.put((store.config, key), segment)
    return ref


def stored_segments(store: StateStore, layout: PipelineLayout) -> list[SegmentRef]:
    """Every segment object in the store, named by the floor or not (one list request)."""
    found = (_SEGMENT_KEY.search("/" + k) for k in store.list(layout.epoch_segments_prefix))
    return [SegmentRef(int(m.group(1)), int(m.group(2)), m.group(3)) for m in found if m]


def delete_segments(store: StateStore, layout: PipelineLayout, refs: Iterable[SegmentRef]) -> None:
    """Delete the objects of ``refs`` (no floor names them any more)."""
    keys = [layout.epoch_segment(r.first, r.end, r.digest) for r in refs]
    for key in keys:
        _READ.discard((store.config, key))
    store.delete_many(keys)
