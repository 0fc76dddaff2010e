"""Which completed batch to snapshot, and when: the coordinator's snapshot scheduler.

Pure bookkeeping, without Spark, threads or I/O; the clock is injectable. The caller
(:class:`state.coordinator.worker.SnapshotWorker`) serialises every call.

* The newest completed batch of the watched query is the candidate; a batch of a new
  query run (a restart) replaces it even with a lower batch id.
* An attempt is *due* when ``period`` has passed since the last one started, when a
  snapshot is requested, or right after a batch whose files were incomplete (the next
  batch is then tried at once).
* A batch is accepted once. After an attempt failed, the same batch is tried again when
  the period has passed, or at once if a snapshot is requested after that attempt; a
  later batch is preferred whenever one completes. An idle query's last batch is thus
  snapshotted once ZooKeeper or the store is back. A batch whose files were incomplete
  is never tried again: its files are gone.
* Requests are numbered tickets. An attempt answers every request made before it
  started; a request made when nothing completed since the last accepted snapshot is
  answered by that snapshot.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from state.coordinator.batches import CompletedBatch

Clock = Callable[[], float]

MIN_WAIT_S = 0.05


@dataclass(frozen=True)
class Attempt:
    """A snapshot attempt of ``batch``; it answers the requests up to ``ticket``."""

    batch: CompletedBatch
    ticket: int


class SnapshotScheduler:
    """Decides which completed batch to snapshot and when (see the module docstring)."""

    def __init__(self, period: float, *, clock: Clock = time.monotonic) -> None:
        self.period = period
        self._clock = clock
        self._query_id: str | None = None
        self._latest: CompletedBatch | None = None
        self._last_done: tuple[str, int] | None = None  # last accepted: (query/run, batch)
        self._last_tried: tuple[str, int] | None = None  # last attempted
        self._tried_ticket = 0
        self._retry_next = False
        self._requested = 0
        self._served = 0
        self._served_error: str | None = None
        self._last_attempt = clock()

    # --- events --------------------------------------------------------------------------

    @property
    def query_id(self) -> str | None:
        """The watched query's id; batches of other queries are ignored."""
        return self._query_id

    def watch(self, query_id: str) -> None:
        """Follow ``query_id``; the period counts from now."""
        self._query_id = query_id
        self._last_attempt = self._clock()

    def unwatch(self) -> None:
        self._query_id = None

    def offer(self, batch: CompletedBatch) -> bool:
        """A batch completed (the minimal-time event); False if it is not the watched query's."""
        if batch.query_id != self._query_id:
            return False
        latest = self._latest
        if latest is None or batch.batch_id >= latest.batch_id or batch.run_id != latest.run_id:
            self._latest = batch
        return True

    def request(self) -> int:
        """Ask for a snapshot now; returns the request's ticket."""
        self._requested += 1
        return self._requested

    def forget_snapshots(self) -> None:
        """A new generation of the resume point began: no batch counts as snapshotted."""
        self._last_done = self._last_tried = None

    # --- deciding ------------------------------------------------------------------------

    def next_attempt(self) -> Attempt | None:
        """The attempt to start now, marked as started; None if there is none yet.

        May answer pending requests with the last accepted snapshot (see :meth:`answer`).
        """
        now = self._clock()
        b = self._latest
        if b is None or self._query_id != b.query_id:
            return None
        pending = self._requested > self._served
        if not _newer(b, self._last_done):
            if pending:
                # Nothing completed since the last snapshot: that one answers the request.
                self._serve(self._requested, None)
            return None
        eligible = _newer(b, self._last_tried) or self._requested > self._tried_ticket
        if not (eligible and self._due(now)):
            return None
        self._last_attempt = now
        self._last_tried = (b.run, b.batch_id)
        self._tried_ticket = self._requested
        self._retry_next = False
        return Attempt(b, self._requested)

    def wait_time(self) -> float:
        """How long until the period makes the next attempt due (at least 50 ms)."""
        return max(MIN_WAIT_S, self.period - (self._clock() - self._last_attempt))

    def _due(self, now: float) -> bool:
        return (
            self._retry_next
            or self._requested > self._served
            or now - self._last_attempt >= self.period
        )

    # --- outcomes ------------------------------------------------------------------------

    def accepted(self, attempt: Attempt) -> None:
        """The attempt's snapshot was accepted: its batch is done, its requests answered."""
        self._last_done = self._last_tried
        self._serve(attempt.ticket, None)

    def incomplete(self, attempt: Attempt) -> None:
        """The batch's files were incomplete: try the next batch as soon as one completes;
        the requests stay open for it."""
        self._retry_next = True

    def abandoned(self, attempt: Attempt, error: str) -> None:
        """The attempt failed: its requests are answered with ``error``; its batch may be
        tried again after the period."""
        self._last_tried = self._last_done
        self._serve(attempt.ticket, error)

    def answer(self, ticket: int) -> tuple[bool, str | None]:
        """Whether request ``ticket`` was answered, and the error if its attempt failed."""
        return self._served >= ticket, self._served_error

    @property
    def served(self) -> int:
        """The highest ticket answered (changes tell the caller to wake waiters)."""
        return self._served

    def _serve(self, ticket: int, error: str | None) -> None:
        if ticket > self._served:
            self._served = ticket
            self._served_error = error


def _newer(b: CompletedBatch, than: tuple[str, int] | None) -> bool:
    return than is None or than[0] != b.run or b.batch_id > than[1]


__all__ = ["Attempt", "SnapshotScheduler"]
