"""The snapshot manifest: ``<pipeline>/snapshots/<id>/manifest.json``, what one snapshot holds.

docs/PROTOCOL.md, "Snapshots and resume point"::

    {"format": 2, "pipeline_id": "orders", "snapshot_id": 12, "generation": 0, "token": 3,
     "batch_id": 41, "epoch": 41, "frontier": {...}, "query_id": "...",
     "created_at": 1760000000.0,
     "files": [{"path", "sha256", "size", "pack", "offset"}, ...],
     "packs": [{"sha256", "size"}, ...],
     "bytes": 123456, "uploaded_bytes": 2345, "uploaded_files": 7, "copy_seconds": 0.41}

Format 2 stores the checkpoint files in packs: each file is ``size`` bytes at ``offset``
of the pack ``pack`` (``<pipeline>/snapshot-blobs/pack-<sha256>``, the SHA-256 of the
pack's bytes), and ``packs`` gives the size of every pack a file names. Format 1 (written
before packs, and still for a manifest without them) has no ``pack``, ``offset`` or
``packs``: each file is the blob ``<pipeline>/snapshot-blobs/<sha256>``.

Created once and never changed: its canonical bytes' SHA-256 goes in the resume point, so
:meth:`Manifest.to_bytes` must stay byte-stable. ``format`` has always been written and is
required. ``bytes`` is derived from ``files``.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from state.errors import SnapshotCorrupted
from state.records.codec import FORMAT_FIELD, Fields, dumps

MANIFEST_FORMAT = 2

#: The format of a manifest whose files are blobs of their own: a release before packs reads it.
MANIFEST_WITHOUT_PACKS_FORMAT = 1

#: A pack's name under ``snapshot-blobs/`` is this prefix and the SHA-256 of its bytes.
PACK_NAME_PREFIX = "pack-"

_SHA256 = re.compile(r"[0-9a-f]{64}")

#: What a file's path may be: relative to the checkpoint, ``/``-separated, no part empty,
#: ``.`` or ``..``; a restore writes each file at this path under the checkpoint only.
RELATIVE_PATH = "a relative path inside the checkpoint (no leading '/', no '.', '..' or empty part)"


def is_relative_path(path: str) -> bool:
    """Whether ``path`` names a file below a directory, never the directory itself or
    anything outside it (before symbolic links, which the restore checks)."""
    return (
        bool(path)
        and not path.startswith("/")
        and "\0" not in path
        and all(part not in ("", ".", "..") for part in path.split("/"))
    )


@dataclass(frozen=True)
class PackRef:
    """A pack: the SHA-256 of its bytes (its name) and its size."""

    sha256: str
    size: int

    @property
    def name(self) -> str:
        """Its object's name under the pipeline's ``snapshot-blobs/``."""
        return f"{PACK_NAME_PREFIX}{self.sha256}"

    def to_json(self) -> dict[str, Any]:
        return {"sha256": self.sha256, "size": self.size}

    @classmethod
    def from_json(cls, raw: object) -> PackRef:
        f = Fields(raw, "manifest pack entry")
        sha = f.string("sha256")
        if not _SHA256.fullmatch(sha):
            raise f.invalid("sha256", "64 lowercase hex digits")
        return cls(sha, f.integer("size", minimum=0))


@dataclass(frozen=True)
class ManifestEntry:
    """One checkpoint file: its path relative to the checkpoint, size and SHA-256, and
    where it is stored: ``size`` bytes at ``offset`` of the pack whose SHA-256 is
    ``pack``, or (``pack`` None, format 1) the blob named by its own SHA-256."""

    path: str
    size: int
    sha256: str
    pack: str | None = None
    offset: int = 0

    @property
    def blob(self) -> str:
        """The name, under the pipeline's ``snapshot-blobs/``, of the object holding it."""
        return self.sha256 if self.pack is None else f"{PACK_NAME_PREFIX}{self.pack}"

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"path": self.path, "sha256": self.sha256, "size": self.size}
        if self.pack is not None:
            doc["offset"] = self.offset
            doc["pack"] = self.pack
        return doc

    @classmethod
    def from_json(cls, raw: object, *, packed: bool = False) -> ManifestEntry:
        f = Fields(raw, "manifest file entry")
        path, size, sha = f.string("path"), f.integer("size", minimum=0), f.string("sha256")
        if not is_relative_path(path):
            raise f.invalid("path", RELATIVE_PATH)
        if not packed:
            return cls(path, size, sha)
        pack = f.string("pack")
        if not _SHA256.fullmatch(pack):
            raise f.invalid("pack", "the SHA-256 of a pack: 64 lowercase hex digits")
        return cls(path, size, sha, pack=pack, offset=f.integer("offset", minimum=0))


