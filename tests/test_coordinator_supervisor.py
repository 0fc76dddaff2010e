"""run(): restarts with backoff, the consecutive-failure count, and the final error."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
from pyspark.errors import StreamingQueryException

from state.coordinator.supervisor import Supervisor
from state.errors import (
    ConfigError,
    DriverLockHeld,
    GtBarrierError,
    PipelineFenced,
    ResetAttemptsExhausted,
    ZooKeeperUnavailable,
)


class Query:
    def __init__(self, outcome: str | None, on_await: Callable[[], None] | None = None) -> None:
        self.id = "q"
        self.outcome = outcome
        self.on_await = on_await

    def awaitTermination(self) -> None:
        if self.on_await:
            self.on_await()
        if self.outcome is not None:
            raise StreamingQueryException(message=self.outcome)


class Coord:
    """The parts of SnapshotCoordinator the supervisor uses."""

    pipeline_id = "p1"

    def __init__(self) -> None:
        self.accepted = 0
        self.recoveries: list[str] = []
        self.watched = 0
        self.stop_error: GtBarrierError | None = None
        self.recover_errors: list[GtBarrierError] = []
        self.stop_requested = False

    def recover(self, mode: str = "restore") -> None:
        self.recoveries.append(mode)
        if self.recover_errors:
            raise self.recover_errors.pop(0)

    def call_build_query(self, build: Callable[..., Any]) -> Any:
        return build()

    def watch(self, q: Any) -> None:
        self.watched += 1

    def unwatch(self) -> None:
        pass

    def take_stop_error(self) -> GtBarrierError | None:
        e, self.stop_error = self.stop_error, None
        return e


def supervise(
    coord: Coord, outcomes: list[Any], max_resets: int, **kw: Any
) -> tuple[Any, list[float]]:
    sleeps: list[float] = []
    it = iter(outcomes)

    def build() -> Any:
        return next(it)

    sup = Supervisor(
        coord, build, max_resets, sleep=sleeps.append, backoff="1s", max_backoff="4s", **kw
    )
    return sup.run(), sleeps


def test_recovers_after_a_few_failures() -> None:
    coord = Coord()
    done = Query(None)
    got, sleeps = supervise(
        coord, [Query("consumer down"), Query("consumer down"), done], 3, mode="replay"
    )
    assert got is done
    assert coord.recoveries == ["replay", "restore", "restore"]  # replay only the first time
    assert len(sleeps) == 2 and 0.8 <= sleeps[0] <= 1.0 and 1.6 <= sleeps[1] <= 2.0


def test_gives_up_after_max_consecutive_resets() -> None:
    coord = Coord()
    with pytest.raises(ResetAttemptsExhausted) as info:
        supervise(coord, [Query(f"boom {i}") for i in range(10)], 3)
    msg = str(info.value)
    assert "failed 4 consecutive time(s)" in msg and "max_consecutive_reset_attempts=3" in msg
    assert "boom 3" in msg  # the last error
    assert len(coord.recoveries) == 4


def test_zero_resets_means_one_attempt() -> None:
    with pytest.raises(ResetAttemptsExhausted, match="failed 1 consecutive"):
        supervise(Coord(), [Query("x")], 0)


def test_an_accepted_snapshot_resets_the_count() -> None:
    coord = Coord()

    def progress() -> None:
        coord.accepted += 1

    # Two resets used up, then a run that made progress before failing: two more allowed.
    outcomes = [Query("a"), Query("b"), Query("c", on_await=progress), Query("d"), Query(None)]
    got, sleeps = supervise(coord, outcomes, 2)
    assert got is outcomes[-1]
    assert len(sleeps) == 4
    assert sleeps[2] <= 1.0  # after the accepted snapshot the backoff starts over
    with pytest.raises(ResetAttemptsExhausted):
        supervise(Coord(), [Query("a"), Query("b"), Query("c"), Query(None)], 2)


def test_a_fenced_driver_stops_at_once() -> None:
    with pytest.raises(PipelineFenced, match="barrier sink fenced"):
        supervise(Coord(), [Query("sink.errors.PipelineFenced: token 1 < 2"), Query(None)], 5)
    coord = Coord()
    with pytest.raises(DriverLockHeld):
        coord.recover_errors = [DriverLockHeld("another driver")]
        supervise(coord, [Query(None)], 5)


def test_session_loss_is_a_failure_and_recovery_errors_are_retried() -> None:
    coord = Coord()

    def lose() -> None:
        coord.stop_error = ZooKeeperUnavailable("session expired")

    coord.recover_errors = [ZooKeeperUnavailable("zk down")]
    done = Query(None)
    got, sleeps = supervise(coord, [Query(None, on_await=lose), done], 5)
    assert got is done and len(sleeps) == 2


def never_built() -> Any:
    """A build_query for checks that fail before any query starts."""
    raise AssertionError("the query must not be built")


def test_arguments_are_checked() -> None:
    with pytest.raises(ConfigError, match="max_consecutive_reset_attempts"):
        Supervisor(Coord(), never_built, -1)
    with pytest.raises(ConfigError, match="build_query"):
        # deliberately not a callable: the runtime check under test
        Supervisor(Coord(), "not callable", 1)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="backoff"):
        Supervisor(Coord(), never_built, 1, backoff="later")


def test_failure_summary_names_the_python_cause() -> None:
    from state.coordinator.supervisor import _first_line

    text = (
        "[STREAM_FAILED] Query q terminated with exception: Failed when Python streaming data "
        "source perform commit: Traceback (most recent call last):\n"
        '  File "sink/barrier.py", line 3, in commit\n'
        "state.errors.DeliveryFailed: http consumer http://h:1/x: connection refused\n"
        " SQLSTATE: 38000"
    )
    summary = _first_line(text)
    assert summary.startswith("[STREAM_FAILED]")
    assert summary.endswith(
        "caused by state.errors.DeliveryFailed: http consumer http://h:1/x: connection refused"
    )
    assert _first_line("just one line") == "just one line"
