"""The fixed cost of a micro-batch: 100 records through gtbarrier vs through Spark alone.

    python -m benchmarks.fixed_cost                 # 10 measured batches of each
    python -m benchmarks.fixed_cost --batches 4

In one SparkSession (``local[<cores>]``), one after the other, each with
``processingTime=0`` (batches back to back) and its first batch left out:

* Spark alone: ``rate-micro-batch`` (``rowsPerBatch=100``) -> ``noop``;
* Spark's floor for Python data sources: :mod:`benchmarks.python_floor` -> itself, a
  Python source and sink that do no I/O; and, to split that floor into a Python source's
  share and a Python sink's, ``python_floor -> noop`` and ``rate-micro-batch ->
  python_floor``; and ``python_floor_driver -> noop``, the same source read on the driver
  (PySpark's ``SimpleDataSourceStreamReader``: no Python worker for the read);
* a sink on the driver: ``rate-micro-batch -> foreachBatch``, each batch's rows collected
  to the driver as Arrow (what a barrier written on the driver would start from: no
  Python worker per write task, against ``rate-micro-batch -> python_floor``'s);
* gtbarrier: ``gtkafka`` (8 partitions, ``maxOffsetsPerTrigger=100``, state on S3) ->
  ``key, value, gt`` -> ``barrier`` (``consumer=file``, exactly-once, state on S3);
  and the same with ``readMode=driver`` (read on the driver, no Python read task).

``--no-split`` leaves out the four runs that only split the floor (``python_floor ->
noop``, ``rate-micro-batch -> python_floor``, ``python_floor_driver -> noop`` and the
``foreachBatch`` sink), for quick runs; the targets are still measured.

``--crossover 100,1000,10000`` also runs gtkafka -> barrier in both read modes at each of
those batch sizes (``maxOffsetsPerTrigger``), in turn, and prints each size's medians and
the crossover: the smallest size from which executor mode is as fast as, or faster than,
``readMode=driver`` (docs/performance.md, "Choosing a read mode").

``--repeat N`` runs the queries N times in turn and keeps each one's run with the
lowest median (``make bench`` passes 2): a session's first queries are slower whatever
they run, and Spark alone used to run first.

Targets, on the median ``triggerExecution``: gtbarrier / Spark alone <= 2.0x; gtbarrier /
``python_floor -> python_floor`` <= 1.10x (what gtbarrier adds to Spark's own cost of a
Python source and sink); gtbarrier with ``readMode=driver`` / Spark alone <= 1.3x (issue
38's target; its ratio to executor mode is printed too).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import (
    Ratio,
    add_repeat_option,
    best_in_turn,
    kafka_bootstrap,
    load_average,
    local_spark,
    print_table,
    target_ratio,
    wait_for_batches,
    write_results,
)
from benchmarks.sink_bench import percentile, s3_endpoint
from benchmarks.source_bench import fill

TARGET = "<= 2.0x"
DRIVER_TARGET = "<= 1.3x"
FLOOR_TARGET = "<= 1.10x"
RECORDS = 100
PARTITIONS = 8
ALONE = "rate-micro-batch -> noop"
FLOOR_SOURCE = "python_floor -> noop (a Python source)"
FLOOR_SINK = "rate-micro-batch -> python_floor (a Python sink)"
FLOOR = "python_floor -> python_floor (no I/O)"
DRIVER_SOURCE = "python_floor_driver -> noop (a Python source read on the driver)"
DRIVER_SINK = "rate-micro-batch -> foreachBatch (the rows to the driver as Arrow)"
OURS = "gtkafka (8 partitions, S3 state) -> barrier (file)"
OURS_DRIVER = "gtkafka readMode=driver (8 partitions, S3 state) -> barrier (file)"
#: The runs without gtbarrier, in their order: (a Python source?, a Python sink?) -> name.
SPARK_ONLY = {
    (False, False): ALONE,
    (True, False): FLOOR_SOURCE,
    (False, True): FLOOR_SINK,
    (True, True): FLOOR,
}
#: Every run's name, in their order, and its short name for the phases' columns.
QUERIES = (*SPARK_ONLY.values(), DRIVER_SOURCE, DRIVER_SINK, OURS, OURS_DRIVER)
SHORT = (
    "rate -> noop",
    "floor -> noop",
    "rate -> floor",
    "floor -> floor",
    "driver floor -> noop",
    "rate -> foreachBatch",
    "ours",
    "ours on the driver",
)
#: The runs that only split the floor into a Python source's share and a Python sink's.
SPLIT = {(True, False), (False, True)}


@dataclass(frozen=True)
class Run:
    query: str
    trigger_ms: list[float]
    add_batch_ms: list[float]
    load: str
    #: Every phase of Spark's ``durationMs`` (``latestOffset``, ``walCommit``, ...) per batch.
    phases: dict[str, list[float]] = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.trigger_ms)


def measure(query: Any, name: str, batches: int, timeout: float) -> Run:
    """Let ``query`` run ``batches`` + 1 batches, stop it, keep all but the first."""
    try:
        wait_for_batches(query, batches + 1, timeout, name)
    finally:
        query.stop()
    progress = [p for p in query.recentProgress if p["numInputRows"] > 0][1 : batches + 1]
    return Run(
        name,
        [float(p["durationMs"]["triggerExecution"]) for p in progress],
        [float(p["durationMs"].get("addBatch", 0)) for p in progress],
        load_average(),
        {
            phase: [float(p["durationMs"].get(phase, 0)) for p in progress]
            for phase in sorted({k for p in progress for k in p["durationMs"]})
        },
    )


def spark_only(
    spark: Any,
    workdir: Path,
    batches: int,
    *,
    python_source: bool,
    python_sink: bool,
    on_driver: bool = False,
) -> Run:
    """100 records per batch without gtbarrier: from ``rate-micro-batch`` or, with
    ``python_source``, from :mod:`benchmarks.python_floor`'s source (``on_driver``: its
    driver-side reader); into ``noop`` or, with ``python_sink``, into its sink (a Python
    source and sink that do no I/O)."""
    from benchmarks import python_floor as floor

    floor.register(spark)
    if python_source:
        df = (
            spark.readStream.format(floor.DRIVER_NAME if on_driver else floor.NAME)
            .option("rowsPerBatch", RECORDS)
            .option("maxBatches", batches + 1)  # then idle: stopped between batches
            .load()
        )
    else:
        df = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", RECORDS).load()
    query = (
        df.writeStream.format(floor.NAME if python_sink else "noop")
        .option("checkpointLocation", str(workdir / f"cp-{uuid.uuid4().hex[:8]}"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    name = DRIVER_SOURCE if on_driver else SPARK_ONLY[(python_source, python_sink)]
    return measure(query, name, batches, 600)


def driver_sink(spark: Any, workdir: Path, batches: int) -> Run:
    """100 records per batch from ``rate-micro-batch`` into ``foreachBatch``, whose function
    collects the batch's rows to the driver as Arrow: Spark's cost of a sink that runs on
    the driver, with no Python worker per write task."""
    rows: list[int] = []

    def collect(batch: Any, _batch_id: int) -> None:
        rows.append(batch.toArrow().num_rows)

    df = spark.readStream.format("rate-micro-batch").option("rowsPerBatch", RECORDS).load()
    query = (
        df.writeStream.foreachBatch(collect)
        .option("checkpointLocation", str(workdir / f"cp-{uuid.uuid4().hex[:8]}"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    run = measure(query, DRIVER_SINK, batches, 600)
    if RECORDS not in rows:
        raise RuntimeError(f"{DRIVER_SINK}: no batch of {RECORDS} rows reached the driver: {rows}")
    return run


def gtbarrier(
    spark: Any,
    workdir: Path,
    batches: int,
    *,
    bootstrap: str,
    topic: str,
    server: Any,
    read_mode: str = "executors",
    records: int = RECORDS,
    name: str | None = None,
) -> Run:
    """``records`` per batch through gtkafka (``read_mode``) -> barrier (file), measured
    as ``name`` (by default :data:`OURS` or :data:`OURS_DRIVER`)."""
    run = uuid.uuid4().hex[:8]
    bucket = f"fixed-cost-{run}"
    server.client().create_bucket(Bucket=bucket)
    ids = {"pipeline.id": f"fixed-{run}", "state.uri": f"s3://{bucket}/gtb", **server.options()}
    df = (
        spark.readStream.format("gtkafka")
        .options(**ids)
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(records))
        .option("readMode", read_mode)
        .load()
    )
    query = (
        df.select("key", "value", "gt")
        .writeStream.format("barrier")
        .options(**ids)
        .option("consumer", "file")
        .option("consumer.path", str(workdir / f"out-{run}"))
        .option("checkpointLocation", str(workdir / f"cp-{run}"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    default = OURS if read_mode == "executors" else OURS_DRIVER
    return measure(query, name or default, batches, 3600)


def crossover_label(read_mode: str, records: int) -> str:
    return f"gtkafka readMode={read_mode} -> barrier, {records:,} records per batch"


def crossover_size(medians: Mapping[int, tuple[float, float]]) -> int | None:
    """The smallest batch size (records) from which executor mode is at least as fast as
    readMode=driver at every larger size measured, from each size's median
    ``(executors, driver)`` triggerExecution; None if driver mode is faster at the
    largest. Pure."""
    found = None
    for size in sorted(medians, reverse=True):
        executors, driver = medians[size]
        if executors > driver:
            break
        found = size
    return found


def crossover_report(runs: Sequence[Run], sizes: Sequence[int]) -> int | None:
    """Prints each size's medians in both read modes and the crossover; returns it."""
    by_name = {r.query: r for r in runs}
    medians = {
        size: (
            by_name[crossover_label("executors", size)].median,
            by_name[crossover_label("driver", size)].median,
        )
        for size in sizes
    }
    print_table(
        ["records per batch", "executors p50 ms", "driver p50 ms", "driver / executors", "load"],
        [
            [
                f"{size:,}",
                f"{e:,.0f}",
                f"{d:,.0f}",
                f"{d / e:.2f}x",
                by_name[crossover_label("driver", size)].load,
            ]
            for size, (e, d) in medians.items()
        ],
    )
    found = crossover_size(medians)
    if found is None:
        print(f"crossover: readMode=driver is faster up to {max(sizes):,} records per batch")
    else:
        print(f"crossover: executor mode is as fast or faster from {found:,} records per batch")
    print()
    return found


