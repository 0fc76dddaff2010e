"""The resume point: where a restarted pipeline picks up, and the rule that it never moves back.

One small JSON record per pipeline, kept in ZooKeeper (``/gtbarrier/<pipeline>/resume``)
or, without ZooKeeper, in the state store (``<pipeline>/resume.json``)::

    {"generation": 0, "token": 3, "epoch": 7, "batch_id": 12, "query_id": "...",
     "frontier": {"epoch": 8, "offsets": {...}}, "created_at": 1760000000.0,
     "snapshot_id": 4, "manifest": "<pipeline>/snapshots/000000000004/manifest.json",
     "manifest_sha256": "...", "retained": [{...newest first...}]}

``epoch`` is the last source epoch whose effects the snapshot's operator state holds
(the epoch batch ``batch_id`` read); ``frontier`` is the source offset at which the
next batch starts (``frontier.epoch == epoch + 1`` for the gtkafka source).
``generation`` is bumped by ``recover(mode="replay")``: a query started on a fresh
checkpoint begins a new lineage whose snapshots supersede every older one.
``token`` is the fencing token of the driver that wrote the record.

Every write is a compare-and-swap on the record's version (the znode version, or the
store's ETag) and is refused unless it moves the point forward: see :func:`order_key`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from state.errors import ConcurrentModification, KeyExists, PipelineFenced
from state.layout import PipelineLayout
from state.retry import Retry
from state.store import StateStore, dumps

log = logging.getLogger("gtbarrier.coordinator")

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
    def from_json(cls, raw: dict[str, Any]) -> SnapshotRef:
        return cls(
            snapshot_id=int(raw["snapshot_id"]),
            manifest=str(raw["manifest"]),
            manifest_sha256=str(raw["manifest_sha256"]),
            epoch=int(raw["epoch"]),
            batch_id=int(raw["batch_id"]),
        )


@dataclass(frozen=True)
class ResumePoint:
    """The parsed resume point record. ``snapshot`` is None before the first snapshot of a
    generation (the query then replays from the source's persisted start)."""

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

    def to_json(self) -> dict[str, Any]:
        snap = self.snapshot
        return {
            "batch_id": self.batch_id,
            "created_at": self.created_at,
            "epoch": self.epoch,
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
    def from_json(cls, raw: dict[str, Any]) -> ResumePoint:
        return cls(
            generation=int(raw.get("generation", 0)),
            token=int(raw.get("token", 0)),
            epoch=int(raw.get("epoch", NO_EPOCH)),
            batch_id=None if raw.get("batch_id") is None else int(raw["batch_id"]),
            query_id=raw.get("query_id"),
            frontier=raw.get("frontier"),
            created_at=float(raw.get("created_at", 0.0)),
            retained=tuple(SnapshotRef.from_json(r) for r in raw.get("retained", [])),
        )

    @classmethod
    def empty(cls, *, generation: int, token: int, created_at: float) -> ResumePoint:
        """A generation with no snapshot yet."""
        return cls(generation, token, NO_EPOCH, None, None, None, created_at, ())

    def order_key(self) -> tuple[int, int, int]:
        return order_key(self)


def order_key(point: ResumePoint) -> tuple[int, int, int]:
    """Resume points are ordered by (generation, epoch, batch id); a write must increase it."""
    return (point.generation, point.epoch, NO_EPOCH if point.batch_id is None else point.batch_id)


def check_advance(current: ResumePoint | None, new: ResumePoint) -> bool:
    """Whether ``new`` may replace ``current``.

    False if ``new`` is not strictly newer (a late or repeated write: nothing to do).
    Raises :class:`PipelineFenced` if ``current`` was written by a newer driver (a
    higher fencing token): this coordinator is stale and must not write at all.
    """
    if current is None:
        return True
    if new.token < current.token:
        raise PipelineFenced(
            f"resume point was written by a newer driver (fencing token {current.token} > "
            f"ours {new.token}); this driver is stale and must stop"
        )
    return order_key(new) > order_key(current)


class ResumePointBackend(Protocol):
    """Where the resume point record lives. ``version`` is opaque (znode version, ETag)."""

    @property
    def description(self) -> str:
        """Names the server and path, for log lines and errors."""

    def read(self) -> tuple[dict[str, Any] | None, str | None]:
        """The raw record and its version, or ``(None, None)`` if there is none."""

    def write(self, record: dict[str, Any], expected_version: str | None) -> str:
        """Create (``expected_version`` None) or compare-and-swap; the new version.

        Raises :class:`ConcurrentModification` if someone else wrote in between.
        """


class StoreResumePoints:
    """The resume point in the state store (``<pipeline>/resume.json``), without ZooKeeper."""

    def __init__(self, store: StateStore, layout: PipelineLayout) -> None:
        self.store = store
        self.key = layout.resume_point

    @property
    def description(self) -> str:
        return f"state store {self.store.uri} key '{self.key}'"

    def read(self) -> tuple[dict[str, Any] | None, str | None]:
        hit = self.store.get_or_none(self.key)
        if hit is None:
            return None, None
        return json.loads(hit.data), hit.version

    def write(self, record: dict[str, Any], expected_version: str | None) -> str:
        if expected_version is None:
            try:
                return self.store.create(self.key, dumps(record))
            except KeyExists as err:
                raise ConcurrentModification(self.store.uri, self.key, None) from err
        return self.store.compare_and_swap(self.key, dumps(record), expected_version)


def read_resume_point(backend: ResumePointBackend) -> tuple[ResumePoint | None, str | None]:
    raw, version = backend.read()
    return (None if raw is None else ResumePoint.from_json(raw)), version


def advance_resume_point(
    backend: ResumePointBackend,
    make: Callable[[ResumePoint | None], ResumePoint],
    *,
    retry: Retry | None = None,
) -> ResumePoint | None:
    """Replace the resume point with ``make(current)`` if that moves it forward.

    ``make`` sees the current point (to carry the retained list over) and is called
    again after a lost compare-and-swap. Returns the point written, or None if the
    current one is already at or past it. Raises :class:`PipelineFenced` if a newer
    driver wrote the current point.
    """
    attempts = retry or Retry(
        max_attempts=20,
        base_delay=0.02,
        max_delay=0.5,
        deadline=30.0,
        is_retriable=lambda e: (
            isinstance(e, ConcurrentModification) or getattr(e, "retriable", False)
        ),
    )

    def once() -> ResumePoint | None:
        current, version = read_resume_point(backend)
        new = make(current)
        if not check_advance(current, new):
            log.info(
                "resume point in %s is already at %s; not writing %s",
                backend.description,
                current and order_key(current),
                order_key(new),
            )
            return None
        backend.write(new.to_json(), version)
        return new

    return attempts(once)
