"""Exploring schedules: replay, random walks, the bounded exhaustive search, minimisation,
and the two-process exploration ``make sim`` runs.

* :func:`run_schedule` replays a :class:`~simulation.world.Schedule` (stateless
  re-execution: every run starts from the empty store);
* :func:`run_seed` runs the random walk of one seed (``python -m simulation --seed N
  --replay`` runs it again, step for step), :func:`run_pct` its PCT run
  (:mod:`simulation.pct`; ``--seed N --pct --replay``);
* :func:`exhaustive` runs every schedule with at most ``bound`` events, depth first: the
  children of a schedule add one event at a step after its last one, chosen among the
  :func:`~simulation.choosers.alternatives` of that step;
* :func:`minimise` shrinks a failing schedule by delta debugging until removing any one
  of its events makes the violation go away;
* :func:`explore` splits the exhaustive search and the random walks between worker
  processes and prints their progress.
"""

from __future__ import annotations

import json
import logging
import multiprocessing as mp
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from multiprocessing.queues import Queue
from queue import Empty
from typing import TypeVar

from simulation.choosers import (
    EXHAUSTIVE_KINDS,
    PROFILES,
    RandomChooser,
    RandomWalk,
    ReplayChooser,
    walk_for,
)
from simulation.invariants import Violation
from simulation.pct import Pct, PctChooser, pct_for
from simulation.query import SimConfig
from simulation.scheduler import Event
from simulation.world import Outcome, Schedule, World


def run_schedule(
    config: SimConfig,
    schedule: Schedule,
    *,
    trace: bool = False,
    branch_kinds: frozenset[str] | None = None,
) -> tuple[Outcome, ReplayChooser]:
    """Run ``schedule`` from the empty store (and, with ``branch_kinds``, record the
    alternatives of the steps after its last event)."""
    chooser = ReplayChooser(schedule.events, branch_kinds)
    outcome = World(config, chooser, heal=schedule.heal, trace=trace).run()
    return outcome, chooser


def expected_steps(config: SimConfig) -> int:
    """About how many steps a failure-free run takes (where random heals are drawn)."""
    return 40 * (config.partitions * config.per_partition + 2)


def run_seed(
    config: SimConfig, seed: int, walk: RandomWalk | None = None, *, trace: bool = False
) -> tuple[Outcome, Schedule]:
    """The random walk of ``seed`` (by default with the seed's profile,
    :func:`~simulation.choosers.walk_for`), and the schedule of the events that fired."""
    chooser = RandomChooser(seed, walk or walk_for(seed), expected_steps(config))
    outcome = World(config, chooser, heal=chooser.heal, trace=trace).run()
    return outcome, Schedule(tuple(outcome.fired), chooser.heal)


