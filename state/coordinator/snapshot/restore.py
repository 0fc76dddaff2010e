"""Restoring a snapshot: its manifest read and checked, its files written into a
checkpoint directory, verified, and swapped in whole."""

from __future__ import annotations

import os
import shutil
import time
import uuid
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from state.coordinator.snapshot.files import sha256_hex
from state.errors import SnapshotCorrupted, SnapshotIncomplete
from state.fsync import fsync_dir
from state.layout import PipelineLayout
from state.records.manifest import RELATIVE_PATH, Manifest, ManifestEntry, is_relative_path
from state.stores import StateStore

__all__ = ["Materialised", "destination", "load_manifest", "materialise", "replace_dir"]


def load_manifest(store: StateStore, key: str, expected_sha256: str | None) -> Manifest:
    """Read and check a manifest; :class:`SnapshotCorrupted` if absent, altered or malformed."""
    hit = store.get_or_none(key)
    if hit is None:
        raise SnapshotCorrupted(f"snapshot manifest {store.uri}/{key} does not exist")
    if expected_sha256 is not None and sha256_hex(hit.data) != expected_sha256:
        raise SnapshotCorrupted(
            f"snapshot manifest {store.uri}/{key} does not match its recorded SHA-256 "
            f"{expected_sha256[:12]}... (corrupted or overwritten)"
        )
    return Manifest.from_bytes(hit.data, where=f"{store.uri}/{key}")


def destination(staging: Path, path: str) -> Path:
    """Where the manifest's file ``path`` is written: under ``staging``, resolved (symbolic
    links followed). :class:`SnapshotCorrupted` naming ``path`` if it is not a relative
    path (:func:`~state.records.manifest.is_relative_path`) or resolves outside
    ``staging``: a manifest is read from the bucket, and write access to the bucket must
    not become writing files anywhere the driver can."""
    root = staging.resolve()
    if is_relative_path(path):
        dest = (root / path).resolve()
        if dest != root and dest.is_relative_to(root):
            return dest
    raise SnapshotCorrupted(
        f"snapshot manifest names the file {path!r}, which leaves the checkpoint directory "
        f"(expected {RELATIVE_PATH}, not through a symbolic link out of it); nothing was "
        "restored"
    )


@dataclass(frozen=True)
class Materialised:
    files: int
    bytes: int
    seconds: float


def materialise(  # noqa: PLR0913 - a keyword-only cancel hook and progress options
    store: StateStore,
    layout: PipelineLayout,
    manifest: Manifest,
    target: Path,
    *,
    cancelled: Callable[[], bool] = lambda: False,
    parallelism: int = 4,
) -> Materialised:
    """Write the snapshot's files into ``target`` (replacing what is there), verified.

    Files are downloaded into a hidden sibling directory and every one is checked
    against its size and SHA-256 before the directories are swapped, so ``target``
    holds either its old content or the complete snapshot. A mismatch raises
    :class:`SnapshotCorrupted` and leaves ``target`` untouched; so does ``cancelled()``
    returning true before the swap (a recovery that ran out of time).
    """
    started = time.monotonic()
    target = target.absolute()
    # Every path is checked before anything is created: a manifest that names a file
    # outside the checkpoint writes nothing, not even the staging directory.
    for entry in manifest.files:
        if not is_relative_path(entry.path):
            raise SnapshotCorrupted(
                f"snapshot {manifest.snapshot_id}: the manifest names the file "
                f"{entry.path!r}, which leaves the checkpoint directory (expected "
                f"{RELATIVE_PATH}); nothing was restored"
            )
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = target.parent / f".{target.name}.gtbarrier-restore-{uuid.uuid4().hex[:8]}"
    staging.mkdir()
    total = 0
    by_blob: dict[str, list[ManifestEntry]] = {}
    for entry in manifest.files:
        by_blob.setdefault(entry.blob, []).append(entry)
    try:

        def fetch(name: str) -> int:
            if cancelled():
                raise SnapshotIncomplete("recovery cancelled")
            entries = by_blob[name]
            key = f"{layout.snapshot_blobs_prefix}{name}"
            hit = store.get_or_none(key)
            if hit is None:
                raise SnapshotCorrupted(
                    f"snapshot {manifest.snapshot_id}: {store.uri}/{key} is missing "
                    f"(it holds {_paths(entries)})"
                )
            pieces = [(e, hit.data[e.offset : e.offset + e.size]) for e in entries]
            bad = [
                e
                for e, piece in pieces
                if len(piece) != e.size
                or sha256_hex(piece) != e.sha256
                or (e.pack is None and len(hit.data) != e.size)
            ]
            if bad:
                raise SnapshotCorrupted(
                    f"snapshot {manifest.snapshot_id}: {store.uri}/{key} does not hold "
                    f"{_paths(bad)} as recorded (size/SHA-256)"
                )
            for e, piece in pieces:
                # resolved before and after its parents are made: nothing under the
                # staging directory may lead out of it (a symbolic link)
                dest = destination(staging, e.path)
                dest.parent.mkdir(parents=True, exist_ok=True)
                dest = destination(staging, e.path)
                with open(dest, "wb") as fh:
                    fh.write(piece)
                    fh.flush()
                    os.fsync(fh.fileno())
            return sum(e.size for e in entries)

        with ThreadPoolExecutor(max_workers=parallelism) as pool:
            total = sum(pool.map(fetch, sorted(by_blob)))
        if cancelled():
            raise SnapshotIncomplete("recovery cancelled before the checkpoint was replaced")
        replace_dir(staging, target)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return Materialised(len(manifest.files), total, time.monotonic() - started)


def _paths(entries: Sequence[ManifestEntry], most: int = 5) -> str:
    """The paths of ``entries``, at most ``most`` of them, for an error message."""
    names = ", ".join(e.path for e in entries[:most])
    return names if len(entries) <= most else f"{names} and {len(entries) - most} more"


def replace_dir(new: Path, target: Path) -> None:
    """Put directory ``new`` in place of ``target`` (which may not exist) by renames."""
    old = target.parent / f".{target.name}.gtbarrier-old-{uuid.uuid4().hex[:8]}"
    if target.exists():
        os.rename(target, old)
    os.rename(new, target)
    fsync_dir(target.parent)
    shutil.rmtree(old, ignore_errors=True)
