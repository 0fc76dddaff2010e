"""Exploring schedules: replay, random walks, the bounded exhaustive search, minimisation,
and the two-process exploration ``make sim`` runs.

* :func:`run_schedule` replays a :class:`~simulation.world.Schedule` (stateless
  re-execution: every run starts from the empty store);
* :func:`run_seed` runs the random walk of one seed (``python -m simulation --seed N
  --replay`` runs it again, step for step);
* :func:`exhaustive` runs every schedule with at most ``bound`` events, depth first: the
  children of a schedule add one event at a step after its last one, chosen among the
  :func:`~simulation.choosers.alternatives` of that step;
* :func:`minimise` shrinks a failing schedule by delta debugging until removing any one
  of its events makes the violation go away;
* :func:`explore` splits the exhaustive search and the random walks between worker
  processes and prints their progress.
"""

from __future__ import annotations

import multiprocessing as mp
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from queue import Empty

from simulation.choosers import EXHAUSTIVE_KINDS, RandomChooser, RandomWalk, ReplayChooser
from simulation.invariants import Violation
from simulation.scheduler import Event
from simulation.world import Outcome, Schedule, SimConfig, World


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
    config: SimConfig, seed: int, walk: RandomWalk, *, trace: bool = False
) -> tuple[Outcome, Schedule]:
    """The random walk of ``seed``, and the schedule of the events that fired in it."""
    chooser = RandomChooser(seed, walk, expected_steps(config))
    outcome = World(config, chooser, heal=chooser.heal, trace=trace).run()
    return outcome, Schedule(tuple(outcome.fired), chooser.heal)


@dataclass
class Found:
    """A violation and the schedule (and seed, for a random walk) that produced it."""

    violation: Violation
    schedule: Schedule
    seed: int | None = None


@dataclass
class Tally:
    """Counts of an exploration."""

    steps: int = 0
    schedules: int = 0
    violations: int = 0
    found: list[Found] = field(default_factory=list)

    def add(self, outcome: Outcome, schedule: Schedule, seed: int | None = None) -> None:
        self.steps += outcome.steps
        self.schedules += 1
        if outcome.violation is not None:
            self.violations += 1
            self.found.append(Found(outcome.violation, schedule, seed))


def exhaustive(
    config: SimConfig,
    bound: int,
    *,
    kinds: frozenset[str] = EXHAUSTIVE_KINDS,
    shard: tuple[int, int] = (0, 1),
    heal: str = "keep",
) -> Iterator[tuple[Outcome, Schedule]]:
    """Every schedule with at most ``bound`` events, depth first (see the module
    docstring). ``shard=(i, n)``: only the subtrees whose first event is number ``i``
    modulo ``n`` (the empty schedule belongs to shard 0)."""
    root = Schedule((), heal)
    outcome, chooser = run_schedule(config, root, branch_kinds=kinds if bound else None)
    if shard[0] == 0:
        yield outcome, root
    first = [e for b in chooser.branches for e in b.events]
    for i, event in enumerate(first):
        if i % shard[1] == shard[0]:
            yield from _subtree(config, (event,), bound, kinds, heal)


def _subtree(
    config: SimConfig, events: tuple[Event, ...], bound: int, kinds: frozenset[str], heal: str
) -> Iterator[tuple[Outcome, Schedule]]:
    stack = [events]
    while stack:
        prefix = stack.pop()
        schedule = Schedule(prefix, heal)
        deeper = len(prefix) < bound
        outcome, chooser = run_schedule(config, schedule, branch_kinds=kinds if deeper else None)
        yield outcome, schedule
        if outcome.violation is not None or not deeper:
            continue
        children = [(*prefix, e) for b in chooser.branches for e in b.events]
        stack.extend(reversed(children))


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


@dataclass(frozen=True)
class Plan:
    """What ``python -m simulation`` explores."""

    config: SimConfig = field(default_factory=SimConfig)
    walk: RandomWalk = field(default_factory=RandomWalk)
    bound: int = 1
    seconds: float = 570.0
    max_steps: int | None = None
    seed: int = 1
    workers: int = 2
    report_every: float = 10.0
    show: int = 3


