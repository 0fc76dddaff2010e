"""The snapshot manifest: ``<pipeline>/snapshots/<id>/manifest.json``, what one snapshot holds.

docs/PROTOCOL.md, "Snapshots and resume point"::

    {"format": 1, "pipeline_id": "orders", "snapshot_id": 12, "generation": 0, "token": 3,
     "batch_id": 41, "epoch": 41, "frontier": {...}, "query_id": "...",
     "created_at": 1760000000.0, "files": [{"path", "sha256", "size"}, ...],
     "bytes": 123456, "uploaded_bytes": 2345, "uploaded_files": 7, "copy_seconds": 0.41}

Created once and never changed: its canonical bytes' SHA-256 goes in the resume point, so
:meth:`Manifest.to_bytes` must stay byte-stable. ``format`` has always been written and is
required. ``bytes`` is derived from ``files``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from state.errors import SnapshotCorrupted
from state.records.codec import FORMAT_FIELD, Fields, dumps

MANIFEST_FORMAT = 1


@dataclass(frozen=True)
class ManifestEntry:
    """One checkpoint file: its path relative to the checkpoint, size and SHA-256."""

    path: str
    size: int
    sha256: str

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "sha256": self.sha256, "size": self.size}

    @classmethod
    def from_json(cls, raw: object) -> ManifestEntry:
        f = Fields(raw, "manifest file entry")
        return cls(f.string("path"), f.integer("size", minimum=0), f.string("sha256"))


@dataclass(frozen=True)
class Manifest:
    """What one snapshot holds. Serialised canonically; its SHA-256 goes in the resume point."""

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

    @property
    def total_bytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "batch_id": self.batch_id,
            "bytes": self.total_bytes,
            "copy_seconds": round(self.copy_seconds, 3),
            "created_at": self.created_at,
            "epoch": self.epoch,
            "files": [f.to_json() for f in self.files],
            FORMAT_FIELD: MANIFEST_FORMAT,
            "frontier": self.frontier,
            "generation": self.generation,
            "pipeline_id": self.pipeline_id,
            "query_id": self.query_id,
            "snapshot_id": self.snapshot_id,
            "token": self.token,
            "uploaded_bytes": self.uploaded_bytes,
            "uploaded_files": self.uploaded_files,
        }

    def to_bytes(self) -> bytes:
        return dumps(self.to_json())

    @classmethod
    def from_json(cls, raw: object) -> Manifest:
        f = Fields(raw, "snapshot manifest")
        f.format(MANIFEST_FORMAT, required=True)
        return cls(
            pipeline_id=f.string("pipeline_id"),
            snapshot_id=f.integer("snapshot_id", minimum=0),
            generation=f.integer("generation", minimum=0),
            token=f.integer("token", minimum=0),
            batch_id=f.integer("batch_id", minimum=0),
            epoch=f.integer("epoch"),
            frontier=f.value("frontier"),
            query_id=f.optional_string("query_id"),
            created_at=f.number("created_at"),
            files=tuple(ManifestEntry.from_json(e) for e in f.array("files")),
            uploaded_files=f.integer("uploaded_files", 0, minimum=0),
            uploaded_bytes=f.integer("uploaded_bytes", 0, minimum=0),
            copy_seconds=f.number("copy_seconds", 0.0),
        )

    @classmethod
    def from_bytes(cls, data: bytes, *, where: str) -> Manifest:
        """Decode stored bytes; :class:`SnapshotCorrupted` (naming ``where``) if malformed."""
        try:
            return cls.from_json(json.loads(data))
        except ValueError as err:  # not JSON, or a MalformedRecord
            raise SnapshotCorrupted(f"snapshot manifest {where} is malformed: {err}") from err
