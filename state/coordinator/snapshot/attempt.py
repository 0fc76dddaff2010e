"""The snapshot of one completed batch, from checkpoint files to an accepted resume point.

:meth:`SnapshotPipeline.run`, within ``drain_timeout``:

1. wait for the batch's checkpoint files (the commit entry is written just before the
   progress event is posted);
2. upload them (:class:`state.coordinator.snapshot.write.SnapshotWriter`: content-addressed,
   verified);
3. wait until the barrier has no bundle in flight at or below the batch's epoch;
4. accept: move the resume point forward (:mod:`state.protocol.resume_point`), only while
   this driver holds the pipeline, its fencing token is the newest, and the resume point is still in
   the generation the snapshot started in;
5. prune, from the resume point read again (a driver that paused since its acceptance must
   not delete what a newer one retains, :mod:`state.coordinator.snapshot.retention`): the
   snapshots below the oldest retained one, then the epoch log below the oldest retained
   snapshot and ``epochs_retained`` below the barrier (:mod:`state.protocol.epoch_floor`).

The checkpoint files, their upload and the manifest are the writer's
(:class:`ManifestWriter`, by default :class:`~state.coordinator.snapshot.write.SnapshotWriter`),
and the clocks and the sleep of the waits are seams too: a deterministic simulation runs
this same sequence over simulated checkpoint files, on its own clock.

A snapshot belongs to the generation of the resume point when it starts (its manifest
records it): a snapshot of the old query version still waiting when
``recover(mode="replay")`` begins a new generation is refused, never accepted into the
new one.

Any failure leaves the previous resume point in place; the caller decides what it means
(:class:`SnapshotIncomplete`: try the next batch; anything else: abandoned).
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from state.coordinator.batches import CompletedBatch
from state.coordinator.config import CoordinatorConfig
from state.coordinator.driver_ownership import DriverOwnership
from state.coordinator.snapshot.retention import Pruned, decide_retention, prune
from state.coordinator.snapshot.write import SnapshotWriter
from state.errors import (
    CoordinationError,
    GtBarrierError,
    PipelineFenced,
    RetriableError,
    SnapshotIncomplete,
)
from state.protocol.barrier_state import read_barrier_state
from state.protocol.epoch_floor import (
    FloorRead,
    prune_below,
    pruning_step,
    read_floor_versioned,
    snapshot_floor_target,
)
from state.protocol.fencing import check_token
from state.protocol.resume_point import (
    accepted_point,
    advance_resume_point,
    read_resume_point,
)
from state.records.barrier import BarrierState
from state.records.inflight_bundle import InflightBundle
from state.records.manifest import Manifest
from state.records.resume_point import ResumePoint, SnapshotRef
from state.retry import poll_until
from state.stores import StateStore

log = logging.getLogger(__name__)

CHECKPOINT_WAIT_S = 10.0


def blocking_bundle(state: BarrierState, epoch: int) -> InflightBundle | None:
    """The bundle a snapshot of a batch of ``epoch`` waits for (None: it may be accepted).

    A bundle in flight at or below the snapshot's epoch may still be resolved by a
    replay of its epoch; a restore from the snapshot starts after it, so the snapshot is
    accepted only once no such bundle is in flight (pure: the simulator calls it too)."""
    inflight = state.inflight
    if inflight is not None and inflight.epoch <= epoch:
        return inflight
    return None


@dataclass(frozen=True)
class SnapshotStats:
    snapshot_id: int
    epoch: int
    batch_id: int
    started_at: float
    accepted_at: float
    duration_s: float
    copy_s: float
    files: int
    bytes: int
    uploaded_files: int
    uploaded_bytes: int

    def summary(self, now: float) -> dict[str, Any]:
        """As ``status()["last_snapshot"]``: age and durations rounded to milliseconds."""
        return {
            "snapshot_id": self.snapshot_id,
            "epoch": self.epoch,
            "batch_id": self.batch_id,
            "age_s": round(now - self.accepted_at, 3),
            "duration_s": round(self.duration_s, 3),
            "copy_s": round(self.copy_s, 3),
            "files": self.files,
            "bytes": self.bytes,
            "uploaded_files": self.uploaded_files,
            "uploaded_bytes": self.uploaded_bytes,
        }


class Lineage:
    """The resume point generation this driver snapshots in, and the point it last read
    or wrote (for ``status()`` and log lines)."""

    def __init__(self) -> None:
        self.generation = 0
        self.point: ResumePoint | None = None

    def seen(self, point: ResumePoint | None) -> None:
        self.point = point
        self.generation = point.generation if point is not None else 0

    def describe(self) -> str:
        point = self.point
        if point is None or point.snapshot is None:
            return "the persisted start (no snapshot)"
        return (
            f"epoch {point.epoch} (batch {point.batch_id}, snapshot {point.snapshot.snapshot_id})"
        )


class _NotDrainedError(RetriableError):
    """The barrier still has a bundle in flight at or below the snapshot's epoch."""


