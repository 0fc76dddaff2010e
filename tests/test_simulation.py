"""The protocol simulator (simulation/): determinism, its fault model, dead letters (poison
rows at errors.tolerance=all, and at none until the operator switches to all), and a
bounded exploration of the unmodified product that must find no violation (the unit tier's
version of ``make sim``). The mutation tests (test_simulation_mutations.py) show that the
same exploration fails when the product is broken."""

from __future__ import annotations

import json
import logging
import re
import subprocess
import sys
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from simulation.choosers import ALL_KINDS, ReplayChooser
from simulation.explore import (
    COMPACTING,
    DEAD_LETTER_RETENTION,
    DEAD_LETTERS,
    DRIVER,
    FANOUT,
    PRUNING,
    RECREATED,
    RECREATED_FATAL,
    SMALL,
    SMALL_DEAD_LETTERS,
    SPARSE,
    SWITCH,
    exhaustive,
    in_turn,
    run_schedule,
    run_seed,
    schedule_json,
    walk_config,
)
from simulation.query import SimConfig
from simulation.scheduler import Event
from simulation.spark import DriverProc, SparkQueryError
from simulation.world import Schedule, StepRecord, World
from sink import cleanup, write_task
from state import spark_offset_log

ROOT = Path(__file__).resolve().parents[1]
CONFIG = SimConfig()
#: The pipelines whose topic may be recreated, at failOnDataLoss=false and true.
RECREATING = (RECREATED, RECREATED_FATAL)


def test_a_failure_free_run_delivers_every_epoch_once_in_order() -> None:
    outcome, _ = run_schedule(CONFIG, Schedule())
    assert outcome.violation is None
    # two partitions of three records, one record per partition and epoch: epochs 0..2
    assert outcome.delivered == [0, 1, 2]
    assert outcome.attempts == 3
    assert outcome.healed and outcome.steps > 50


def test_the_same_seed_runs_the_same_steps_and_its_schedule_replays_them() -> None:
    seed = next(s for s in range(100) if len(run_seed(CONFIG, s)[1].events) >= 4)
    first, schedule = run_seed(CONFIG, seed, trace=True)
    again, _ = run_seed(CONFIG, seed, trace=True)
    replayed, _ = run_schedule(CONFIG, schedule, trace=True)

    def steps(trace: list[StepRecord]) -> list[tuple[object, ...]]:
        return [(r.actor, r.index, r.op, r.fault) for r in trace]

    assert steps(first.trace) == steps(again.trace) == steps(replayed.trace)
    assert first.fired == again.fired == replayed.fired
    assert first.delivered == replayed.delivered


@pytest.mark.slow
def test_bounded_exploration_finds_no_violation() -> None:
    """Every schedule of at most one event on the small and on the default pipeline, with
    and without poison rows at errors.tolerance=all, then random walks over the walks'
    pipelines (the default one without poison, at all and at none, and the pruned ones;
    ``make sim`` runs every one-event schedule of each too), and over the pipelines whose
    drivers prune without the coordinator and over those whose topic may be recreated, in
    which every kind of event takes effect: the unmodified product violates nothing."""
    started = time.monotonic()
    schedules = steps = 0
    fired: Counter[str] = Counter()
    for config in (SMALL, CONFIG, SMALL_DEAD_LETTERS, DEAD_LETTERS):
        for outcome, schedule in exhaustive(config, 1):
            assert outcome.violation is None, f"{config} {schedule}: {outcome.violation}"
            assert outcome.healed
            schedules, steps = schedules + 1, steps + outcome.steps
    for seed in range(1000, 1450):
        outcome, schedule = run_seed(walk_config(seed), seed)
        assert outcome.violation is None, f"seed {seed}: {outcome.violation}"
        schedules, steps = schedules + 1, steps + outcome.steps
        fired.update(e.kind for e in schedule.events)
    # The pipelines without the coordinator whose drivers prune (the sweep is theirs), and
    # those whose topic may be recreated (the recreation is theirs).
    for seed in range(1000, 1040):
        for config in (walk_config(seed, (PRUNING, SPARSE)), walk_config(seed, RECREATING)):
            outcome, schedule = run_seed(config, seed)
            assert outcome.violation is None, f"{config} seed {seed}: {outcome.violation}"
            schedules, steps = schedules + 1, steps + outcome.steps
            fired.update(e.kind for e in schedule.events)
    elapsed = time.monotonic() - started
    print(f"\n{schedules} schedules, {steps} steps in {elapsed:.1f} s; events {dict(fired)}")
    assert set(fired) >= ALL_KINDS | {"heal"}, fired
    assert schedules > 2000 and steps > 150_000