def _worker(plan: Plan, index: int, out: mp.Queue[tuple[str, object]]) -> None:
    """One worker: its shard of the exhaustive search, then its seeds, until the deadline;
    counts go to ``out`` about every second, each new kind of violation minimised."""
    deadline = time.monotonic() + plan.seconds
    tally = Tally()
    sent = Tally()
    reported: set[str] = set()
    last_send = time.monotonic()
    step_cap = None if plan.max_steps is None else plan.max_steps // plan.workers

    def flush(force: bool = False) -> None:
        nonlocal last_send
        now = time.monotonic()
        if force or now - last_send >= 1.0:
            out.put(
                (
                    "count",
                    (
                        tally.steps - sent.steps,
                        tally.schedules - sent.schedules,
                        tally.violations - sent.violations,
                    ),
                )
            )
            sent.steps, sent.schedules, sent.violations = (
                tally.steps,
                tally.schedules,
                tally.violations,
            )
            last_send = now

    def record(outcome: Outcome, schedule: Schedule, seed: int | None) -> None:
        tally.add(outcome, schedule, seed)
        v = outcome.violation
        if v is not None and v.invariant not in reported and len(reported) < plan.show:
            reported.add(v.invariant)
            out.put(("violation", report(plan.config, Found(v, schedule, seed))))
        flush()

    def done() -> bool:
        return time.monotonic() >= deadline or (step_cap is not None and tally.steps >= step_cap)

    for outcome, schedule in exhaustive(plan.config, plan.bound, shard=(index, plan.workers)):
        record(outcome, schedule, None)
        if done():
            break
    seed = plan.seed + index
    while not done():
        outcome, schedule = run_seed(plan.config, seed, plan.walk)
        record(outcome, schedule, seed)
        seed += plan.workers
    flush(force=True)
    out.put(("done", index))


def report(config: SimConfig, found: Found) -> str:
    """A violation, its minimised schedule, and how to run it again."""
    small = minimise(config, found.schedule, found.violation.invariant)
    lines = [f"VIOLATION {found.violation}"]
    if found.seed is not None:
        lines.append(f"  seed {found.seed}: python -m simulation --seed {found.seed} --replay")
    lines.append(f"  found with {len(found.schedule.events)} event(s): {found.schedule}")
    lines.append(f"  shortest schedule ({len(small.events)} event(s)): {small}")
    lines.append(f"  python -m simulation --schedule '{schedule_json(small)}'")
    lines.extend(describe(config, small))
    return "\n".join(lines)


def schedule_json(schedule: Schedule) -> str:
    import json

    return json.dumps({"events": [e.to_json() for e in schedule.events], "heal": schedule.heal})


def explore(plan: Plan, emit: Callable[[str], None] = print) -> Tally:
    """Run ``plan`` on ``plan.workers`` processes; progress every ``report_every`` s."""
    ctx = mp.get_context("fork")
    out: mp.Queue[tuple[str, object]] = ctx.Queue()
    procs = [ctx.Process(target=_worker, args=(plan, i, out)) for i in range(plan.workers)]
    emit(
        f"exploring: bound {plan.bound} exhaustively, then random walks from seed {plan.seed}; "
        f"{plan.workers} workers, {plan.seconds:.0f} s"
        + ("" if plan.max_steps is None else f" or {plan.max_steps:,} steps")
    )
    started = time.monotonic()
    for p in procs:
        p.start()
    total = Tally()
    running = plan.workers
    next_report = started + plan.report_every
    while running:
        try:
            kind, payload = out.get(timeout=0.5)
        except Empty:
            kind, payload = "", None
        if kind == "count":
            steps, schedules, violations = payload  # type: ignore[misc]
            total.steps += steps
            total.schedules += schedules
            total.violations += violations
        elif kind == "violation":
            emit(str(payload))
        elif kind == "done":
            running -= 1
        now = time.monotonic()
        if now >= next_report:
            elapsed = now - started
            emit(
                f"[{elapsed:5.0f} s] {total.steps:,} steps ({total.steps / elapsed:,.0f}/s), "
                f"{total.schedules:,} schedules, {total.violations} violations"
            )
            next_report += plan.report_every
    for p in procs:
        p.join()
    elapsed = time.monotonic() - started
    emit(
        f"done in {elapsed:.0f} s: {total.steps / max(elapsed, 1e-9):,.0f} steps/s "
        f"on {plan.workers} workers"
    )
    return total
