"""Snapshot retention: which snapshots a driver may delete after it accepted one
(:func:`decide_retention`, pure), and the deletion of those snapshots and of the packs and
blobs no remaining manifest names (:func:`prune`).

A driver prunes from the resume point as it reads it after its acceptance, never from the
point it wrote: a driver paused after its acceptance (a zombie, or the old version's
snapshot thread after ``recover(mode="replay")``) must not delete what a newer driver or
generation retains. So it prunes only while the resume point is still its own (its fencing
token, its generation), and only the snapshots below the oldest one the point retains.
Snapshot ids only grow (a writer takes one more than any it lists, and retention never
deletes the newest), and a resume point's retained list only moves to newer snapshots: a
snapshot below the oldest retained one is never needed again, whoever wrote it, while one
above it may be a snapshot another driver is writing or accepting now.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from state.errors import SnapshotCorrupted
from state.layout import PipelineLayout
from state.records.manifest import Manifest
from state.records.resume_point import ResumePoint
from state.stores import StateStore

__all__ = ["Pruned", "Retention", "decide_retention", "doomed", "prune"]

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Pruned:
    snapshots: int
    blobs: int


@dataclass(frozen=True)
class Retention:
    """What a driver's retention may do: keep ``keep`` (the ids the resume point retains)
    and delete what lies below, or, with ``skipped``, nothing (the reason)."""

    keep: tuple[int, ...] = ()
    skipped: str | None = None


def decide_retention(point: ResumePoint | None, *, token: int, generation: int) -> Retention:
    """The retention of the driver holding ``token`` in ``generation``, given the resume
    point read after its acceptance (pure).

    Nothing is pruned unless the point is this driver's (its token: a newer driver prunes
    for itself) in this driver's generation (a newer generation's retention is its
    own) and retains a snapshot (a generation without one may still restore nothing
    but the persisted start).
    """
    if point is None:
        return Retention(skipped="there is no resume point")
    if point.generation != generation:
        return Retention(
            skipped=f"the resume point is at generation {point.generation}, this driver's is "
            f"{generation}"
        )
    if point.token != token:
        return Retention(
            skipped=f"the resume point was written by fencing token {point.token}, this "
            f"driver holds {token}"
        )
    if not point.retained:
        return Retention(skipped="the resume point retains no snapshot")
    return Retention(keep=tuple(r.snapshot_id for r in point.retained))


def doomed(stored: Iterable[int], keep: Sequence[int]) -> list[int]:
    """The snapshot ids of ``stored`` that retention deletes: those below the oldest of
    ``keep`` and not in it; none if ``keep`` is empty (pure)."""
    if not keep:
        return []
    oldest = min(keep)
    kept = set(keep)
    return sorted(sid for sid in set(stored) if sid < oldest and sid not in kept)


def stored_snapshot_ids(store: StateStore, layout: PipelineLayout) -> set[int]:
    """The ids of the snapshots under ``snapshots/`` (one listing)."""
    prefix = layout.snapshots_prefix
    ids: set[int] = set()
    for k in store.list(prefix):
        head = k[len(prefix) :].split("/", 1)[0]
        if head.isdigit():
            ids.add(int(head))
    return ids


def prune(
    store: StateStore,
    layout: PipelineLayout,
    keep: Sequence[int],
    known: Mapping[int, Manifest] | None = None,
) -> tuple[Pruned, set[str]]:
    """Delete the snapshots :func:`doomed` by ``keep``, then the packs and blobs that no
    remaining manifest names.

    Returns the counts and the names (under ``snapshot-blobs/``) of the deleted objects.
    They are deleted only after the manifests that named them, and an object a remaining
    manifest names is never deleted: a kept one's, or one newer than the kept ones (a
    snapshot another driver is accepting). A remaining manifest that cannot be read stops
    the sweep (nothing is deleted that might still be needed). ``known``: manifests this
    process wrote, by id (not read again).
    """
    ids = stored_snapshot_ids(store, layout)
    drop = doomed(ids, keep)
    for sid in drop:
        store.delete_prefix(layout.snapshot(sid))
    referenced: set[str] = set()
    for sid in sorted((ids - set(drop)) | set(keep)):
        if known is not None and sid in known:  # written by us: its content is known
            referenced.update(known[sid].blobs)
            continue
        hit = store.get_or_none(f"{layout.snapshot(sid)}manifest.json")
        if hit is None:
            if sid not in keep:
                continue  # an abandoned snapshot's files, its manifest never written
            log.warning("kept snapshot %d has no manifest; blobs are not swept this time", sid)
            return Pruned(len(drop), 0), set()
        try:
            m = Manifest.from_bytes(hit.data, where=f"{layout.snapshot(sid)}manifest.json")
        except SnapshotCorrupted as err:
            log.warning("%s; blobs are not swept this time", err)
            return Pruned(len(drop), 0), set()
        referenced.update(m.blobs)
    blob_prefix = layout.snapshot_blobs_prefix
    deleted: set[str] = set()
    for k in store.list(blob_prefix):
        name = k[len(blob_prefix) :]
        if name not in referenced:
            store.delete(k)
            deleted.add(name)
    return Pruned(len(drop), len(deleted)), deleted
