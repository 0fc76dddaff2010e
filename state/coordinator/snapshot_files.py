"""Snapshots of a Spark checkpoint in the state store: copy, manifest, verify, restore, prune.

A snapshot of batch ``N`` is the set of checkpoint files that a restart after batch
``N`` needs, copied to the store, plus a manifest
(``<pipeline>/snapshots/<id>/manifest.json``) listing each file's relative path, size,
SHA-256 and where its bytes are. The files a snapshot is the first to need are stored
together, as one pack (``<pipeline>/snapshot-blobs/pack-<sha256>``, named by the SHA-256
of its bytes; at most :data:`PACK_BYTES` each, unless one file alone is larger). A file
an earlier snapshot stored is referenced where it is, so a snapshot costs the files
written since the previous one, in one or a few objects; but a pack that the new
snapshot would use less than half of is not referenced: its files are copied into the
new pack (:func:`plan_packs`). So every pack a manifest names is at least half live for
it, and the packs that the retained snapshots name stay a handful however long the
query runs. Snapshots written before packs (manifest format 1) name a blob per file,
``<pipeline>/snapshot-blobs/<sha256>``; they are restored and pruned as before.

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
import logging
import os
import re
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from state.errors import KeyExists, SnapshotCorrupted, SnapshotIncomplete
from state.layout import PipelineLayout
from state.records.manifest import Manifest, ManifestEntry, PackRef
from state.stores import StateStore

__all__ = [
    "PACK_BYTES",
    "CheckpointFile",
    "Materialised",
    "PackPlan",
    "Pruned",
    "SnapshotWriter",
    "checkpoint_files",
    "load_manifest",
    "materialise",
    "plan_packs",
    "prune",
    "replace_dir",
    "restart_reads",
    "sha256_hex",
    "wanted",
]

log = logging.getLogger(__name__)
_STATE_VERSIONED = re.compile(r"^(\d+)(?:_[^.]+)?\.(delta|snapshot|zip|changelog)$")
_BATCH_KEYED = re.compile(r"^(\d+)(?:_.*)?$")

#: A pack holds at most this many bytes, unless one file alone is larger (it is a pack of
#: its own): what a snapshot holds in memory per upload thread.
PACK_BYTES = 64 << 20

#: A snapshot references a stored pack only if it uses at least this fraction of its bytes.
LIVE_FRACTION = 0.5


# --- which files -------------------------------------------------------------------


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
        m = _STATE_VERSIONED.match(name)
        if m and "SSTs" not in parts:
            return int(m.group(1)) <= batch_id + 1
        if any(p in ("v2", "_stateSchema") for p in parts[:-1]):
            k = _BATCH_KEYED.match(name)
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
        m = _STATE_VERSIONED.match(name)
        if f.path.startswith("state/") and m and m.group(2) == "snapshot":
            newest[where] = max(newest.get(where, -1), int(m.group(1)))
    kept = []
    for f in files:
        where, _, name = f.path.rpartition("/")
        m = _STATE_VERSIONED.match(name)
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


# --- manifest (the record: state.records.manifest) -----------------------------------


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


# --- planning (pure) ------------------------------------------------------------------

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


# --- writing -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Copied:
    """What one copy of a snapshot's files did."""

    entries: tuple[ManifestEntry, ...] = ()
    packs: tuple[PackRef, ...] = ()
    where: dict[str, Location] = field(default_factory=dict)
    uploaded_files: int = 0
    uploaded_bytes: int = 0


