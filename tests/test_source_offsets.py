"""Offset arithmetic of gtkafka: ranges, rate limiting, splitting (the JSON form: test_records)."""

from __future__ import annotations

import random
from collections.abc import Callable

from datasource.offsets import (
    OffsetRange,
    backlog,
    cap_frontier,
    pack_ranges,
    plan_end,
    ranges_between,
    rate_limit,
    split_ranges,
    task_ranges,
)


def test_ranges_between_new_and_gone_partitions() -> None:
    start = {("t", 0): 5, ("t", 1): 9, ("gone", 0): 3}
    end = {("t", 0): 8, ("t", 1): 9, ("t", 2): 4}
    assert ranges_between(start, end) == [OffsetRange("t", 0, 5, 8), OffsetRange("t", 2, 0, 4)]
    assert backlog(start, end) == 7
    # an end below the start reads nothing
    assert ranges_between({("t", 0): 9}, {("t", 0): 3}) == []


def test_rate_limit_is_proportional_and_exact() -> None:
    start = {("t", 0): 0, ("t", 1): 100, ("t", 2): 0}
    latest = {("t", 0): 600, ("t", 1): 400, ("t", 2): 100}  # backlogs 600, 300, 100
    end = rate_limit(start, latest, 100)
    assert end == {("t", 0): 60, ("t", 1): 130, ("t", 2): 10}
    assert rate_limit(start, latest, 10_000) == latest


def test_rate_limit_never_starves_a_partition() -> None:
    start = {("t", p): 0 for p in range(4)}
    latest = {("t", 0): 1_000_000, ("t", 1): 1, ("t", 2): 2, ("t", 3): 0}
    end = rate_limit(start, latest, 10)
    assert end[("t", 1)] == 1 and end[("t", 2)] >= 1 and end[("t", 3)] == 0
    assert sum(end.values()) == 10
    # fewer rows allowed than partitions with data: each still reads one
    end = rate_limit(start, latest, 1)
    assert end == {("t", 0): 1, ("t", 1): 1, ("t", 2): 1, ("t", 3): 0}


def test_rate_limit_properties_random() -> None:
    rng = random.Random(7)
    for _ in range(500):
        n = rng.randint(1, 12)
        start = {("t", p): rng.randint(0, 50) for p in range(n)}
        latest = {
            tp: off + rng.choice([0, 1, 2, rng.randint(0, 10_000)]) for tp, off in start.items()
        }
        latest[("new", 0)] = rng.randint(0, 30)
        limit = rng.randint(1, 5_000)
        end = rate_limit(start, latest, limit)
        sizes = {(r.topic, r.partition): r.size for r in ranges_between(start, latest)}
        got = {(r.topic, r.partition): r.size for r in ranges_between(start, end)}
        total = sum(sizes.values())
        assert sum(got.values()) == min(total, max(limit, len(sizes)))
        for tp, size in sizes.items():
            assert 1 <= got.get(tp, 0) <= size  # none starved, none overshoots
            if total > limit >= len(sizes):
                assert abs(got[tp] - limit * size / total) <= 1 + len(sizes)
        assert rate_limit(start, latest, limit) == end  # deterministic
        assert set(end) == set(latest)


def test_cap_frontier() -> None:
    assert cap_frontier({("t", 0): 10, ("t", 1): 5, ("n", 0): 3}, {("t", 0): 7, ("t", 1): 9}) == {
        ("t", 0): 7,
        ("t", 1): 5,
    }


def test_plan_end_nothing_new_and_the_rate_limit() -> None:
    begin = {("t", 0): 3, ("t", 1): 3}
    assert plan_end(begin, {("t", 0): 3, ("t", 1): 3}) is None
    latest = {("t", 0): 9, ("t", 1): 6}
    assert plan_end(begin, latest) == latest
    # maxOffsetsPerTrigger: the allowance split by backlog, never past the broker's end
    assert plan_end(begin, latest, max_rows=3) == {("t", 0): 5, ("t", 1): 4}
    assert plan_end(begin, latest, max_rows=100) == latest
    # a partition new since begin is read from 0
    assert plan_end(begin, {**latest, ("t", 2): 2}, max_rows=100) == {**latest, ("t", 2): 2}


