"""benchmarks.driver_reads' planning: at most the records asked for, shared evenly between
the partitions that have records, never past their ends."""

from __future__ import annotations

from benchmarks.driver_reads import plan


def test_a_read_takes_at_most_its_share_of_each_partition() -> None:
    start = {"0": 0, "1": 0, "2": 0, "3": 0}
    ends = {"0": 100, "1": 100, "2": 100, "3": 100}
    assert plan(start, ends, 100) == {"0": 25, "1": 25, "2": 25, "3": 25}
    assert plan(start, ends, 10) == {"0": 3, "1": 3, "2": 2, "3": 2}


def test_a_short_partition_gives_its_share_to_the_next_ones() -> None:
    start = {"0": 5, "1": 0, "2": 7}
    ends = {"0": 6, "1": 50, "2": 7}
    assert plan(start, ends, 20) == {"0": 6, "1": 19, "2": 7}
    assert plan(start, {"0": 5, "1": 0, "2": 7}, 20) == start  # nothing new
