"""The chaos run's pure logic (integration_tests/chaos/): the references of its queries,
the verdict's counts (the consumer and the dead letters together), epoch assignment, round
plans and their poison rows, the process tree, the report."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from harness.pids import ProcessInfo, descendants
from integration_tests.chaos.checks import judge
from integration_tests.chaos.consumers import CONSUMERS, DeliveredBundle
from integration_tests.chaos.faults import FAULTS, draw_plan
from integration_tests.chaos.plan import Sizing
from integration_tests.chaos.poison import poison_sink_options
from integration_tests.chaos.queries import QUERIES, TICK_BASE, record_key
from integration_tests.chaos.reference import InputRecord, assign_epochs
from integration_tests.chaos.report import RunSummary, table
from state.records.barrier import BarrierState
from state.records.epoch import EpochRecord
from state.records.source_offset import SourceOffset

TOPIC = "t"


def epochs(*ends: int) -> list[EpochRecord]:
    """One-partition epochs ending at ``ends``."""
    out, start = [], 0
    for k, end in enumerate(ends):
        out.append(
            EpochRecord(
                k, SourceOffset(k, {(TOPIC, 0): start}), SourceOffset(k + 1, {(TOPIC, 0): end})
            )
        )
        start = end
    return out


def records(n: int) -> list[tuple[int, int, bytes | None, bytes]]:
    return [(0, i, record_key(i), b"%d" % i) for i in range(n)]


def stateless_bundles(recs: list[InputRecord]) -> list[DeliveredBundle]:
    by: dict[int, list[dict[str, Any]]] = {}
    for r in recs:
        gt = {"epoch": r.epoch, "topic": TOPIC, "partition": r.partition, "offset": r.offset}
        by.setdefault(r.epoch, []).append({"key": r.key, "value": b"%d" % r.number, "gt": gt})
    return [DeliveredBundle(k, rows) for k, rows in sorted(by.items())]


def test_assign_epochs_and_unread_records() -> None:
    got = assign_epochs(TOPIC, records(7), epochs(3, 5))
    assert [(r.number, r.epoch) for r in got.records] == [(0, 0), (1, 0), (2, 0), (3, 1), (4, 1)]
    assert got.unread == [(0, 5), (0, 6)]
    assert got.problems == []


def test_a_gap_in_the_epoch_log_is_a_problem() -> None:
    log = epochs(3, 5)
    broken = [log[0], EpochRecord(1, SourceOffset(1, {(TOPIC, 0): 4}), log[1].end)]
    assert assign_epochs(TOPIC, records(5), broken).problems


def test_exactly_once_passes_and_each_violation_is_counted() -> None:
    query = QUERIES["stateless"]
    epoched = assign_epochs(TOPIC, records(6), epochs(3, 6))
    bundles = stateless_bundles(epoched.records)
    ok = judge(query, "arrow", False, epoched, bundles, BarrierState(gt_last=1), 1)
    assert ok.exactly_once and (ok.lost, ok.duplicated, ok.differing) == (0, 0, 0)

    lost = [bundles[0], DeliveredBundle(1, bundles[1].rows[:2])]
    assert judge(query, "arrow", False, epoched, lost, BarrierState(gt_last=1), 1).lost == 1
    twice = [bundles[0], DeliveredBundle(1, bundles[1].rows + bundles[1].rows[:1])]
    assert judge(query, "arrow", False, epoched, twice, BarrierState(gt_last=1), 1).duplicated == 1
    moved = [
        DeliveredBundle(0, bundles[0].rows + bundles[1].rows[:1]),
        DeliveredBundle(1, bundles[1].rows[1:]),
    ]
    v = judge(query, "arrow", False, epoched, moved, BarrierState(gt_last=1), 1)
    assert v.differing == 1 and not v.exactly_once
    backwards = [bundles[1], bundles[0]]
    v = judge(query, "arrow", True, epoched, backwards, BarrierState(gt_last=1), 1)
    assert v.order_errors == 1
    v = judge(query, "arrow", False, epoched, bundles, BarrierState(gt_last=0), 1)
    assert any("GT_last 0" in p for p in v.problems) and not v.exactly_once


def test_keyed_reference_is_a_sequential_replay_of_the_epochs() -> None:
    epoched = assign_epochs(TOPIC, records(30), epochs(13, 30))
    items = QUERIES["keyed"].expected(epoched.records, "arrow")
    first = {i.identity: i.value for i in items}
    assert first[(0, b"k0")] == (1, 0, 0)
    assert first[(1, b"k0")] == (3, 0 + 13 + 26, 26)
    assert len(items) == 13 + 13  # every key in both epochs


def test_windowed_reference_leaves_out_the_ticks() -> None:
    recs = [*records(250), (0, 250, b"tick", b"%d" % TICK_BASE)]
    epoched = assign_epochs(TOPIC, recs, epochs(100, 251))
    items = QUERIES["windowed"].expected(epoched.records, "arrow")
    assert [(i.identity, i.value) for i in items] == [
        (0, (100, sum(range(100)))),
        (100, (100, sum(range(100, 200)))),
        (200, (50, sum(range(200, 250)))),
    ]


def test_kafka_rows_are_read_back_as_json() -> None:
    message = {"key": b"k1", "value": b'{"key":"k1","n":2,"total":5,"mx":4}'}
    keyed = QUERIES["keyed"].item(3, message, "kafka")
    assert (keyed.identity, keyed.value) == ((3, b"k1"), (2, 5, 4))
    windowed = QUERIES["windowed"].item(2, {"value": b'{"start":100,"n":1,"total":7}'}, "kafka")
    assert (windowed.identity, windowed.value) == (100, (1, 7))


def test_plans_are_reproducible_and_armed_faults_come_first() -> None:
    def plan(index: int) -> Any:
        return draw_plan(
            7,
            index,
            queries=list(QUERIES),
            consumers=["file", "http"],
            sizing=Sizing(),
            cluster_share=0.2,
        )

    assert plan(5) == plan(5)
    for i in range(40):
        kinds = [FAULTS[f.kind] for f in plan(i).faults]
        armed = [k.armed_at_start for k in kinds]
        assert armed == sorted(armed, reverse=True)
        assert all(k.applies(plan(i)) for k in kinds)


def test_only_cluster_faults_force_a_cluster_round() -> None:
    p = draw_plan(
        1,
        0,
        queries=["stateless"],
        consumers=["file"],
        sizing=Sizing(),
        cluster_share=0.1,
        fault_kinds=["cluster_worker"],
    )
    assert p.cluster and {f.kind for f in p.faults} == {"cluster_worker"}
    with pytest.raises(ValueError, match="no fault kind"):
        draw_plan(
            1,
            0,
            queries=["stateless"],
            consumers=["file"],
            sizing=Sizing(),
            cluster_share=0.0,
            fault_kinds=["receiver_kill"],
        )


def test_descendants_walk_the_process_tree() -> None:
    table_ = {
        pid: ProcessInfo(pid, ppid, "")
        for pid, ppid in [(1, 0), (10, 1), (11, 10), (12, 11), (13, 10), (20, 1)]
    }
    assert sorted(p.pid for p in descendants(10, table_)) == [11, 12, 13]


def test_the_table_names_every_count(tmp_path: Path) -> None:
    summary = RunSummary(
        seed=3,
        rounds=2,
        passed=2,
        faults=4,
        by_kind={"kill_step:after_ack": 2, "s3_reset": 2},
        skipped=0,
        records=100,
        lost=0,
        duplicated=0,
        differing=0,
        order_errors=0,
        seconds=120.0,
        load=(1.0, 2.0, 3.0),
        failures=[],
    )
    text = table(summary)
    for word in (
        "rounds",
        "kill_step",
        "after_ack 2",
        "records",
        "lost",
        "duplicated",
        "differing",
        "PASS",
    ):
        assert word in text


# --- poison rows and dead letters ------------------------------------------------------------


def poisoned_bundles(
    recs: list[InputRecord], poison: frozenset[int]
) -> tuple[list[DeliveredBundle], list[DeliveredBundle]]:
    """What a stateless round at errors.tolerance=all holds: the consumer's bundles without
    the poison records, and the dead letters (the poison rows, their gt null, by bundle)."""
    clean = stateless_bundles([r for r in recs if r.number not in poison])
    dead: dict[int, list[dict[str, Any]]] = {}
    for r in recs:
        if r.number in poison:
            dead.setdefault(r.epoch, []).append(
                {"key": r.key, "value": b"%d" % r.number, "gt": None, "_gtb_bundle": r.epoch}
            )
    return clean, [DeliveredBundle(k, rows) for k, rows in sorted(dead.items())]


def test_the_consumer_and_the_dead_letters_together_are_exactly_once() -> None:
    query = QUERIES["stateless"]
    epoched = assign_epochs(TOPIC, records(6), epochs(3, 6))
    poison = frozenset({1, 4})
    clean, dead = poisoned_bundles(epoched.records, poison)
    state = BarrierState(gt_last=1)

    def verdict(consumer: list[DeliveredBundle], letters: list[DeliveredBundle]) -> Any:
        return judge(
            query, "arrow", False, epoched, consumer, state, 1, dead_letters=letters, poison=poison
        )

    ok = verdict(clean, dead)
    assert ok.exactly_once, ok.problems
    assert (ok.lost, ok.duplicated, ok.differing, ok.dead_letters) == (0, 0, 0, 2)
    # a poison row in neither place is lost
    assert verdict(clean, dead[:1]).lost == 1
    # in both places (delivered and in dead letters): duplicated
    both = [DeliveredBundle(0, clean[0].rows + dead[0].rows), clean[1]]
    assert verdict(both, dead).duplicated == 1
    # delivered instead of refused: a row the target refuses reached the consumer
    delivered = verdict([DeliveredBundle(0, clean[0].rows + dead[0].rows), clean[1]], dead[1:])
    assert delivered.differing == 1 and not delivered.exactly_once
    # a row nobody refuses in the dead letters
    extra = [DeliveredBundle(0, [*dead[0].rows, clean[0].rows[0]]), dead[1]]
    wrong = verdict([DeliveredBundle(0, clean[0].rows[1:]), clean[1]], extra)
    assert wrong.differing == 1 and not wrong.exactly_once
    # without poison, the reference is unchanged: every row in the consumer
    plain = judge(query, "arrow", False, epoched, stateless_bundles(epoched.records), state, 1)
    assert plain.exactly_once and plain.dead_letters == 0


def test_a_poison_row_read_back_from_kafka_has_no_gt_either() -> None:
    query = QUERIES["stateless"]
    epoched = assign_epochs(TOPIC, records(3), epochs(3))
    poison = frozenset({2})
    consumer = [
        DeliveredBundle(0, [{"key": r.key, "value": b"%d" % r.number} for r in epoched.records[:2]])
    ]
    dead = [DeliveredBundle(0, [{"key": b"k2", "value": b"2", "gt": None}])]
    v = judge(
        query,
        "kafka",
        True,
        epoched,
        consumer,
        BarrierState(gt_last=0),
        0,
        dead_letters=dead,
        poison=poison,
    )
    assert v.exactly_once, v.problems


def plan_of(index: int, share: float, seed: int = 7) -> Any:
    return draw_plan(
        seed,
        index,
        queries=list(QUERIES),
        consumers=list(CONSUMERS),
        sizing=Sizing(),
        cluster_share=0.0,
        poison_share=share,
    )


def test_poison_is_drawn_for_stateless_rounds_at_both_tolerances() -> None:
    plans = [plan_of(i, 0.6) for i in range(90)]
    poisoned = [p for p in plans if p.poison is not None]
    assert poisoned and all(p.query == "stateless" for p in poisoned)
    assert {p.poison.tolerance for p in poisoned} == {"none", "all"}
    for p in poisoned:
        assert p.poison.numbers and all(0 <= n < p.records for n in p.poison.numbers)
        assert "poison" in p.describe()
    # a stateless round without poison too ("some rounds")
    assert any(p.poison is None and p.query == "stateless" for p in plans)
    assert plan_of(5, 0.6) == plan_of(5, 0.6)


def test_poison_draws_leave_the_rest_of_a_round_as_it_was() -> None:
    for i in range(30):
        with_poison, without = plan_of(i, 1.0), plan_of(i, 0.0)
        assert without.poison is None
        same = ("query", "consumer", "partitions", "records", "cluster", "max_offsets")
        assert [getattr(with_poison, f) for f in same] == [getattr(without, f) for f in same]


def test_after_dead_letters_is_drawn_only_where_there_are_dead_letters() -> None:
    for i in range(200):
        p = plan_of(i, 0.6)
        steps = {f.params.get("step") for f in p.faults if f.kind == "kill_step"}
        if "after_dead_letters" in steps:
            assert p.poison is not None, p


def test_dead_letter_sink_options() -> None:
    assert poison_sink_options("none", "file:///x/dead") == {}
    assert poison_sink_options("all", "file:///x/dead") == {
        "errors.tolerance": "all",
        "errors.deadLetter.path": "file:///x/dead",
    }


def test_the_table_names_the_poison_rounds() -> None:
    summary = RunSummary(
        seed=3,
        rounds=2,
        passed=2,
        faults=1,
        by_kind={"s3_reset": 1},
        skipped=0,
        records=100,
        lost=0,
        duplicated=0,
        differing=0,
        order_errors=0,
        seconds=60.0,
        load=(1.0, 1.0, 1.0),
        failures=[],
        poisoned=2,
        switched=1,
        dead_letters=3,
    )
    text = table(summary)
    assert "poison rounds" in text and "2 (1 switched from errors.tolerance=none)" in text
    assert "dead letters" in text