def test_plan_end_available_now_target_and_restarts() -> None:
    begin = {("t", 0): 3, ("t", 1): 3}
    latest = {("t", 0): 9, ("t", 1): 6, ("t", 2): 5}
    target = {("t", 0): 5, ("t", 1): 2}  # t-1's target below begin: it stays
    assert plan_end(begin, latest, target=target) == {("t", 0): 5, ("t", 1): 3}
    assert plan_end(begin, {("t", 0): 3, ("t", 1): 3}, target=target) is None
    # a recreated partition restarts at its new log start: an epoch even without records
    assert plan_end(begin, {("t", 0): 3, ("t", 1): 0}, restart={("t", 1): 0}) == {
        ("t", 0): 3,
        ("t", 1): 0,
    }


def test_plan_end_waits_for_min_rows_until_the_delay_passed() -> None:
    begin = {("t", 0): 0}
    latest = {("t", 0): 4}
    asked: list[bool] = []

    def passed(answer: bool) -> Callable[[], bool]:
        def delay_passed() -> bool:
            asked.append(answer)
            return answer

        return delay_passed

    assert plan_end(begin, latest, min_rows=5, delay_passed=passed(False)) is None
    assert plan_end(begin, latest, min_rows=5, delay_passed=passed(True)) == latest
    assert plan_end(begin, latest, min_rows=4, delay_passed=passed(False)) == latest
    assert asked == [False, True]  # asked only while the epoch would be short
    # under a target (Trigger.AvailableNow) nothing waits
    assert plan_end(begin, latest, target=latest, min_rows=5, delay_passed=passed(False)) == latest


def test_split_ranges_max_records() -> None:
    parts = split_ranges([OffsetRange("t", 0, 10, 35)], max_records_per_partition=10)
    assert parts == [
        OffsetRange("t", 0, 10, 19),
        OffsetRange("t", 0, 19, 27),
        OffsetRange("t", 0, 27, 35),
    ]


def test_split_ranges_min_partitions_in_proportion() -> None:
    ranges = [OffsetRange("t", 0, 0, 900), OffsetRange("t", 1, 0, 100), OffsetRange("t", 2, 5, 5)]
    parts = split_ranges(ranges, min_partitions=10)
    assert len([p for p in parts if p.partition == 0]) == 9
    assert len([p for p in parts if p.partition == 1]) == 1
    assert all(p.size > 0 for p in parts)
    # enough ranges already: nothing split
    assert split_ranges(ranges, min_partitions=2) == ranges[:2]


def test_split_ranges_properties_random() -> None:
    rng = random.Random(11)
    for _ in range(300):
        ranges = []
        for p in range(rng.randint(1, 6)):
            a = rng.randint(0, 100)
            ranges.append(OffsetRange("t", p, a, a + rng.randint(0, 500)))
        min_p = rng.choice([None, rng.randint(1, 40)])
        max_r = rng.choice([None, rng.randint(1, 200)])
        parts = split_ranges(ranges, min_partitions=min_p, max_records_per_partition=max_r)
        assert parts == split_ranges(ranges, min_partitions=min_p, max_records_per_partition=max_r)
        for r in ranges:
            mine = [p for p in parts if p.partition == r.partition]
            covered = [o for p in mine for o in range(p.from_offset, p.until_offset)]
            assert covered == list(range(r.from_offset, r.until_offset))  # contiguous, exact
            if max_r is not None:
                assert all(p.size <= max_r for p in mine)
            if mine:
                assert max(p.size for p in mine) - min(p.size for p in mine) <= 1
        total = sum(r.size for r in ranges)
        if min_p is not None:
            assert len(parts) >= min(min_p, total)