Closing = Callable[[], str | None]
"""Why the snapshot must end early (the coordinator closes, a new generation began), or None."""


class ManifestWriter(Protocol):
    """What the pipeline needs of the snapshot's files: :class:`SnapshotWriter`'s methods."""

    @property
    def manifests(self) -> Mapping[int, Manifest]:
        """The manifests this writer wrote, by snapshot id (retention reads them)."""

    def files_ready(self, checkpoint: Path, batch_id: int) -> object:
        """Raises :class:`SnapshotIncomplete` until the files batch ``batch_id`` needs are
        in ``checkpoint``."""

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
        clock: Callable[[], float],
    ) -> Manifest:
        """Copy the batch's files and create its manifest (a new snapshot id)."""

    def manifest_key(self, snapshot_id: int) -> str:
        """Where snapshot ``snapshot_id``'s manifest is."""

    def forget_blobs(self, names: Iterable[str]) -> None:
        """The stored objects ``names`` were deleted by retention."""


class SnapshotPipeline:
    """Snapshots one batch at a time for one pipeline (see the module docstring)."""

    def __init__(  # noqa: PLR0913 - its collaborators, and the simulation's seams
        self,
        config: CoordinatorConfig,
        store: StateStore,
        ownership: DriverOwnership,
        lineage: Lineage,
        *,
        writer: ManifestWriter | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """``writer`` copies the checkpoint files and writes the manifest (default: a
        :class:`SnapshotWriter` over ``store``); ``clock`` stamps the snapshot,
        ``monotonic`` and ``sleep`` time its waits: seams for a deterministic simulation."""
        self.config = config
        self.store = store
        self.layout = config.layout
        self.ownership = ownership
        self.lineage = lineage
        self.writer: ManifestWriter = (
            writer if writer is not None else SnapshotWriter(store, self.layout)
        )
        self._clock = clock
        self._monotonic = monotonic
        self._sleep = sleep

    def run(self, batch: CompletedBatch, *, closing: Closing) -> tuple[SnapshotStats, ResumePoint]:
        """Snapshot ``batch`` and accept it; a reason from ``closing()`` ends it early."""
        generation = self.lineage.generation
        started_at = self._clock()
        t0 = self._monotonic()
        deadline = t0 + self.config.drain_timeout
        token = self.ownership.token
        if token is None or not self.ownership.held:
            raise CoordinationError(
                "this driver does not hold the pipeline (ZooKeeper session lost)"
            )

        def left() -> float:
            return max(0.0, deadline - self._monotonic())

        checkpoint = self.config.checkpoint
        poll_until(
            min(CHECKPOINT_WAIT_S, left()),
            max_delay=0.5,
            is_retriable=lambda e: isinstance(e, SnapshotIncomplete),
            sleep=self._sleep,
            clock=self._monotonic,
        )(lambda: self.writer.files_ready(checkpoint, batch.batch_id))
        manifest = self.writer.write(
            checkpoint,
            batch_id=batch.batch_id,
            epoch=batch.epoch,
            frontier=batch.frontier,
            generation=generation,
            token=token,
            query_id=batch.query_id,
            clock=self._clock,
        )
        log.info(
            "snapshot %d of batch %d (epoch %d): %d files, %d bytes, %d uploaded in %.2fs",
            manifest.snapshot_id,
            batch.batch_id,
            batch.epoch,
            len(manifest.files),
            manifest.total_bytes,
            manifest.uploaded_bytes,
            manifest.copy_seconds,
        )
        if left() <= 0:
            raise CoordinationError(
                f"drain_timeout={self.config.drain_timeout:g}s passed while uploading"
            )
        self._await_drained(batch.epoch, left(), closing)
        point = self._accept(manifest, token, left(), closing)
        pruned = self._prune(token, manifest.generation)
        stats = SnapshotStats(
            snapshot_id=manifest.snapshot_id,
            epoch=batch.epoch,
            batch_id=batch.batch_id,
            started_at=started_at,
            accepted_at=self._clock(),
            duration_s=self._monotonic() - t0,
            copy_s=manifest.copy_seconds,
            files=len(manifest.files),
            bytes=manifest.total_bytes,
            uploaded_files=manifest.uploaded_files,
            uploaded_bytes=manifest.uploaded_bytes,
        )
        log.info(
            "snapshot %d accepted: resume point at epoch %d (batch %d) in %s; "
            "pruned %d snapshot(s), %d blob(s)",
            manifest.snapshot_id,
            batch.epoch,
            batch.batch_id,
            self.ownership.backend.description,
            pruned.snapshots,
            pruned.blobs,
        )
        return stats, point

    def _prune(self, token: int, generation: int) -> Pruned:
        """After an acceptance: delete the snapshots the resume point no longer retains,
        then raise the epoch log's floor (:meth:`_prune_epochs`), both decided from the
        point read now (:func:`decide_retention`), not from the one this driver wrote: a
        driver that paused since must not delete what a newer one retains. The floor is
        read first, so that a new generation begun after it (which fences the floor,
        :func:`~state.protocol.epoch_floor.fence_generation`) makes the raise lose.

        The snapshot is accepted already: a store that fails the pruning is logged and
        the pruning is tried after the next snapshot; a newer driver's fencing token
        (:class:`~state.errors.PipelineFenced`) still stops this one."""
        try:
            floor = read_floor_versioned(self.store, self.layout)
            point, _ = read_resume_point(self.ownership.backend)
            retention = decide_retention(point, token=token, generation=generation)
            if retention.skipped is not None or point is None:
                log.info("snapshot retention skipped: %s", retention.skipped)
                return Pruned(0, 0)
            check_token(self.store, self.layout, token)
            pruned, deleted = prune(self.store, self.layout, retention.keep, self.writer.manifests)
        except PipelineFenced:
            raise
        except GtBarrierError as err:
            log.warning("pruning the snapshots failed (tried after the next snapshot): %s", err)
            return Pruned(0, 0)
        self.writer.forget_blobs(deleted)
        if floor.generation > generation:
            log.info(
                "the epoch log's floor is fenced by generation %d, this driver's is %d: not raised",
                floor.generation,
                generation,
            )
        else:
            self._prune_epochs(floor, min(r.epoch for r in point.retained))
        return pruned

    def _prune_epochs(self, floor: FloorRead, oldest_snapshot_epoch: int) -> None:
        """Raise the epoch log's floor (:mod:`state.protocol.epoch_floor`), as ``floor``
        read it, to ``epochs_retained`` below the barrier's progress, but never above the
        epoch of the oldest retained snapshot, whose restore starts there. The snapshot is
        already accepted: a pruning that fails on the store is logged and tried after the
        next."""
        retained = self.config.epochs_retained
        try:
            state = read_barrier_state(self.store, self.layout)
            inflight = None if state.inflight is None else state.inflight.bundle_id
            target = snapshot_floor_target(
                state.progress, inflight, retained, oldest_snapshot_epoch
            )
            if target - floor.epoch >= pruning_step(retained):
                prune_below(self.store, self.layout, target, read=floor)
        except GtBarrierError as err:
            log.warning("pruning the epoch log failed (tried after the next snapshot): %s", err)

    def _await_drained(self, epoch: int, timeout: float, closing: Closing) -> None:
        def check() -> None:
            _check_not_closing(closing)
            inflight = blocking_bundle(read_barrier_state(self.store, self.layout), epoch)
            if inflight is not None:
                raise _NotDrainedError(
                    f"barrier bundle {inflight.bundle_id} (epoch {inflight.epoch}) "
                    f"still in flight at or below the snapshot's epoch {epoch}"
                )

        # The store retries its own requests: only the condition itself is polled.
        poll_until(
            timeout,
            is_retriable=lambda e: isinstance(e, _NotDrainedError),
            sleep=self._sleep,
            clock=self._monotonic,
        )(check)

    def _accept(
        self, manifest: Manifest, token: int, timeout: float, closing: Closing
    ) -> ResumePoint:
        ref = SnapshotRef(
            snapshot_id=manifest.snapshot_id,
            manifest=self.writer.manifest_key(manifest.snapshot_id),
            manifest_sha256=hashlib.sha256(manifest.to_bytes()).hexdigest(),
            epoch=manifest.epoch,
            batch_id=manifest.batch_id,
        )

        def make(current: ResumePoint | None) -> ResumePoint:
            _check_not_closing(closing)
            if not self.ownership.held:
                raise CoordinationError("the driver lock was lost before the snapshot was accepted")
            check_token(self.store, self.layout, token)
            return accepted_point(
                current,
                ref,
                generation=manifest.generation,
                token=token,
                query_id=manifest.query_id,
                frontier=manifest.frontier,
                retain=self.config.retain,
                created_at=self._clock(),
            )

        written = advance_resume_point(
            self.ownership.backend,
            make,
            retry=self.ownership.resume_point_writes(
                timeout, sleep=self._sleep, clock=self._monotonic
            ),
        )
        if written is None:
            raise CoordinationError(
                f"the resume point is already at or past epoch {manifest.epoch}; snapshot "
                f"{manifest.snapshot_id} is not needed"
            )
        self.lineage.seen(written)
        return written


def _check_not_closing(closing: Closing) -> None:
    reason = closing()
    if reason is not None:
        raise CoordinationError(reason)


__all__ = ["Lineage", "ManifestWriter", "SnapshotPipeline", "SnapshotStats", "blocking_bundle"]
