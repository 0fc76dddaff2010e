"""Snapshot packs (pure): which stored files a new snapshot references, and how the
others are grouped into packs.

The files a snapshot is the first to need are stored together, as one pack
(``<pipeline>/snapshot-blobs/pack-<sha256>``, named by the SHA-256 of its bytes; at most
:data:`PACK_BYTES` each, unless one file alone is larger). A file an earlier snapshot
stored is referenced where it is, so a snapshot costs the files written since the
previous one, in one or a few objects; but a pack that the new snapshot would use less
than :data:`LIVE_FRACTION` of is not referenced: its files are copied into the new pack
(:func:`plan_packs`). So every pack a manifest names is at least half live for it, and
the packs that the retained snapshots name stay a handful however long the query runs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from state.coordinator.snapshot.files import CheckpointFile
from state.records.manifest import PackRef

__all__ = ["LIVE_FRACTION", "PACK_BYTES", "Location", "PackPlan", "plan_packs"]

#: A pack holds at most this many bytes, unless one file alone is larger (it is a pack of
#: its own): what a snapshot holds in memory per upload thread.
PACK_BYTES = 64 << 20

#: A snapshot references a stored pack only if it uses at least this fraction of its bytes.
LIVE_FRACTION = 0.5

#: Where a stored file's bytes are: its pack and its offset in it.
Location = tuple[PackRef, int]


@dataclass(frozen=True)
class PackPlan:
    """Where a snapshot's files go. ``referenced``: the stored files it uses where they
    are (by SHA-256). ``groups``: the packs to upload, each a list of (SHA-256, the path
    of a file with that content), in the order of the bytes in the pack."""

    referenced: dict[str, Location]
    groups: list[list[tuple[str, str]]]


def plan_packs(
    files: Sequence[tuple[CheckpointFile, str]],
    stored: Mapping[str, Location],
    *,
    pack_bytes: int = PACK_BYTES,
    live_fraction: float = LIVE_FRACTION,
) -> PackPlan:
    """Which of ``files`` (each with its SHA-256) to reference where ``stored`` says they
    are, and how to pack the others.

    A stored pack is referenced only if the distinct contents the snapshot uses from it
    are at least ``live_fraction`` of its bytes; otherwise those files are packed again,
    so the old pack can be pruned with the snapshots that still use it. The contents to
    pack are taken once each, in the order of their first path, and filled into packs of
    at most ``pack_bytes``; a larger file is a pack of its own.
    """
    first_path: dict[str, CheckpointFile] = {}
    for f, sha in sorted(files, key=lambda pair: pair[0].path):
        first_path.setdefault(sha, f)
    used: dict[PackRef, int] = {}
    for sha, f in first_path.items():
        if sha in stored:
            pack = stored[sha][0]
            used[pack] = used.get(pack, 0) + f.size
    live = {pack for pack, n in used.items() if n >= live_fraction * pack.size}
    referenced = {
        sha: stored[sha] for sha in first_path if sha in stored and stored[sha][0] in live
    }
    groups: list[list[tuple[str, str]]] = []
    filled = 0
    for sha, f in first_path.items():
        if sha in referenced:
            continue
        if not groups or filled + f.size > pack_bytes:
            groups.append([])
            filled = 0
        groups[-1].append((sha, f.path))
        filled += f.size
    return PackPlan(referenced, groups)
