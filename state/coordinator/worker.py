"""The watched query and the snapshot thread.

:class:`SnapshotWorker` feeds completed batches to the
:class:`~state.coordinator.scheduler.SnapshotScheduler`, runs its attempts through the
:class:`~state.coordinator.snapshot.attempt.SnapshotPipeline` on a background thread while later
batches run, and keeps the outcome: counters, the last snapshot, the last error, and why
it stopped the query (a driver fenced by a newer one, or a ZooKeeper session lost).
One condition variable guards all of it; the snapshot itself runs outside it.

Before ``recover(mode="replay")`` begins a new generation, :meth:`SnapshotWorker.end_generation`
stops following the old query and ends the snapshot in progress: it belongs to the old
generation and is abandoned at its next step.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from state.coordinator.batches import CompletedBatch, completed_batch_from_progress
from state.coordinator.scheduler import Attempt, SnapshotScheduler
from state.coordinator.snapshot.attempt import Lineage, SnapshotPipeline, SnapshotStats
from state.errors import CoordinationError, GtBarrierError, PipelineFenced, SnapshotIncomplete

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)

HISTORY = 1000
MAX_WAIT_S = 1.0


class SnapshotWorker:
    """Snapshots the watched query's completed batches on a thread of its own.

    ``on_fenced`` runs when a newer driver took the pipeline (the token is void).
    """

    def __init__(
        self,
        scheduler: SnapshotScheduler,
        pipeline: SnapshotPipeline,
        lineage: Lineage,
        *,
        pipeline_id: str,
        on_fenced: Callable[[], None],
    ) -> None:
        self.scheduler = scheduler
        self.pipeline = pipeline
        self.lineage = lineage
        self.pipeline_id = pipeline_id
        self._on_fenced = on_fenced
        self._cv = threading.Condition()
        self._query: StreamingQuery | None = None
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._stop_error: GtBarrierError | None = None
        self._running = False  # an attempt is in progress
        self._generations_ended = 0  # end_generation() calls; an attempt started before one ends

        self.accepted = 0
        self.abandoned = 0
        self.last_snapshot: SnapshotStats | None = None
        self.history: deque[SnapshotStats] = deque(maxlen=HISTORY)  # accepted snapshots
        self.last_error: str | None = None

    # --- the watched query -------------------------------------------------------------

    def watch(self, query: StreamingQuery) -> None:
        """Follow ``query``'s completed batches and start the snapshot thread."""
        with self._cv:
            self._query = query
            self.scheduler.watch(str(query.id))
            self._stopping = False
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(
                    target=self._run, name="gtbarrier-snapshots", daemon=True
                )
                self._thread.start()

    def unwatch(self) -> None:
        with self._cv:
            self._query = None
            self.scheduler.unwatch()
            self._cv.notify_all()

    @property
    def query(self) -> StreamingQuery | None:
        return self._query

    @property
    def query_id(self) -> str | None:
        return self.scheduler.query_id

    def offer(self, batch: CompletedBatch) -> None:
        """A batch completed (the listener's event)."""
        with self._cv:
            if self.scheduler.offer(batch):
                self._cv.notify_all()

    def catch_up(self) -> None:
        """Offer the watched query's ``lastProgress``.

        Listener events arrive asynchronously, so a request made right after a batch
        finished (or after the query terminated) could otherwise be served with an older
        batch than the caller has already seen complete.
        """
        with self._cv:
            query = self._query
        if query is None:
            return
        progress = query.lastProgress
        if not progress:
            return
        raw = getattr(progress, "json", None)  # StreamingQueryProgress, as the listener sees it
        parsed = json.loads(raw) if isinstance(raw, str) else dict(progress)
        self.offer(completed_batch_from_progress(parsed))

    def on_terminated(self, query_id: str, exception: str | None) -> None:
        with self._cv:
            if query_id == self.scheduler.query_id:
                log.info(
                    "watched query %s terminated%s", query_id, f": {exception}" if exception else ""
                )
                self._cv.notify_all()

    def stop_query(self, error: GtBarrierError) -> None:
        """Stop the watched query because of ``error`` (kept for :meth:`take_stop_error`)."""
        with self._cv:
            self._stop_error = error
            query = self._query
            self._cv.notify_all()
        if query is not None:
            _stop_query(query)

    def take_stop_error(self) -> GtBarrierError | None:
        with self._cv:
            error, self._stop_error = self._stop_error, None
            return error

    def clear_stop_error(self) -> None:
        with self._cv:
            self._stop_error = None

    # --- requests ----------------------------------------------------------------------

    def request(self) -> int:
        """Ask for a snapshot; the request's ticket."""
        with self._cv:
            ticket = self.scheduler.request()
            self._cv.notify_all()
            return ticket

    def await_answer(self, ticket: int, timeout: float) -> None:
        """Wait until request ``ticket`` is answered by an accepted snapshot, else
        :class:`CoordinationError` (abandoned, or not accepted within ``timeout``)."""
        deadline = time.monotonic() + timeout
        with self._cv:
            while True:
                answered, error = self.scheduler.answer(ticket)
                if answered:
                    break
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CoordinationError(
                        f"requested snapshot of pipeline '{self.pipeline_id}' not accepted within "
                        f"{timeout:g}s (last error: {self.last_error})"
                    )
                self._cv.wait(min(left, MAX_WAIT_S))
        if error is not None:
            raise CoordinationError(
                f"requested snapshot of pipeline '{self.pipeline_id}' was abandoned: {error}"
            )

    def end_generation(self, timeout: float) -> bool:
        """A new generation is about to begin (``recover(mode="replay")``): stop following
        the old query and end the snapshot in progress (abandoned at its next step). True
        once none runs; False if one still runs after ``timeout`` seconds."""
        with self._cv:
            self._query = None
            self.scheduler.unwatch()
            self._generations_ended += 1
            self._cv.notify_all()
            return self._cv.wait_for(lambda: not self._running, timeout)

    def forget_snapshots(self) -> None:
        """A new generation began (``recover(mode="replay")``)."""
        with self._cv:
            self.scheduler.forget_snapshots()

    # --- reading -----------------------------------------------------------------------

    def counters(self, now: float) -> dict[str, Any]:
        """The snapshot part of ``status()``."""
        with self._cv:
            last = self.last_snapshot
            return {
                "snapshots_accepted": self.accepted,
                "snapshots_abandoned": self.abandoned,
                "last_error": self.last_error,
                "last_snapshot": None if last is None else last.summary(now),
            }

    @property
    def closing(self) -> bool:
        return self._stopping

    def close(self, timeout: float) -> None:
        """Stop the thread; a snapshot in progress is abandoned at its next step."""
        with self._cv:
            self._stopping = True
            self._query = None
            self._cv.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join(timeout=timeout)

    # --- the thread --------------------------------------------------------------------

    def _next_attempt(self) -> Attempt | None:
        """Wait (holding the condition) for an attempt; None when stopping."""
        while not self._stopping:
            served = self.scheduler.served
            attempt = self.scheduler.next_attempt()
            if self.scheduler.served != served:
                self._cv.notify_all()
            if attempt is not None:
                return attempt
            self._cv.wait(min(self.scheduler.wait_time(), MAX_WAIT_S))
        return None

    def _run(self) -> None:
        while True:
            with self._cv:
                attempt = self._next_attempt()
                if attempt is None:
                    return
                self._running = True
                generations_ended = self._generations_ended
            try:
                self._attempt(attempt, generations_ended)
            finally:
                with self._cv:
                    self._running = False
                    self._cv.notify_all()

    def _ending(self, generations_ended: int) -> str | None:
        """Why an attempt started after ``generations_ended`` generations ended must stop."""
        if self._stopping:
            return "the coordinator is closing"
        if self._generations_ended != generations_ended:
            return (
                "recover(mode='replay') begins a new generation of the resume point; this "
                "snapshot belongs to the old query version and is not accepted"
            )
        return None

    def _attempt(self, attempt: Attempt, generations_ended: int) -> None:
        batch = attempt.batch
        try:
            stats, _ = self.pipeline.run(batch, closing=lambda: self._ending(generations_ended))
        except SnapshotIncomplete as err:
            log.info("snapshot of batch %d skipped: %s; trying the next batch", batch.batch_id, err)
            with self._cv:
                self.last_error = str(err)
                self.scheduler.incomplete(attempt)
        except PipelineFenced as err:
            log.error("snapshot of batch %d refused: %s; stopping the query", batch.batch_id, err)
            with self._cv:
                self.last_error = str(err)
                self._stop_error = err
                self._on_fenced()
                self.abandoned += 1
                query, self._query = self._query, None
                self.scheduler.unwatch()
                self.scheduler.abandoned(attempt, str(err))
                self._cv.notify_all()
            if query is not None:
                _stop_query(query)
        except Exception as err:  # abandoned: logged, counted, the previous point stays
            log.warning(
                "snapshot of batch %d (epoch %d) abandoned: %s; the resume point stays at %s",
                batch.batch_id,
                batch.epoch,
                err,
                self.lineage.describe(),
            )
            with self._cv:
                self.last_error = f"{type(err).__name__}: {err}"
                self.abandoned += 1
                self.scheduler.abandoned(attempt, self.last_error)
                self._cv.notify_all()
        else:
            with self._cv:
                self.last_snapshot = stats
                self.history.append(stats)
                self.accepted += 1
                self.last_error = None
                self.scheduler.accepted(attempt)
                self._cv.notify_all()


def _stop_query(query: StreamingQuery) -> None:
    try:
        query.stop()
    except Exception as err:  # the query may be gone already; record why it could not stop
        log.warning("could not stop query %s: %s", getattr(query, "id", "?"), err)


__all__ = ["SnapshotWorker"]
