"""``python -m simulation``: explore the protocol's schedules (``make sim``), or replay one.

    python -m simulation                          # the deep exploration (about 10 minutes)
    python -m simulation --seconds 60             # a shorter one
    python -m simulation --seed 4711 --replay     # one random walk again, step by step
                                                  # (on its pipeline: walk_config(seed))
    python -m simulation --seed 4711 --pct --replay   # the seed's PCT run (simulation.pct)
    python -m simulation --schedule '{"events": [["p1", 12, "crash", "keep"]], "heal": "keep"}'

The exploration prints its progress every 10 s and every violation it finds (minimised,
with the command that replays it); its last three lines are ``steps explored: N``,
``schedules: N`` and ``violations: N``, and it exits with 1 if there was a violation.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import NoReturn

from simulation.explore import (
    Found,
    Plan,
    explore,
    quiet,
    report,
    run_pct,
    run_schedule,
    run_seed,
    walk_config,
)
from simulation.query import SimConfig
from simulation.scheduler import Event
from simulation.world import Outcome, Schedule


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulation", description=__doc__)
    parser.add_argument("--seconds", type=float, default=Plan.seconds, help="time budget")
    parser.add_argument("--steps", type=int, default=None, help="stop after about N steps")
    parser.add_argument("--workers", type=int, default=Plan.workers, help="processes")
    parser.add_argument(
        "--small-bound",
        type=int,
        default=Plan.small_bound,
        help="events per schedule of the exhaustive search on the small pipeline",
    )
    parser.add_argument(
        "--bound",
        type=int,
        default=Plan.bound,
        help="events per schedule of the exhaustive search on the default pipeline",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="every one-event schedule of the default, the poison and the pruned pipelines, "
        "to the end",
    )
    parser.add_argument(
        "--free-zombies",
        type=int,
        default=Plan.free_zombies,
        help="zombie starts the exhaustive phases do not count toward their bounds",
    )
    parser.add_argument("--seed", type=int, default=Plan.seed, help="first random-walk seed")
    parser.add_argument("--replay", action="store_true", help="run --seed's walk, traced")
    parser.add_argument(
        "--pct",
        action="store_true",
        help="with --replay: run --seed's PCT run (randomized priorities) instead of its walk",
    )
    parser.add_argument(
        "--pct-share",
        type=_share,
        default=Plan.pct_share,
        help="the share of the random-walk phase's seeds run as PCT runs (0 to 1)",
    )
    parser.add_argument("--schedule", help="run this schedule (JSON), traced")
    args = parser.parse_args(argv)
    if args.pct and not args.replay:
        parser.error("--pct: only with --replay (the exploration's share is --pct-share)")
    quiet()
    if args.schedule is not None:
        raw = json.loads(args.schedule)
        config = SimConfig.from_json(raw.get("config", {}))
        schedule = Schedule(
            tuple(Event.from_json(e) for e in raw["events"]), str(raw.get("heal", "keep"))
        )
        outcome, _ = run_schedule(config, schedule, trace=True)
        return show(config, outcome, schedule, None)
    if args.replay:
        config = walk_config(args.seed)
        run = run_pct if args.pct else run_seed
        outcome, schedule = run(config, args.seed, trace=True)
        return show(config, outcome, schedule, args.seed, pct=args.pct)
    plan = Plan(
        small_bound=args.small_bound,
        bound=args.bound,
        seconds=args.seconds,
        max_steps=args.steps,
        seed=args.seed,
        workers=args.workers,
        quick=args.quick,
        free_zombies=args.free_zombies,
        pct_share=args.pct_share,
    )
    total = explore(plan)
    print(f"steps explored: {total.steps}")
    print(f"schedules: {total.schedules}")
    print(f"violations: {total.violations}")
    return 1 if total.violations else 0


def _share(raw: str) -> float:
    """``--pct-share``'s value: a number from 0 to 1."""
    try:
        share = float(raw)
    except ValueError:
        share = -1.0
    if not 0.0 <= share <= 1.0:
        raise argparse.ArgumentTypeError(f"{raw!r}; expected a number from 0 to 1")
    return share


def show(
    config: SimConfig,
    outcome: Outcome,
    schedule: Schedule,
    seed: int | None,
    *,
    pct: bool = False,
) -> int:
    """Print a run's trace, step by step, and its violation (minimised), if any."""
    for r in outcome.trace:
        events = "  <- " + ", ".join(str(e) for e in r.events) if r.events else ""
        fault = f" [{r.fault}]" if r.fault else ""
        print(f"{r.step:5d} {r.actor}@{r.index} {r.op}{fault}{events}")
    print(f"schedule ({len(schedule.events)} event(s)): {schedule}")
    if outcome.violation is None:
        print("no violation")
        return 0
    print(report(config, Found(outcome.violation, schedule, seed, pct)))
    return 1


def exit_now(code: int) -> NoReturn:
    """Flush the output and end the process with ``code``, without the interpreter's
    finalization: there, Arrow's global thread pools (which the simulated sink's table
    operations start) sometimes abort the process (SIGABRT, "terminate called without
    an active exception") after every line was written, which would turn a verdict of
    no violation into a crash. The simulation holds no file, socket or buffer that
    finalization would still have to close."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
