"""``python -m integration_tests.chaos`` (``make chaos``): see docs/chaos.md.

    python -m integration_tests.chaos --quick                 # about 10 faults
    python -m integration_tests.chaos --faults 100 --seed 7   # the long run
    python -m integration_tests.chaos --seed 7 --first-round 12 --rounds 1   # one round again

Prints a line per round while it runs and a table at the end; writes ``chaos.json``,
``chaos.png``, the run's log and every round's logs (driver output, job files, the
round's timeline) under ``--out``. Exits 0 when every round delivered exactly once.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict

from integration_tests.chaos.faults import draw_plan
from integration_tests.chaos.options import ChaosOptions, parse
from integration_tests.chaos.report import (
    RunSummary,
    round_line,
    summarize,
    table,
    write_json,
    write_plot,
)
from integration_tests.chaos.rounds import RoundResult, RoundRunner
from integration_tests.chaos.servers import ChaosServers

log = logging.getLogger("integration_tests.chaos")


def _say(text: str) -> None:
    print(text, flush=True)


def run(options: ChaosOptions, say: Callable[[str], None] = _say) -> RunSummary:
    """Run rounds until ``options`` says enough; write the report; return its summary."""
    out = options.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(out / "chaos.log")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    opts = {k: str(v) for k, v in asdict(options).items()}
    say(f"chaos run, seed {options.seed}, results in {out}")
    results: list[RoundResult] = []
    starts: list[float] = []
    loads: list[float] = [os.getloadavg()[0]]
    t0 = time.monotonic()
    servers = ChaosServers(out, cluster=options.cluster_share > 0)
    try:
        servers.start()
        say(f"servers up in {time.monotonic() - t0:.0f}s")
        index = options.first_round
        while not options.enough(len(results), sum(len(r.fired) for r in results)):
            plan = draw_plan(
                options.seed,
                index,
                queries=options.queries,
                consumers=options.consumers,
                sizing=options.sizing,
                cluster_share=options.cluster_share,
                fault_kinds=options.fault_kinds,
                poison_share=options.poison_share,
                setting_share=options.setting_share,
                sparse_share=options.sparse_share,
                driver_read_share=options.driver_read_share,
            )
            starts.append(time.monotonic() - t0)
            result = RoundRunner(plan, servers, out, timeout=options.round_timeout, say=say).run()
            results.append(result)
            loads.append(os.getloadavg()[0])
            fired = sum(len(r.fired) for r in results)
            say(
                f"{round_line(result)}  [total: {fired} faults, "
                f"{time.monotonic() - t0:.0f}s, load {loads[-1]:.1f}]"
            )
            write_json(
                out / "chaos.json",
                summarize(options.seed, results, time.monotonic() - t0, loads),
                results,
                opts,
            )
            index += 1
    except KeyboardInterrupt:
        say("interrupted: reporting the rounds so far")
    finally:
        servers.stop()
        root.removeHandler(handler)
        root.setLevel(level)
        handler.close()
    summary = summarize(options.seed, results, time.monotonic() - t0, loads)
    write_json(out / "chaos.json", summary, results, opts)
    if results:
        write_plot(out / "chaos.png", summary, results, starts)
    say("")
    say(table(summary))
    for failure in summary.failures:
        say(f"FAILED {failure}")
    say(f"results: {out / 'chaos.json'}, {out / 'chaos.png'}")
    return summary


def main(argv: list[str] | None = None) -> int:
    options = parse(argv)
    summary = run(options)
    print(
        json.dumps(
            {
                "lost": summary.lost,
                "duplicated": summary.duplicated,
                "differing": summary.differing,
                "rounds": summary.rounds,
                "passed": summary.passed,
            }
        ),
        flush=True,
    )
    return 0 if summary.clean and summary.rounds else 1


if __name__ == "__main__":
    sys.exit(main())
