"""``recover()`` as a cancellable future: take the pipeline, read the resume point, prepare
the checkpoint directory (:mod:`state.coordinator.checkpoint_recovery`).

:meth:`Recoverer.start` runs one recovery on a daemon thread (a recovery stuck on an
unresponsive server must not keep the process alive) and returns a
:class:`RecoveryFuture`. Its :attr:`~RecoveryFuture.step` says what the recovery is
doing, for a timeout message; :meth:`~RecoveryFuture.cancel` also asks a running
recovery to stop before its next file (the future then ends with that error).

``mode="replay"`` first stops the snapshot in progress (it belongs to the old query
version), then writes the new generation of the resume point, then empties the checkpoint
directory and marks it with the new generation
(:mod:`state.coordinator.checkpoint_recovery`). Written in that order, a recovery
interrupted half-way never leaves the old version's checkpoint or snapshot usable by the
new generation. The driver that writes the new generation works in it from then on
(:meth:`~state.coordinator.driver_ownership.DriverOwnership.began_generation`); every
other driver that started before it is refused when it takes the pipeline, or when its
``recover()`` reads a generation it did not start in
(:class:`~state.errors.GenerationSuperseded`).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from state.coordinator.checkpoint_recovery import (
    CheckpointFiles,
    RecoveryResult,
    recover_checkpoint,
)
from state.coordinator.config import CoordinatorConfig
from state.coordinator.driver_ownership import DriverOwnership
from state.coordinator.snapshot.attempt import Lineage
from state.errors import CoordinationError, GenerationSuperseded
from state.protocol.epoch_floor import fence_generation
from state.protocol.epoch_log import EpochLog
from state.protocol.fencing import check_token
from state.protocol.resume_point import advance_resume_point, new_generation, read_resume_point
from state.records.resume_point import ResumePoint
from state.records.source_offset import SourceOffset
from state.stores import StateStore

log = logging.getLogger(__name__)

NEW_GENERATION_DEADLINE_S = 30.0
SNAPSHOT_STOP_WAIT_S = 30.0


class RecoveryFuture(Future[RecoveryResult]):
    """A recovery in progress."""

    def __init__(self) -> None:
        super().__init__()
        self.step = "starting"
        self.cancel_requested = threading.Event()

    def cancel(self) -> bool:
        """Cancel: a pending recovery never starts, a running one stops before its next
        file (``False`` is returned then, as for any running future)."""
        self.cancel_requested.set()
        return super().cancel()


class Recoverer:
    """Runs recoveries of one pipeline; :attr:`last` is the last one that succeeded in time."""

    def __init__(  # noqa: PLR0913 - its collaborators, injected so tests can replace them
        self,
        config: CoordinatorConfig,
        store: StateStore,
        ownership: DriverOwnership,
        lineage: Lineage,
        *,
        stop_snapshots: Callable[[float], bool],
        on_new_generation: Callable[[], None],
        files: CheckpointFiles | None = None,
        clock: Callable[[], float] = time.time,
        monotonic: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        """``stop_snapshots(timeout)`` stops following the old query and ends the snapshot in
        progress before a new generation begins (False: one still runs after ``timeout``);
        ``on_new_generation()`` runs once the new generation is written. ``files`` reaches
        the checkpoint directory (default: the configured one on this host), ``clock``
        stamps the new generation, ``monotonic`` and ``sleep`` time its writes: seams for
        a deterministic simulation, which calls :meth:`recover` in its own steps."""
        self.config = config
        self.store = store
        self.layout = config.layout
        self.ownership = ownership
        self.lineage = lineage
        self._stop_snapshots = stop_snapshots
        self._on_new_generation = on_new_generation
        self._files = files
        self._clock = clock
        self._monotonic = monotonic
        self._sleep = sleep
        self.last: RecoveryResult | None = None

    def start(self, mode: str) -> RecoveryFuture:
        """Start a recovery in ``mode`` (checked by the caller) on a thread of its own."""
        future = RecoveryFuture()
        worker = threading.Thread(
            target=self._run, args=(future, mode), name="gtbarrier-recover", daemon=True
        )
        worker.start()
        return future

    def _run(self, future: RecoveryFuture, mode: str) -> None:
        if not future.set_running_or_notify_cancel():
            return
        started = time.monotonic()
        try:
            result = self.recover(mode, future)
        except BaseException as err:  # handed to whoever waits on the future
            future.set_exception(err)
            return
        if not future.cancel_requested.is_set():
            self.last = result
            log.info(
                "recover() of pipeline %s: %s in %.2fs (%s)",
                self.layout.pipeline_id,
                result.action,
                time.monotonic() - started,
                result.reason,
            )
        future.set_result(result)

    def recover(self, mode: str, future: RecoveryFuture | None = None) -> RecoveryResult:
        """One recovery in ``mode``, in the caller's thread (see the module docstring);
        ``future`` (default: a new one) shows its step and asks it to stop."""
        if future is None:
            future = RecoveryFuture()
        future.step = self.ownership.describe_acquire()
        self.ownership.acquire()
        backend = self.ownership.backend
        if mode == "replay":
            future.step = "stopping the snapshot in progress"
            if not self._stop_snapshots(SNAPSHOT_STOP_WAIT_S):
                log.warning(
                    "a snapshot of pipeline %s was still running %gs after a new generation was "
                    "asked for; it belongs to the old generation and will not be accepted",
                    self.layout.pipeline_id,
                    SNAPSHOT_STOP_WAIT_S,
                )
            future.step = f"starting a new generation in {backend.description}"
            generation = self._new_generation()
            future.step = f"removing the old checkpoint {self.config.checkpoint}"
            result = recover_checkpoint(
                self.store, self.layout, generation, self.config.checkpoint, mode, files=self._files
            )
            self._on_new_generation()
            return result
        future.step = f"reading the resume point from {backend.description}"
        point, _ = read_resume_point(backend)
        try:
            self.ownership.check_generation(point)
        except GenerationSuperseded:
            self.ownership.revoke()  # a newer driver began it and holds a newer token
            raise
        future.step = f"materialising the checkpoint from {self.config.store_description()}"
        return recover_checkpoint(
            self.store,
            self.layout,
            point,
            self.config.checkpoint,
            mode,
            cancelled=future.cancel_requested.is_set,
            files=self._files,
        )

    def _new_generation(self) -> ResumePoint:
        """Begin a new lineage of the resume point, without a snapshot (``mode="replay"``);
        returns it."""
        token = self.ownership.token
        if token is None:
            raise CoordinationError("the driver lost the pipeline while recovering")

        def make(current: ResumePoint | None) -> ResumePoint:
            check_token(self.store, self.layout, token)
            point = new_generation(current, token=token, created_at=self._clock())
            # Before the point: a driver of the old generation that read the floor earlier
            # loses its swap, and one that reads it later does not raise it.
            fence_generation(self.store, self.layout, point.generation, log_start)
            return point

        def log_start() -> SourceOffset | None:
            return EpochLog(self.store, self.layout).start()

        written = advance_resume_point(
            self.ownership.backend,
            make,
            retry=self.ownership.resume_point_writes(
                NEW_GENERATION_DEADLINE_S, sleep=self._sleep, clock=self._monotonic
            ),
        )
        if written is None:  # cannot happen: a higher generation always moves the point on
            raise CoordinationError(
                f"the new generation was not written to {self.ownership.backend.description}"
            )
        self.ownership.began_generation(written)
        self.lineage.seen(written)
        log.info(
            "pipeline %s: generation %d of the resume point begins (no snapshot yet)",
            self.layout.pipeline_id,
            written.generation,
        )
        return written


__all__ = ["Recoverer", "RecoveryFuture"]
