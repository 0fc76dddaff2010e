"""The resume point's rules and its two homes: it never moves back, stale drivers are fenced.

The record itself (:class:`~state.records.resume_point.ResumePoint`, docs/PROTOCOL.md) is
kept in ZooKeeper (``/gtbarrier/<pipeline>/resume``,
:mod:`state.coordinator.zookeeper_resume_points`) or, without ZooKeeper, in the state store
(``<pipeline>/resume.json``, :class:`StoreResumePoints`).

``generation`` is bumped by ``recover(mode="replay")``: a query started on a fresh
checkpoint begins a new lineage whose snapshots supersede every older one
(:func:`new_generation`). ``token`` is the fencing token of the driver that wrote the
record.

Every write is a compare-and-swap on the record's version (the znode version, or the
store's ETag) and is refused unless it moves the point forward: see :func:`order_key`.
A snapshot is accepted only into the generation it was taken in (:func:`accepted_point`):
a snapshot of the old query version still running when a new generation begins is never
accepted into the new one. A driver works only in the generation it observed when it
started (before it waited for the driver lock), or in one it began itself
(:func:`check_driver_generation`): a driver of the old version started before
``recover(mode="replay")``, a standby on the lock, refuses the new generation, so its
snapshots are never of the new generation either.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from typing import Any, Protocol

from state.errors import (
    ConcurrentModification,
    CoordinationError,
    GenerationSuperseded,
    KeyExists,
    MalformedRecord,
    PipelineFenced,
)
from state.layout import PipelineLayout
from state.records.codec import dumps
from state.records.resume_point import ResumePoint, SnapshotRef
from state.retry import Retry, cas_loop
from state.stores import StateStore

__all__ = [
    "ResumePointBackend",
    "StoreResumePoints",
    "accepted_point",
    "advance_resume_point",
    "check_advance",
    "check_driver_generation",
    "generation_of",
    "new_generation",
    "order_key",
    "read_resume_point",
]

log = logging.getLogger(__name__)


def order_key(point: ResumePoint) -> tuple[int, int, int]:
    """Resume points are ordered by (generation, epoch, batch id); a write must increase it."""
    return point.order_key()


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


def accepted_point(  # noqa: PLR0913 - the snapshot's fields, keyword-only
    current: ResumePoint | None,
    snapshot: SnapshotRef,
    *,
    generation: int,
    token: int,
    query_id: str | None,
    frontier: Any,
    retain: int,
    created_at: float,
) -> ResumePoint:
    """The resume point that accepts ``snapshot``, taken in ``generation`` by the driver
    holding ``token``; it keeps the ``retain`` newest snapshots of the generation.

    Raises :class:`~state.errors.CoordinationError` if the current point is in another
    generation: a new query version began (``recover(mode="replay")``) after the snapshot
    started, and its snapshot of the old version must not become the new one's.
    """
    if current is not None and current.generation != generation:
        raise CoordinationError(
            f"snapshot {snapshot.snapshot_id} belongs to generation {generation} of the "
            f"resume point, which is at generation {current.generation} now (a new query "
            "version began with recover(mode='replay')): not accepted"
        )
    older = current.retained if current is not None else ()
    return ResumePoint(
        generation=generation,
        token=token,
        epoch=snapshot.epoch,
        batch_id=snapshot.batch_id,
        query_id=query_id,
        frontier=frontier,
        created_at=created_at,
        retained=(snapshot, *older)[:retain],
    )


def generation_of(point: ResumePoint | None) -> int:
    """The point's generation; 0 (the pipeline's first) if there is no point yet."""
    return point.generation if point is not None else 0


def check_driver_generation(current: ResumePoint | None, *, started: int, pipeline_id: str) -> None:
    """Refuse a driver that would work in a generation begun after it started.

    ``started`` is the generation of the resume point this driver observed when it
    started (before it waited for the driver lock), or the one it began itself with
    ``recover(mode="replay")``. If ``current`` is in a newer generation, another driver
    began it for a new query version while this one waited: this driver may run the
    previous version, whose state must never enter the new generation. Raises
    :class:`~state.errors.GenerationSuperseded` (fatal) then; the caller must not have
    written anything, and must not.
    """
    generation = generation_of(current)
    if generation > started:
        raise GenerationSuperseded(
            f"pipeline '{pipeline_id}' was moved to generation {generation} of the resume "
            f"point by recover(mode='replay') after this driver started at generation "
            f"{started}, so this driver may run the previous version of the query: it does "
            "not take the pipeline; restart it with the current program"
        )


def new_generation(current: ResumePoint | None, *, token: int, created_at: float) -> ResumePoint:
    """The first point of the next generation (no snapshot yet), for a query version that
    starts on a fresh checkpoint and replays from the source's persisted start."""
    generation = current.generation + 1 if current is not None else 1
    return ResumePoint.empty(generation=generation, token=token, created_at=created_at)


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
        try:
            return json.loads(hit.data), hit.version
        except ValueError:
            raise MalformedRecord(f"{self.description}: not a JSON document") from None

    def write(self, record: dict[str, Any], expected_version: str | None) -> str:
        if expected_version is None:
            try:
                return self.store.create(self.key, dumps(record))
            except KeyExists as err:
                raise ConcurrentModification(self.store.uri, self.key, None) from err
        return self.store.compare_and_swap(self.key, dumps(record), expected_version)


def read_resume_point(backend: ResumePointBackend) -> tuple[ResumePoint | None, str | None]:
    """The resume point and its version, or ``(None, None)`` if there is none."""
    raw, version = backend.read()
    if raw is None:
        return None, version
    try:
        return ResumePoint.from_json(raw), version
    except MalformedRecord as err:
        err.add_note(f"while reading the resume point in {backend.description}")
        raise


def advance_resume_point(
    backend: ResumePointBackend,
    make: Callable[[ResumePoint | None], ResumePoint],
    *,
    retry: Retry | None = None,
) -> ResumePoint | None:
    """Replace the resume point with ``make(current)`` if that moves it forward.

    ``make`` sees the current point (to carry the retained list over) and is called
    again after a lost compare-and-swap (:func:`~state.retry.cas_loop` unless ``retry`` is
    given). Returns the point written, or None if the current one is already at or past
    it. Raises :class:`PipelineFenced` if a newer driver wrote the current point.

    Transient errors of the backend's requests are the backend's to retry (the state
    store retries its own), never this loop's: they propagate.
    """
    attempts = retry or cas_loop()

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
