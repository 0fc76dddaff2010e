"""Shared pieces of the benchmarks: a Kafka broker, a local Spark session, result tables,
ratios with their targets and the files that carry them to ``python -m benchmarks``."""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

REPO_ROOT = Path(__file__).resolve().parent.parent
R = TypeVar("R")


@contextmanager
def kafka_bootstrap(bootstrap: str | None) -> Iterator[str]:
    """``bootstrap`` if given, else a Tansu broker started for the benchmark (and stopped)."""
    if bootstrap:
        yield bootstrap
        return
    from harness.kafka import KafkaBroker

    with tempfile.TemporaryDirectory(prefix="gtb-bench-kafka-") as workdir:
        broker = KafkaBroker(Path(workdir))
        broker.start_on_free_port()
        try:
            yield broker.bootstrap
        finally:
            broker.stop()


@contextmanager
def local_spark(cores: int, **conf: str) -> Iterator[Any]:
    """A ``local[cores]`` SparkSession with gtbarrier's sources registered."""
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    path = os.environ.get("PYTHONPATH", "")
    if str(REPO_ROOT) not in path.split(os.pathsep):
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO_ROOT), path) if p)
    from pyspark.sql import SparkSession

    from gtbarrier import register_all

    builder = (
        SparkSession.builder.master(f"local[{cores}]")
        .appName("gtbarrier-benchmark")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "2g")
        .config("spark.sql.shuffle.partitions", str(cores))
    )
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register_all(spark)
    try:
        yield spark
    finally:
        spark.stop()


def print_table(headers: Sequence[str], rows: Sequence[Sequence[object]]) -> None:
    """A plain-text table, columns right-aligned except the first."""
    cells = [list(map(str, headers))] + [[str(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]

    def line(row: list[str]) -> str:
        first = row[0].ljust(widths[0])
        rest = [c.rjust(w) for c, w in zip(row[1:], widths[1:], strict=True)]
        return "  ".join([first, *rest])

    print(line(cells[0]))
    print("  ".join("-" * w for w in widths))
    for row in cells[1:]:
        print(line(row))


def load_average() -> str:
    """The machine's load averages (1, 5 and 15 minutes), as ``uptime`` prints them."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


@dataclass
class Ratio:
    """One measured figure next to its target (a line of ``python -m benchmarks``' table).

    ``met`` is None for a figure without a target; ``note`` carries the absolute figures.
    """

    benchmark: str
    measure: str
    value: float | None
    target: str
    met: bool | None
    unit: str = "x"
    note: str = ""

    def cells(self) -> list[str]:
        if self.value is None:
            shown = "-"
        elif self.unit == "x":
            shown = f"{self.value:.2f}"
        elif self.unit in ("ms", "s"):
            shown = f"{self.value:,.1f} {self.unit}"
        else:
            shown = f"{self.value:,.0f} {self.unit}".strip()
        verdict = {True: "met", False: "NOT met", None: "-"}[self.met]
        return [self.benchmark, self.measure, shown, self.target, verdict, self.note]


def verdict(value: float, target: str) -> bool:
    """Whether ``value`` meets ``target`` (``">= 0.9"``, ``"<= 2.0x"``)."""
    op, bound = target.split()[:2]
    limit = float(bound.rstrip("x"))
    if op == ">=":
        return value >= limit
    if op == "<=":
        return value <= limit
    raise ValueError(f"a target is '>= N' or '<= N', got {target!r}")


def target_ratio(benchmark: str, measure: str, value: float, target: str, note: str) -> Ratio:
    """A ratio with its target and verdict, also printed as one line
    ``<measure> = <value> (target <target>: met|NOT met); <note>``."""
    met = verdict(value, target)
    print(
        f"{measure} = {value:.2f} (target {target}: {'met' if met else 'NOT met'}); {note}",
        flush=True,
    )
    return Ratio(benchmark, measure, value, target, met, note=note)


def write_results(path: Path | None, ratios: Sequence[Ratio], data: dict[str, Any]) -> None:
    """``{"ratios": [...], "data": {...}}`` for ``python -m benchmarks`` (if ``path``)."""
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {"ratios": [asdict(r) for r in ratios], "data": data, "load_average": load_average()}
    path.write_text(json.dumps(doc, indent=2, default=str))


def read_results(path: Path) -> tuple[list[Ratio], dict[str, Any]]:
    doc = json.loads(path.read_text())
    return [Ratio(**r) for r in doc["ratios"]], dict(doc.get("data", {}))


def progress_durations(progress: Sequence[dict[str, Any]], key: str) -> list[float]:
    """``durationMs[key]`` of every progress entry that read input, in ms."""
    return [float(p["durationMs"].get(key, 0)) for p in progress if p.get("numInputRows", 0) > 0]


def wait_for_batches(query: Any, batches: int, timeout: float, what: str) -> None:
    """Poll until ``query`` has completed ``batches`` micro-batches (batch ids 0..n-1)."""
    deadline = time.monotonic() + timeout
    while (query.lastProgress or {}).get("batchId", -1) < batches - 1:
        if query.exception() is not None:
            raise RuntimeError(f"{what} failed: {query.exception()}")
        if not query.isActive:
            raise RuntimeError(f"{what} stopped after {len(query.recentProgress)} batches")
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what}: fewer than {batches} batches in {timeout:.0f}s")
        time.sleep(0.2)


def _at_least_one(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"{text!r}; expected an integer of at least 1")
    return value


def add_repeat_option(parser: argparse.ArgumentParser, text: str) -> None:
    """``--repeat N`` (default 1, at least 1; ``text`` is its help), for
    :func:`best_in_turn`."""
    parser.add_argument("--repeat", type=_at_least_one, default=1, help=text)


def best_in_turn(
    variants: Sequence[Callable[[int], R]],
    repeat: int,
    *,
    cost: Callable[[R], float],
    describe: Callable[[R], str] | None = None,
) -> list[R]:
    """Run the variants ``repeat`` times in turn (A B A B ...; each is given the turn's
    number) and keep each one's run of the lowest ``cost``.

    A session's first runs are slower whatever they run (the JVM's JIT, the Python
    workers' first imports): in turn, and the best of each, no variant is favoured by its
    place in the order. With ``describe``, each turn's runs are printed on one line.
    """
    turns: list[list[R]] = []
    for turn in range(repeat):
        turns.append([variant(turn) for variant in variants])
        if describe is not None:
            print(
                f"  round {turn + 1}/{repeat}: " + "; ".join(describe(r) for r in turns[-1]),
                flush=True,
            )
    return [min(runs, key=cost) for runs in zip(*turns, strict=True)]
