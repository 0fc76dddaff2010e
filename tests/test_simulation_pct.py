"""PCT runs of the simulator (``simulation/pct.py``): the priority rule and its change
points, a run replayed from its seed and from its schedule, a second driver's start that
no event budget counts, bad parameters refused, and a known bug found within a fixed
budget of seeds (deterministic: the seeds are fixed, so it cannot flake)."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest

from simulation.choosers import RandomWalk
from simulation.explore import (
    PRUNING,
    SPARSE,
    Found,
    Plan,
    minimise,
    report,
    run_pct,
    run_schedule,
    walk_config,
)
from simulation.pct import Pct, PctChooser, pct_for
from simulation.pct_bench import MUTANTS, hunt_mutant
from simulation.query import SimConfig
from simulation.scheduler import Actor
from simulation.world import Schedule, StepRecord

ROOT = Path(__file__).resolve().parents[1]
CONFIG = SimConfig()
#: The bug PCT must find, and the seeds it has for it.
MUTANT = "5 stale remembered state"
SEEDS = range(100)


@dataclass
class Stage:
    """The world as PCT's decision reads it: actors, the step, who can run."""

    actors: list[Actor] = field(default_factory=list)
    step: int = 0

    def runnable(self) -> list[Actor]:
        return [a for a in self.actors if a.runnable()]

    def add(self, name: str) -> Actor:
        actor = Actor(name=name, order=len(self.actors), body=lambda: None)
        self.actors.append(actor)
        return actor


def test_the_highest_priority_runs_and_each_change_point_demotes_the_one_running() -> None:
    # Expected run length 2: both change points of depth 3 fall on step 1.
    chooser = PctChooser(11, Pct(3, RandomWalk()), expected_steps=2)
    stage = Stage()
    a, b, c = stage.add("a"), stage.add("b"), stage.add("c")
    first = chooser.schedule(stage)
    assert first is not None
    initial = dict(chooser.priority)
    assert all(p > 3 for p in initial.values())
    assert first.name == max(initial, key=initial.__getitem__)
    ranked = sorted((a, b, c), key=lambda x: initial[x.name], reverse=True)

    stage.step = 1
    chosen = chooser.schedule(stage)
    # Change 1 demotes the top actor to 2, change 2 the next one to 1: the lowest runs.
    assert chosen is ranked[2]
    assert chooser.priority[ranked[0].name] == 2
    assert chooser.priority[ranked[1].name] == 1

    ranked[2].alive = False  # it ends: of the demoted, the one demoted first runs
    assert chooser.schedule(stage) is ranked[0]
    late = stage.add("d")  # a new actor ranks above every demoted one
    assert chooser.schedule(stage) is late
    assert chooser.priority["d"] > 3


def test_a_pct_run_replays_from_its_seed_and_from_its_schedule() -> None:
    def kinds(seed: int) -> list[str]:
        return [e.kind for e in run_pct(CONFIG, seed)[1].events]

    seed = next(s for s in range(200) if kinds(s).count("switch") >= 3 and "zombie" in kinds(s))
    first, schedule = run_pct(CONFIG, seed, trace=True)
    again, _ = run_pct(CONFIG, seed, trace=True)
    replayed, _ = run_schedule(CONFIG, schedule, trace=True)

    def steps(trace: list[StepRecord]) -> list[tuple[object, ...]]:
        return [(r.actor, r.index, r.op, r.fault) for r in trace]

    assert steps(first.trace) == steps(again.trace) == steps(replayed.trace)
    assert first.fired == again.fired == replayed.fired
    assert first.delivered == replayed.delivered


