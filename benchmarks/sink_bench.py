"""The barrier sink's cost: exactly-once vs at-least-once vs Spark's parquet sink.

    python -m benchmarks.sink_bench                    # 400,000 records of ~100 bytes
    python -m benchmarks.sink_bench --records 100000   # a quick run

One topic (4 partitions, ~100-byte records) on one broker (a Tansu broker started here,
or ``--bootstrap``) and one S3 server (SeaweedFS started here, or ``--s3-endpoint``). The same
stateless query (gtkafka -> key, value, gt) runs with ``Trigger.AvailableNow`` and
``maxOffsetsPerTrigger`` into:

* ``barrier`` ``delivery=exactly-once`` and ``delivery=at-least-once``, with the ``file``
  consumer (state ``file://``), the ``s3`` consumer (state on S3 too), the ``iceberg``
  consumer (pyiceberg's SQL catalog on SQLite, a ``file://`` warehouse, state ``file://``)
  and the ``delta`` consumer (a ``file://`` table, appended, state ``file://``);
* Spark's own ``parquet`` file sink as a reference (on the local file system for both
  targets: pyspark ships no S3A connector).

Printed per run: records/s over the query's wall time, the median / p99 of Spark's
per-batch ``addBatch`` time (write tasks + commit), the median / p99 of the barrier's
commit (the protocol in the commit process: state reads, CASes, promotion, cleanup, from
``GTBARRIER_METRICS``) and the item bytes that passed through the driver (for iceberg and
delta also the Parquet footer bytes the driver read to commit the data files' statistics). Then the
targets: exactly-once throughput >= 0.95 x at-least-once; exactly-once adds <= 10 ms per
bundle at the median; zero item bytes through the driver.

Before its measured runs each target gets an unmeasured at-least-once run: a target's
first query imports its client (boto3, pyiceberg) in Spark's Python workers, a cost paid
once per process, which would otherwise fall on whichever mode runs first. ``--no-warmup``
leaves these runs out (quick runs whose numbers are shapes only: the first mode pays it),
``--no-parquet`` the parquet reference.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common import kafka_bootstrap, local_spark, print_table
from benchmarks.source_bench import fill

MODES = ("exactly-once", "at-least-once", "parquet")
S3_PARTS = "exactly-once, layout=parts"


@dataclass
class Run:
    target: str
    mode: str
    records: int
    seconds: float
    add_batch_ms: list[float]
    commit_ms: list[float]
    driver_bytes: int
    inflight_ms: list[float]

    @property
    def rate(self) -> float:
        return self.records / self.seconds


def percentile(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


@contextmanager
def s3_endpoint(endpoint: str | None) -> Iterator[Any]:
    """An :class:`harness.s3.S3Server` (SeaweedFS started here unless given)."""
    from harness.s3 import S3Server

    if endpoint:
        yield S3Server.external_at(endpoint)
        return
    with tempfile.TemporaryDirectory(prefix="gtb-bench-s3-") as workdir:
        server = S3Server(Path(workdir))
        server.start_on_free_port()
        try:
            yield server
        finally:
            server.stop()


@dataclass(frozen=True)
class Setup:
    """What every run shares."""

    spark: Any
    args: argparse.Namespace
    topic: str
    workdir: Path
    bucket: str
    server: Any
    metrics: Path


def run_query(setup: Setup, target: str, mode: str, *, per_batch: int | None = None) -> Run:
    spark, args, workdir, bucket = setup.spark, setup.args, setup.workdir, setup.bucket
    run = uuid.uuid4().hex[:8]
    pipeline = f"bench-{target}-{run}"
    s3 = setup.server.options()
    if target == "s3":
        state = f"s3://{bucket}/state-{run}"
        extra_source = s3
    else:
        state = f"file://{workdir}/state-{run}"
        extra_source = {}
    df = (
        spark.readStream.format("gtkafka")
        .option("kafka.bootstrap.servers", args.bootstrap_used)
        .option("subscribe", setup.topic)
        .option("startingOffsets", "earliest")
        .option("pipeline.id", pipeline)
        .option("state.uri", state)
        .option("maxOffsetsPerTrigger", str(per_batch or args.per_batch))
        .options(**extra_source)
        .load()
        .select("key", "value", "gt")
    )
    writer = df.writeStream.option("checkpointLocation", str(workdir / f"cp-{run}"))
    if mode == "parquet":
        writer = writer.format("parquet").option("path", str(workdir / f"parquet-{run}"))
    else:
        delivery = "exactly-once" if mode == S3_PARTS else mode
        writer = writer.format("barrier").options(
            **{"pipeline.id": pipeline, "state.uri": state, "delivery": delivery}
        )
        writer = writer.options(**consumer_options(setup, target, mode, run))
    began = time.perf_counter()
    query = writer.trigger(availableNow=True).start()
    query.awaitTermination()
    seconds = time.perf_counter() - began
    if query.exception() is not None:
        raise RuntimeError(f"{target}/{mode} query failed: {query.exception()}")
    progress = query.recentProgress
    rows = sum(p["numInputRows"] for p in progress)
    add_batch = [float(p["durationMs"].get("addBatch", 0)) for p in progress if p["numInputRows"]]
    commits: list[float] = []
    inflight: list[float] = []
    driver_bytes = 0
    if mode != "parquet" and setup.metrics.exists():
        for line in setup.metrics.read_text().splitlines():
            rec = json.loads(line)
            if rec["pipeline_id"] == pipeline and rec["action"] == "delivered":
                commits.append(1000.0 * rec["timings"]["total"])
                if "cas_inflight" in rec["timings"]:
                    inflight.append(1000.0 * rec["timings"]["cas_inflight"])
                driver_bytes += int(rec["driver_bytes"])
    return Run(target, mode, rows, seconds, add_batch, commits, driver_bytes, inflight)


def consumer_options(setup: Setup, target: str, mode: str, run: str) -> dict[str, str]:
    """The barrier's ``consumer`` and ``consumer.*`` options of ``target`` for run ``run``."""
    workdir, bucket = setup.workdir, setup.bucket
    if target == "iceberg":
        return {"consumer": "iceberg", **iceberg_options(workdir, run)}
    if target == "delta":
        return {"consumer": "delta", "consumer.delta.uri": f"file://{workdir}/delta-{run}"}
    if target == "s3":
        return {
            "consumer": "s3",
            **setup.server.options(),
            "consumer.path": f"s3://{bucket}/out-{run}",
            "consumer.s3.layout": "parts" if mode == S3_PARTS else "bundle",
        }
    return {"consumer": "file", "consumer.path": str(workdir / f"out-{run}")}


