"""The demo's query through gtbarrier vs the same query over Spark's own file source.

    python -m benchmarks.demo_bench                      # 40,000 events, 10,000 per batch
    python -m benchmarks.demo_bench --events 8000 --per-batch 2000

The demo's events (:mod:`demo.generator`: orders and payments as JSON, keyed by
customer over 8 partitions) go to a Kafka topic and, the same events, to JSON-lines files
(one file per batch's worth, with the Kafka partition and offset as fields). In one
SparkSession (``local[<cores>]``, 4 shuffle partitions, as the demo's driver), each after
a small warm-up run of its own, with ``Trigger.AvailableNow``:

* gtbarrier: ``gtkafka`` (``maxOffsetsPerTrigger``, state on S3: one bucket, a prefix per
  run; the columns the query reads, :data:`demo.pipeline.SOURCE_SCHEMA`) -> the demo's query
  (:func:`demo.pipeline.shop_outputs`: enrichment, a windowed aggregation and
  ``applyInPandasWithState``, unioned) -> ``barrier`` (``consumer=file``, exactly-once);
* Spark alone: the ``json`` file source (``maxFilesPerTrigger=1``, the same batches) ->
  the same query -> ``noop``.

Both read their source once per micro-batch for the query's three branches, the same
way (:func:`demo.pipeline.read_once`: one exchange over the source, by every column the
query reads of it, shared by the branches). The table's ``scans`` column shows it: the
rows Spark counted from the source's scans over the records, 1.0 when the branches share
one scan.

Measured: records/s over each query's wall time (start to end); with ``--repeat N``
(``make bench`` passes 2) the queries run N times in turn and each one's fastest run
counts, so that none is favoured by its place in the session. Target: gtbarrier /
Spark alone >= 0.8. Printed next to it, without a target: the same ratio of records/s
inside the triggers of the batches after each query's first (the query running, without
its start: about 0.9 s for any Python source, docs/performance.md). With ``--split``
(``make bench`` passes it) two more runs split the gap: ``gtkafka -> the query -> noop``
(gtkafka's share: a Python source instead of json) and
``json files -> the query -> python_floor`` (a Python sink that does no I/O,
:mod:`benchmarks.python_floor`: Spark's share for any Python sink); the rest is the
barrier's own work. (``json -> barrier`` cannot run: the barrier refuses a batch that no
gtkafka source with its pipeline recorded.)

With ``--driver`` two more runs measure driver-side reads (docs/performance.md, "Driver-side
reads, measured"): ``kafka_driver -> the query -> noop``, the same topic read on the driver
by :class:`benchmarks.driver_reads.KafkaDriverSource` (PySpark's
``SimpleDataSourceStreamReader``: the tasks read the batch from Spark's block manager, no
Python worker), against ``gtkafka -> the query -> noop``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import (
    Ratio,
    add_repeat_option,
    best_in_turn,
    load_average,
    local_spark,
    print_table,
    progress_durations,
    target_ratio,
    write_results,
)
from benchmarks.sink_bench import s3_endpoint

TARGET = ">= 0.8"
PARTITIONS = 8
FILE_SCHEMA_EXTRA = ", src_partition INT, src_offset BIGINT"
#: The columns of the json files the demo's query reads (all but quantity and method).
FILE_COLUMNS = (
    "type",
    "order_id",
    "payment_id",
    "customer_id",
    "category",
    "amount",
    "currency",
    "ts",
    "src_partition",
    "src_offset",
)
SINKS = {"barrier": "barrier (file)", "noop": "noop", "python": "python_floor (no I/O)"}
OURS = f"gtkafka -> demo query -> {SINKS['barrier']}"
ALONE = f"json files -> demo query -> {SINKS['noop']}"
SOURCE_ONLY = f"gtkafka -> demo query -> {SINKS['noop']}"
SINK_ONLY = f"json files -> demo query -> {SINKS['python']}"
DRIVER = f"kafka_driver -> demo query -> {SINKS['noop']}"


@dataclass(frozen=True)
class Run:
    query: str
    records: int
    seconds: float
    batches: int
    load: str
    #: Spark's numInputRows over the batches: the rows its scans of the source counted.
    input_rows: int
    #: numInputRows and seconds (triggerExecution) of the batches after the first that
    #: read records: the query running, without its start and first batch.
    steady_rows: int = 0
    steady_seconds: float = 0.0

    @property
    def rate(self) -> float:
        return self.records / self.seconds

    @property
    def steady_rate(self) -> float:
        """Records/s inside the triggers of the batches after the first (nan if none)."""
        if not self.steady_seconds:
            return float("nan")
        return self.steady_rows / self.scans / self.steady_seconds

    @property
    def scans(self) -> float:
        """How many times the source was scanned, on average (1.0: once per batch)."""
        return self.input_rows / self.records


@dataclass(frozen=True)
class Inputs:
    topic: str
    directory: Path
    events: int


def make_inputs(bootstrap: str, workdir: Path, events: int, per_batch: int, name: str) -> Inputs:
    """The events in a new topic and, the same, in JSON-lines files of ``per_batch``."""
    from demo.generator import GeneratorConfig, iter_events
    from harness.kafka import KafkaBroker, KafkaHelper

    config = GeneratorConfig(events=events, partitions=PARTITIONS)
    kafka = KafkaHelper(KafkaBroker.external_at(bootstrap), name)
    directory = workdir / f"{name}-json"
    directory.mkdir(parents=True)
    try:
        topic = kafka.create_topic(partitions=PARTITIONS)
        generated = list(iter_events(config))
        kafka.produce(topic, (e.record() for e in generated), batch_size=5000)
    finally:
        kafka.close()
    next_offset = [0] * PARTITIONS
    lines = []
    for e in generated:
        body = json.loads(e.value)
        body["src_partition"], body["src_offset"] = e.partition, next_offset[e.partition]
        next_offset[e.partition] += 1
        lines.append(json.dumps(body, separators=(",", ":")))
    for n, first in enumerate(range(0, len(lines), per_batch)):
        (directory / f"part-{n:05d}.json").write_text("\n".join(lines[first : first + per_batch]))
    return Inputs(topic, directory, events)


def _sink(out: Any) -> Any:
    from demo.pipeline import DemoJob

    # The demo's driver writes fewer, larger parts per bundle (DemoJob.output_partitions).
    partitions = DemoJob.__dataclass_fields__["output_partitions"].default
    return out.coalesce(partitions) if partitions else out


def _start(
    out: Any, sink: str, ids: dict[str, str], workdir: Path, run: str, *, available_now: bool = True
) -> Any:
    """Start the demo query ``out`` into ``barrier`` (file consumer) or ``noop``, with
    ``Trigger.AvailableNow`` or else batches back to back."""
    writer = _sink(out).writeStream
    if sink == "barrier":
        writer = (
            writer.format("barrier")
            .options(**ids)
            .option("consumer", "file")
            .option("consumer.path", str(workdir / f"out-{run}"))
        )
    elif sink == "python":
        from benchmarks import python_floor

        python_floor.register(out.sparkSession)
        writer = writer.format(python_floor.NAME)
    else:
        writer = writer.format("noop")
    return (
        writer.option("checkpointLocation", str(workdir / f"cp-{run}"))
        .outputMode("append")
        .trigger(**({"availableNow": True} if available_now else {"processingTime": "0 seconds"}))
        .start()
    )


@dataclass(frozen=True)
class StateBucket:
    """The bucket of every run's gtbarrier state, a prefix per run. A production
    pipeline's bucket exists before it starts; a new bucket per run would measure
    SeaweedFS's first write into it (about 200 ms: it allocates the bucket's volumes)."""

    name: str
    options: dict[str, str]

    @classmethod
    def create(cls, server: Any) -> StateBucket:
        name = f"demo-bench-{uuid.uuid4().hex[:8]}"
        server.client().create_bucket(Bucket=name)
        return cls(name, server.options())

    def pipeline(self) -> tuple[str, dict[str, str]]:
        """A run id and the gtbarrier options of a pipeline of its own."""
        run = uuid.uuid4().hex[:8]
        return run, {
            "pipeline.id": f"demo-{run}",
            "state.uri": f"s3://{self.name}/{run}",
            **self.options,
        }


def _run(query: Any, name: str, records: int, began: float) -> Run:
    """Wait for the AvailableNow ``query`` to end; its wall time counts from ``began``."""
    query.awaitTermination()
    seconds = time.perf_counter() - began
    if query.exception() is not None:
        raise RuntimeError(f"{name} failed: {query.exception()}")
    progress = query.recentProgress
    input_rows = sum(int(p["numInputRows"]) for p in progress)
    steady = _steady(progress)
    return Run(name, records, seconds, len(progress), load_average(), input_rows, *steady)


def _steady(progress: list[Any]) -> tuple[int, float]:
    """numInputRows and seconds in the triggers of the batches after the first that read
    records."""
    later = [p for p in progress if int(p["numInputRows"]) > 0][1:]
    seconds = sum(progress_durations(later, "triggerExecution")) / 1000.0
    return sum(int(p["numInputRows"]) for p in later), seconds


def through_gtbarrier(
    spark: Any,
    inputs: Inputs,
    per_batch: int,
    *,
    bootstrap: str,
    state: StateBucket,
    workdir: Path,
    sink: str = "barrier",
    on_driver: bool = False,
) -> Run:
    """The demo's query over the topic; ``on_driver``: read by ``kafka_driver`` instead of
    gtkafka (into ``noop`` only: the barrier needs a gtkafka source's epochs)."""
    from demo.pipeline import parse_events, read_source, reference_tables, shop_outputs

    run, ids = state.pipeline()
    if on_driver:
        from benchmarks.driver_reads import NAME, KafkaDriverSource

        spark.dataSource.register(KafkaDriverSource)
        raw = (
            spark.readStream.format(NAME)
            .option("bootstrap", bootstrap)
            .option("topic", inputs.topic)
            .option("maxRecordsPerRead", str(per_batch))
            .load()
        )
    else:
        raw = read_source(
            spark,
            {
                **ids,
                "kafka.bootstrap.servers": bootstrap,
                "subscribe": inputs.topic,
                "startingOffsets": "earliest",
                "maxOffsetsPerTrigger": str(per_batch),
            },
        )
    categories, rates = reference_tables(spark)
    out = shop_outputs(parse_events(raw, "5 minutes"), categories, rates, "1 minute")
    began = time.perf_counter()
    if on_driver:
        # A simple stream reader gets no read limit from Spark: under AvailableNow its
        # first read's end is the target, and the query stops after one batch.
        query = _start(out, sink, ids, workdir, run, available_now=False)
        return _run_until_read(query, DRIVER, inputs.events, began)
    query = _start(out, sink, ids, workdir, run)
    return _run(query, f"gtkafka -> demo query -> {SINKS[sink]}", inputs.events, began)


def _run_until_read(query: Any, name: str, records: int, began: float) -> Run:
    """Let ``query`` (a ``kafka_driver`` source, batches back to back) run until a batch
    that ends at ``records`` records read has completed, then stop it; the wall time
    counts from ``began`` to that batch's progress."""
    deadline = time.monotonic() + 600
    try:
        while True:
            if query.exception() is not None:
                raise RuntimeError(f"{name} failed: {query.exception()}")
            progress = query.recentProgress
            read = [
                sum(map(int, json.loads(p["sources"][0]["endOffset"]).values())) for p in progress
            ]
            if read and read[-1] >= records:
                seconds = time.perf_counter() - began
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{name}: {read[-1] if read else 0} of {records} read")
            time.sleep(0.05)
    finally:
        query.stop()
    done = [p for p in progress if int(p["numInputRows"]) > 0]
    input_rows = sum(int(p["numInputRows"]) for p in done)
    return Run(name, records, seconds, len(done), load_average(), input_rows, *_steady(done))


def through_files(spark: Any, inputs: Inputs, workdir: Path, *, sink: str = "noop") -> Run:
    from demo.pipeline import EVENT_SCHEMA, read_once, reference_tables, shop_outputs

    source = (
        spark.readStream.format("json")
        .schema(EVENT_SCHEMA + FILE_SCHEMA_EXTRA)
        .option("maxFilesPerTrigger", 1)
        .load(str(inputs.directory))
    )
    # The shape of the demo's query over gtkafka (parse_events): the source read once for
    # the three branches, the watermark above that exchange.
    events = (
        read_once(source, FILE_COLUMNS)
        .withColumnRenamed("ts", "event_time")
        .withWatermark("event_time", "5 minutes")
    )
    categories, rates = reference_tables(spark)
    out = shop_outputs(events, categories, rates, "1 minute")
    run, ids = f"files-{uuid.uuid4().hex[:6]}", dict[str, str]()
    began = time.perf_counter()
    query = _start(out, sink, ids, workdir, run)
    return _run(query, f"json files -> demo query -> {SINKS[sink]}", inputs.events, began)


def report(runs: list[Run], per_batch: int) -> list[Ratio]:
    print()
    print_table(
        [
            "query",
            "records",
            "batches",
            "scans",
            "wall s",
            "records/s",
            "after the 1st batch /s",
            "load average",
        ],
        [
            [
                r.query,
                f"{r.records:,}",
                str(r.batches),
                f"{r.scans:.1f}",
                f"{r.seconds:.1f}",
                f"{r.rate:,.0f}",
                "-" if math.isnan(r.steady_rate) else f"{r.steady_rate:,.0f}",
                r.load,
            ]
            for r in runs
        ],
    )
    print()
    by = {r.query: r for r in runs}
    ours, alone = by[OURS], by[ALONE]
    if SOURCE_ONLY in by and SINK_ONLY in by:
        source_only, sink_only = by[SOURCE_ONLY], by[SINK_ONLY]
        gap = 1 / ours.rate - 1 / alone.rate
        source_s = 1 / source_only.rate - 1 / alone.rate
        sink_s = 1 / sink_only.rate - 1 / alone.rate
        print(
            "where gtkafka -> barrier's extra time per 1,000 records over json -> noop goes: "
            f"{1e6 * gap:,.1f} ms in all; gtkafka instead of json (gtkafka -> noop) "
            f"{1e6 * source_s:,.1f} ms; a Python sink instead of noop (json -> python_floor) "
            f"{1e6 * sink_s:,.1f} ms; the rest (the barrier's own work) "
            f"{1e6 * (gap - source_s - sink_s):,.1f} ms"
        )
        print()
    if DRIVER in by and SOURCE_ONLY in by:
        driver, worker = by[DRIVER], by[SOURCE_ONLY]
        print(
            "driver-side reads: kafka_driver -> noop / gtkafka -> noop = "
            f"{driver.rate / worker.rate:.2f} ({driver.rate:,.0f} vs {worker.rate:,.0f} "
            f"records/s); kafka_driver -> noop / json -> noop = {driver.rate / alone.rate:.2f}"
        )
        print()
    return [
        target_ratio(
            "demo query",
            f"demo query ({per_batch:,} per batch), records/s: gtkafka -> barrier / "
            "json files -> noop",
            ours.rate / alone.rate,
            TARGET,
            f"{ours.rate:,.0f} vs {alone.rate:,.0f} records/s; load {ours.load}",
        ),
        *_steady_ratio(ours, alone, per_batch),
    ]


def _steady_ratio(ours: Run, alone: Run, per_batch: int) -> list[Ratio]:
    """The same ratio without each query's start and first batch (no target: the target
    is over the wall time); none if a query ran one batch."""
    if not (ours.steady_seconds and alone.steady_seconds):
        return []
    value = ours.steady_rate / alone.steady_rate
    measure = (
        f"the demo query after its first batch ({per_batch:,} per batch), records/s inside "
        "the triggers: gtkafka -> barrier / json files -> noop"
    )
    note = f"{ours.steady_rate:,.0f} vs {alone.steady_rate:,.0f} records/s"
    print(f"{measure} = {value:.2f}; {note}", flush=True)
    return [Ratio("demo query", measure, value, "-", None, note=note)]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.demo_bench", description=__doc__)
    parser.add_argument("--events", type=int, default=40_000)
    parser.add_argument("--per-batch", type=int, default=10_000)
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--bootstrap", default=os.environ.get("GTB_KAFKA_BOOTSTRAP"))
    parser.add_argument("--s3-endpoint", default=os.environ.get("GTB_S3_ENDPOINT"))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument(
        "--no-warmup", action="store_true", help="no small run of each query first (tiny runs)"
    )
    parser.add_argument(
        "--split",
        action="store_true",
        help="also gtkafka -> noop and json -> python_floor (the source's, a Python sink's share)",
    )
    parser.add_argument(
        "--driver",
        action="store_true",
        help="also kafka_driver -> noop (the topic read on the driver) and gtkafka -> noop",
    )
    add_repeat_option(parser, "run the queries this many times in turn and keep each one's fastest")
    args = parser.parse_args(argv)
    from benchmarks.common import kafka_bootstrap

    conf = {"spark.sql.shuffle.partitions": "4", "spark.sql.session.timeZone": "UTC"}
    with (
        kafka_bootstrap(args.bootstrap) as bootstrap,
        s3_endpoint(args.s3_endpoint) as server,
        tempfile.TemporaryDirectory(prefix="gtb-demo-bench-") as tmp,
    ):
        workdir = Path(tmp)
        warm_n = max(500, args.per_batch // 5)
        warm = None
        if not args.no_warmup:
            warm = make_inputs(bootstrap, workdir, warm_n, warm_n, "demo-warmup")
        inputs = make_inputs(bootstrap, workdir, args.events, args.per_batch, "demo-bench")
        state = StateBucket.create(server)
        with local_spark(args.cores, **conf) as spark:
            if warm is not None:
                through_gtbarrier(
                    spark, warm, warm_n, bootstrap=bootstrap, state=state, workdir=workdir
                )
                through_files(spark, warm, workdir)

            def over_kafka(sink: str = "barrier", on_driver: bool = False) -> Callable[[int], Run]:
                return lambda _turn: through_gtbarrier(
                    spark,
                    inputs,
                    args.per_batch,
                    bootstrap=bootstrap,
                    state=state,
                    workdir=workdir,
                    sink=sink,
                    on_driver=on_driver,
                )

            variants = [over_kafka(), lambda _turn: through_files(spark, inputs, workdir)]
            if args.split or args.driver:
                variants.append(over_kafka("noop"))
            if args.split:
                variants.append(lambda _turn: through_files(spark, inputs, workdir, sink="python"))
            if args.driver:
                variants.append(over_kafka("noop", on_driver=True))
            runs = best_in_turn(
                variants,
                args.repeat,
                cost=lambda r: r.seconds,
                describe=lambda r: f"{r.query} {r.seconds:.1f} s",
            )
    ratios = report(runs, args.per_batch)
    write_results(args.json, ratios, {"runs": [r.__dict__ | {"rate": r.rate} for r in runs]})


if __name__ == "__main__":
    main()