def test_a_second_drivers_start_is_not_counted_against_the_event_budget() -> None:
    # No budget at all: only second drivers start (the upgrade, drawn as often, never).
    walk = RandomWalk(
        fault=0.0,
        environment=1.0,
        max_events=0,
        early_heal=0.0,
        kinds=frozenset({"zombie", "upgrade"}),
    )
    fired = [e.kind for s in range(5) for e in run_pct(CONFIG, s, Pct(2, walk))[1].events]
    assert "zombie" in fired
    assert "upgrade" not in fired
    # With a budget of one, the upgrade comes too.
    one = replace(walk, max_events=1)
    fired = [e.kind for s in range(5) for e in run_pct(CONFIG, s, Pct(2, one))[1].events]
    assert "upgrade" in fired


def test_every_depth_meets_every_profile_by_seed() -> None:
    seen = {(pct_for(s).depth, pct_for(s).walk) for s in range(27)}
    assert {d for d, _ in seen} == {2, 3, 4}
    assert len(seen) == 9
    assert pct_for(5, depth=4).depth == 4


def test_bad_parameters_are_refused_naming_the_value() -> None:
    with pytest.raises(ValueError, match=r"PCT depth: 0; expected an integer of at least 1"):
        Pct(0, RandomWalk())
    with pytest.raises(ValueError, match=r"pct_share: 1.5; expected a number from 0 to 1"):
        Plan(pct_share=1.5)
    bad = subprocess.run(
        [sys.executable, "-m", "simulation", "--pct-share", "2"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert bad.returncode == 2
    assert "--pct-share: '2'; expected a number from 0 to 1" in bad.stderr


def test_pct_finds_a_bug_that_needs_two_drivers_interleaved_within_fixed_seeds() -> None:
    mutate, invariant = MUTANTS[MUTANT]
    hunt = hunt_mutant(MUTANT, run_pct, SEEDS)
    assert hunt.first is not None, f"PCT found {MUTANT!r} in none of seeds {SEEDS}"
    with mutate():
        outcome, schedule = run_pct(CONFIG, hunt.first)
        assert outcome.violation is not None
        assert outcome.violation.invariant == invariant
        # Its schedule replays the violation and minimises as a random walk's does.
        replayed, _ = run_schedule(CONFIG, schedule)
        assert replayed.violation is not None
        assert replayed.violation.invariant == invariant
        small = minimise(CONFIG, schedule, invariant)
        assert len(small.events) < len(schedule.events)
        assert any(e.kind == "zombie" for e in small.events)
        for i in range(len(small.events)):
            fewer = Schedule(small.events[:i] + small.events[i + 1 :], small.heal)
            v = run_schedule(CONFIG, fewer)[0].violation
            assert v is None or v.invariant != invariant, f"{small} is not 1-minimal"
        text = report(CONFIG, Found(outcome.violation, schedule, hunt.first, pct=True), small)
    assert f"--seed {hunt.first} --pct --replay" in text


def test_the_cli_replays_a_seeds_pct_run() -> None:
    outcome, schedule = run_pct(walk_config(4), 4)
    done = subprocess.run(
        [sys.executable, "-m", "simulation", "--seed", "4", "--pct", "--replay"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert f"schedule ({len(schedule.events)} event(s)): {schedule}" in done.stdout
    assert "no violation" in done.stdout
    assert outcome.violation is None


def test_pct_runs_of_the_unmodified_product_find_no_violation() -> None:
    """PCT runs over ``make sim``'s walk pipelines (with and without poison rows, at all
    and at none) and the pruning pipelines without the coordinator: nothing violated,
    and the priorities do preempt (every depth, second drivers interleaved)."""
    switches = zombies = 0
    for seed in range(300):
        config = walk_config(seed) if seed < 270 else walk_config(seed, (PRUNING, SPARSE))
        outcome, schedule = run_pct(config, seed)
        assert outcome.violation is None, f"PCT run of seed {seed}: {outcome.violation}"
        switches += sum(e.kind == "switch" for e in schedule.events)
        zombies += sum(e.kind == "zombie" for e in schedule.events)
    assert switches > 300 and zombies > 50, (switches, zombies)
