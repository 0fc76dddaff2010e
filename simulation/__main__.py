"""``python -m simulation``: explore the protocol's schedules (``make sim``), or replay one.

    python -m simulation                          # the deep exploration (about 10 minutes)
    python -m simulation --seconds 60 --bound 1   # a shorter one
    python -m simulation --seed 4711 --replay     # one random walk again, step by step
    python -m simulation --schedule '{"events": [["p1", 12, "crash", "keep"]], "heal": "keep"}'

The exploration's last three lines are ``steps explored: N``, ``schedules: N`` and
``violations: N``; it exits with 1 if there was a violation.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from simulation.choosers import RandomWalk
from simulation.explore import Found, Plan, explore, report, run_schedule, run_seed
from simulation.scheduler import Event
from simulation.world import Outcome, Schedule, SimConfig


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m simulation", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--seconds", type=float, default=Plan.seconds, help="time budget")
    parser.add_argument("--steps", type=int, default=None, help="stop after this many steps")
    parser.add_argument("--workers", type=int, default=Plan.workers)
    parser.add_argument("--bound", type=int, default=Plan.bound, help="events, exhaustively")
    parser.add_argument("--seed", type=int, default=Plan.seed, help="first random-walk seed")
    parser.add_argument("--replay", action="store_true", help="run --seed's walk, with a trace")
    parser.add_argument("--schedule", help="run this schedule (JSON), with a trace")
    args = parser.parse_args(argv)
    quiet()
    config = SimConfig()
    if args.schedule is not None:
        raw = json.loads(args.schedule)
        schedule = Schedule(
            tuple(Event.from_json(e) for e in raw["events"]), str(raw.get("heal", "keep"))
        )
        outcome, _ = run_schedule(config, schedule, trace=True)
        return show(config, outcome, schedule, None)
    if args.replay:
        outcome, schedule = run_seed(config, args.seed, RandomWalk(), trace=True)
        return show(config, outcome, schedule, args.seed)
    plan = Plan(
        config=config,
        bound=args.bound,
        seconds=args.seconds,
        max_steps=args.steps,
        seed=args.seed,
        workers=args.workers,
    )
    total = explore(plan)
    print(f"steps explored: {total.steps}")
    print(f"schedules: {total.schedules}")
    print(f"violations: {total.violations}")
    return 1 if total.violations else 0


def show(config: SimConfig, outcome: Outcome, schedule: Schedule, seed: int | None) -> int:
    """Print a run's trace and its violation (minimised), if any."""
    for r in outcome.trace:
        events = "  <- " + ", ".join(str(e) for e in r.events) if r.events else ""
        fault = f" [{r.fault}]" if r.fault else ""
        print(f"{r.step:5d} {r.actor}@{r.index} {r.op}{fault}{events}")
    print(f"schedule ({len(schedule.events)} event(s)): {schedule}")
    if outcome.violation is None:
        print("no violation")
        return 0
    print(report(config, Found(outcome.violation, schedule, seed)))
    return 1


def quiet() -> None:
    """The product logs every decision; thousands of runs would drown the output."""
    os.environ["GTBARRIER_LOG_LEVEL"] = "OFF"
    os.environ.pop("GTBARRIER_FAULT", None)
    os.environ.pop("GTBARRIER_METRICS", None)
    logging.disable(logging.CRITICAL)


if __name__ == "__main__":
    sys.exit(main())