def _p50(values: list[float] | None) -> float:
    return statistics.median(values) if values else 0.0


def report(runs: list[Run]) -> list[Ratio]:
    print()
    print_table(
        [
            "query (100 records per batch)",
            "batches",
            "triggerExecution p50 ms",
            "p90 ms",
            "addBatch p50 ms",
            "load average",
        ],
        [
            [
                r.query,
                str(len(r.trigger_ms)),
                f"{r.median:,.0f}",
                f"{percentile(r.trigger_ms, 0.9):,.0f}",
                f"{statistics.median(r.add_batch_ms):,.0f}",
                r.load,
            ]
            for r in runs
        ],
    )
    print()
    by_name = {r.query: r for r in runs}
    alone, floor, ours = by_name[ALONE], by_name[FLOOR], by_name[OURS]
    source, sink = by_name.get(FLOOR_SOURCE), by_name.get(FLOOR_SINK)
    on_driver = by_name.get(DRIVER_SOURCE)
    sink_on_driver = by_name.get(DRIVER_SINK)
    ours_driver = by_name.get(OURS_DRIVER)
    phases = sorted({k for r in runs for k in r.phases})
    print_table(
        [
            "Spark durationMs, p50",
            *(f"{SHORT[QUERIES.index(r.query)]} ms" for r in runs),
            "ours over floor -> floor ms",
        ],
        [
            [
                phase,
                *(f"{_p50(r.phases.get(phase)):,.0f}" for r in runs),
                f"{_p50(ours.phases.get(phase)) - _p50(floor.phases.get(phase)):+,.0f}",
            ]
            for phase in phases
        ],
    )
    print(
        f"of gtkafka -> barrier's {ours.median - alone.median:,.0f} ms over rate -> noop, "
        f"{floor.median - alone.median:,.0f} ms are Spark's for a Python source and sink "
        f"(python_floor, {floor.median / alone.median:.2f}x rate -> noop) and "
        f"{ours.median - floor.median:,.0f} ms are gtbarrier's"
    )
    if source is not None and sink is not None:
        print(
            f"of python_floor -> python_floor's {floor.median - alone.median:,.0f} ms over "
            f"rate -> noop, a Python source alone adds {source.median - alone.median:,.0f} ms "
            f"(python_floor -> noop, {source.median / alone.median:.2f}x), a Python sink "
            f"alone {sink.median - alone.median:,.0f} ms (rate -> python_floor, "
            f"{sink.median / alone.median:.2f}x), both together "
            f"{floor.median - source.median - sink.median + alone.median:+,.0f} ms beyond "
            "the sum"
        )
    if source is not None and on_driver is not None:
        print(
            f"a Python source read on the driver (python_floor_driver -> noop) adds "
            f"{on_driver.median - alone.median:,.0f} ms over rate -> noop "
            f"({on_driver.median / alone.median:.2f}x), read in a Python worker "
            f"{source.median - alone.median:,.0f} ms"
        )
    if sink is not None and sink_on_driver is not None:
        print(
            f"a sink on the driver (rate -> foreachBatch, the rows to the driver as Arrow) "
            f"adds {sink_on_driver.median - alone.median:,.0f} ms over rate -> noop "
            f"({sink_on_driver.median / alone.median:.2f}x), a Python sink "
            f"{sink.median - alone.median:,.0f} ms ({sink.median / alone.median:.2f}x)"
        )
    if ours_driver is not None:
        print(
            f"gtkafka readMode=driver -> barrier: {ours_driver.median:,.0f} ms, "
            f"{ours_driver.median / alone.median:.2f}x rate -> noop, "
            f"{ours_driver.median / ours.median:.2f}x executor mode, "
            f"{ours_driver.median / floor.median:.2f}x python_floor -> python_floor"
        )
        if sink is not None:
            # The barrier is a Python data source's writer: a Python worker runs every
            # write task, so Spark's cost of a Python sink bounds driver mode from below.
            print(
                f"  and {ours_driver.median / sink.median:.2f}x rate -> python_floor, the "
                f"floor of any query that writes through a Python sink ("
                f"{sink.median / alone.median:.2f}x rate -> noop)"
            )
    print()
    driver_ratios = (
        []
        if ours_driver is None
        else [
            target_ratio(
                "fixed cost",
                "fixed cost on the driver: median triggerExecution of a 100-record batch, "
                "gtkafka readMode=driver -> barrier / rate-micro-batch -> noop",
                ours_driver.median / alone.median,
                DRIVER_TARGET,
                f"{ours_driver.median:,.0f} ms vs {alone.median:,.0f} ms (executor mode "
                f"{ours.median:,.0f} ms); load {ours_driver.load}",
            )
        ]
    )
    return [
        target_ratio(
            "fixed cost",
            "fixed cost: median triggerExecution of a 100-record batch, "
            "gtkafka -> barrier / rate-micro-batch -> noop",
            ours.median / alone.median,
            TARGET,
            f"{ours.median:,.0f} ms vs {alone.median:,.0f} ms; load {ours.load}",
        ),
        target_ratio(
            "fixed cost",
            "gtbarrier over Spark's Python floor: median triggerExecution of a 100-record "
            "batch, gtkafka -> barrier / python_floor -> python_floor",
            ours.median / floor.median,
            FLOOR_TARGET,
            f"{ours.median:,.0f} ms vs {floor.median:,.0f} ms; load {ours.load}",
        ),
        *driver_ratios,
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.fixed_cost", description=__doc__)
    parser.add_argument("--batches", type=int, default=10, help="measured batches of each")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--bootstrap", default=os.environ.get("GTB_KAFKA_BOOTSTRAP"))
    parser.add_argument("--s3-endpoint", default=os.environ.get("GTB_S3_ENDPOINT"))
    add_repeat_option(
        parser, "run the queries this many times in turn; each keeps its run with the lowest median"
    )
    parser.add_argument(
        "--no-split",
        action="store_true",
        help="leave out python_floor -> noop, rate-micro-batch -> python_floor and "
        "python_floor_driver -> noop (quick runs)",
    )
    parser.add_argument(
        "--crossover",
        type=lambda v: tuple(int(x) for x in v.split(",") if x.strip()),
        default=(),
        metavar="N,N,...",
        help="also run gtkafka -> barrier in both read modes at these records per batch "
        "and print where executor mode becomes faster",
    )
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    if any(n <= 0 for n in args.crossover):
        parser.error(f"--crossover {args.crossover}: expected record counts > 0")
    with (
        kafka_bootstrap(args.bootstrap) as bootstrap,
        s3_endpoint(args.s3_endpoint) as server,
        tempfile.TemporaryDirectory(prefix="gtb-fixed-cost-") as tmp,
    ):
        topic = f"fixed-cost-{uuid.uuid4().hex[:8]}"
        fill(bootstrap, topic, PARTITIONS, RECORDS * (args.batches + 3), 1)
        sized = f"fixed-cost-sized-{uuid.uuid4().hex[:8]}"
        if args.crossover:
            fill(bootstrap, sized, PARTITIONS, max(args.crossover) * (args.batches + 3), 1)
        with local_spark(args.cores) as spark:

            def floor_run(
                py_source: bool, py_sink: bool, *, on_driver: bool = False
            ) -> Callable[[int], Run]:
                return lambda _turn: spark_only(
                    spark,
                    Path(tmp),
                    args.batches,
                    python_source=py_source,
                    python_sink=py_sink,
                    on_driver=on_driver,
                )

            variants = [
                floor_run(py_source, py_sink)
                for py_source, py_sink in SPARK_ONLY
                if not (args.no_split and (py_source, py_sink) in SPLIT)
            ]
            if not args.no_split:
                variants.append(floor_run(True, False, on_driver=True))
                variants.append(lambda _turn: driver_sink(spark, Path(tmp), args.batches))

            def ours_run(read_mode: str) -> Callable[[int], Run]:
                return lambda _turn: gtbarrier(
                    spark,
                    Path(tmp),
                    args.batches,
                    bootstrap=bootstrap,
                    topic=topic,
                    server=server,
                    read_mode=read_mode,
                )

            variants += [ours_run("executors"), ours_run("driver")]
            runs = best_in_turn(
                variants,
                args.repeat,
                cost=lambda r: r.median,
                describe=(lambda r: f"{r.query}: {r.median:,.0f} ms") if args.repeat > 1 else None,
            )

            def sized_run(read_mode: str, records: int) -> Callable[[int], Run]:
                return lambda _turn: gtbarrier(
                    spark,
                    Path(tmp),
                    args.batches,
                    bootstrap=bootstrap,
                    topic=sized,
                    server=server,
                    read_mode=read_mode,
                    records=records,
                    name=crossover_label(read_mode, records),
                )

            sized_runs = best_in_turn(
                [sized_run(mode, n) for n in args.crossover for mode in ("executors", "driver")],
                args.repeat,
                cost=lambda r: r.median,
            )
    ratios = report(runs)
    crossover = crossover_report(sized_runs, args.crossover) if args.crossover else None
    write_results(
        args.json,
        ratios,
        {"runs": [r.__dict__ for r in runs + sized_runs], "crossover_records": crossover},
    )


if __name__ == "__main__":
    main()
