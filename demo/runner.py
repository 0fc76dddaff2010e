"""``python -m demo``: exactly-once through a driver crash, end to end, on real parts.

1. start Kafka (Tansu), S3 (SeaweedFS) and ZooKeeper on loopback ports (or use given ones);
2. produce a deterministic stream of orders and payments (:mod:`demo.generator`);
3. run the streaming job (:mod:`demo.pipeline`) in a driver subprocess: gtkafka -> parse
   -> enrich -> windowed revenue + per-customer totals -> barrier -> consumer, with the
   snapshot coordinator writing resume points to ZooKeeper and state to S3;
4. part-way through, SIGKILL the driver, delete its checkpoint directory (as if its host
   were lost), start a new driver on a new directory: ``recover()`` materialises the
   checkpoint from the last snapshot, the source replays the recorded epochs, the
   barrier drops what the consumer already has; the run finishes;
5. verify the consumer against a batch computation of the same input (:mod:`demo.verify`),
   print the table, write the figure (:mod:`demo.plot`) and exit non-zero on a mismatch.
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from demo.generator import GeneratorConfig, describe, generate, last_event_time_ms, ticks
from demo.pipeline import DemoJob
from demo.progress import ProgressTail, ProgressWriter, read_events
from demo.services import Services
from demo.verify import (
    expected_from_records,
    read_file_consumer,
    read_http_consumer,
    read_iceberg_consumer,
    read_postgres_consumer,
    render_table,
    table_rows,
    verify,
)
from harness.logs import tail
from harness.process import REPO_ROOT, ManagedProcess, repo_env

SMALL_EVENTS = 4_000
DEFAULT_EVENTS = 120_000
STREAM = "orders-demo"
PG_TABLE = "demo.orders"


class DemoFailed(RuntimeError):
    """The demo could not run to its verification (a driver failed, a phase timed out)."""


@dataclass
class Tracker:
    """What the drivers reported so far (from the progress file)."""

    events: list[dict[str, Any]] = field(default_factory=list)
    gt_last: dict[int, int] = field(default_factory=dict)
    offsets_of_epoch: dict[int, int] = field(default_factory=dict)
    max_offsets: dict[int, int] = field(default_factory=dict)
    snapshots: dict[int, list[dict[str, Any]]] = field(default_factory=dict)
    commits: dict[tuple[int, int], dict[str, Any]] = field(default_factory=dict)
    failed: dict[int, str] = field(default_factory=dict)

    def add(self, e: dict[str, Any]) -> None:
        self.events.append(e)
        d = int(e["driver"])
        kind = e["event"]
        if kind == "batch":
            self.offsets_of_epoch[int(e["epoch"])] = int(e["offsets"])
            self.max_offsets[d] = max(self.max_offsets.get(d, 0), int(e["offsets"]))
        elif kind == "gt_last":
            self.gt_last[d] = max(self.gt_last.get(d, -1), int(e["gt_last"]))
        elif kind == "snapshot":
            self.snapshots.setdefault(d, []).append(e)
        elif kind == "commit":
            self.commits[(d, int(e["batch_id"]))] = e
        elif kind == "failed":
            self.failed[d] = str(e.get("error"))

    def delivered_records(self, driver: int) -> int:
        gt = self.gt_last.get(driver)
        return 0 if gt is None else self.offsets_of_epoch.get(gt, 0)

    def first(self, driver: int, event: str, **match: Any) -> dict[str, Any] | None:
        for e in self.events:
            if (
                e["driver"] == driver
                and e["event"] == event
                and all(e.get(k) == v for k, v in match.items())
            ):
                return e
        return None


class Runner:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.t0 = time.monotonic()
        self.workdir: Path = args.workdir
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.progress_path = self.workdir / "progress.jsonl"
        self.progress_path.unlink(missing_ok=True)
        self.log = ProgressWriter(self.progress_path, driver=0)
        self.tail = ProgressTail(self.progress_path)
        self.track = Tracker()
        self.procs: list[ManagedProcess] = []
        suffix = uuid.uuid4().hex[:6]
        self.pipeline_id = f"orders-demo-{suffix}"
        self.topic = f"shop-events-{suffix}"
        self.bucket = f"gtbarrier-demo-{suffix}"
        self.state_uri = ""  # set once the services run (Services.state_store)
        self.state_options: dict[str, str] = {}
        self.printed_batches: set[tuple[int, int]] = set()

    # --- output ---------------------------------------------------------------------

    def say(self, message: str) -> None:
        print(f"[{time.monotonic() - self.t0:6.1f}s] {message}", flush=True)

    def pump(self) -> None:
        """Read new progress lines; print what a reader wants to see."""
        for e in self.tail.new():
            self.track.add(e)
            self._print_event(e)

    def _print_event(self, e: dict[str, Any]) -> None:
        d, kind = e["driver"], e["event"]
        who = f"driver {d}"
        total = self.total_records
        if kind == "spark_ready":
            self.say(f"{who}: Spark {e['version']} ready ({self.args.master})")
        elif kind == "recovered":
            self.say(
                f"{who}: coordinator.recover() -> {e['action']} in {e['seconds']:.2f}s "
                f"({e['reason']})"
            )
        elif kind == "query_started":
            self.say(f"{who}: query started (run {e['run_id'][:8]})")
        elif kind == "batch" and e["rows"]:
            commit = self.track.commits.get((d, e["batch_id"]))
            action = _describe_commit(commit, self.track.gt_last.get(d))
            done = min(e["offsets"], total)
            self.say(
                f"{who}: batch {e['batch_id']:>3} epoch {e['epoch']:>3}: "
                f"{e['rows']:>7,} records in {e['duration_ms'] / 1000:5.2f}s  "
                f"read {done:>9,}/{total:,}  {action}"
            )
            self.printed_batches.add((d, e["batch_id"]))
        elif kind == "commit" and (d, e["batch_id"]) in self.printed_batches:
            self.say(f"{who}: batch {e['batch_id']:>3}: {_describe_commit(e, None)}")
        elif kind == "snapshot":
            self.say(
                f"{who}: snapshot {e['snapshot_id']} accepted at epoch {e['epoch']} "
                f"(batch {e['batch_id']}): {e['files']} files, {e['bytes'] / 1e6:.2f} MB, "
                f"{e['uploaded_bytes'] / 1e6:.2f} MB uploaded in {e['duration_s']:.2f}s; "
                "resume point in ZooKeeper"
            )
        elif kind == "failed":
            self.say(f"{who}: the query FAILED: {e['error'][:500]}")

    # --- steps ----------------------------------------------------------------------

    @property
    def total_records(self) -> int:
        return int(self.args.events)

    def run(self) -> int:
        args = self.args
        config = GeneratorConfig(events=args.events, seed=args.seed, partitions=args.partitions)
        self.say(
            f"gtbarrier demo: {describe(config)}; consumer={args.consumer}, "
            f"master={args.master}; work directory {self.workdir}"
        )
        services = Services(
            self.workdir / "services",
            kafka=args.kafka,
            s3=args.s3_endpoint,
            zookeeper=args.zookeeper,
            gcs=args.gcs_endpoint,
            azure=args.azure_endpoint,
            parts=("kafka", "s3", "zookeeper")
            + ((args.state_store,) if args.state_store != "s3" else ()),
        )
        receiver: Any = None
        self.postgres: Any = None
        try:
            services.start()
            for line in services.describe():
                self.say(f"service: {line}")
            services.create_bucket(self.bucket)
            self.state_uri, self.state_options = services.state_store(self.bucket)
            self.say(f"state: {self.state_uri}")
            if args.consumer == "http":
                receiver = self._start_receiver()
            if args.consumer == "postgres":
                self.postgres = self._start_postgres()
            self._produce(services, config)
            job = self._job(services, receiver)
            timings = self._crash_and_recover(job, services, config)
            verification_rows, ok = self._verify(services, receiver, timings)
        finally:
            for proc in self.procs:
                if _TERMINATING.is_set():
                    proc.kill()  # no time for a graceful stop: whoever sent SIGTERM waits
                else:
                    proc.stop(grace=15)
            if receiver is not None:
                receiver.stop()
            if self.postgres is not None and not self.postgres.external:
                self.postgres.shutdown()
                self.postgres.remove()
            services.stop()
        self.say(
            render_table(
                verification_rows,
                "Verification (consumer content vs. a batch computation of the same input):",
            )
        )
        figure = self._plot(args.plot or self.workdir / "demo.png")
        self.say(f"figure: {figure}")
        self.say(f"progress log: {self.progress_path}; driver logs: {self.workdir}/driver-*.log")
        return 0 if ok else 1

    def _start_receiver(self) -> Any:
        from harness.receiver import Receiver

        receiver = Receiver(self.workdir / "receiver", self.workdir).start()
        self.say(
            "consumer: reference HTTP receiver (python -m gtbarrier.http_receiver) at "
            f"{receiver.url}"
        )
        return receiver

    def _start_postgres(self) -> Any:
        from harness.postgres import PostgresServer

        server = PostgresServer.from_env() or PostgresServer(self.workdir / "postgres")
        if not server.external:
            try:
                server.start_on_free_port()
            except BaseException:
                server.stop()
                server.remove()
                raise
        self.say(f"consumer: PostgreSQL at {server.dsn}, table demo.orders")
        return server

    def _produce(self, services: Services, config: GeneratorConfig) -> None:
        kafka = services.kafka()
        try:
            kafka.create_topic(partitions=config.partitions, name=self.topic)
            t = time.monotonic()
            events = generate(config)
            kafka.produce(self.topic, (e.record() for e in events), batch_size=5000)
            seconds = time.monotonic() - t
        finally:
            kafka.close()
        self.log.emit("produced", records=len(events), seconds=round(seconds, 3))
        self.say(
            f"produced {len(events):,} events to topic {self.topic} ({config.partitions} "
            f"partitions, keyed by customer) in {seconds:.1f}s"
        )

    def _job(self, services: Services, receiver: Any) -> DemoJob:
        args = self.args
        consumer_path = None
        consumer_url = None
        if args.consumer == "http":
            consumer_url = f"{receiver.url}/{STREAM}"
        elif args.consumer == "file":
            consumer_path = str(self.workdir / "consumer")
        spark_conf = dict(kv.split("=", 1) for kv in args.conf)
        return DemoJob(
            pipeline_id=self.pipeline_id,
            topic=self.topic,
            bootstrap=services.bootstrap,
            state_uri=self.state_uri,
            s3_options=self.state_options,
            zookeeper_hosts=services.zookeeper_hosts,
            checkpoint="",
            consumer=args.consumer,
            consumer_path=consumer_path,
            consumer_url=consumer_url,
            consumer_dsn=self.postgres.dsn if self.postgres is not None else None,
            consumer_table=PG_TABLE if self.postgres is not None else None,
            progress_path=str(self.progress_path),
            master=args.master,
            spark_conf=spark_conf,
            max_offsets_per_trigger=args.max_offsets_per_trigger
            or max(500, args.events // (5 if args.small else 12)),
            snapshot_period=args.snapshot_period,
            use_coordinator=not args.without_coordinator,
            shuffle_partitions=2 if args.small else 4,
        )

    def _start_driver(self, job: DemoJob, n: int) -> ManagedProcess:
        job.driver = n
        job.checkpoint = str(self.workdir / f"checkpoint-{n}")
        job.stop_path = str(self.workdir / f"stop-{n}")
        proc = start_driver(job, self.workdir, "demo")
        self.procs.append(proc)
        self.say(f"driver {n} (pid {proc.pid}) started on checkpoint {job.checkpoint}")
        return proc

    def _wait(self, proc: ManagedProcess, n: int, what: str, done: Any) -> None:
        deadline = time.monotonic() + self.args.timeout
        while True:
            self.pump()
            if done():
                return
            if n in self.track.failed or not proc.running:
                raise DemoFailed(
                    f"driver {n} stopped while waiting for {what} (exit code "
                    f"{proc.returncode}); last lines of {proc.log_path}:\n"
                    f"{tail(proc.log_path, 60)}"
                )
            if time.monotonic() > deadline:
                raise DemoFailed(
                    f"timed out after {self.args.timeout}s waiting for {what}; last lines of "
                    f"{proc.log_path}:\n{tail(proc.log_path, 40)}"
                )
            time.sleep(0.2)

    def _crash_and_recover(  # noqa: PLR0915 - the demo's scripted crash, step by step
        self, job: DemoJob, services: Services, config: GeneratorConfig
    ) -> dict[str, Any]:
        args = self.args
        total = self.total_records
        crash_after = int(total * args.crash_at)
        track = self.track
        d1 = self._start_driver(job, 1)

        def crash_point() -> bool:
            if track.max_offsets.get(1, 0) >= total:
                raise DemoFailed(
                    f"driver 1 read every record before the crash point ({args.crash_at:.0%} "
                    "delivered and a snapshot behind GT_last); use more --events or a smaller "
                    "--crash-at"
                )
            gt = track.gt_last.get(1)
            snaps = track.snapshots.get(1, [])
            snapshot_ok = not job.use_coordinator or bool(
                snaps and gt is not None and snaps[-1]["epoch"] < gt
            )
            return snapshot_ok and track.delivered_records(1) >= crash_after

        self._wait(d1, 1, "the crash point", crash_point)
        gt_at_kill = track.gt_last[1]
        delivered = track.delivered_records(1)
        d1.kill()  # SIGKILL to the driver's process group: Python, its JVM, its workers
        t_kill = time.time()
        self.log.emit("kill", pid=d1.pid, gt_last=gt_at_kill, delivered=delivered)
        self.pump()
        self.say(
            f"SIGKILL driver 1 (pid {d1.pid}) at GT_last {gt_at_kill}: {delivered:,} of "
            f"{total:,} records delivered"
        )
        shutil.rmtree(job.checkpoint)
        self.log.emit("checkpoint_deleted", path=job.checkpoint)
        self.say(f"deleted its checkpoint directory {job.checkpoint} (as if the host were lost)")

        d2 = self._start_driver(job, 2)

        def resumed() -> bool:
            return any(
                e["driver"] == 2
                and e["event"] == "commit"
                and e["action"] == "delivered"
                and e["epoch"] > gt_at_kill
                for e in track.events
            )

        self._wait(d2, 2, "the first new bundle after the restart", resumed)
        first_new = next(
            e
            for e in track.events
            if e["driver"] == 2
            and e["event"] == "commit"
            and e["action"] == "delivered"
            and e["epoch"] > gt_at_kill
        )
        recovery_s = first_new["t"] - t_kill
        self.say(
            f"recovered: first new bundle (epoch {first_new['epoch']}) delivered "
            f"{recovery_s:.1f}s after the SIGKILL"
        )
        self._wait(d2, 2, "the end of the input", lambda: track.max_offsets.get(2, 0) >= total)
        t_data_done = time.time()

        # End-of-stream heartbeats: Spark moves the watermark one batch after it sees an
        # event time, and runs no batch without new data (no-data batches are disabled for
        # the barrier), so two rounds close every window.
        delay_ms = _minutes(job.watermark_delay) * 60_000
        stamp = last_event_time_ms(config) + delay_ms + 2 * 60_000
        kafka = services.kafka("demo-ticks")
        try:
            for round_ in (1, 2):
                beats = ticks(config.partitions, stamp + round_ * 60_000)
                kafka.produce(self.topic, (b.record() for b in beats))
                target = total + round_ * config.partitions
                self._wait(
                    d2,
                    2,
                    f"heartbeat round {round_}",
                    lambda target=target: track.max_offsets.get(2, 0) >= target,
                )
        finally:
            kafka.close()
        self.say("end-of-stream heartbeats processed: every window is closed and delivered")
        Path(job.stop_path).touch()
        deadline = time.monotonic() + 120
        while d2.running and time.monotonic() < deadline:
            self.pump()
            time.sleep(0.2)
        self.pump()
        if d2.running or d2.returncode != 0:
            raise DemoFailed(
                f"driver 2 did not stop cleanly (exit code {d2.returncode}); last lines of "
                f"{d2.log_path}:\n{tail(d2.log_path, 60)}"
            )
        started = track.first(1, "query_started")
        assert started is not None
        batches = [e for e in track.events if e["event"] == "batch" and e["rows"]]
        busy = sum(e["duration_ms"] for e in batches if e["driver"] == 1) / 1000
        rows = sum(e["rows"] for e in batches if e["driver"] == 1)
        recovered = track.first(2, "recovered")
        dropped = [e for e in track.events if e["event"] == "commit" and e["action"] == "dropped"]
        return {
            "gt_at_kill": gt_at_kill,
            "delivered_at_kill": delivered,
            "recovery_s": recovery_s,
            "recover_action": recovered["action"] if recovered else "none (no coordinator)",
            "recover_s": recovered["seconds"] if recovered else None,
            "dropped_bundles": len(dropped),
            "end_to_end_rate": total / max(1e-9, t_data_done - started["t"]),
            "steady_rate": rows / busy if busy else 0.0,
        }

    def _verify(
        self, services: Services, receiver: Any, timings: dict[str, Any]
    ) -> tuple[list[tuple[str, str]], bool]:
        t = time.monotonic()
        kafka = services.kafka("demo-verify")
        try:
            records = [(r.partition, r.offset, r.value) for r in kafka.consume_all(self.topic)]
        finally:
            kafka.close()
        expected = expected_from_records(records)
        if self.args.consumer == "http":
            delivered = read_http_consumer(receiver.directory, STREAM)
        elif self.args.consumer == "postgres":
            delivered = read_postgres_consumer(self.postgres.dsn, PG_TABLE)
        elif self.args.consumer == "iceberg":
            delivered = read_iceberg_consumer(self.workdir / "consumer")
        else:
            delivered = read_file_consumer(self.workdir / "consumer")
        result = verify(delivered, expected)
        self.say(
            f"verification: read {len(records):,} records back from Kafka and "
            f"{len(delivered):,} rows from the consumer in {time.monotonic() - t:.1f}s"
        )
        for line in result.details:
            self.say(f"  mismatch: {line}")
        recover = (
            f"{timings['recover_action']} in {timings['recover_s']:.1f}s"
            if timings["recover_s"] is not None
            else timings["recover_action"]
        )
        extra = [
            (
                "crash",
                f"SIGKILL at GT_last {timings['gt_at_kill']} "
                f"({timings['delivered_at_kill']:,} records delivered), checkpoint deleted",
            ),
            (
                "recovery",
                f"recover(): {recover}; {timings['dropped_bundles']} replayed "
                "bundle(s) dropped at the barrier",
            ),
            (
                "recovery time",
                f"{timings['recovery_s']:.1f} s (SIGKILL -> first new bundle delivered)",
            ),
            (
                "throughput",
                f"{timings['end_to_end_rate']:,.0f} records/s end to end incl. "
                f"recovery; {timings['steady_rate']:,.0f} records/s in batches",
            ),
        ]
        rows = table_rows(result, extra)
        summary = {
            "ok": result.ok,
            "table": dict(rows),
            "details": result.details,
            "timings": timings,
            "pipeline_id": self.pipeline_id,
            "topic": self.topic,
        }
        (self.workdir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))
        return rows, result.ok

    def _plot(self, path: Path) -> Path:
        from demo.plot import plot_run

        return plot_run(read_events(self.progress_path), path, total_records=self.total_records)


def start_driver(job: DemoJob, workdir: Path, label: str) -> ManagedProcess:
    """Start driver ``job.driver`` of ``job`` (``python -m demo.pipeline``): its job file
    ``job-<n>.json`` and its log ``driver-<n>.log`` in ``workdir``."""
    n = job.driver
    path = workdir / f"job-{n}.json"
    job.save(path)
    proc = ManagedProcess(
        f"{label} driver {n}",
        [sys.executable, "-m", "demo.pipeline", str(path)],
        log_path=workdir / f"driver-{n}.log",
        cwd=REPO_ROOT,
        env=repo_env({"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable}),
    )
    proc.start()
    return proc


def _describe_commit(commit: dict[str, Any] | None, gt_last: int | None) -> str:
    if commit is None:
        return ""
    if commit["action"] == "delivered":
        return f"bundle {commit['epoch']} delivered ({commit['rows']:,} rows) -> GT_last"
    if commit["action"] == "dropped":
        return f"bundle {commit['epoch']} dropped at the barrier (already delivered)"
    return f"epoch {commit['epoch']}: no output rows"


def _minutes(text: str) -> int:
    number, unit = text.split()
    if not unit.startswith("minute"):
        raise ValueError(f"watermark delay {text!r}: expected 'N minutes'")
    return int(number)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m demo",
        description="Exactly-once Kafka -> Spark -> consumer through a driver crash, verified.",
    )
    parser.add_argument(
        "--events",
        type=int,
        default=None,
        help=f"events to produce (default {DEFAULT_EVENTS:,}; --small: {SMALL_EVENTS:,})",
    )
    parser.add_argument("--small", action="store_true", help="a quick run (about a minute)")
    parser.add_argument("--seed", type=int, default=7, help="seed of the generator (7)")
    parser.add_argument("--partitions", type=int, default=8, help="Kafka partitions (8)")
    parser.add_argument(
        "--consumer",
        choices=("file", "http", "postgres", "iceberg"),
        default="file",
        help="file: Parquet bundles in a directory (default); http: the "
        "reference receiver, python -m gtbarrier.http_receiver; postgres: a table in a local "
        "PostgreSQL (Debian's package; GTB_POSTGRES_DSN for another server); iceberg: an "
        "Iceberg table (pyiceberg, SQL catalog on SQLite, file:// warehouse)",
    )
    parser.add_argument(
        "--master",
        default="local[2]",
        help="Spark master: local[N] (default local[2]) or spark://host:port",
    )
    parser.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark settings for the drivers (repeatable)",
    )
    parser.add_argument(
        "--crash-at",
        type=float,
        default=0.4,
        help="SIGKILL the driver once this share of records is delivered (0.4)",
    )
    parser.add_argument(
        "--max-offsets-per-trigger",
        type=int,
        default=None,
        help="records per micro-batch (default: a twelfth of the events)",
    )
    parser.add_argument("--snapshot-period", default="3s", help="snapshot period (3s)")
    parser.add_argument(
        "--without-coordinator",
        action="store_true",
        help="no snapshots: recover by replaying from the start (the barrier "
        "still drops what was delivered)",
    )
    parser.add_argument(
        "--kafka", help=f"use this Kafka instead of starting Tansu (or ${'GTB_KAFKA_BOOTSTRAP'})"
    )
    parser.add_argument(
        "--s3-endpoint",
        help="use this S3 endpoint instead of starting SeaweedFS (or $GTB_S3_ENDPOINT)",
    )
    parser.add_argument(
        "--state-store",
        choices=("s3", "gcs", "azure"),
        default="s3",
        help="where the state lives: s3 (SeaweedFS, the default), gcs (fake-gcs-server) or "
        "azure (Azurite); the chosen emulator is started unless an endpoint is given",
    )
    parser.add_argument(
        "--gcs-endpoint", help="with --state-store gcs: this GCS endpoint (or $GTB_GCS_ENDPOINT)"
    )
    parser.add_argument(
        "--azure-endpoint",
        help="with --state-store azure: this blob service URL (or $GTB_AZURE_ENDPOINT)",
    )
    parser.add_argument(
        "--zookeeper", help="use this ZooKeeper instead of starting one (or $GTB_ZK_HOSTS)"
    )
    parser.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="where logs, checkpoints and the consumer go (default demo-output/<time>)",
    )
    parser.add_argument(
        "--plot", type=Path, default=None, help="where the PNG goes (default <workdir>/demo.png)"
    )
    parser.add_argument(
        "--timeout", type=float, default=900.0, help="seconds each phase may take (900)"
    )
    args = parser.parse_args(argv)
    if args.events is None:
        args.events = SMALL_EVENTS if args.small else DEFAULT_EVENTS
    if not 0.05 <= args.crash_at <= 0.9:
        parser.error("--crash-at must be between 0.05 and 0.9")
    if args.workdir is None:
        args.workdir = REPO_ROOT / "demo-output" / time.strftime("run-%Y%m%d-%H%M%S")
    args.workdir = args.workdir.resolve()
    for kv in args.conf:
        if "=" not in kv:
            parser.error(f"--conf {kv!r}: expected KEY=VALUE")
    return args


_TERMINATING = threading.Event()


def _terminate(signum: int, frame: object) -> None:
    # SIGTERM (a test's teardown, `kill`): unwind, so that drivers and servers are stopped.
    _TERMINATING.set()
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    runner = Runner(args)
    try:
        return runner.run()
    except DemoFailed as err:
        runner.say(f"DEMO FAILED: {err}")
        return 2


if __name__ == "__main__":
    sys.exit(main())