@dataclass(frozen=True)
class Manifest:
    """What one snapshot holds. Serialised canonically; its SHA-256 goes in the resume point.

    With ``packs``, every file is in one of them, within its size (format 2); without,
    every file is a blob of its own (format 1).
    """

    pipeline_id: str
    snapshot_id: int
    generation: int
    token: int
    batch_id: int
    epoch: int
    frontier: Any
    query_id: str | None
    created_at: float
    files: tuple[ManifestEntry, ...]
    uploaded_files: int = 0
    uploaded_bytes: int = 0
    copy_seconds: float = 0.0
    packs: tuple[PackRef, ...] = ()

    def __post_init__(self) -> None:
        sizes = {p.sha256: p.size for p in self.packs}
        if len(sizes) != len(self.packs):
            raise ValueError("a manifest names each pack once")
        for f in self.files:
            if (f.pack is None) != (not self.packs):
                raise ValueError(
                    f"{f.path}: in a manifest with packs every file is in one, else none is"
                )
            if f.pack is not None:
                if f.pack not in sizes:
                    raise ValueError(f"{f.path}: pack {f.pack[:12]}... is not among the packs")
                if f.offset + f.size > sizes[f.pack]:
                    raise ValueError(
                        f"{f.path}: bytes {f.offset}..{f.offset + f.size} lie beyond the "
                        f"{sizes[f.pack]} bytes of pack {f.pack[:12]}..."
                    )
        used = {f.pack for f in self.files}
        if any(p.sha256 not in used for p in self.packs):
            raise ValueError("a manifest names only the packs that hold its files")

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    @property
    def blobs(self) -> set[str]:
        """The names, under ``snapshot-blobs/``, of the objects its files are read from."""
        return {f.blob for f in self.files}

    def to_json(self) -> dict[str, Any]:
        doc = {
            "batch_id": self.batch_id,
            "bytes": self.total_bytes,
            "copy_seconds": round(self.copy_seconds, 3),
            "created_at": self.created_at,
            "epoch": self.epoch,
            "files": [f.to_json() for f in self.files],
            FORMAT_FIELD: MANIFEST_FORMAT if self.packs else MANIFEST_WITHOUT_PACKS_FORMAT,
            "frontier": self.frontier,
            "generation": self.generation,
            "pipeline_id": self.pipeline_id,
            "query_id": self.query_id,
            "snapshot_id": self.snapshot_id,
            "token": self.token,
            "uploaded_bytes": self.uploaded_bytes,
            "uploaded_files": self.uploaded_files,
        }
        if self.packs:
            doc["packs"] = [p.to_json() for p in self.packs]
        return doc

    def to_bytes(self) -> bytes:
        return dumps(self.to_json())

    @classmethod
    def from_json(cls, raw: object) -> Manifest:
        f = Fields(raw, "snapshot manifest")
        packed = f.format(MANIFEST_FORMAT, required=True) >= 2
        packs = tuple(PackRef.from_json(p) for p in f.array("packs")) if packed else ()
        if packed and not packs:
            raise f.invalid("packs", "a non-empty JSON array of packs")
        files = tuple(ManifestEntry.from_json(e, packed=packed) for e in f.array("files"))
        fields = {
            "pipeline_id": f.string("pipeline_id"),
            "snapshot_id": f.integer("snapshot_id", minimum=0),
            "generation": f.integer("generation", minimum=0),
            "token": f.integer("token", minimum=0),
            "batch_id": f.integer("batch_id", minimum=0),
            "epoch": f.integer("epoch"),
            "frontier": f.value("frontier"),
            "query_id": f.optional_string("query_id"),
            "created_at": f.number("created_at"),
            "uploaded_files": f.integer("uploaded_files", 0, minimum=0),
            "uploaded_bytes": f.integer("uploaded_bytes", 0, minimum=0),
            "copy_seconds": f.number("copy_seconds", 0.0),
        }
        try:
            return cls(files=files, packs=packs, **fields)
        except ValueError as err:
            raise f.invalid("files", f"files that lie within the packs named ({err})") from None

    @classmethod
    def from_bytes(cls, data: bytes, *, where: str) -> Manifest:
        """Decode stored bytes; :class:`SnapshotCorrupted` (naming ``where``) if malformed."""
        try:
            return cls.from_json(json.loads(data))
        except ValueError as err:  # not JSON, or a MalformedRecord
            raise SnapshotCorrupted(f"snapshot manifest {where} is malformed: {err}") from err
