"""Does PCT help? Two measurements of PCT runs (:mod:`simulation.pct`) against the random
walks, printed as tables (a benchmark, not a test: its figures depend on the machine).

    python -m simulation.pct_bench states --seconds 60     # distinct states in equal time
    python -m simulation.pct_bench mutants --seeds 600     # seeds to find known bugs

``states``: random walks and PCT runs, alternated seed by seed over the pipelines of
``make sim`` (:func:`~simulation.explore.walk_config`), each until it has used
``--seconds`` of CPU: schedules, steps, and the distinct abstract states the faults left
(:meth:`~simulation.world.World.abstract_state`), each searcher's own and the ones the
other never reached.

``mutants``: the product with one known bug put back (:data:`MUTANTS`, bugs that need a
second driver and the two drivers interleaved in one order at two points), searched by
seeds ``0 .. --seeds - 1`` of each searcher on the default pipeline: the first seed that
finds it, the steps run until then, and how many of the seeds find it (the rate is what
says how long a search needs; the first seed is luck). Deterministic: the same seeds give
the same table on any machine.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from simulation import mutants
from simulation.explore import quiet, run_pct, run_seed, walk_config
from simulation.query import SimConfig
from simulation.world import Outcome, Schedule

Searcher = Callable[[SimConfig, int], tuple[Outcome, Schedule]]
#: The two searchers compared: a seed's random walk, and its PCT run.
SEARCHERS: dict[str, Searcher] = {"walks": run_seed, "PCT": run_pct}


#: name -> (the mutation, the invariant it violates).
#: Bugs that need a second driver and the two drivers interleaved in one order at two
#: points (shortest known schedules: a zombie, p2 run, then p1 again; a zombie, p2
#: staging, p1's cleanup between p2's staging and commit; an upgrade and three or four
#: preemptions and faults around it).
MUTANTS: dict[str, tuple[Callable[[], contextlib.AbstractContextManager[None]], str]] = {
    "5 stale remembered state": (
        mutants.STALE_REMEMBERED_STATE.applied,
        "GT_last never moves back",
    ),
    "3 cleanup without the generation rule": (
        mutants.CLEANUP_WITHOUT_THE_GENERATION_RULE.applied,
        "in-flight parts kept",
    ),
    "2 snapshot accepted into another generation": (
        mutants.SNAPSHOT_INTO_ANOTHER_GENERATION.applied,
        "liveness",  # the healthy driver finds no usable snapshot
    ),
}


@dataclass
class Hunt:
    """One searcher's seeds against one mutation."""

    seeds: int = 0
    steps: int = 0
    hits: int = 0
    first: int | None = None
    steps_to_first: int | None = None
    seconds: float = 0.0


def hunt_mutant(
    name: str, searcher: Searcher, seeds: range, config: SimConfig | None = None
) -> Hunt:
    """Run ``searcher``'s seeds with mutation ``name`` in place on ``config`` (by
    default, the default pipeline); count those whose run violates the mutation's
    invariant."""
    config = config or SimConfig()
    mutate, invariant = MUTANTS[name]
    result = Hunt()
    started = time.process_time()
    with mutate():
        for seed in seeds:
            outcome, _ = searcher(config, seed)
            result.seeds += 1
            result.steps += outcome.steps
            v = outcome.violation
            if v is not None and v.invariant == invariant:
                result.hits += 1
                if result.first is None:
                    result.first, result.steps_to_first = seed, result.steps
    result.seconds = time.process_time() - started
    return result


@dataclass
class Coverage:
    """One searcher's runs in the ``states`` measurement."""

    schedules: int = 0
    steps: int = 0
    seconds: float = 0.0
    states: set[str] = field(default_factory=set)


def coverage(seconds: float, first_seed: int = 1) -> dict[str, Coverage]:
    """Random walks and PCT runs alternated seed by seed (the same seeds, the same
    pipelines), each until it has used ``seconds`` of CPU."""
    out = {name: Coverage() for name in SEARCHERS}
    seed = first_seed
    while any(c.seconds < seconds for c in out.values()):
        config = walk_config(seed)
        for name, searcher in SEARCHERS.items():
            c = out[name]
            if c.seconds >= seconds:
                continue
            started = time.process_time()
            outcome, _ = searcher(config, seed)
            c.seconds += time.process_time() - started
            c.schedules += 1
            c.steps += outcome.steps
            if outcome.state is not None:
                c.states.add(outcome.state)
        seed += 1
    return out


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min), {five:.1f} (5 min)"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m simulation.pct_bench", description=__doc__)
    sub = parser.add_subparsers(dest="what", required=True)
    states = sub.add_parser("states", help="distinct states in equal CPU time")
    states.add_argument("--seconds", type=float, default=60.0, help="CPU seconds each")
    mutants = sub.add_parser("mutants", help="seeds each searcher needs to find known bugs")
    mutants.add_argument("--seeds", type=int, default=600, help="seeds per searcher and bug")
    args = parser.parse_args(argv)
    quiet()
    if args.what == "states":
        if args.seconds <= 0:
            parser.error(f"--seconds: {args.seconds}; expected a positive number")
        print(f"{_load()} at the start")
        found = coverage(args.seconds)
        print("| searcher | schedules | steps | CPU s | distinct states | reached only by it |")
        print("|---|---|---|---|---|---|")
        for name, c in found.items():
            others = set().union(*(o.states for n, o in found.items() if n != name))
            print(
                f"| {name} | {c.schedules:,} | {c.steps:,} | {c.seconds:.0f} | "
                f"{len(c.states):,} | {len(c.states - others):,} |"
            )
        print(f"{_load()} at the end")
        return 0
    if args.seeds <= 0:
        parser.error(f"--seeds: {args.seeds}; expected a positive number")
    print(f"{_load()} at the start; seeds 0 to {args.seeds - 1}, the default pipeline")
    print("| mutation | searcher | first seed | steps until it | seeds finding it | CPU s |")
    print("|---|---|---|---|---|---|")
    for name in MUTANTS:
        for searcher_name, searcher in SEARCHERS.items():
            h = hunt_mutant(name, searcher, range(args.seeds))
            first = "none" if h.first is None else str(h.first)
            until = "-" if h.steps_to_first is None else f"{h.steps_to_first:,}"
            print(
                f"| {name} | {searcher_name} | {first} | {until} | "
                f"{h.hits} of {h.seeds} | {h.seconds:.0f} |"
            )
    print(f"{_load()} at the end")
    return 0


if __name__ == "__main__":
    from simulation.__main__ import exit_now

    exit_now(main())
