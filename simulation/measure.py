"""``python -m simulation.measure``: the simulator's own costs, measured on one process.

* throughput of the random walks (steps per second);
* stateless re-execution: what one schedule of the exhaustive search costs, replaying its
  prefix from the empty store;
* state copying: what the cheapest copy of a simulator process costs (``fork`` and
  ``waitpid`` of a child that exits at once), i.e. the least a search that forks at a
  branch point instead of replaying would pay per branch;
* with ``--profile``, where the time goes (cProfile, by own time).

The README's figures come from here.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import time

from simulation.explore import exhaustive, quiet, run_schedule, run_seed
from simulation.query import SimConfig
from simulation.world import Schedule


def walks(config: SimConfig, seeds: int) -> tuple[int, float]:
    """Steps of ``seeds`` random walks, and the seconds they took."""
    started = time.perf_counter()
    steps = sum(run_seed(config, seed)[0].steps for seed in range(seeds))
    return steps, time.perf_counter() - started


def replays(config: SimConfig) -> tuple[int, int, float]:
    """Schedules and steps of the exhaustive search of one-event schedules, and seconds."""
    started = time.perf_counter()
    schedules = steps = 0
    for outcome, _ in exhaustive(config, 1):
        schedules, steps = schedules + 1, steps + outcome.steps
    return schedules, steps, time.perf_counter() - started


def forks(n: int) -> float:
    """Seconds per fork of this process (the child exits at once) and wait for it."""
    started = time.perf_counter()
    for _ in range(n):
        pid = os.fork()
        if pid == 0:
            os._exit(0)
        os.waitpid(pid, 0)
    return (time.perf_counter() - started) / n


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m simulation.measure", description=__doc__)
    parser.add_argument("--seeds", type=int, default=2000)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    quiet()
    config = SimConfig()
    for _ in range(20):  # imports, caches: not part of any figure
        run_schedule(config, Schedule())
    steps, seconds = walks(config, args.seeds)
    print(
        f"random walks: {args.seeds} schedules, {steps} steps in {seconds:.1f} s: "
        f"{steps / seconds:,.0f} steps/s, {seconds / args.seeds * 1e3:.2f} ms per schedule"
    )
    schedules, steps, seconds = replays(config)
    print(
        f"stateless re-execution (bound 1): {schedules} schedules, {steps} steps in "
        f"{seconds:.1f} s: {seconds / schedules * 1e3:.2f} ms per schedule, "
        f"{seconds / steps * 1e6:.0f} us per step"
    )
    print(f"state copying: one fork + wait costs {forks(200) * 1e3:.2f} ms")
    if args.profile:
        profiler = cProfile.Profile()
        profiler.runcall(walks, config, min(args.seeds, 1000))
        pstats.Stats(profiler).sort_stats("tottime").print_stats(15)


if __name__ == "__main__":
    main()
