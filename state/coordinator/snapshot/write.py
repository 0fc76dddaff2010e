"""Writing a snapshot: the checkpoint files a restart reads, uploaded in packs, then the
manifest.

A snapshot of batch ``N`` is the set of checkpoint files that a restart after batch ``N``
needs (:func:`~state.coordinator.snapshot.files.checkpoint_files`), copied to the store in
packs (:mod:`state.coordinator.snapshot.packs`), plus a manifest
(``<pipeline>/snapshots/<id>/manifest.json``, the record
:mod:`state.records.manifest`) listing each file's relative path, size, SHA-256 and where
its bytes are. Snapshots written before packs (manifest format 1) name a blob per file,
``<pipeline>/snapshot-blobs/<sha256>``; they are restored and pruned as before.

Spark may delete old files while a copy runs (``minBatchesToRetain``, state store
maintenance). The listing is taken again once; if a file the batch needs is still
missing, :class:`SnapshotIncomplete` is raised and the coordinator tries the next batch.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from state.coordinator.snapshot.files import CheckpointFile, checkpoint_files, sha256_hex
from state.coordinator.snapshot.packs import PACK_BYTES, Location, plan_packs
from state.errors import KeyExists, SnapshotCorrupted, SnapshotIncomplete
from state.layout import PipelineLayout
from state.records.manifest import Manifest, ManifestEntry, PackRef
from state.stores import StateStore

__all__ = ["SnapshotWriter"]

log = logging.getLogger(__name__)


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

    def files_ready(self, checkpoint: Path, batch_id: int) -> list[CheckpointFile]:
        """The files batch ``batch_id`` needs; :class:`SnapshotIncomplete` until they are
        all in ``checkpoint``."""
        return checkpoint_files(checkpoint, batch_id)

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