# --- dead letters -----------------------------------------------------------------------------


#: A run that claims and dies before deleting its own parts, and a healthy driver with no
#: batch left to commit: p4 restores the older snapshot (the newest is unusable), replays
#: epoch 2, which p1 delivered, claims, and is stopped by the heal right before deleting
#: its dropped batch's parts; the healthy driver restores the newest snapshot, past every
#: epoch, and never commits, so never claims and never sweeps.
DIES_AFTER_ITS_CLAIM = Schedule(
    (
        Event("p1", 25, "lose-part", "sim/staging/q1/000000000000/p00000-t1-rp1-r1.parquet"),
        Event("p1", 84, "zombie", "lost"),
        Event("p1s", 3, "zombie", "lost"),
        Event("p3", 6, "crash", "older"),
        Event("p4", 23, "heal", "lose"),
    ),
    "lose",
)


def test_a_claimed_runs_parts_may_wait_for_the_next_runs_sweep(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """p4-r1's parts are left at the end: not a leak, the next run's claim sweeps them
    (tests/test_sink_barrier.py shows it on the product). A sweep that keeps superseded
    runs' parts would leave them for good, and fails the check."""
    outcome, _ = run_schedule(FANOUT, DIES_AFTER_ITS_CLAIM)
    assert outcome.violation is None, outcome.violation
    monkeypatch.setattr(cleanup.StagingCleanup, "_superseded", lambda self, rid, auth: False)
    outcome, _ = run_schedule(FANOUT, DIES_AFTER_ITS_CLAIM)
    assert outcome.violation is not None
    assert outcome.violation.invariant == "no claimed run's part outlives the next sweep"
    assert "rp4-r1" in outcome.violation.message


def test_at_errors_tolerance_all_the_refused_rows_go_to_dead_letters_once() -> None:
    # Driver p1 plans one record per partition and epoch: epoch 1 reads the record its
    # consumer kind refuses (0, 1), epoch 2 the one whose gt is null (1, 2).
    outcome, _ = run_schedule(DEAD_LETTERS, Schedule())
    assert outcome.violation is None, outcome.violation
    assert outcome.delivered == [0, 1, 2]
    assert outcome.dead_letters == {1: 1, 2: 1}
    assert outcome.refused == 0


def test_a_bundle_refused_whole_writes_its_dead_letters_and_delivers_nothing() -> None:
    # One partition of two records, the first refused: epoch 0 has nothing to deliver.
    outcome, _ = run_schedule(SMALL_DEAD_LETTERS, Schedule())
    assert outcome.violation is None, outcome.violation
    assert outcome.delivered == [1]
    assert outcome.dead_letters == {0: 1}


def test_at_none_the_query_stops_at_the_poison_bundle_until_the_operator_switches() -> None:
    # Without an event: every run of p1 fails at bundle 1 (nothing of it delivered) until
    # the supervisor gives up; the healthy driver's operator switches to all and it ends.
    outcome, _ = run_schedule(SWITCH, Schedule())
    assert outcome.violation is None, outcome.violation
    assert outcome.refused >= 2 * 4  # two task attempts, a first run and three resets
    assert outcome.delivered == [0, 1, 2]
    assert outcome.dead_letters == {1: 1, 2: 1}
    # the operator switches while p1 still runs (p1's steps 34 to 44 fall after its
    # bundle 0 and before it gives up): p1 is stopped, p2 restarts on its checkpoint with
    # errors.tolerance=all
    switched, _ = run_schedule(SWITCH, Schedule((Event("p1", 38, "tolerate"),)))
    assert switched.violation is None, switched.violation
    assert switched.fired == [Event("p1", 38, "tolerate")]
    assert switched.delivered == [0, 1, 2]
    assert switched.dead_letters == {1: 1, 2: 1}
    # a switch before p1 planned epoch 2: the restarted query's batch reads epochs 1 and 2
    # as one bundle, whose dead letters hold both poison rows
    early, _ = run_schedule(SWITCH, Schedule((Event("p1", 20, "tolerate"),)))
    assert early.violation is None, early.violation
    assert (early.delivered, early.dead_letters) == ([0, 1], {1: 2})


def test_a_poison_bundle_delivered_under_none_is_a_violation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    stage = write_task.stage_task

    def unchecked(*args: object, **kwargs: object) -> object:
        kwargs["checks"] = write_task.RowChecks()  # no kind, so only the gt check ...
        return stage(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(write_task, "stage_task", unchecked)
    outcome, _ = run_schedule(SWITCH, Schedule())
    assert outcome.violation is not None
    assert outcome.violation.invariant == "nothing of a poison bundle under none"


def test_a_schedule_names_its_pipeline() -> None:
    raw = schedule_json(Schedule((Event("p1", 3, "tolerate"),), "lose"), SWITCH)
    assert SimConfig.from_json(json.loads(raw)["config"]) == SWITCH
    assert "config" not in json.loads(schedule_json(Schedule(), CONFIG))


def test_liveness_fails_when_the_healthy_driver_cannot_finish(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def never(self: DriverProc) -> None:
        raise SparkQueryError("simulated: the query always fails")

    monkeypatch.setattr(DriverProc, "run_query", never)
    outcome, _ = run_schedule(CONFIG, Schedule())
    assert outcome.violation is not None
    assert outcome.violation.invariant == "liveness"
    assert "gave-up" in outcome.violation.message


def test_the_command_prints_its_counts_last() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "simulation",
            "--seconds",
            "2",
            "--workers",
            "1",
            "--small-bound",
            "0",
            "--bound",
            "0",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    last = done.stdout.strip().splitlines()[-3:]
    assert re.fullmatch(r"steps explored: [1-9]\d*", last[0]), last
    assert re.fullmatch(r"schedules: [1-9]\d*", last[1]), last
    assert last[2] == "violations: 0"


def test_the_quick_mode_finishes_its_schedules_whatever_the_time_budget() -> None:
    # --bound 0: the failure-free schedule of the default pipeline, of each poison one (5),
    # of each whose topic may be recreated (2), of each pruned one (5) and of each read
    # with readMode=driver (2), every one run although the budget (0.01 s) is spent
    # before the first ends.
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "simulation",
            "--quick",
            "--seconds",
            "0.01",
            "--workers",
            "1",
            "--bound",
            "0",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.strip().splitlines()
    assert lines[-2] == "schedules: 15", lines
    assert any(line.endswith(": 15 schedules, complete") for line in lines), lines
    states = re.search(
        r"liveness steps \(the healthy driver alone\): ([\d,]+); .* left: (\d+)", done.stdout
    )
    assert states is not None, lines
    assert int(states.group(1).replace(",", "")) > 0
    assert int(states.group(2)) >= 2  # with and without poison rows, the faults leave others


def test_a_seed_replays_from_the_command_line() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "simulation", "--seed", "7", "--replay"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "no violation" in done.stdout
    assert re.search(r"^\s+0 p1@0 start$", done.stdout, re.MULTILINE)


def test_a_zombie_start_can_be_made_free_in_the_exhaustive_search() -> None:
    # Bound 0 with one free zombie: the failure-free schedule, then one schedule for each
    # point where a second driver can start, and nothing else.
    runs = list(exhaustive(SMALL, 0, free_zombies=1))
    kinds = [[e.kind for e in schedule.events] for _, schedule in runs]
    assert kinds[0] == []
    assert len(runs) > 10
    assert all(k == ["zombie"] for k in kinds[1:]), kinds
    assert all(outcome.violation is None for outcome, _ in runs)
    # Without it, bound 0 is the failure-free schedule alone.
    assert [str(s) for _, s in exhaustive(SMALL, 0)] == [str(runs[0][1])]


def test_the_exhaustive_phases_take_their_pipelines_in_turn() -> None:
    # A phase cut by its time limit has run some schedules of every pipeline (the last,
    # the pruned ones, too), each pipeline's in its own order.
    runs = [iter([1, 2, 3]), iter([]), iter([4]), iter([5, 6])]
    assert list(in_turn(runs)) == [1, 4, 5, 2, 6, 3]


# --- readMode=driver ------------------------------------------------------------------------


def test_driver_mode_records_batches_from_the_offset_log_and_delivers_every_epoch_once() -> None:
    """With ``readMode=driver`` no read task records a batch planned in the running run:
    the barrier records it from the simulated offset log (``make sim`` and the walks
    above explore the mode's faults: DRIVER and DRIVER_PRUNED are walk pipelines)."""
    outcome, _ = run_schedule(DRIVER, Schedule())
    assert outcome.violation is None
    assert outcome.delivered == [0, 1, 2]
    assert outcome.healed


def test_a_barrier_that_takes_the_wrong_epoch_from_the_offset_log_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The simulator's invariants see a commit that maps a batch read on the driver to
    the epoch before the one its offsets name."""
    right = spark_offset_log.decide_batch_epoch

    def one_too_early(*args: Any, **kwargs: Any) -> int | None:
        epoch = right(*args, **kwargs)
        return None if epoch is None else max(epoch - 1, 0)

    monkeypatch.setattr(spark_offset_log, "decide_batch_epoch", one_too_early)
    outcome, _ = run_schedule(DRIVER, Schedule())
    assert outcome.violation is not None
    assert outcome.violation.invariant == "content"


# --- compaction ---------------------------------------------------------------------------------


def _compactions(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if " compacted (" in r.getMessage()]


def test_the_compacting_pipeline_compacts_and_merges_without_a_violation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The product's compaction runs in the simulator (a unit of one epoch): a failure-free
    run compacts epochs into segments, merges them and deletes the merged parts a
    compaction later; so does a run whose first driver dies without its checkpoint, after
    which a query on a new checkpoint replays the log from the persisted start."""
    for schedule in (Schedule(), Schedule((Event("p1", 60, "crash", "lose"),))):
        caplog.clear()
        with caplog.at_level(logging.INFO, logger="state.protocol.epoch_floor"):
            outcome, _ = run_schedule(COMPACTING, schedule)
        assert outcome.violation is None and outcome.healed, (schedule, outcome.violation)
        compactions = _compactions(caplog)
        assert len(compactions) >= 4, compactions
        merged = [c for c in compactions if re.search(r", [1-9]\d* leftover segment", c)]
        assert merged, compactions


def test_a_compaction_rewriting_the_floor_is_not_the_runs_own_pruning() -> None:
    """A compaction swaps the floor record with the epoch another run's pruning set; the
    run that compacts did not raise the floor, so an epoch below it that the run then
    asks for is the documented stop of a query far behind (``EpochsPruned``), not its own
    pruner passing it (``the pruner spares its query``)."""
    config = replace(COMPACTING, max_per_partition=(1,))
    schedule = Schedule(
        (
            Event("p1", 24, "zombie", "lost"),
            Event("p1", 29, "zombie", "lost"),
            Event("p1", 34, "switch", "p3"),
            Event("p3", 4, "zombie", "shared"),
            Event("p3", 15, "switch", "p4"),
            Event("p4", 2, "switch", "p2"),
            Event("p2", 299, "heal", "keep"),
        ),
        "keep",
    )
    outcome, _ = run_schedule(config, schedule)
    assert outcome.violation is None, outcome.violation


def test_dead_letter_retention_deletes_committed_bundles_files_and_every_row_stays_once() -> None:
    """At ``errors.deadLetter.retention`` of 20 ms, the product's owner sweep deletes the
    files of committed bundles within the run; the checker accepts each deletion only for
    a bundle at or below ``GT_last`` and a file older than the retention, and the output is
    still every row once, in the consumer or in a dead-letter file written once."""
    world = World(DEAD_LETTER_RETENTION, ReplayChooser(()), heal="keep")
    outcome = world.run()
    assert outcome.violation is None, outcome.violation
    # Bundle 2's file is younger than the retention when the last sweep runs: kept.
    assert world.checker.expired == {1}, world.checker.expired
    assert outcome.dead_letters == {1: 1, 2: 1}


#: Found by ``make sim`` (PCT seed 8008 on ``COMPACTING``), and on ``a5052aa`` too: p4, a
#: driver that fell behind, creates epoch 3's object after p3's compaction moved epoch 3
#: into a segment and deleted the object. Its create succeeds, so p4 runs batch 3 with its
#: own end (1 record) while the log's epoch 3, in the segment, has p3's (2 records); the
#: healthy driver continuing p4's checkpoint then met epoch 4 (p3's) starting elsewhere
#: (``EpochLogConflict``) and stopped for good. ``EpochLog.record`` now adopts the
#: segment's record after a create that succeeds for an epoch a segment holds.
BEHIND_A_COMPACTION = (
    '{"events": [["p1", 15, "zombie", "lost"], ["p1", 16, "switch", "p2"], '
    '["p2", 2, "zombie", "shared"], ["p2", 18, "switch", "p1"], ["p1", 19, "zombie", "lost"], '
    '["p1", 20, "switch", "p4"], ["p4", 75, "switch", "p1"]], "heal": "keep", "config": '
    '{"partitions": 1, "per_partition": 12, "max_upgrades": 0, "coordinator": false, '
    '"epochs_retained": 8, "segment_epochs": 1}}'
)


def test_a_driver_behind_a_compaction_adopts_the_compacted_epoch() -> None:
    raw = json.loads(BEHIND_A_COMPACTION)
    config = SimConfig.from_json(raw["config"])
    assert config == COMPACTING
    schedule = Schedule(tuple(Event.from_json(e) for e in raw["events"]), raw["heal"])
    outcome, _ = run_schedule(config, schedule)
    assert outcome.violation is None, f"{schedule}: {outcome.violation}"