def iceberg_options(workdir: Path, run: str) -> dict[str, str]:
    """``consumer.iceberg.*``: a table of its own per run, catalog and warehouse in workdir."""
    return {
        "consumer.iceberg.table": f"bench.run_{run}",
        "consumer.iceberg.catalog.uri": f"sqlite:///{workdir}/iceberg-catalog.db",
        "consumer.iceberg.catalog.warehouse": f"file://{workdir}/warehouse",
    }


def iceberg_footer_bytes(workdir: Path) -> dict[str, int]:
    """Per table of the iceberg runs: the Parquet footer bytes of its data files (what the
    driver reads to commit them; the rows are never read there)."""
    import pyarrow.parquet as pq
    from pyiceberg.catalog import load_catalog

    catalog = load_catalog(
        "default",
        uri=f"sqlite:///{workdir}/iceberg-catalog.db",
        warehouse=f"file://{workdir}/warehouse",
    )
    out = {}
    for ident in catalog.list_tables("bench"):
        table = catalog.load_table(ident)
        total = 0
        for task in table.scan().plan_files():
            path = task.file.file_path.removeprefix("file://")
            total += pq.read_metadata(path).serialized_size + 8  # + length and magic
        out[ident[-1].removeprefix("run_")] = total
    return out


def delta_footer_bytes(workdir: Path) -> dict[str, int]:
    """Per table of the delta runs: the Parquet footer bytes of the data files its version
    references (what the driver reads to commit them; the rows are never read there)."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from deltalake import DeltaTable

    out = {}
    for directory in sorted(workdir.glob("delta-*")):
        paths = pa.table(DeltaTable(f"file://{directory}").get_add_actions()).column("path")
        out[directory.name.removeprefix("delta-")] = sum(
            pq.read_metadata(directory / str(path)).serialized_size + 8  # + length and magic
            for path in paths.to_pylist()
        )
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.sink_bench", description=__doc__)
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--per-batch", type=int, default=50_000, help="maxOffsetsPerTrigger")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=1, help="runs of each mode (best kept)")
    parser.add_argument("--targets", default="file,s3,iceberg,delta")
    parser.add_argument(
        "--no-warmup", action="store_true", help="no unmeasured run first (quick runs)"
    )
    parser.add_argument(
        "--no-parquet", action="store_true", help="no parquet reference run (quick runs)"
    )
    parser.add_argument("--bootstrap", default=os.environ.get("GTB_KAFKA_BOOTSTRAP"))
    parser.add_argument("--s3-endpoint", default=os.environ.get("GTB_S3_ENDPOINT"))
    args = parser.parse_args(argv)
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]

    workdir = Path(tempfile.mkdtemp(prefix="gtb-sink-bench-"))
    metrics = workdir / "commits.jsonl"
    os.environ["GTBARRIER_METRICS"] = str(metrics)  # before Spark starts: workers inherit it
    with kafka_bootstrap(args.bootstrap) as bootstrap, s3_endpoint(args.s3_endpoint) as server:
        args.bootstrap_used = bootstrap
        bucket = f"gtb-bench-{uuid.uuid4().hex[:8]}"
        server.client().create_bucket(Bucket=bucket)
        topic = f"sink-bench-{uuid.uuid4().hex[:8]}"
        print(f"filling {topic}: {args.records:,} records in {args.partitions} partitions ...")
        fill(bootstrap, topic, args.partitions, args.records, min(args.partitions, 4))
        with local_spark(args.cores) as spark:
            setup = Setup(spark, args, topic, workdir, bucket, server, metrics)
            if not args.no_warmup:
                # warm-up: the JVM's first streaming job is slow for any sink (it warms `file`)
                run_query(setup, "file", "at-least-once", per_batch=args.records)
            runs: list[Run] = []
            for target in targets:
                if target != "file" and not args.no_warmup:
                    # A target's first query imports its client (boto3, pyiceberg, deltalake) in the
                    # Python workers: a once-per-process cost, kept out of either mode.
                    run_query(setup, target, "at-least-once", per_batch=args.records // 2)
                modes = target_modes(target, args)
                for i in range(args.repeat):
                    order = modes if i % 2 == 0 else tuple(reversed(modes))
                    for mode in order:
                        r = run_query(setup, target, mode)
                        print(
                            f"  {target:4} {mode:26} {r.records:,} records in "
                            f"{r.seconds:.1f}s ({r.rate:,.0f}/s)"
                        )
                        runs.append(r)
    footers = {
        "iceberg": iceberg_footer_bytes(workdir) if "iceberg" in targets else {},
        "delta": delta_footer_bytes(workdir) if "delta" in targets else {},
    }
    report(runs, targets, args, footers)


def target_modes(target: str, args: argparse.Namespace) -> tuple[str, ...]:
    """The modes run for ``target``, in their order (the s3 target also with layout=parts)."""
    modes = tuple(m for m in MODES if not (m == "parquet" and args.no_parquet))
    return (*modes, S3_PARTS) if target == "s3" else modes


def best(runs: list[Run], target: str, mode: str) -> Run:
    return max((r for r in runs if r.target == target and r.mode == mode), key=lambda r: r.rate)


def report(
    runs: list[Run],
    targets: list[str],
    args: argparse.Namespace,
    footers: dict[str, dict[str, int]] | None = None,
) -> None:
    print()
    print(
        f"{args.records:,} records, {args.partitions} partitions, {args.per_batch:,} per "
        f"batch, local[{args.cores}], best of {args.repeat}"
    )
    rows = []
    for target in targets:
        alo = best(runs, target, "at-least-once")
        for mode in target_modes(target, args):
            r = best(runs, target, mode)
            local = " (local fs)" if mode == "parquet" and target == "s3" else ""
            rows.append(
                [
                    f"{target} {mode}{local}",
                    f"{r.records:,}",
                    f"{r.seconds:.1f}",
                    f"{r.rate:,.0f}",
                    f"{r.rate / alo.rate:.2f}",
                    f"{statistics.median(r.add_batch_ms):.0f}" if r.add_batch_ms else "-",
                    f"{percentile(r.add_batch_ms, 0.99):.0f}" if r.add_batch_ms else "-",
                    f"{statistics.median(r.commit_ms):.1f}" if r.commit_ms else "-",
                    f"{percentile(r.commit_ms, 0.99):.1f}" if r.commit_ms else "-",
                    "-" if mode == "parquet" else f"{r.driver_bytes:,}",
                ]
            )
    print_table(
        [
            "sink",
            "records",
            "wall s",
            "records/s",
            "vs ALO",
            "addBatch p50 ms",
            "addBatch p99 ms",
            "commit p50 ms",
            "commit p99 ms",
            "driver item bytes",
        ],
        rows,
    )
    print()
    for target in targets:
        eo, alo = best(runs, target, "exactly-once"), best(runs, target, "at-least-once")
        ratio = eo.rate / alo.rate
        added = statistics.median(eo.commit_ms) - statistics.median(alo.commit_ms)
        step = statistics.median(
            ms
            for r in runs
            if r.target == target and r.mode == "exactly-once"
            for ms in r.inflight_ms
        )
        moved = eo.driver_bytes + alo.driver_bytes
        print(
            f"{target}: exactly-once / at-least-once throughput = {ratio:.2f} "
            f"(target >= 0.95: {'met' if ratio >= 0.95 else 'NOT met'}); "
            f"exactly-once's one extra step, the in-flight CAS, takes {step:.1f} ms at the "
            f"median (target <= 10 ms per bundle: {'met' if step <= 10 else 'NOT met'}; "
            f"difference of the commit medians of the best runs: {added:+.1f} ms); "
            f"item bytes through the driver = {moved:,} "
            f"(target 0: {'met' if moved == 0 else 'NOT met'})"
        )
        if target == "s3":
            parts = best(runs, target, S3_PARTS)
            print(
                f"s3 with consumer.s3.layout=parts: item bytes through the driver = "
                f"{parts.driver_bytes:,}; throughput {parts.rate / alo.rate:.2f} x "
                "at-least-once (layout=bundle)"
            )
        read = (footers or {}).get(target)
        if read:
            print(
                f"{target}: Parquet footer bytes the driver read to commit the data files "
                f"(metadata, no rows): {sum(read.values()):,} over "
                f"{len(read)} run(s); item bytes: {moved:,}"
            )


if __name__ == "__main__":
    main()