def run_pct(
    config: SimConfig, seed: int, pct: Pct | None = None, *, trace: bool = False
) -> tuple[Outcome, Schedule]:
    """The PCT run of ``seed`` (by default with the seed's parameters,
    :func:`~simulation.pct.pct_for`), and the schedule of the events that fired."""
    # The change points must fall where the faults still run: a failure-free run of the
    # walks' pipelines reaches its heal after 50 to 90 steps, a PCT run after 65 to 120
    # (median), a third of expected_steps. Not measured per run: a seed's run must not
    # depend on anything but the seed and the pipeline.
    chooser = PctChooser(seed, pct or pct_for(seed), expected_steps(config) // 3)
    outcome = World(config, chooser, heal=chooser.heal, trace=trace).run()
    return outcome, Schedule(tuple(outcome.fired), chooser.heal)


@dataclass
class Found:
    """A violation and the schedule (and seed, for a random walk or, with ``pct``, a PCT
    run) that produced it."""

    violation: Violation
    schedule: Schedule
    seed: int | None = None
    pct: bool = False


@dataclass
class Tally:
    """Counts of an exploration."""

    steps: int = 0
    schedules: int = 0
    violations: int = 0
    found: list[Found] = field(default_factory=list)
    #: Steps after the heal (the healthy driver alone), part of ``steps``.
    liveness_steps: int = 0
    #: The distinct abstract states the faults left (:meth:`World.abstract_state`).
    states: set[str] = field(default_factory=set)

    def add(
        self, outcome: Outcome, schedule: Schedule, seed: int | None = None, *, pct: bool = False
    ) -> None:
        self.steps += outcome.steps
        self.schedules += 1
        if outcome.heal_step is not None:
            self.liveness_steps += outcome.steps - outcome.heal_step
        if outcome.state is not None:
            self.states.add(outcome.state)
        if outcome.violation is not None:
            self.violations += 1
            if len(self.found) < 10:
                self.found.append(Found(outcome.violation, schedule, seed, pct))


def exhaustive(
    config: SimConfig,
    bound: int,
    *,
    kinds: frozenset[str] = EXHAUSTIVE_KINDS,
    shard: tuple[int, int] = (0, 1),
    heal: str = "keep",
    free_zombies: int = 0,
) -> Iterator[tuple[Outcome, Schedule]]:
    """Every schedule with at most ``bound`` events, depth first (see the module
    docstring). ``shard=(i, n)``: only the subtrees whose first event is number ``i``
    modulo ``n`` (the empty schedule belongs to shard 0). Up to ``free_zombies`` second
    drivers' starts (``zombie`` events) do not count toward ``bound``: a zombie is the
    setting of most protocol bugs, and the events that make it one are what the bound
    should buy."""
    space = _Space(bound, free_zombies)
    root = Schedule((), heal)
    outcome, chooser = run_schedule(config, root, branch_kinds=kinds if space.deeper(()) else None)
    if shard[0] == 0:
        yield outcome, root
    first = space.children((), chooser)
    for i, events in enumerate(first):
        if i % shard[1] == shard[0]:
            yield from _subtree(config, events, space, kinds, heal)


@dataclass(frozen=True)
class _Space:
    """Which schedules the exhaustive search runs: at most ``bound`` events besides up to
    ``free_zombies`` zombie starts."""

    bound: int
    free_zombies: int

    def _counts(self, prefix: tuple[Event, ...]) -> tuple[int, int]:
        zombies = sum(1 for e in prefix if e.kind == "zombie")
        free = min(zombies, self.free_zombies)
        return len(prefix) - free, zombies

    def deeper(self, prefix: tuple[Event, ...]) -> bool:
        cost, zombies = self._counts(prefix)
        return cost < self.bound or zombies < self.free_zombies

    def children(
        self, prefix: tuple[Event, ...], chooser: ReplayChooser
    ) -> list[tuple[Event, ...]]:
        cost, zombies = self._counts(prefix)
        events = [e for b in chooser.branches for e in b.events]
        if cost >= self.bound:  # only a free zombie may still come
            events = (
                [e for e in events if e.kind == "zombie"] if zombies < self.free_zombies else []
            )
        return [(*prefix, e) for e in events]


def _subtree(
    config: SimConfig,
    events: tuple[Event, ...],
    space: _Space,
    kinds: frozenset[str],
    heal: str,
) -> Iterator[tuple[Outcome, Schedule]]:
    stack = [events]
    while stack:
        prefix = stack.pop()
        schedule = Schedule(prefix, heal)
        deeper = space.deeper(prefix)
        outcome, chooser = run_schedule(config, schedule, branch_kinds=kinds if deeper else None)
        yield outcome, schedule
        if outcome.violation is not None or not deeper:
            continue
        stack.extend(reversed(space.children(prefix, chooser)))


def minimise(
    config: SimConfig, schedule: Schedule, invariant: str, *, max_runs: int = 2000
) -> Schedule:
    """A 1-minimal sub-schedule that still violates ``invariant`` (delta debugging, then
    single removals until none keeps it failing). Only the events that fired are kept."""
    runs = [0]

    def fails(events: list[Event]) -> list[Event] | None:
        runs[0] += 1
        outcome, _ = run_schedule(config, Schedule(tuple(events), schedule.heal))
        v = outcome.violation
        if v is not None and v.invariant == invariant:
            return list(outcome.fired)
        return None

    events = fails(list(schedule.events))
    if events is None:
        return schedule  # not reproducible as a schedule: keep it as it was
    n = 2
    while len(events) >= 2 and runs[0] < max_runs:
        chunk = -(-len(events) // n)
        subsets = [events[i : i + chunk] for i in range(0, len(events), chunk)]
        for sub in subsets:
            rest = [e for e in events if e not in sub]
            kept = fails(rest)
            if kept is not None:
                events, n = kept, max(n - 1, 2)
                break
        else:
            if n >= len(events):
                break
            n = min(len(events), 2 * n)
    changed = True
    while changed and runs[0] < max_runs:
        changed = False
        for i in range(len(events)):
            kept = fails(events[:i] + events[i + 1 :])
            if kept is not None:
                events, changed = kept, True
                break
    return Schedule(tuple(events), schedule.heal)


def hunt(
    config: SimConfig,
    *,
    bound: int,
    seeds: int,
    more: int = 0,
    keep: int = 5,
    pct: bool = False,
) -> tuple[list[Found], Tally]:
    """Search for violations: every schedule of up to ``bound`` events (depth first, the
    empty schedule first), then the random walks of seeds ``0 .. seeds - 1`` (with
    ``pct``, the PCT runs of those seeds instead). Stops at the first violation, or, with
    ``more``, after ``more`` further seeds (or ``keep`` violations of the first one's
    invariant), so that there are several schedules to minimise. The violations found,
    first first, and what the search ran."""
    tally = Tally()
    found: list[Found] = []
    for outcome, schedule in exhaustive(config, bound):
        tally.add(outcome, schedule)
        if outcome.violation is not None:
            return [Found(outcome.violation, schedule)], tally
    run = run_pct if pct else run_seed
    stop = seeds
    for seed in range(seeds):
        if seed >= stop:
            break
        outcome, schedule = run(config, seed)
        tally.add(outcome, schedule, seed)
        v = outcome.violation
        if v is not None and (not found or v.invariant == found[0].violation.invariant):
            found.append(Found(v, schedule, seed, pct=pct))
            if len(found) == 1:
                stop = min(seeds, seed + 1 + more)
            if len(found) >= keep:
                break
    return found, tally


def shortest(config: SimConfig, found: list[Found]) -> tuple[Found, Schedule]:
    """Of ``found`` (violations of one invariant), the one whose minimised schedule is the
    shortest, and that schedule."""
    best: tuple[Found, Schedule] | None = None
    for f in found:
        small = minimise(config, f.schedule, f.violation.invariant)
        if best is None or len(small.events) < len(best[1].events):
            best = (f, small)
    assert best is not None
    return best


def describe(config: SimConfig, schedule: Schedule) -> list[str]:
    """The schedule's events with the step and the point each fired at (a replay)."""
    outcome, _ = run_schedule(config, schedule)
    lines = [
        f"  step {step:4d}: {event}  (where it stood: {op})" for step, event, op in outcome.fired_at
    ]
    if outcome.violation is not None:
        lines.append(f"  -> {outcome.violation}")
    return lines


# --- the exploration of `make sim` -----------------------------------------------------------

#: The small pipeline the deeper exhaustive search runs on: one partition of two records.
SMALL = SimConfig(partitions=1, per_partition=2)
#: The default pipeline with two poison records at errors.tolerance=all: (0, 1), whose
#: value the consumer kind refuses, and (1, 2), whose gt is null. Every epoch has rows to
#: deliver, whichever driver plans it.
DEAD_LETTERS = SimConfig(poison=((0, 1),), no_gt=((1, 2),), tolerance="all")
#: Poison rows at errors.tolerance=all with ``errors.deadLetter.retention`` of 20 ms (20
#: steps) and the owner's sweep after every commit: dead-letter files of committed bundles
#: are deleted within the run, and one a paused commit creates again must hold the same rows.
DEAD_LETTER_RETENTION = replace(DEAD_LETTERS, dead_letter_retention=0.02)
#: The same at errors.tolerance=none: the query stops at the first poison bundle until the
#: operator switches to all (the ``tolerate`` event, or the healthy driver's operator).
SWITCH = replace(DEAD_LETTERS, tolerance="none")
#: The small pipeline whose first record is poison: with one record an epoch (p1), epoch 0
#: is refused whole (its file written, nothing delivered); with two (p2), it is mixed.
SMALL_DEAD_LETTERS = replace(SMALL, poison=((0, 0),), tolerance="all")
#: The same at errors.tolerance=none.
SMALL_SWITCH = replace(SMALL_DEAD_LETTERS, tolerance="none")
#: The default pipeline with a fan-out record at errors.tolerance=all (two rows sharing its
#: gt, one refused), whose refused row depends on a consumer setting that changes between
#: query runs (``SimConfig.flip``): an attempt refuses the other row than the one an
#: earlier attempt's dead-letter file holds. No upgrade: an upgraded query computes other
#: values for both rows, which then pair with the file's neither by value nor by their
#: shared gt, and the commit stops for good (docs/bad-input.md E19, E23; the way out it
#: names, the table as it was, does not bring back the old query's values).
FANOUT = SimConfig(fanout=((0, 1),), flip=True, tolerance="all", max_upgrades=0)
#: A pipeline without the snapshot coordinator whose drivers prune the epoch log
#: (``state.epochsRetained=8``, a pruning step of 2) after each batch: one partition of 12
#: records, one an epoch, so that the first pruning is due after epoch 9. No upgrade (it
#: is the coordinator's ``recover(mode="replay")``).
PRUNING = SimConfig(
    partitions=1,
    per_partition=12,
    max_per_partition=(1,),
    coordinator=False,
    epochs_retained=8,
    max_upgrades=0,
)
#: The same, 22 records pruned at ``state.epochsRetained=1``: more epochs than the log
#: keeps at the end (``the epoch log stays bounded``: 20) unless the drivers prune.
LONG = replace(PRUNING, per_partition=22, epochs_retained=1)
#: Sparse output: the query filters out every record but the first (epochs 1 to 21 have
#: empty bundles); the barrier records empty bundles' epochs 16 at a time.
SPARSE = replace(LONG, dropped=tuple((0, o) for o in range(1, 22)))
#: A topic deleted and created again (the ``recreate`` event, once) on the small pipeline,
#: at ``failOnDataLoss=false``: a re-run of an epoch planned under the old id skips its
#: ranges, and the next epoch reads the new topic from its log start. Four keys, so that
#: every record has a key of its own and an epoch's rows do not depend on whether an
#: earlier one was read (its records lost or not).
RECREATED = replace(SMALL, keys=4, recreate=True, fail_on_data_loss=False)
#: The same at ``failOnDataLoss=true``: the query stops with ``DataLossError``.
RECREATED_FATAL = replace(RECREATED, fail_on_data_loss=True)
#: The default pipeline whose source sets ``state.epochsRetained=1``: the drivers' pruner
#: would be due after every batch, but the snapshot coordinator owns the pruning (its driver
#: record says so), and the pruner defers to it; the coordinator keeps as few epochs, so
#: its own pruning after an accepted snapshot runs.
COORDINATED = replace(SimConfig(), epochs_retained=1)
#: The pruning pipeline with a compaction unit of one epoch (``SimConfig.segment_epochs``):
#: the drivers compact each committed epoch but the newest into a segment, merge 4
#: segments of one size into one (of 4 epochs: the 12 epochs of a run never make the four
#: 4-epoch segments a 16-epoch merge needs), and delete the merged parts a compaction
#: later, while queries on new checkpoints replay from the floor through them.
#: Drivers take 1 and 2 records an epoch in turn: an epoch lost from the log and planned
#: again by the next driver differs from the one recorded after it.
COMPACTING = replace(PRUNING, segment_epochs=1, max_per_partition=(1, 2))
#: The pipelines whose source prunes (or would): without the coordinator, and with it.
PRUNED = (PRUNING, SPARSE, LONG, COORDINATED, COMPACTING)
#: The default pipeline read with ``readMode=driver``: a batch planned by the running query
#: run has no read task, so the barrier learns its epoch from the offset log and records
#: it; a batch run again after a restart is read by a read task, which records it.
DRIVER = replace(SimConfig(), read_mode="driver")
#: The same with the epoch log pruned by the drivers (batch records deleted below the
#: floor, and recorded again by a replay) and with sparse output.
DRIVER_PRUNED = replace(SPARSE, read_mode="driver")
#: The random walks' pipelines, taken in turn by seed (:func:`walk_config`).
WALK_CONFIGS = (
    SimConfig(),
    DEAD_LETTERS,
    SWITCH,
    *PRUNED,
    DRIVER,
    DRIVER_PRUNED,
    DEAD_LETTER_RETENTION,
)


def walk_config(seed: int, configs: tuple[SimConfig, ...] = WALK_CONFIGS) -> SimConfig:
    """The pipeline of the random walk of ``seed`` in ``make sim`` (and ``--replay``): the
    profile is ``seed % 3`` (:func:`~simulation.choosers.walk_for`), the pipeline
    ``seed // 3`` modulo the pipelines, so that every profile meets every pipeline."""
    return configs[(seed // len(PROFILES)) % len(configs)]


@dataclass(frozen=True)
class Plan:
    """What ``python -m simulation`` explores, in three phases: every schedule of up to
    ``small_bound`` events on the :data:`SMALL` pipeline; every schedule of up to ``bound``
    events on ``config``, on each of ``dead_letters`` (poison rows at errors.tolerance=all,
    and at none until the operator switches, on the default and the small pipeline; and a
    topic recreated) and on each of ``pruned`` (the epoch log pruned by the drivers, or
    deferred to the coordinator); then random walks over :data:`WALK_CONFIGS` (seeds from
    ``seed``), ``pct_share`` of the seeds run as PCT runs (:mod:`simulation.pct`), until
    ``seconds`` (or ``max_steps``) are spent. Workers take disjoint shares of each."""

    config: SimConfig = field(default_factory=SimConfig)
    small: SimConfig = SMALL
    dead_letters: tuple[SimConfig, ...] = (
        DEAD_LETTERS,
        SWITCH,
        SMALL_DEAD_LETTERS,
        SMALL_SWITCH,
        DEAD_LETTER_RETENTION,
        *(RECREATED, RECREATED_FATAL),  # not poison: a recreated topic, the same search
    )
    pruned: tuple[SimConfig, ...] = PRUNED
    #: The pipelines read with ``readMode=driver``.
    driver: tuple[SimConfig, ...] = (DRIVER, DRIVER_PRUNED)
    small_bound: int = 2
    bound: int = 1
    seconds: float = 570.0
    max_steps: int | None = None
    seed: int = 1
    workers: int = 2
    report_every: float = 10.0
    #: Violations (of distinct invariants) each worker minimises and prints.
    show: int = 3
    #: Only the one-event schedules of the default, the poison and the pruned pipelines,
    #: every one of them, whatever the time budget (``--quick``).
    quick: bool = False
    #: Zombie starts the exhaustive phases do not count toward their bounds.
    free_zombies: int = 0
    #: The share of the random-walk phase's seeds run as PCT runs (0: none; 0.5: every
    #: other seed).
    pct_share: float = 0.5

    def __post_init__(self) -> None:
        if not 0.0 <= self.pct_share <= 1.0:
            raise ValueError(f"pct_share: {self.pct_share!r}; expected a number from 0 to 1")


Message = tuple[str, object]
T = TypeVar("T")
#: A run, its seed (None: a fixed schedule) and whether the seed's run was a PCT run.
Run = tuple[Outcome, Schedule, int | None, bool]
#: When each phase must end, as a share of the time budget (cumulative): the exhaustive
#: search of the small pipeline takes about 3 minutes of 2 idle cores, the one-event
#: search of the others (the pruned pipelines' runs are long) about 2.5; on a busy machine
#: they are cut, and the output says so.
PHASE_SHARES = (0.40, 0.70)


class _Worker:
    """One worker process's exploration and its messages to the parent."""

    def __init__(self, plan: Plan, index: int, out: Queue[Message]) -> None:
        self.plan = plan
        self.index = index
        self.out = out
        self.deadline = time.monotonic() + (float("inf") if plan.quick else plan.seconds)
        self.step_cap = None if plan.max_steps is None else plan.max_steps // plan.workers
        self.tally = Tally()
        self.sent = (0, 0, 0, 0)
        self.states_sent: set[str] = set()
        self.last_send = time.monotonic()
        self.reported: set[str] = set()
        #: The random-walk phase's runs by searcher (``walks``, ``PCT``): what PCT adds.
        self.searchers = {"walks": Tally(), "PCT": Tally()}

    def run(self) -> None:
        """The three phases, each until it is complete or its share of the time is spent
        (the shares are cumulative: time a phase leaves goes to the next)."""
        plan, shard = self.plan, (self.index, self.plan.workers)

        def one(config: SimConfig, bound: int) -> Iterator[tuple[SimConfig, Run]]:
            for outcome, schedule in exhaustive(
                config, bound, shard=shard, free_zombies=plan.free_zombies
            ):
                yield config, (outcome, schedule, None, False)

        def every(configs: tuple[SimConfig, ...], bound: int) -> Iterator[tuple[SimConfig, Run]]:
            # In turn, so that a phase its time limit cuts (a busy machine) has run some of
            # every pipeline's schedules.
            return in_turn([one(config, bound) for config in configs])

        phases: list[tuple[str, float, Iterator[tuple[SimConfig, Run]]]] = [
            (
                f"every schedule of up to {plan.small_bound} events, one partition of two records",
                PHASE_SHARES[0],
                every((plan.small,), plan.small_bound),
            ),
            (
                f"every schedule of up to {plan.bound} events, the default pipeline (then "
                "with poison rows at errors.tolerance=all and at none, on it and on the small "
                "one; then with the epoch log pruned, and with pruning deferred to the "
                "coordinator; then read with readMode=driver)",
                PHASE_SHARES[1],
                every((plan.config, *plan.dead_letters, *plan.pruned, *plan.driver), plan.bound),
            ),
            (
                f"random walks from seed {plan.seed}, over {len(WALK_CONFIGS)} pipelines in "
                "turn (the default one, with poison rows at all and at none, pruned; "
                f"{plan.pct_share:.0%} of the seeds PCT runs)",
                1.0,
                _walks(plan.seed + self.index, plan.workers, plan.pct_share),
            ),
        ]
        if plan.quick:
            name, _, runs = phases[1]
            phases = [(name, float("inf"), runs)]
        started = time.monotonic()
        for name, share, runs in phases:
            until = started + share * plan.seconds
            before = self.tally.schedules
            complete = True
            for config, (outcome, schedule, seed, pct) in runs:
                self.record(config, outcome, schedule, seed, pct)
                if self.done() or time.monotonic() >= until:
                    complete = False
                    break
            self.flush(force=True)
            count = self.tally.schedules - before
            if share == float("inf"):
                state = "complete" if complete else "cut (not complete)"
            elif share >= 1.0:
                state = "until the time limit"
            else:
                state = "complete" if complete else "cut at its time limit (not complete)"
            self.out.put(("phase", f"worker {self.index}: {name}: {count:,} schedules, {state}"))
            for searcher, t in self.searchers.items():
                if t.schedules:
                    self.out.put(("searcher", (searcher, t.schedules, t.steps, tuple(t.states))))
                    self.searchers[searcher] = Tally()
            if self.done():
                break
        self.out.put(("done", self.index))

    def done(self) -> bool:
        cap = self.step_cap
        return time.monotonic() >= self.deadline or (cap is not None and self.tally.steps >= cap)

    def record(
        self,
        config: SimConfig,
        outcome: Outcome,
        schedule: Schedule,
        seed: int | None,
        pct: bool = False,
    ) -> None:
        self.tally.add(outcome, schedule, seed, pct=pct)
        if seed is not None:
            self.searchers["PCT" if pct else "walks"].add(outcome, schedule, seed, pct=pct)
        v = outcome.violation
        if (
            v is not None
            and v.invariant not in self.reported
            and len(self.reported) < self.plan.show
        ):
            self.reported.add(v.invariant)
            self.out.put(("violation", report(config, Found(v, schedule, seed, pct))))
        self.flush()

    def flush(self, *, force: bool = False) -> None:
        now = time.monotonic()
        if not force and now - self.last_send < 1.0:
            return
        t = self.tally
        now_counts = (t.steps, t.schedules, t.violations, t.liveness_steps)
        self.out.put(("count", tuple(a - b for a, b in zip(now_counts, self.sent, strict=True))))
        self.out.put(("states", tuple(t.states - self.states_sent)))
        self.states_sent |= t.states
        self.sent, self.last_send = now_counts, now


def in_turn(runs: list[Iterator[T]]) -> Iterator[T]:
    """The items of ``runs`` one from each in turn, skipping those that ended, until all
    ended (every item of each, in its own order)."""
    pending = list(runs)
    while pending:
        for run in list(pending):
            try:
                item = next(run)
            except StopIteration:
                pending.remove(run)
                continue
            yield item


def _walks(first: int, stride: int, pct_share: float) -> Iterator[tuple[SimConfig, Run]]:
    """Seeds ``first``, ``first + stride``, ...: each one's random walk, or its PCT run for
    ``pct_share`` of them, spread evenly (0.5: every other seed)."""
    seed, walks = first, 0
    while True:
        config = walk_config(seed)
        pct = int((walks + 1) * pct_share) > int(walks * pct_share)
        outcome, schedule = run_pct(config, seed) if pct else run_seed(config, seed)
        yield config, (outcome, schedule, seed, pct)
        seed += stride
        walks += 1


def _work(plan: Plan, index: int, out: Queue[Message]) -> None:
    quiet()
    _Worker(plan, index, out).run()


def report(config: SimConfig, found: Found, small: Schedule | None = None) -> str:
    """A violation, its minimised schedule (``small``, else minimised here), and how to
    run it again."""
    if small is None:
        small = minimise(config, found.schedule, found.violation.invariant)
    lines = [f"VIOLATION {found.violation}"]
    if found.seed is not None:
        how = " --pct" if found.pct else ""
        what = "PCT run of seed" if found.pct else "seed"
        lines.append(
            f"  {what} {found.seed}: python -m simulation --seed {found.seed}{how} --replay"
        )
    lines.append(f"  found with {len(found.schedule.events)} event(s): {found.schedule}")
    lines.append(f"  shortest schedule ({len(small.events)} event(s)): {small}")
    lines.append(f"  python -m simulation --schedule '{schedule_json(small, config)}'")
    lines.extend(describe(config, small))
    return "\n".join(lines)


def schedule_json(schedule: Schedule, config: SimConfig | None = None) -> str:
    """The schedule as ``--schedule`` takes it (with the pipeline, if not the default)."""
    raw: dict[str, object] = {
        "events": [e.to_json() for e in schedule.events],
        "heal": schedule.heal,
    }
    if config is not None and config != SimConfig():
        raw["config"] = config.to_json()
    return json.dumps(raw)


def quiet() -> None:
    """The product logs every decision; thousands of runs would drown the output."""
    os.environ["GTBARRIER_LOG_LEVEL"] = "OFF"
    os.environ.pop("GTBARRIER_FAULT", None)
    os.environ.pop("GTBARRIER_METRICS", None)
    logging.disable(logging.CRITICAL)


def explore(plan: Plan, emit: Callable[[str], None] = print) -> Tally:
    """Run ``plan`` on ``plan.workers`` processes, printing progress every
    ``report_every`` seconds and each violation found (minimised)."""
    ctx = mp.get_context("fork")
    out: Queue[Message] = ctx.Queue()
    procs = [ctx.Process(target=_work, args=(plan, i, out)) for i in range(plan.workers)]
    limit = "" if plan.max_steps is None else f" or {plan.max_steps:,} steps"
    emit(f"exploring on {plan.workers} worker process(es) for {plan.seconds:.0f} s{limit}")
    started = time.monotonic()
    for p in procs:
        p.start()
    total = Tally()
    searchers: dict[str, Tally] = {}
    running = plan.workers
    next_report = started + plan.report_every
    while running:
        try:
            kind, payload = out.get(timeout=0.5)
        except Empty:
            kind, payload = "", None
        if kind == "count":
            assert isinstance(payload, tuple)
            total.steps += payload[0]
            total.schedules += payload[1]
            total.violations += payload[2]
            total.liveness_steps += payload[3]
        elif kind == "states":
            assert isinstance(payload, tuple)
            total.states.update(payload)
        elif kind == "searcher":
            assert isinstance(payload, tuple)
            name, schedules, steps, states = payload
            t = searchers.setdefault(name, Tally())
            t.schedules, t.steps = t.schedules + schedules, t.steps + steps
            t.states.update(states)
        elif kind in ("violation", "phase"):
            emit(str(payload))
        elif kind == "done":
            running -= 1
        now = time.monotonic()
        if now >= next_report:
            elapsed = now - started
            emit(
                f"[{elapsed:4.0f} s] {total.steps:,} steps ({total.steps / elapsed:,.0f}/s), "
                f"{total.schedules:,} schedules, {total.violations} violations"
            )
            next_report += plan.report_every
    for p in procs:
        p.join()
    elapsed = time.monotonic() - started
    emit(
        f"done in {elapsed:.0f} s: {total.steps:,} steps, "
        f"{total.steps / max(elapsed, 1e-9):,.0f} steps/s on {plan.workers} worker(s)"
    )
    emit(
        f"of which liveness steps (the healthy driver alone): {total.liveness_steps:,}; "
        f"fault steps: {total.steps - total.liveness_steps:,}; distinct states the faults "
        f"left: {len(total.states):,}"
    )
    for name, t in sorted(searchers.items(), reverse=True):
        emit(
            f"random-walk phase, {name}: {t.schedules:,} schedules, {t.steps:,} steps, "
            f"{len(t.states):,} distinct states"
        )
    return total
