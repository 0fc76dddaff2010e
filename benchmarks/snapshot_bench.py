"""The snapshot coordinator's cost and recovery times.

    python -m benchmarks.snapshot_bench            # 100,000 and 1,000,000 keys of state
    python -m benchmarks.snapshot_bench --small    # 20,000 and 100,000 keys (a quick run)

1. **Batch durations with and without snapshots.** A stateful query (Spark's
   ``rate-micro-batch`` source, ``rowsPerBatch`` rows per batch, ``groupBy(value % keys)``
   with ``count`` and ``sum``, HDFS-backed state store, update mode into ``noop``) first
   fills ``keys`` keys of state, then runs ``--batches`` measured batches: once without a
   coordinator, once with a :class:`SnapshotCoordinator` snapshotting every
   ``--period`` to S3 (SeaweedFS started here, or ``--s3-endpoint``). Each size runs both
   twice, in the order none, snapshots, snapshots, none, and keeps each one's run with the
   lower p99: a size's first run is the slower one whatever it runs (measured: 1.19 with
   the snapshot run first, 0.91 with it second, on the same commit). Printed: p50/p99 of
   Spark's ``batchDuration`` and their ratio (target: p99 within 1.1x), and per snapshot
   its duration and bytes: the first one uploads the whole checkpoint (full), later ones
   only new files (incremental).
2. **Recovery time.** The gtkafka -> applyInPandasWithState -> barrier pipeline of the
   integration tests (``integration_tests/coordinator_driver.py``) runs as a driver
   subprocess, is SIGKILLed, and a new driver is started: once on the same checkpoint,
   once on an empty directory (the checkpoint is materialised from S3). Measured: from
   the kill to the first bundle delivered after the restart (the barrier's ``GT_last``
   moves), and how long ``recover()`` took. Without ZooKeeper (a lock would add up to a
   session timeout before the new driver can take over).

A table goes to stdout and ``results/snapshot_bench.png`` gets a plot.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import REPO_ROOT, kafka_bootstrap, local_spark, print_table
from benchmarks.sink_bench import percentile, s3_endpoint

DRIVER = REPO_ROOT / "integration_tests" / "coordinator_driver.py"


@dataclass
class StateRun:
    keys: int
    snapshots: bool
    durations_ms: list[float]
    snapshot_stats: list[dict[str, Any]] = field(default_factory=list)

    @property
    def p50(self) -> float:
        return statistics.median(self.durations_ms)

    @property
    def p99(self) -> float:
        return percentile(self.durations_ms, 0.99)


def state_run(  # noqa: PLR0917
    spark: Any, args: argparse.Namespace, server: Any, keys: int, snapshots: bool, workdir: Path
) -> StateRun:
    from pyspark.sql import functions as sf

    from gtbarrier import SnapshotCoordinator

    per_batch = max(1, keys // args.fill_batches)
    cp = workdir / f"cp-{keys}-{'snap' if snapshots else 'none'}-{uuid.uuid4().hex[:6]}"
    coord = None
    if snapshots:
        bucket = f"snapbench-{uuid.uuid4().hex[:8]}"
        server.client().create_bucket(Bucket=bucket)
        coord = SnapshotCoordinator(
            spark,
            pipeline_id=f"bench-{keys}",
            state_uri=f"s3://{bucket}/gtb",
            checkpoint_location=cp,
            state_options=server.options(),
            snapshot_period=args.period,
            retain=3,
        )
        coord.recover()
    rows = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", per_batch)
        .option("numPartitions", args.cores)
        .load()
    )
    agg = rows.groupBy((sf.col("value") % keys).alias("k")).agg(
        sf.count("*").alias("n"), sf.sum("value").alias("s")
    )
    q = (
        agg.writeStream.format("noop")
        .outputMode("update")
        .option("checkpointLocation", str(cp))
        .trigger(processingTime="0 seconds")
        .start()
    )
    if coord is not None:
        coord.watch(q)
    total = args.fill_batches + args.batches
    try:
        while (q.lastProgress or {}).get("batchId", -1) < total - 1:
            if q.exception() is not None:
                raise RuntimeError(str(q.exception()))
            time.sleep(0.2)
    finally:
        q.stop()
    progress = [p for p in q.recentProgress if p["batchId"] >= args.fill_batches]
    durations = [float(p["batchDuration"]) for p in progress][: args.batches]
    stats: list[dict[str, Any]] = []
    if coord is not None:
        stats = manifests(coord)
        coord.close()
    shutil.rmtree(cp, ignore_errors=True)
    return StateRun(keys, snapshots, durations, stats)


def manifests(coord: Any) -> list[dict[str, Any]]:
    """Every snapshot the coordinator accepted during the run, oldest first."""
    return [asdict(s) for s in coord.history]


def recovery_runs(  # noqa: PLR0915 - one scripted scenario, step by step
    args: argparse.Namespace, server: Any, bootstrap: str, workdir: Path
) -> list[dict[str, Any]]:
    """Kill the pipeline's driver and restart it: same checkpoint, then an empty one."""
    from kafka.admin import KafkaAdminClient, NewTopic

    from harness.coordinator_program import driver_args, produce
    from harness.coordinator_program import gt_last as barrier_gt_last
    from state.stores import StoreConfig, open_store

    topic = f"snapbench-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, num_partitions=2, replication_factor=1)])
    admin.close()

    class Producer:
        def __init__(self) -> None:
            from kafka import KafkaProducer

            self.p = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=50)

        def produce(self, topic: str, records: Any, batch_size: int = 2000) -> None:
            for i, (k, v, _h, part) in enumerate(records):
                self.p.send(topic, key=k, value=v, partition=part)
                if i % batch_size == batch_size - 1:
                    self.p.flush()
            self.p.flush()

    producer = Producer()
    produced = 0

    def feed(n: int) -> None:
        # The driver must never run out of input while a step waits for bundles: every wait
        # for new bundles is preceded by records that only those bundles can carry.
        nonlocal produced
        produce(producer, topic, produced, produced + n)
        produced += n

    feed(args.recovery_records)
    bucket = f"snapbench-{uuid.uuid4().hex[:8]}"
    server.client().create_bucket(Bucket=bucket)
    state_uri = f"s3://{bucket}/gtb"
    store = open_store(StoreConfig.from_options({"state.uri": state_uri, **server.options()}))
    env = dict(os.environ)
    env.update(
        {
            **server.exported_env(),
            "PYSPARK_PYTHON": sys.executable,
            "PYTHONPATH": os.pathsep.join(
                p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p
            ),
        }
    )
    pipeline = "bench-keyed"

    def gt_last() -> int:
        return barrier_gt_last(store, pipeline)

    def start(cp_root: Path, log: Path) -> subprocess.Popen[bytes]:
        argv = [
            sys.executable,
            str(DRIVER),
            *driver_args(
                bootstrap=bootstrap,
                topic=topic,
                state_uri=state_uri,
                prefix="bench",
                pipelines="keyed",
                cp_root=cp_root,
                out_root=workdir / "out",
                trigger="processing",
                max_offsets=args.recovery_per_batch,
                period="2s",
            ),
        ]
        with open(log, "ab") as fh:
            return subprocess.Popen(
                argv, cwd=REPO_ROOT, env=env, stdout=fh, stderr=fh, start_new_session=True
            )

    def kill(proc: subprocess.Popen[bytes]) -> None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)

    def wait(check: Any, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not check():
            if time.monotonic() > deadline:
                raise TimeoutError(f"{what} not reached within {timeout:.0f}s")
            time.sleep(0.1)

    def snapshotted() -> bool:
        return store.get_or_none(f"{pipeline}/resume.json") is not None

    results = []
    log = workdir / "drivers.log"
    cp = workdir / "host-a"
    proc = start(cp, log)
    try:
        cases = [
            c
            for c in (("same checkpoint", False), ("materialised from S3", True))
            if ("fresh" if c[1] else "same") in args.recovery_cases
        ]
        for label, fresh in cases:
            wait(snapshotted, 300, "a first snapshot")
            before = gt_last()
            feed(3 * args.recovery_per_batch)
            wait(lambda before=before: gt_last() >= before + 2, 300, "two more bundles")
            at_kill = gt_last()
            kill(proc)
            killed, killed_wall = time.monotonic(), time.time()
            feed(2 * args.recovery_per_batch)
            if fresh:
                cp = workdir / f"host-{uuid.uuid4().hex[:4]}"
            proc = start(cp, log)
            wait(lambda at_kill=at_kill: gt_last() > at_kill, 300, "a bundle after the restart")
            first_bundle = time.monotonic() - killed
            recovered = _last_event(log, "recovered")
            started = _last_event(log, "started")
            results.append(
                {
                    "case": label,
                    "kill_to_first_bundle_s": first_bundle,
                    "kill_to_recovered_s": recovered.get("t", killed_wall) - killed_wall,
                    "kill_to_query_started_s": started.get("t", killed_wall) - killed_wall,
                    "recover_s": recovered.get("seconds"),
                    "action": recovered.get("action"),
                    "files": recovered.get("files"),
                    "bytes": recovered.get("bytes"),
                }
            )
            print(
                f"  recovery ({label}): first bundle {first_bundle:.1f}s after the kill; "
                f"recover() {recovered.get('action')} in {recovered.get('seconds', 0):.2f}s",
                flush=True,
            )
    finally:
        if proc.poll() is None:
            kill(proc)
        producer.p.close()
        store.close()
    return results


def _last_event(log: Path, event: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for line in log.read_text(errors="replace").splitlines():
        if line.startswith('{"event"'):
            e = json.loads(line)
            if e.get("event") == event:
                found = e
    return found


#: The runs of one size: without and with snapshots, each once first and once second.
IN_TURN = (False, True, True, False)


def pool(runs: list[StateRun]) -> list[StateRun]:
    """One run per (keys, snapshots): batch durations of the repeats pooled; snapshot stats
    of the first repeat, plus the later repeats' incremental ones."""
    out: dict[tuple[int, bool], StateRun] = {}
    for r in runs:
        key = (r.keys, r.snapshots)
        if key not in out:
            out[key] = StateRun(r.keys, r.snapshots, list(r.durations_ms), list(r.snapshot_stats))
        else:
            out[key].durations_ms += r.durations_ms
            out[key].snapshot_stats += r.snapshot_stats[1:]
    return list(out.values())


def plot(runs: list[StateRun], recovery: list[dict[str, Any]], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(14, 4))
    sizes = sorted({r.keys for r in runs})
    labels = [f"{k:,} keys" for k in sizes]
    for i, (attr, title) in enumerate(
        (("p50", "batch duration p50"), ("p99", "batch duration p99"))
    ):
        ax = axes[i]
        width = 0.35
        for j, snap in enumerate((False, True)):
            vals = [
                getattr(next(r for r in runs if r.keys == k and r.snapshots == snap), attr)
                for k in sizes
            ]
            ax.bar(
                [x + j * width for x in range(len(sizes))],
                vals,
                width,
                label="snapshots" if snap else "no snapshots",
            )
        ax.set_xticks([x + width / 2 for x in range(len(sizes))], labels)
        ax.set_ylabel("ms")
        ax.set_title(title)
        ax.legend()
    ax = axes[2]
    if recovery:
        ax.bar([r["case"] for r in recovery], [r["kill_to_first_bundle_s"] for r in recovery])
        ax.set_ylabel("s")
        ax.set_title("driver kill -> first bundle after restart")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)


def report(runs: list[StateRun], recovery: list[dict[str, Any]], args: argparse.Namespace) -> None:
    print()
    print(
        f"state query: rate-micro-batch, {args.repeat} x {args.batches} measured batches after "
        f"{args.fill_batches} filling ones, local[{args.cores}], snapshots every {args.period}, "
        f"load average {os.getloadavg()[0]:.1f} (S3 is a SeaweedFS server on the same cores)"
    )
    rows = []
    for r in runs:
        snaps = r.snapshot_stats
        full = snaps[0] if snaps else None
        incr = snaps[1:]
        rows.append(
            [
                f"{r.keys:,} keys, {'snapshots' if r.snapshots else 'no snapshots'}",
                f"{len(r.durations_ms)}",
                f"{r.p50:.0f}",
                f"{r.p99:.0f}",
                f"{len(snaps)}" if r.snapshots else "-",
                f"{statistics.median(s['duration_s'] for s in snaps):.2f}" if snaps else "-",
                f"{full['uploaded_bytes']:,} of {full['bytes']:,}" if full else "-",
                f"{statistics.median(s['uploaded_bytes'] for s in incr):,.0f} of "
                f"{statistics.median(s['bytes'] for s in incr):,.0f}"
                if incr
                else "-",
            ]
        )
    print_table(
        [
            "run",
            "batches",
            "p50 ms",
            "p99 ms",
            "snapshots",
            "snapshot s (median)",
            "full: uploaded of bytes",
            "incremental: uploaded of bytes (median)",
        ],
        rows,
    )
    if recovery:
        print()
        print_table(
            [
                "recovery",
                "kill -> first bundle s",
                "kill -> recovered s",
                "kill -> query started s",
                "recover() s",
                "action",
                "files",
                "bytes",
            ],
            [
                [
                    r["case"],
                    f"{r['kill_to_first_bundle_s']:.1f}",
                    f"{r['kill_to_recovered_s']:.1f}",
                    f"{r['kill_to_query_started_s']:.1f}",
                    f"{r['recover_s']:.2f}" if r["recover_s"] is not None else "-",
                    str(r["action"]),
                    str(r["files"]),
                    f"{r['bytes'] or 0:,}",
                ]
                for r in recovery
            ],
        )
    print()
    for keys in sorted({r.keys for r in runs}):
        base = next(r for r in runs if r.keys == keys and not r.snapshots)
        snap = next(r for r in runs if r.keys == keys and r.snapshots)
        ratio = snap.p99 / base.p99
        print(
            f"p99 batch duration with snapshots / without, {keys:,} keys = {ratio:.2f}x "
            f"(target <= 1.1x: {'met' if ratio <= 1.1 else 'NOT met'}); "
            f"p50 ratio {snap.p50 / base.p50:.2f}x"
        )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.snapshot_bench", description=__doc__
    )
    parser.add_argument(
        "--small", action="store_true", help="20,000 and 100,000 keys, fewer batches"
    )
    parser.add_argument("--keys", default=None, help="comma list of state sizes (keys)")
    parser.add_argument("--batches", type=int, default=None, help="measured batches per run")
    parser.add_argument("--fill-batches", type=int, default=5)
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds per size (each runs both modes twice; durations of the rounds pooled)",
    )
    parser.add_argument("--period", default="3s")
    parser.add_argument("--cores", type=int, default=2)
    parser.add_argument("--recovery-records", type=int, default=None)
    parser.add_argument("--recovery-per-batch", type=int, default=500)
    parser.add_argument("--skip-recovery", action="store_true")
    parser.add_argument(
        "--recovery-cases",
        default="same,fresh",
        type=lambda v: {c.strip() for c in v.split(",") if c.strip()},
        help="comma list: same (restart on the same checkpoint), fresh (an empty directory, "
        "the checkpoint materialised from S3)",
    )
    parser.add_argument("--bootstrap", default=os.environ.get("GTB_KAFKA_BOOTSTRAP"))
    parser.add_argument("--s3-endpoint", default=os.environ.get("GTB_S3_ENDPOINT"))
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "results")
    args = parser.parse_args(argv)
    if not args.recovery_cases or args.recovery_cases - {"same", "fresh"}:
        parser.error(
            f"--recovery-cases: expected a comma list of 'same' and 'fresh', got "
            f"{','.join(sorted(args.recovery_cases)) or '(nothing)'}"
        )
    keys = [
        int(k)
        for k in (args.keys or ("20000,100000" if args.small else "100000,1000000")).split(",")
    ]
    args.batches = args.batches or (15 if args.small else 30)
    args.recovery_records = args.recovery_records or (10_000 if args.small else 30_000)

    runs: list[StateRun] = []
    recovery: list[dict[str, Any]] = []
    with (
        tempfile.TemporaryDirectory(prefix="gtb-snapbench-") as tmp,
        s3_endpoint(args.s3_endpoint) as server,
    ):
        workdir = Path(tmp)
        conf = {
            "spark.sql.streaming.stateStore.maintenanceInterval": "5s",
            "spark.sql.streaming.stateStore.minDeltasForSnapshot": "10",
        }
        with local_spark(args.cores, **conf) as spark:
            for k in keys * args.repeat:
                tried: dict[bool, list[StateRun]] = {False: [], True: []}
                for snap in IN_TURN:
                    r = state_run(spark, args, server, k, snap, workdir)
                    print(
                        f"  {k:,} keys, {'snapshots' if snap else 'no snapshots'}: "
                        f"p50 {r.p50:.0f} ms, p99 {r.p99:.0f} ms over {len(r.durations_ms)} batches"
                        + (f", {len(r.snapshot_stats)} snapshots" if snap else ""),
                        flush=True,
                    )
                    tried[snap].append(r)
                runs += [min(tried[snap], key=lambda r: r.p99) for snap in (False, True)]
        if not args.skip_recovery:
            with kafka_bootstrap(args.bootstrap) as bootstrap:
                recovery = recovery_runs(args, server, bootstrap, workdir)
    runs = pool(runs)
    report(runs, recovery, args)
    png = args.out / "snapshot_bench.png"
    plot(runs, recovery, png)
    print(f"\nplot: {png.relative_to(REPO_ROOT) if png.is_relative_to(REPO_ROOT) else png}")


if __name__ == "__main__":
    main()
