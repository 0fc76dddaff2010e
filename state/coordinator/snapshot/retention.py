"""Snapshot retention: the snapshots not kept are deleted, then the packs and blobs no
kept manifest names."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from state.errors import SnapshotCorrupted
from state.layout import PipelineLayout
from state.records.manifest import Manifest
from state.stores import StateStore

__all__ = ["Pruned", "prune"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Pruned:
    snapshots: int
    blobs: int


def prune(
    store: StateStore,
    layout: PipelineLayout,
    keep: Sequence[int],
    known: Mapping[int, Manifest] | None = None,
) -> tuple[Pruned, set[str]]:
    """Delete snapshots not in ``keep`` and the packs and blobs no kept manifest names.

    Returns the counts and the names (under ``snapshot-blobs/``) of the deleted objects.
    They are deleted only after the manifests that named them, and an object a kept
    manifest names is never deleted; a kept manifest that cannot be read stops the sweep
    (nothing is deleted that might still be needed).
    """
    prefix = layout.snapshots_prefix
    keep_set = set(keep)
    ids: set[int] = set()
    for k in store.list(prefix):
        head = k[len(prefix) :].split("/", 1)[0]
        if head.isdigit():
            ids.add(int(head))
    dropped = 0
    for sid in sorted(ids - keep_set):
        store.delete_prefix(layout.snapshot(sid))
        dropped += 1
    referenced: set[str] = set()
    for sid in keep_set:
        if known is not None and sid in known:  # written by us: its content is known
            referenced.update(known[sid].blobs)
            continue
        hit = store.get_or_none(f"{layout.snapshot(sid)}manifest.json")
        if hit is None:
            log.warning("kept snapshot %d has no manifest; blobs are not swept this time", sid)
            return Pruned(dropped, 0), set()
        try:
            m = Manifest.from_bytes(hit.data, where=f"{layout.snapshot(sid)}manifest.json")
        except SnapshotCorrupted as err:
            log.warning("%s; blobs are not swept this time", err)
            return Pruned(dropped, 0), set()
        referenced.update(m.blobs)
    blob_prefix = layout.snapshot_blobs_prefix
    deleted: set[str] = set()
    for k in store.list(blob_prefix):
        name = k[len(blob_prefix) :]
        if name not in referenced:
            store.delete(k)
            deleted.add(name)
    return Pruned(dropped, len(deleted)), deleted
