"""The snapshot scheduler on a fake clock: which completed batch to snapshot, and when."""

from __future__ import annotations

import pytest

from state.coordinator.scheduler import Attempt, SnapshotScheduler
from tests.coordinator_fakes import batch

PERIOD = 30.0


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def sched(clock: Clock) -> SnapshotScheduler:
    s = SnapshotScheduler(PERIOD, clock=clock)
    s.watch("q-1")
    return s


def attempt(s: SnapshotScheduler) -> Attempt:
    got = s.next_attempt()
    assert got is not None, "an attempt was due"
    return got


def test_the_period_spaces_attempts(sched: SnapshotScheduler, clock: Clock) -> None:
    assert sched.next_attempt() is None  # nothing completed yet
    sched.offer(batch(1))
    assert sched.next_attempt() is None  # the period counts from watch()
    assert sched.wait_time() == PERIOD
    clock.advance(PERIOD - 1)
    assert sched.next_attempt() is None and sched.wait_time() == 1.0
    clock.advance(1)
    first = attempt(sched)
    assert first.batch.batch_id == 1
    sched.accepted(first)
    sched.offer(batch(2))
    clock.advance(PERIOD / 2)
    assert sched.next_attempt() is None  # start to start: the next one is not due yet
    clock.advance(PERIOD / 2)
    assert attempt(sched).batch.batch_id == 2
    clock.advance(PERIOD - 0.01)
    assert sched.wait_time() == pytest.approx(0.05)  # never a busy loop


def test_a_request_is_due_at_once_and_answered_by_the_attempt(
    sched: SnapshotScheduler, clock: Clock
) -> None:
    sched.offer(batch(3))
    ticket = sched.request()
    assert sched.answer(ticket) == (False, None)
    got = attempt(sched)
    assert (got.batch.batch_id, got.ticket) == (3, ticket)
    later = sched.request()  # made while the attempt runs: not answered by it
    sched.accepted(got)
    assert sched.answer(ticket) == (True, None)
    assert sched.answer(later) == (False, None)
    assert sched.next_attempt() is None  # nothing newer completed: batch 3's snapshot answers
    assert sched.answer(later) == (True, None)


def test_a_request_with_nothing_new_is_answered_by_the_last_snapshot(
    sched: SnapshotScheduler,
) -> None:
    sched.offer(batch(3))
    sched.request()
    sched.accepted(attempt(sched))
    ticket = sched.request()
    assert sched.next_attempt() is None  # batch 3 is snapshotted already
    assert sched.answer(ticket) == (True, None)
    assert sched.next_attempt() is None


def test_a_failed_batch_is_retried_at_once_on_request(sched: SnapshotScheduler) -> None:
    sched.offer(batch(4))
    first = sched.request()
    failed = attempt(sched)
    sched.abandoned(failed, "CoordinationError: drain_timeout")
    assert sched.answer(first) == (True, "CoordinationError: drain_timeout")
    second = sched.request()
    again = attempt(sched)  # due at once, without waiting for the period
    assert (again.batch.batch_id, again.ticket) == (4, second)
    sched.accepted(again)
    assert sched.answer(second) == (True, None)


def test_a_failed_batch_is_retried_after_the_period_when_nothing_newer_completes(
    sched: SnapshotScheduler, clock: Clock
) -> None:
    # An idle query after an outage (ZooKeeper or the store down): its last batch is the
    # only one that can move the resume point, so it is tried again, once per period.
    sched.offer(batch(4))
    clock.advance(PERIOD)
    sched.abandoned(attempt(sched), "CoordinationError: ZooKeeper is not connected")
    clock.advance(PERIOD - 1)
    assert sched.next_attempt() is None  # not before the period
    clock.advance(1)
    again = attempt(sched)
    assert again.batch.batch_id == 4
    sched.accepted(again)
    clock.advance(10 * PERIOD)
    assert sched.next_attempt() is None  # accepted: never tried again


def test_incomplete_files_move_on_to_the_next_batch(sched: SnapshotScheduler) -> None:
    sched.offer(batch(5))
    ticket = sched.request()
    tried = attempt(sched)
    sched.incomplete(tried)
    assert sched.answer(ticket) == (False, None)  # the request stays open
    assert sched.next_attempt() is None  # not batch 5 again
    sched.offer(batch(6))
    nxt = attempt(sched)  # due at once, without waiting for the period
    assert (nxt.batch.batch_id, nxt.ticket) == (6, ticket)


def test_a_later_batch_is_preferred(sched: SnapshotScheduler, clock: Clock) -> None:
    sched.offer(batch(1))
    sched.offer(batch(2))
    sched.offer(batch(1))  # a late event of an older batch does not replace the newest
    sched.request()
    assert attempt(sched).batch.batch_id == 2
    sched.offer(batch(3))
    sched.offer(batch(4))
    clock.advance(PERIOD)
    assert attempt(sched).batch.batch_id == 4  # batch 3 is skipped


def test_a_new_run_starts_over(sched: SnapshotScheduler, clock: Clock) -> None:
    sched.offer(batch(7, run_id="run-1"))
    sched.request()
    sched.accepted(attempt(sched))
    # The query restarted (a new run); its batch ids may be lower than the last snapshot's.
    sched.offer(batch(2, run_id="run-2"))
    clock.advance(PERIOD)
    got = attempt(sched)
    assert (got.batch.batch_id, got.batch.run_id) == (2, "run-2")


def test_other_queries_and_unwatched_batches_are_ignored(
    sched: SnapshotScheduler, clock: Clock
) -> None:
    assert not sched.offer(batch(1, query_id="another"))
    sched.request()
    assert sched.next_attempt() is None
    sched.offer(batch(1))
    sched.unwatch()
    assert sched.next_attempt() is None
    assert not sched.offer(batch(2))
    sched.watch("q-1")
    assert attempt(sched).batch.batch_id == 1


def test_a_new_generation_forgets_what_was_snapshotted(sched: SnapshotScheduler) -> None:
    sched.offer(batch(3))
    sched.request()
    sched.accepted(attempt(sched))
    sched.forget_snapshots()
    sched.request()
    assert attempt(sched).batch.batch_id == 3
