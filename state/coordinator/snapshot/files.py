"""The checkpoint files of a snapshot: which files a restart after a batch reads.

A snapshot of batch ``N`` (:mod:`state.coordinator.snapshot.write`) copies the set of
checkpoint files that a restart after batch ``N`` needs to the state store.

Which files (Spark 4.3 checkpoint layout; see :func:`checkpoint_files`):

* ``metadata`` (the query id) and ``sources/`` (each source's initial metadata);
* ``offsets/<k>`` and ``commits/<k>`` for ``k`` in ``N - 1, N``: on restart Spark reads
  the last two offset entries (the batch to run next starts where batch ``N - 1``
  ended) and the last commit. The earlier ones Spark keeps (``minBatchesToRetain``, 100)
  are for Spark's own bookkeeping, which starts again from these;
* ``state/<operator>/<partition>/``: store version ``v`` is the state *after* batch
  ``v - 1``, so the restart after batch ``N`` loads version ``N + 1``. The
  HDFS-backed store rebuilds it from the newest ``<v>.snapshot`` at or below it plus the
  ``<v>.delta`` files after it, so only those are copied (:func:`restart_reads`); the
  RocksDB store from ``<v>.zip`` (or ``<v>_<uuid>.zip``, checkpoint format 2), the
  ``SSTs/`` files it references and, with changelog checkpointing, ``<v>.changelog``
  files, of which every one with a version ``<= N + 1`` is copied (all are immutable
  once written; later versions belong to batches after ``N`` and are left out, so a
  restart rewrites them). ``SSTs/`` and ``logs/`` files have unique names and are
  copied as present. Operator metadata and
  state schema files keyed by batch id (``_metadata/v2/<k>``,
  ``_stateSchema/.../<k>_<uuid>``) are copied for ``k <= N``; unversioned ones
  (``_metadata/metadata``, ``_metadata/schema``) always.
* Hidden files (Hadoop ``.crc`` checksums, ``.tmp`` files of writes in progress) are
  skipped: the checksum files are derived data, and the manifest's SHA-256 replaces them.

Spark may delete old files while a copy runs (``minBatchesToRetain``, state store
maintenance). The listing is taken again once; if a file the batch needs is still
missing, :class:`SnapshotIncomplete` is raised and the coordinator tries the next batch.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from state.errors import SnapshotIncomplete

__all__ = ["CheckpointFile", "checkpoint_files", "restart_reads", "sha256_hex", "wanted"]

_STATE_VERSIONED = re.compile(r"(\d+)(?:_[^.]+)?\.(delta|snapshot|zip|changelog)")
_BATCH_KEYED = re.compile(r"(\d+)(?:_.*)?")


@dataclass(frozen=True)
class CheckpointFile:
    path: str  # relative, "/"-separated
    size: int
    mtime_ns: int


def wanted(relpath: str, batch_id: int) -> bool:
    """Whether a restart after ``batch_id`` may need the checkpoint file ``relpath``, by
    its name alone (:func:`restart_reads` then keeps, of an HDFS-backed state store's
    files, those after its newest snapshot)."""
    parts = relpath.split("/")
    name = parts[-1]
    if any(p.startswith(".") for p in parts) or name.endswith((".tmp", ".crc")):
        return False
    top = parts[0]
    if top in ("offsets", "commits") and len(parts) == 2:
        return not name.isdigit() or batch_id - 1 <= int(name) <= batch_id
    if top == "state":
        m = _STATE_VERSIONED.fullmatch(name)
        if m and "SSTs" not in parts:
            return int(m.group(1)) <= batch_id + 1
        if any(p in ("v2", "_stateSchema") for p in parts[:-1]):
            k = _BATCH_KEYED.fullmatch(name)
            return k is None or int(k.group(1)) <= batch_id
    return True


def restart_reads(files: Iterable[CheckpointFile]) -> list[CheckpointFile]:
    """Of ``files`` (all :func:`wanted`), those a restart reads: in each directory of an
    HDFS-backed state store that holds a ``<v>.snapshot``, the newest snapshot and the
    ``<v>.delta`` files after it (the store rebuilds its version from those alone); every
    other file as it is."""
    newest: dict[str, int] = {}
    for f in files:
        where, _, name = f.path.rpartition("/")
        m = _STATE_VERSIONED.fullmatch(name)
        if f.path.startswith("state/") and m and m.group(2) == "snapshot":
            newest[where] = max(newest.get(where, -1), int(m.group(1)))
    kept = []
    for f in files:
        where, _, name = f.path.rpartition("/")
        m = _STATE_VERSIONED.fullmatch(name)
        if where in newest and m and m.group(2) in ("delta", "snapshot"):
            version, snapshot = int(m.group(1)), newest[where]
            if version < snapshot or (version == snapshot and m.group(2) == "delta"):
                continue
        kept.append(f)
    return kept


def checkpoint_files(checkpoint: Path, batch_id: int) -> list[CheckpointFile]:
    """The files of ``checkpoint`` that a restart after ``batch_id`` needs, sorted by path.

    Raises :class:`SnapshotIncomplete` if ``commits/<batch_id>`` or ``offsets/<batch_id>``
    is missing (the batch is not committed, or Spark already deleted it).
    """
    found: list[CheckpointFile] = []
    for root, dirs, files in os.walk(checkpoint):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in files:
            full = Path(root) / name
            rel = full.relative_to(checkpoint).as_posix()
            if not wanted(rel, batch_id):
                continue
            try:
                st = full.stat()
            except FileNotFoundError:
                continue  # deleted by Spark between listing and stat: not needed by a recent batch
            found.append(CheckpointFile(rel, st.st_size, st.st_mtime_ns))
    present = {f.path for f in found}
    for needed in (f"offsets/{batch_id}", f"commits/{batch_id}"):
        if needed not in present:
            raise SnapshotIncomplete(
                f"checkpoint {checkpoint} has no {needed}: batch {batch_id} is not committed "
                "or its files were already removed"
            )
    return sorted(restart_reads(found), key=lambda f: f.path)


def sha256_hex(data: bytes) -> str:
    """The SHA-256 of ``data``, in hex: how manifests name contents and packs."""
    return hashlib.sha256(data).hexdigest()
