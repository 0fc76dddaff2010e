"""state.lag: offsets behind Kafka's end, under the names of Spark's Kafka metrics."""

from __future__ import annotations

from state.lag import Lag


def test_lag_per_partition_and_the_three_figures() -> None:
    lag = Lag.between({("t", 0): 10, ("t", 1): 5, ("u", 0): 7}, {("t", 0): 40, ("t", 1): 5})
    assert dict(lag.behind) == {("t", 0): 30, ("t", 1): 0}  # u-0: no end known, left out
    assert lag.metrics() == {
        "minOffsetsBehindLatest": 0,
        "maxOffsetsBehindLatest": 30,
        "avgOffsetsBehindLatest": 15.0,
    }
    assert lag.total == 30
    assert lag.describe() == (
        "minOffsetsBehindLatest=0 maxOffsetsBehindLatest=30 avgOffsetsBehindLatest=15.0 "
        "over 2 partition(s)"
    )


def test_an_end_below_the_position_is_not_behind_and_no_partitions_is_said() -> None:
    assert dict(Lag.between({("t", 0): 9}, {("t", 0): 3}).behind) == {("t", 0): 0}
    empty = Lag.between({}, {})
    assert empty.metrics()["maxOffsetsBehindLatest"] is None
    assert empty.describe() == "no partitions"
