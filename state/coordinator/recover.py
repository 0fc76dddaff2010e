"""``recover()`` as a cancellable future: take the pipeline, read the resume point, prepare
the checkpoint directory (:mod:`state.recovery`).

:meth:`Recoverer.start` runs one recovery on a daemon thread (a recovery stuck on an
unresponsive server must not keep the process alive) and returns a
:class:`RecoveryFuture`. Its :attr:`~RecoveryFuture.step` says what the recovery is
doing, for a timeout message; :meth:`~RecoveryFuture.cancel` also asks a running
recovery to stop before its next file (the future then ends with that error).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

from state.coordinator.config import CoordinatorConfig
from state.coordinator.ownership import DriverOwnership
from state.coordinator.pipeline import Lineage
from state.errors import CoordinationError
from state.fencing import check_token
from state.records.resume_point import ResumePoint
from state.recovery import RecoveryResult, recover_checkpoint
from state.resume import advance_resume_point, read_resume_point
from state.store import StateStore

log = logging.getLogger(__name__)

NEW_GENERATION_DEADLINE_S = 30.0


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

    def __init__(
        self,
        config: CoordinatorConfig,
        store: StateStore,
        ownership: DriverOwnership,
        lineage: Lineage,
        *,
        on_new_generation: Callable[[], None],
    ) -> None:
        self.config = config
        self.store = store
        self.layout = config.layout
        self.ownership = ownership
        self.lineage = lineage
        self._on_new_generation = on_new_generation
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
            result = self._recover(future, mode)
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

    def _recover(self, future: RecoveryFuture, mode: str) -> RecoveryResult:
        future.step = self.ownership.describe_acquire()
        self.ownership.acquire()
        backend = self.ownership.backend
        future.step = f"reading the resume point from {backend.description}"
        point, _ = read_resume_point(backend)
        if mode == "replay":
            future.step = f"removing the old checkpoint {self.config.checkpoint}"
            result = recover_checkpoint(
                self.store, self.layout, point, self.config.checkpoint, mode
            )
            future.step = f"starting a new generation in {backend.description}"
            self._new_generation()
            return result
        future.step = f"materialising the checkpoint from {self.config.store_description()}"
        return recover_checkpoint(
            self.store,
            self.layout,
            point,
            self.config.checkpoint,
            mode,
            cancelled=future.cancel_requested.is_set,
        )

    def _new_generation(self) -> None:
        """Begin a new lineage of the resume point, without a snapshot (``mode="replay"``)."""
        token = self.ownership.token
        if token is None:
            raise CoordinationError("the driver lost the pipeline while recovering")

        def make(current: ResumePoint | None) -> ResumePoint:
            check_token(self.store, self.layout, token)
            gen = current.generation + 1 if current is not None else 1
            return ResumePoint.empty(generation=gen, token=token, created_at=time.time())

        written = advance_resume_point(
            self.ownership.backend,
            make,
            retry=self.ownership.resume_point_writes(NEW_GENERATION_DEADLINE_S),
        )
        if written is not None:
            self.lineage.seen(written)
        self._on_new_generation()


__all__ = ["Recoverer", "RecoveryFuture"]
