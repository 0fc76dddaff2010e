"""The chaos run's command line: :class:`ChaosOptions` and :func:`parse`."""

from __future__ import annotations

import argparse
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

from integration_tests.chaos.consumers import CONSUMERS
from integration_tests.chaos.faults import FAULTS
from integration_tests.chaos.plan import Sizing
from integration_tests.chaos.poison import DEFAULT_SHARE
from integration_tests.chaos.queries import QUERIES
from integration_tests.chaos.variants import (
    DEFAULT_DRIVER_READ_SHARE,
    DEFAULT_SETTING_SHARE,
    DEFAULT_SPARSE_SHARE,
)

QUICK_FAULTS = 10
QUICK_SIZING = Sizing(
    min_batches=3, max_batches=3, chunks=2, fault_counts=(2, 3), fault_count_weights=(1.0, 2.0)
)


@dataclass(frozen=True)
class ChaosOptions:
    seed: int
    out: Path
    rounds: int | None = None  # stop after this many rounds ...
    faults: int | None = None  # ... or after this many injected faults
    first_round: int = 0
    queries: list[str] = field(default_factory=lambda: list(QUERIES))
    consumers: list[str] = field(default_factory=lambda: list(CONSUMERS))
    fault_kinds: list[str] = field(default_factory=lambda: list(FAULTS))
    sizing: Sizing = field(default_factory=Sizing)
    cluster_share: float = 0.15  # rounds on the standalone cluster (0: no cluster started)
    round_timeout: float = 900.0
    poison_share: float = DEFAULT_SHARE  # stateless rounds with poison rows
    setting_share: float = DEFAULT_SETTING_SHARE  # stateless -> postgres: a setting change
    sparse_share: float = DEFAULT_SPARSE_SHARE  # stateless rounds without poison: sparse
    driver_read_share: float = DEFAULT_DRIVER_READ_SHARE  # rounds read with readMode=driver

    def enough(self, rounds: int, faults: int) -> bool:
        """Whether a run that did ``rounds`` rounds and injected ``faults`` faults is done."""
        if self.rounds is not None:
            return rounds >= self.rounds
        target = self.faults or QUICK_FAULTS
        # Rounds whose faults could not be injected do not count; do not loop forever.
        return faults >= target or rounds >= 2 * target


def _names(raw: str, known: dict[str, object], what: str) -> list[str]:
    names = [n.strip() for n in raw.split(",") if n.strip()]
    unknown = [n for n in names if n not in known]
    if unknown or not names:
        raise argparse.ArgumentTypeError(
            f"{what}: unknown {unknown or raw!r}; choose from {', '.join(known)}"
        )
    return names


def parse(argv: list[str] | None = None) -> ChaosOptions:
    p = argparse.ArgumentParser(
        prog="python -m integration_tests.chaos",
        description="Randomized fault rounds against real servers, checked for exactly-once "
        "(docs/chaos.md).",
    )
    p.add_argument("--seed", type=int, default=None, help="the run's seed (default: random)")
    stop = p.add_mutually_exclusive_group()
    stop.add_argument("--rounds", type=int, help="run this many rounds")
    stop.add_argument("--faults", type=int, help="stop once this many faults were injected")
    p.add_argument(
        "--quick",
        action="store_true",
        help=f"small rounds, {QUICK_FAULTS} faults, no standalone cluster",
    )
    p.add_argument(
        "--first-round",
        type=int,
        default=0,
        help="number of the first round (to re-run round N of a seed: "
        "--seed S --first-round N --rounds 1)",
    )
    p.add_argument(
        "--queries",
        type=lambda s: _names(s, dict(QUERIES), "--queries"),
        default=list(QUERIES),
        help=f"comma list of {', '.join(QUERIES)}",
    )
    p.add_argument(
        "--consumers",
        type=lambda s: _names(s, dict(CONSUMERS), "--consumers"),
        default=list(CONSUMERS),
        help=f"comma list of {', '.join(CONSUMERS)}",
    )
    p.add_argument(
        "--fault-kinds",
        type=lambda s: _names(s, dict(FAULTS), "--fault-kinds"),
        default=list(FAULTS),
        help=f"comma list of {', '.join(FAULTS)}",
    )
    p.add_argument(
        "--cluster-share",
        type=float,
        default=None,
        help="share of rounds on a standalone cluster (default 0.15, --quick 0)",
    )
    p.add_argument(
        "--poison-share",
        type=float,
        default=DEFAULT_SHARE,
        help=f"share of stateless rounds with poison rows (default {DEFAULT_SHARE})",
    )
    p.add_argument(
        "--setting-share",
        type=float,
        default=DEFAULT_SETTING_SHARE,
        help="share of stateless -> postgres rounds whose consumer setting changes between "
        f"driver starts (default {DEFAULT_SETTING_SHARE})",
    )
    p.add_argument(
        "--sparse-share",
        type=float,
        default=DEFAULT_SPARSE_SHARE,
        help="share of stateless rounds without poison rows that have sparse output "
        f"(default {DEFAULT_SPARSE_SHARE})",
    )
    p.add_argument(
        "--driver-read-share",
        type=float,
        default=DEFAULT_DRIVER_READ_SHARE,
        help="share of rounds whose source reads on the driver (gtkafka readMode=driver; "
        f"default {DEFAULT_DRIVER_READ_SHARE})",
    )
    p.add_argument(
        "--round-timeout",
        type=float,
        default=900.0,
        help="seconds a round may take before it is a failure (default 900)",
    )
    p.add_argument(
        "--out", type=Path, default=None, help="results directory (default results/chaos-<time>)"
    )
    a = p.parse_args(argv)
    seed = a.seed if a.seed is not None else secrets.randbelow(1_000_000)
    out = a.out or Path("results") / f"chaos-{time.strftime('%Y%m%d-%H%M%S')}"
    faults = a.faults if a.faults is not None else (QUICK_FAULTS if a.rounds is None else None)
    return ChaosOptions(
        seed=seed,
        out=out,
        rounds=a.rounds,
        faults=faults,
        first_round=a.first_round,
        queries=a.queries,
        consumers=a.consumers,
        fault_kinds=a.fault_kinds,
        sizing=QUICK_SIZING if a.quick else Sizing(),
        cluster_share=a.cluster_share
        if a.cluster_share is not None
        else (0.0 if a.quick else 0.15),
        round_timeout=a.round_timeout,
        poison_share=a.poison_share,
        setting_share=a.setting_share,
        sparse_share=a.sparse_share,
        driver_read_share=a.driver_read_share,
    )
