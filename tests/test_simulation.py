"""The protocol simulator (simulation/): determinism, its fault model, and a bounded
exploration of the unmodified product that must find no violation (the unit tier's
version of ``make sim``). The mutation tests (test_simulation_mutations.py) show that the
same exploration fails when the product is broken."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import pytest

from simulation.choosers import ALL_KINDS
from simulation.explore import SMALL, exhaustive, run_schedule, run_seed
from simulation.query import SimConfig
from simulation.spark import DriverProc, SparkQueryError
from simulation.world import Schedule, StepRecord

ROOT = Path(__file__).resolve().parents[1]
CONFIG = SimConfig()


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


def test_bounded_exploration_finds_no_violation() -> None:
    """Every schedule of at most one event on the small and on the default pipeline, then
    random walks, in which every kind of event takes effect: the unmodified product
    violates nothing (about 12 s on an idle core)."""
    started = time.monotonic()
    schedules = steps = 0
    fired: Counter[str] = Counter()
    for config, bound in ((SMALL, 1), (CONFIG, 1)):
        for outcome, schedule in exhaustive(config, bound):
            assert outcome.violation is None, f"{schedule}: {outcome.violation}"
            assert outcome.healed
            schedules, steps = schedules + 1, steps + outcome.steps
    for seed in range(1000, 2200):
        outcome, schedule = run_seed(CONFIG, seed)
        assert outcome.violation is None, f"seed {seed}: {outcome.violation}"
        schedules, steps = schedules + 1, steps + outcome.steps
        fired.update(e.kind for e in schedule.events)
    elapsed = time.monotonic() - started
    print(f"\n{schedules} schedules, {steps} steps in {elapsed:.1f} s; events {dict(fired)}")
    assert set(fired) >= ALL_KINDS | {"heal"}, fired
    assert schedules > 2000 and steps > 150_000


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