@dataclass
class SnapshotWriter:
    """Uploads checkpoint files in packs and writes manifests.

    Keeps, across snapshots, where each stored content is (learnt once from the stored
    manifests whose packs exist) and the SHA-256 of each (path, size, mtime) it has read,
    so an unchanged file is neither uploaded nor read again. Packs upload on
    ``parallelism`` threads; every uploaded pack is verified before the manifest is
    written: by its S3 ETag (the MD5 of what the server stored) when the store returns
    one, else by reading it back and comparing its SHA-256.
    """

    store: StateStore
    layout: PipelineLayout
    parallelism: int = 4
    pack_bytes: int = PACK_BYTES
    _known_blobs: set[str] | None = None
    _located: dict[str, Location] | None = None
    _next_id: int | None = None
    manifests: dict[int, Manifest] = field(default_factory=dict)  # written by this writer
    _hashes: dict[tuple[str, int, int], str] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def blob_key(self, name: str) -> str:
        """The key of the object named ``name`` under ``snapshot-blobs/`` (a pack or, written
        before packs, one file's blob)."""
        return f"{self.layout.snapshot_blobs_prefix}{name}"

    def known_blobs(self) -> set[str]:
        """The names of the objects under ``snapshot-blobs/`` (listed once)."""
        if self._known_blobs is None:
            prefix = self.layout.snapshot_blobs_prefix
            self._known_blobs = {k[len(prefix) :] for k in self.store.list(prefix)}
        return self._known_blobs

    def forget_blobs(self, names: Iterable[str]) -> None:
        """``names`` were deleted (pruned): their contents are stored again when needed."""
        gone = set(names)
        with self._lock:
            self.known_blobs().difference_update(gone)
            if self._located is not None:
                self._located = {
                    sha: loc for sha, loc in self._located.items() if loc[0].name not in gone
                }

    def located(self) -> dict[str, Location]:
        """Where each stored content is: learnt from the stored manifests, once."""
        with self._lock:
            if self._located is None:
                self._located = self._learn()
            return self._located

    def _learn(self) -> dict[str, Location]:
        present = self.known_blobs()
        prefix = self.layout.snapshots_prefix
        found: dict[str, Location] = {}
        for key in self.store.list(prefix):
            if not key.endswith("/manifest.json"):
                continue
            hit = self.store.get_or_none(key)
            if hit is None:
                continue  # pruned meanwhile
            try:
                manifest = Manifest.from_bytes(hit.data, where=f"{self.store.uri}/{key}")
            except SnapshotCorrupted as err:
                log.warning("%s; its packs are not referenced", err)
                continue
            packs = {p.sha256: p for p in manifest.packs}
            for f in manifest.files:
                if f.pack is not None and packs[f.pack].name in present:
                    found.setdefault(f.sha256, (packs[f.pack], f.offset))
        return found

    def next_snapshot_id(self) -> int:
        """The id the next snapshot gets: one more than any in the store (listed once)."""
        with self._lock:
            if self._next_id is None:
                prefix = self.layout.snapshots_prefix
                heads = (k[len(prefix) :].split("/", 1)[0] for k in self.store.list(prefix))
                self._next_id = max((int(h) for h in heads if h.isdigit()), default=0) + 1
            return self._next_id

    def _hash_file(self, checkpoint: Path, f: CheckpointFile) -> str:
        """The SHA-256 of one checkpoint file (read unless known by path, size and mtime)."""
        key = (f.path, f.size, f.mtime_ns)
        with self._lock:
            cached = self._hashes.get(key)
        if cached is not None:
            return cached
        sha = sha256_hex(_read(checkpoint / f.path))
        with self._lock:
            self._hashes[key] = sha
        return sha

    def _upload_pack(
        self, checkpoint: Path, group: Sequence[tuple[str, str]]
    ) -> tuple[PackRef, int]:
        """Store the contents of ``group`` as one pack, verified; (the pack, bytes uploaded:
        0 if an equal pack was already stored)."""
        parts = []
        for sha, path in group:
            data = _read(checkpoint / path)
            if sha256_hex(data) != sha:  # the cache is keyed by mtime: a rewrite is caught here
                raise SnapshotIncomplete(f"checkpoint file {path} changed while being copied")
            parts.append(data)
        body = b"".join(parts)
        pack = PackRef(sha256_hex(body), len(body))
        key = self.blob_key(pack.name)
        created = True
        version = None
        try:
            version = self.store.create(key, body)
        except KeyExists:
            created = False  # stored by an earlier snapshot or a concurrent upload: same content
        if not _etag_is_md5_of(version, body):
            # The store cannot vouch for what it stored (not S3, or not a plain upload): read back.
            back = self.store.get(key).data
            if sha256_hex(back) != pack.sha256:
                raise SnapshotCorrupted(
                    f"pack {self.store.uri}/{key} read back with another checksum"
                )
        with self._lock:
            self.known_blobs().add(pack.name)
        return pack, len(body) if created else 0

    def _copy(self, checkpoint: Path, files: Sequence[CheckpointFile]) -> _Copied:
        """Hash ``files`` and upload, in packs, the contents not referenced where they are."""
        with ThreadPoolExecutor(max_workers=self.parallelism) as pool:
            shas = list(pool.map(lambda f: self._hash_file(checkpoint, f), files))
            pairs = list(zip(files, shas, strict=True))
            with self._lock:  # only files still listed can be asked again: the cache stays bounded
                self._hashes = {(f.path, f.size, f.mtime_ns): sha for f, sha in pairs}
            plan = plan_packs(pairs, self.located(), pack_bytes=self.pack_bytes)
            uploads = list(pool.map(lambda g: self._upload_pack(checkpoint, g), plan.groups))
        size = {f.path: f.size for f in files}
        where = dict(plan.referenced)
        uploaded_files = 0
        for group, (pack, uploaded) in zip(plan.groups, uploads, strict=True):
            offset = 0
            for sha, path in group:
                where[sha] = (pack, offset)
                offset += size[path]
            uploaded_files += len(group) if uploaded else 0
        entries = tuple(
            ManifestEntry(f.path, f.size, sha, pack=where[sha][0].sha256, offset=where[sha][1])
            for f, sha in pairs
        )
        packs = tuple(sorted({where[sha][0] for sha in shas}, key=lambda p: p.sha256))
        return _Copied(entries, packs, where, uploaded_files, sum(n for _, n in uploads))

    def write(  # noqa: PLR0913 - keyword-only fields of the manifest
        self,
        checkpoint: Path,
        *,
        batch_id: int,
        epoch: int,
        frontier: Any,
        generation: int,
        token: int,
        query_id: str | None,
        snapshot_id: int | None = None,
        clock: Callable[[], float] = time.time,
    ) -> Manifest:
        """Copy the files batch ``batch_id`` needs and write the manifest (create-if-absent).

        The listing is taken again once if a file vanishes while it is copied; after that
        :class:`SnapshotIncomplete` propagates.
        """
        started = time.monotonic()
        copied = _Copied()
        for attempt in (1, 2):
            files = checkpoint_files(checkpoint, batch_id)
            try:
                copied = self._copy(checkpoint, files)
            except FileNotFoundError as err:
                if attempt == 2:
                    raise SnapshotIncomplete(
                        f"checkpoint file {err.filename} vanished while batch {batch_id} was copied"
                    ) from err
                log.info("checkpoint file %s vanished during the copy; listing again", err.filename)
                continue
            break
        self._check_present(copied.packs)
        sid = snapshot_id if snapshot_id is not None else self.next_snapshot_id()
        while True:
            manifest = Manifest(
                pipeline_id=self.layout.pipeline_id,
                snapshot_id=sid,
                generation=generation,
                token=token,
                batch_id=batch_id,
                epoch=epoch,
                frontier=frontier,
                query_id=query_id,
                created_at=clock(),
                files=copied.entries,
                uploaded_files=copied.uploaded_files,
                uploaded_bytes=copied.uploaded_bytes,
                copy_seconds=time.monotonic() - started,
                packs=copied.packs,
            )
            try:
                self.store.create(self.manifest_key(sid), manifest.to_bytes())
            except KeyExists:
                sid += 1  # an abandoned snapshot (or another driver) used the id
                continue
            with self._lock:
                self._next_id = max(self._next_id or 0, sid + 1)
                self.manifests[sid] = manifest
                # Contents packed again are referenced where they are now.
                self._located = {**(self._located or {}), **copied.where}
            return manifest

    def manifest_key(self, snapshot_id: int) -> str:
        return f"{self.layout.snapshot(snapshot_id)}manifest.json"

    def _check_present(self, packs: Sequence[PackRef]) -> None:
        """Every pack the manifest names is in the store (one listing): it is complete."""
        prefix = self.layout.snapshot_blobs_prefix
        stored = {k[len(prefix) :] for k in self.store.list(prefix)}
        missing = sorted({p.name for p in packs} - stored)
        if missing:
            with self._lock:
                self._known_blobs = stored
                self._located = None
            raise SnapshotIncomplete(
                f"{len(missing)} pack(s) of the snapshot are missing from "
                f"{self.store.uri}/{prefix} "
                f"(e.g. {missing[0]}); they are uploaded again with the next batch"
            )


def _etag_is_md5_of(version: str | None, data: bytes) -> bool:
    """Whether ``version`` is S3's ETag of a plain upload of ``data`` (the MD5 of the bytes
    the server received and stored): the upload is verified without reading it back."""
    if version is None:
        return False
    return version.strip('"') == hashlib.md5(data, usedforsecurity=False).hexdigest()


def _read(path: Path) -> bytes:
    with open(path, "rb") as fh:
        return fh.read()


# --- reading, verifying, restoring ---------------------------------------------------


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
                dest = staging / e.path
                dest.parent.mkdir(parents=True, exist_ok=True)
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
    _fsync_dir(target.parent)
    shutil.rmtree(old, ignore_errors=True)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


# --- retention ---------------------------------------------------------------------


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
