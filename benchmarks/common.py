"""Shared pieces of the benchmarks: a Kafka broker, a local Spark session, result tables."""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent


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
