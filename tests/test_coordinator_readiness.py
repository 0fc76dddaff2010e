"""The pure decisions of a graceful stop and of ``/ready``."""

from __future__ import annotations

import logging
import os
import signal
import threading
import time

import pytest

from state.coordinator.graceful_stop import GracefulStop, Step, next_step, stopping_on
from state.coordinator.readiness import QueryLiveness, readiness, ready_bound


def _live(**changes: object) -> QueryLiveness:
    base: dict[str, object] = {
        "active": True,
        "owner": True,
        "stopping": False,
        "trigger_interval": None,
        "heard": 100.0,
    }
    base.update(changes)
    return QueryLiveness(**base)  # type: ignore[arg-type]


def test_bound_is_three_floored_intervals() -> None:
    assert ready_bound(None) == 30.0
    assert ready_bound(0.2) == 30.0
    assert ready_bound(60.0) == 180.0


def test_ready_within_the_bound_and_not_after() -> None:
    assert readiness(_live(), 129.0).ready
    late = readiness(_live(), 131.0)
    assert not late.ready and "31s" in late.reason and "bound 30s" in late.reason


def test_not_ready_without_a_query_an_owner_or_while_stopping() -> None:
    assert readiness(_live(active=False), 100.0).reason == "no query is running"
    assert not readiness(_live(heard=None), 100.0).ready
    assert "does not hold" in readiness(_live(owner=False), 100.0).reason
    assert "stopping" in readiness(_live(stopping=True), 100.0).reason


def test_a_stop_waits_for_the_batch_boundary_or_the_grace() -> None:
    wait = {"requests": 1, "trigger_active": True, "committed": False, "waited": 1.0, "grace": 30.0}
    assert next_step(**wait) is Step.WAIT  # type: ignore[arg-type]
    assert next_step(**{**wait, "committed": True}) is Step.STOP  # type: ignore[arg-type]
    assert next_step(**{**wait, "trigger_active": False}) is Step.STOP  # type: ignore[arg-type]
    assert next_step(**{**wait, "waited": 30.0}) is Step.STOP  # type: ignore[arg-type]
    assert next_step(**{**wait, "requests": 2}) is Step.STOP  # type: ignore[arg-type]


class _BusyQuery:
    """A query whose triggers run back to back: Spark's status always shows one active."""

    def __init__(self) -> None:
        self.id = "q-busy"
        self.isActive = True
        self.status = {"isTriggerActive": True}
        self.stopped = threading.Event()

    def stop(self) -> None:
        self.isActive = False
        self.stopped.set()


def test_back_to_back_triggers_stop_at_the_next_commit_not_after_the_grace() -> None:
    # A status poll rarely sees the instant between two triggers: the committed batch
    # the listener hears is the boundary to stop at.
    stop = GracefulStop("p1", grace=30.0)
    query = _BusyQuery()
    stop.watch(query)  # type: ignore[arg-type]
    stop.request()
    assert not query.stopped.wait(0.5), "stopped before any batch boundary"
    began = time.monotonic()
    stop.on_batch_completed()
    assert query.stopped.wait(5.0), "not stopped at the commit"
    assert time.monotonic() - began < 5.0
    stop.join(5.0)


def test_a_commit_before_the_request_is_no_boundary_for_it() -> None:
    stop = GracefulStop("p1", grace=30.0)
    query = _BusyQuery()
    stop.watch(query)  # type: ignore[arg-type]
    stop.on_batch_completed()  # heard before anyone asked to stop
    stop.request()
    assert not query.stopped.wait(0.5)
    stop.request()  # the second request: at once
    assert query.stopped.wait(5.0)
    stop.join(5.0)


def test_a_signal_asks_for_a_boundary_and_a_second_one_stops_at_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # Real signals to this process, handled one at a time: a process sent two in the
    # same instant may see one (the kernel and Python coalesce a pending signal).
    stop = GracefulStop("p1", grace=30.0)
    query = _BusyQuery()
    stop.watch(query)  # type: ignore[arg-type]
    before = signal.getsignal(signal.SIGUSR1)
    with caplog.at_level(logging.INFO), stopping_on([signal.SIGUSR1], stop):
        os.kill(os.getpid(), signal.SIGUSR1)
        assert stop.requested
        assert not query.stopped.wait(0.5), "the first signal stopped the query at once"
        os.kill(os.getpid(), signal.SIGUSR1)
        assert query.stopped.wait(5.0), "the second signal did not stop the query"
    stop.join(5.0)
    assert signal.getsignal(signal.SIGUSR1) is before
    text = caplog.text
    assert "SIGUSR1: stopping the query at the next batch boundary" in text
    assert "second SIGUSR1: stopping the query now" in text
    assert "stopping query q-busy at once" in text