def sizes(tasks: list[tuple[OffsetRange, ...]]) -> list[list[int]]:
    return [[r.size for r in task] for task in tasks]


def small(n: int, size: int, topic: str = "t") -> list[OffsetRange]:
    return [OffsetRange(topic, p, 0, size) for p in range(n)]


def test_pack_ranges_fills_tasks_in_order() -> None:
    pieces = small(64, 100)
    tasks = pack_ranges(pieces, min_records_per_task=1_000)
    assert sizes(tasks) == [[100] * 10] * 6 + [[100] * 4]
    assert [r for task in tasks for r in task] == pieces  # order unchanged, nothing lost
    assert pack_ranges(pieces, min_records_per_task=1_000) == tasks  # deterministic
    # 0 (or 1) packs nothing
    assert pack_ranges(pieces, min_records_per_task=0) == [(p,) for p in pieces]
    assert pack_ranges(pieces, min_records_per_task=1) == [(p,) for p in pieces]
    assert pack_ranges([], min_records_per_task=10) == []


def test_large_ranges_stay_alone_and_cut_a_packed_task() -> None:
    pieces = [OffsetRange("t", p, 0, n) for p, n in enumerate((300, 5000, 300, 800, 100))]
    # a packed task holds fewer than twice the target: 300 + 800 reaches it
    assert sizes(pack_ranges(pieces, min_records_per_task=1_000)) == [
        [300],
        [5000],
        [300, 800],
        [100],
    ]


def test_max_records_per_partition_caps_a_packed_task() -> None:
    pieces = small(6, 300)
    assert sizes(pack_ranges(pieces, min_records_per_task=1_000)) == [[300] * 4, [300] * 2]
    capped = pack_ranges(pieces, min_records_per_task=1_000, max_records_per_partition=700)
    assert sizes(capped) == [[300, 300]] * 3
    # through task_ranges: a long range is split first, its pieces are never packed beyond
    tasks = task_ranges(
        [OffsetRange("t", 0, 0, 2_000), *small(3, 10, "u")],
        max_records_per_partition=700,
        min_records_per_task=10_000,
    )
    assert sizes(tasks) == [[667], [667], [666, 10, 10, 10]]


def test_min_partitions_wins_over_packing() -> None:
    pieces = small(8, 100)
    # the target shrinks to total // minPartitions = 200
    assert (
        sizes(pack_ranges(pieces, min_records_per_task=1_000, min_partitions=4)) == [[100, 100]] * 4
    )
    # packing that would still give fewer tasks than minPartitions packs nothing
    uneven = [OffsetRange("t", 0, 0, 1), OffsetRange("t", 1, 0, 9), OffsetRange("t", 2, 0, 1)]
    assert pack_ranges(uneven, min_records_per_task=100, min_partitions=3) == [(p,) for p in uneven]
    # task_ranges: splitting for minPartitions happens first, then packing keeps the count
    tasks = task_ranges(small(4, 10), min_partitions=8, min_records_per_task=10_000)
    assert len(tasks) >= 8
    assert sum(r.size for task in tasks for r in task) == 40


def test_packing_is_deterministic_over_random_inputs() -> None:
    rng = random.Random(7)
    for _ in range(200):
        pieces = [OffsetRange("t", p, 0, rng.randint(1, 3_000)) for p in range(rng.randint(0, 40))]
        target = rng.choice([0, 1, 500, 2_000, 10_000])
        cap = rng.choice([None, 1_500, 5_000])
        if cap is not None:
            pieces = split_ranges(pieces, max_records_per_partition=cap)
        tasks = pack_ranges(pieces, min_records_per_task=target, max_records_per_partition=cap)
        assert [r for task in tasks for r in task] == pieces
        for task in tasks:
            records = sum(r.size for r in task)
            if len(task) > 1:
                assert records < 2 * target
                assert cap is None or records <= cap
