"""The resume point: where a restarted pipeline picks up, and the snapshots it may use.

One small JSON record per pipeline, in ZooKeeper (``/gtbarrier/<pipeline>/resume``) or,
without ZooKeeper, in the state store (``<pipeline>/resume.json``); docs/PROTOCOL.md,
"Snapshots and resume point"::

    {"format": 1, "generation": 0, "token": 3, "epoch": 7, "batch_id": 12,
     "query_id": "...", "frontier": {"epoch": 8, "offsets": {...}},
     "created_at": 1760000000.0, "snapshot_id": 4,
     "manifest": "<pipeline>/snapshots/000000000004/manifest.json",
     "manifest_sha256": "...", "retained": [{...newest first...}]}

``snapshot_id``, ``manifest`` and ``manifest_sha256`` repeat the newest retained snapshot
(null before a generation's first snapshot). A point written before the ``format`` field
existed decodes as format 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from state.records.codec import FORMAT_FIELD, Fields

RESUME_POINT_FORMAT = 1
NO_EPOCH = -1


@dataclass(frozen=True)
class SnapshotRef:
    """A snapshot listed in the resume point (the current one or a retained older one)."""

    snapshot_id: int
    manifest: str
    manifest_sha256: str
    epoch: int
    batch_id: int

    def to_json(self) -> dict[str, Any]:
        return {
            "batch_id": self.batch_id,
            "epoch": self.epoch,
            "manifest": self.manifest,
            "manifest_sha256": self.manifest_sha256,
            "snapshot_id": self.snapshot_id,
        }

    @classmethod
    def from_json(cls, raw: object) -> SnapshotRef:
        f = Fields(raw, "retained snapshot")
        return cls(
            snapshot_id=f.integer("snapshot_id", minimum=0),
            manifest=f.string("manifest"),
            manifest_sha256=f.string("manifest_sha256"),
            epoch=f.integer("epoch", minimum=NO_EPOCH),
            batch_id=f.integer("batch_id", minimum=0),
        )


@dataclass(frozen=True)
class ResumePoint:
    """The parsed resume point. ``snapshot`` is None before the first snapshot of a
    generation (the query then replays from the source's persisted start).

    ``epoch`` is the last source epoch whose effects the snapshot's operator state holds;
    ``frontier`` the source offset at which the next batch starts (any JSON: the gtkafka
    offset, or another source's); ``token`` the fencing token of the driver that wrote it.
    """

    generation: int
    token: int
    epoch: int
    batch_id: int | None
    query_id: str | None
    frontier: Any
    created_at: float
    retained: tuple[SnapshotRef, ...]

    @property
    def snapshot(self) -> SnapshotRef | None:
        return self.retained[0] if self.retained else None

    def order_key(self) -> tuple[int, int, int]:
        """Resume points are ordered by (generation, epoch, batch id); a write must increase it."""
        return (self.generation, self.epoch, NO_EPOCH if self.batch_id is None else self.batch_id)

    def to_json(self) -> dict[str, Any]:
        snap = self.snapshot
        return {
            "batch_id": self.batch_id,
            "created_at": self.created_at,
            "epoch": self.epoch,
            FORMAT_FIELD: RESUME_POINT_FORMAT,
            "frontier": self.frontier,
            "generation": self.generation,
            "manifest": snap.manifest if snap else None,
            "manifest_sha256": snap.manifest_sha256 if snap else None,
            "query_id": self.query_id,
            "retained": [r.to_json() for r in self.retained],
            "snapshot_id": snap.snapshot_id if snap else None,
            "token": self.token,
        }

    @classmethod
    def from_json(cls, raw: object) -> ResumePoint:
        f = Fields(raw, "resume point")
        f.format(RESUME_POINT_FORMAT)
        return cls(
            generation=f.integer("generation", 0, minimum=0),
            token=f.integer("token", 0, minimum=0),
            epoch=f.integer("epoch", NO_EPOCH, minimum=NO_EPOCH),
            batch_id=f.optional_integer("batch_id", minimum=0),
            query_id=f.optional_string("query_id"),
            frontier=f.value("frontier"),
            created_at=f.number("created_at", 0.0),
            retained=tuple(SnapshotRef.from_json(r) for r in f.array("retained", [])),
        )

    @classmethod
    def empty(cls, *, generation: int, token: int, created_at: float) -> ResumePoint:
        """A generation with no snapshot yet."""
        return cls(generation, token, NO_EPOCH, None, None, None, created_at, ())
