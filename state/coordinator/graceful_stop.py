"""Stopping the watched query at a batch boundary, on request or on SIGTERM.

The first request (:meth:`GracefulStop.request`, or the first SIGTERM while
``SnapshotCoordinator.run()`` runs on the main thread) announces the stop (with ZooKeeper,
the driver lock's node says so, and a driver started meanwhile waits for the lock instead
of failing with ``DriverLockHeld``) and, on a thread of its own, waits until no trigger
of the query is running, or until the listener hears a batch commit after the request
(:meth:`GracefulStop.on_batch_completed`: with back-to-back triggers a status poll rarely
sees the instant between two of them), then calls Spark's ``query.stop()``: the stop falls
at a batch boundary, the last batch committed (a trigger that began in the moment since is
interrupted). If no boundary comes for :data:`STOP_GRACE` seconds (a long batch), it is
stopped then. A second request stops it at once. Neither can duplicate output: a batch
interrupted in the barrier sink is resolved by the next driver's recovery, as after a
crash.

:func:`next_step` is the decision alone, apart from Spark; :class:`GracefulStop` applies it.
Signal handlers only set state and start a thread: they run on the main thread between
two bytecodes, possibly inside a Py4J call that must not be re-entered.
"""

from __future__ import annotations

import enum
import logging
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)

STOP_GRACE = 30.0
"""Seconds the first request waits for the running trigger to end before stopping anyway."""

POLL = 0.05
"""Seconds between two looks at the query's status while waiting for a batch boundary."""


class Step(enum.Enum):
    """What the stopping thread does next."""

    WAIT = "wait"
    STOP = "stop"


def next_step(
    *, requests: int, trigger_active: bool, committed: bool, waited: float, grace: float
) -> Step:
    """Stop once no trigger runs or a batch committed since the request (a batch
    boundary), once ``grace`` seconds have been waited, or at once after a second request;
    otherwise wait."""
    if requests >= 2 or not trigger_active or committed or waited >= grace:
        return Step.STOP
    return Step.WAIT


def _ignore() -> None:
    pass


class GracefulStop:
    """The stop requests of one coordinator, and the thread that stops its query.

    ``announce`` runs once, on the stopping thread, at the first request (the driver lock
    says the driver is stopping). ``requested`` stays true until :meth:`reset`: a query
    started after a request is stopped as soon as it is watched.
    """

    def __init__(
        self,
        pipeline_id: str,
        *,
        announce: Callable[[], None] = _ignore,
        grace: float = STOP_GRACE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pipeline_id = pipeline_id
        self._announce = announce
        self._grace = grace
        self._clock = clock
        self._lock = threading.Lock()
        self._requests = 0
        self._query: StreamingQuery | None = None
        self._thread: threading.Thread | None = None
        self._announced = False
        # set by a commit heard after the first request: the boundary to stop at
        self._boundary = threading.Event()

    @property
    def requested(self) -> bool:
        """A stop was requested: the run ends when its query does, with no restart."""
        return self._requests > 0

    def watch(self, query: StreamingQuery) -> None:
        """``query`` is the one to stop; stopped at once if a stop was requested already."""
        with self._lock:
            self._query = query
            pending = self._requests > 0
        if pending:
            self._start()

    def request(self, *, now: bool = False) -> None:
        """Stop the query at its next batch boundary; at once if ``now`` or if this is the
        second request. Returns at once (the stop runs on a thread of its own)."""
        with self._lock:
            if self._requests == 0:
                self._boundary.clear()  # only a commit after the request is its boundary
            self._requests = max(self._requests + 1, 2 if now else 1)
        self._start()

    def on_batch_completed(self) -> None:
        """The watched query committed a batch (the listener's progress event): a
        requested stop happens now."""
        with self._lock:
            if self._requests > 0:
                self._boundary.set()

    def reset(self) -> None:
        """Forget the requests (a new run)."""
        with self._lock:
            self._requests = 0
            self._query = None
            self._announced = False
            self._boundary.clear()

    def join(self, timeout: float) -> None:
        """Wait for the stopping thread to end."""
        thread = self._thread
        if thread is not None:
            thread.join(timeout)

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None and self._thread.is_alive():
                return
            self._thread = threading.Thread(
                target=self._stop, name="gtbarrier-graceful-stop", daemon=True
            )
            self._thread.start()

    def _stop(self) -> None:
        with self._lock:
            announce, self._announced = not self._announced, True
        if announce:
            try:
                self._announce()
            except Exception:
                # The announcement only spares a new driver its failure; the stop goes on.
                log.exception("pipeline %s: could not announce the stop", self.pipeline_id)
        began = self._clock()
        while True:
            with self._lock:
                query, requests = self._query, self._requests
            if query is None:
                return  # no query yet: watch() stops it when it comes
            step = next_step(
                requests=requests,
                trigger_active=_trigger_active(query),
                committed=self._boundary.is_set(),
                waited=self._clock() - began,
                grace=self._grace,
            )
            if step is Step.STOP:
                break
            self._boundary.wait(POLL)  # a commit ends the wait at once
        how = "at once" if requests >= 2 else "at a batch boundary"
        log.info("pipeline %s: stopping query %s %s", self.pipeline_id, query.id, how)
        try:
            query.stop()
        except Exception as err:  # the query may be gone already
            log.warning("pipeline %s: could not stop query: %s", self.pipeline_id, err)


def _trigger_active(query: StreamingQuery) -> bool:
    """Whether a trigger (planning, a micro-batch, its commit) is running now."""
    try:
        return bool(query.isActive and query.status["isTriggerActive"])
    except Exception:
        return False  # no status to wait for: the query is ending


@contextmanager
def stopping_on(signals: Sequence[signal.Signals], stop: GracefulStop) -> Iterator[None]:
    """While inside, each of ``signals`` requests a stop (the second one: at once).

    Installed only on the main thread (the only one Python runs signal handlers on);
    elsewhere this does nothing. The previous handlers come back on exit.
    """
    if not signals or threading.current_thread() is not threading.main_thread():
        yield
        return

    def handle(signum: int, frame: object) -> None:
        name = signal.Signals(signum).name
        if stop.requested:
            log.warning("pipeline %s: second %s: stopping the query now", stop.pipeline_id, name)
            stop.request(now=True)
        else:
            log.info(
                "pipeline %s: %s: stopping the query at the next batch boundary "
                "(send it again to stop at once)",
                stop.pipeline_id,
                name,
            )
            stop.request()

    previous = {s: signal.signal(s, handle) for s in signals}
    try:
        yield
    finally:
        for s, handler in previous.items():
            signal.signal(s, handler)


__all__ = ["STOP_GRACE", "GracefulStop", "Step", "next_step", "stopping_on"]
