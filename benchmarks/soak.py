"""Soak: the demo's stateful query for an hour at a steady rate, killed every 15 minutes,
or run by one driver that is never killed.

    python -m benchmarks.soak --minutes 60                 # make soak
    python -m benchmarks.soak --minutes 60 --no-kills      # make soak-lifetime
    python -m benchmarks.soak --minutes 60 --no-kills --sparse   # make soak-sparse
    python -m benchmarks.soak --minutes 3 --kill-every-minutes 1 --sample-seconds 10

One Kafka broker (Tansu) and one ZooKeeper, started here unless given (``--bootstrap`` /
``--zk-hosts``, or ``GTB_KAFKA_BOOTSTRAP`` / ``GTB_ZK_HOSTS``); state in a ``file://``
store of the work directory.

**The query** is the demo's (:mod:`demo.pipeline`: gtkafka -> parse -> enrich -> windowed
revenue + per-customer totals -> barrier -> ``file`` consumer), run as the demo runs it: a
driver program (``python -m demo.pipeline JOB.json``) in its own process group under the
:class:`~gtbarrier.SnapshotCoordinator` (ZooKeeper), snapshotting every
``--snapshot-seconds`` (30), the epoch log pruned ``--epochs-retained`` (100) epochs
below the barrier (``state.epochsRetained`` and the coordinator's ``epochs_retained``).

**Input.** This process produces the demo generator's orders and payments
(:mod:`demo.generator`, 2,000 customers) at ``--rate`` records a second (100) for the
whole run (from the start of driver 1's query; minute 0 is its first delivered bundle),
whatever the driver is doing: every ``--send-every`` seconds (5) the records due, in one
request of one record batch per partition, as a producer with a linger would. Each
event's time (``ts``) is the wall-clock time of its send (ms), so the produce time
travels with the record into the consumer's ``event_time`` column (the idea of
:mod:`benchmarks.latency`), and the 1-minute windows close as real time passes. (Batched
sends keep the test broker out of the measure: the Tansu broker answers ListOffsets and
Fetch in a time that grows with the number of record batches a partition holds. Sent
every second, an hour's 3,600 batches per partition moved the p99 by 1.28x; sent every
5 seconds, by 1.03x: docs/operations.md, "Soak".)

**Kills.** Every ``--kill-every-minutes`` (15) the driver's process group gets SIGKILL;
a new driver starts at once on the same checkpoint and state: ``recover()`` finds the
checkpoint, the source replays the recorded epochs, the barrier drops what the consumer
already has. A kill falls due only once the driver running has delivered a bundle (after
a kill: one beyond the killed driver's ``GT_last``), so it is put off while a driver
starts or resumes. With ``--no-kills`` one driver runs the whole hour: its targets
compare one process with itself, which is what says whether a driver can live for months.

**Sparse output** (``--sparse``): the query's output narrowed by a filter to about one
row every sixtieth of the run (a minute of an hour; :func:`demo.pipeline.sparse_output`:
the event rows whose offset is a multiple of ``rate x minutes``), every operator still
running: nearly every bundle is empty. Latency is then that of the few rows kept.

**Samples**, every ``--sample-seconds`` (60), one progress line each: RSS, open file
descriptors and threads of the driver's JVM, its Python process and Spark's Python
workers (the driver's process tree in ``/proc``, :mod:`benchmarks.soak_measures`);
the driver JVM's heap in use, committed, and metaspace (``jcmd <pid> GC.heap_info``);
the machine's load average;
end-to-end latency p50 and p99 of the records first seen since the previous sample
(a :class:`~benchmarks.latency.FileReader` polls the consumer every 200 ms; produce
time -> first poll that listed the record's bundle); records a second delivered; stored
objects per prefix of the pipeline's state (:class:`~state.layout.PipelineLayout`).

**The end.** Production stops, two rounds of heartbeats close every window (as
``python -m demo`` does), the driver is stopped once everything is visible, and the
consumer is checked against a batch computation of everything in the topic
(:func:`demo.verify.verify`: 0 lost, 0 duplicated, equal aggregates).

Prints the table and the targets (``<measure> = <ratio> (target ...: met)``): RSS, fds,
threads, committed heap and metaspace at the end <= 1.1x a sixth in (minute 10 of an
hour), the lowest heap in use of the last sixth <= 1.1x that of minutes 5-15, p50 of the
last sixth <= 1.1x and p99 <= 1.2x those of minutes 5-15 of an hour (before the first
kill), per prefix the last count <= the
first half's max + a slack (max(5, 10%)), 0 lost, 0 duplicated. Writes
``<out>/soak.json`` (the ratios for ``python -m benchmarks``' format and every sample)
and ``<out>/soak.png``. Exit code 1 when exactly-once fails, 2 when the run could not
finish.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sys
import threading
import time
import uuid
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC
from pathlib import Path
from typing import Any

from benchmarks.common import REPO_ROOT, load_average, print_table, write_results
from benchmarks.latency import FileReader, Visibility
from benchmarks.sink_bench import percentile
from benchmarks.soak_measures import (
    Sample,
    jvm_heap,
    jvm_pid,
    plot,
    sample_processes,
    table_rows,
    targets,
)
from demo.generator import GeneratorConfig, iso_millis, iter_events, ticks
from demo.pipeline import DemoJob
from demo.progress import ProgressTail
from demo.runner import Tracker, start_driver
from demo.services import Services
from harness.logs import tail
from harness.process import ManagedProcess
from state.layout import PipelineLayout
from state.stores import open_store

PARTITIONS = 4
CUSTOMERS = 2_000
POLL_S = 0.2  # the consumer's reader
WATERMARK_MINUTES = 5  # DemoJob.watermark_delay


class SoakFailed(RuntimeError):
    """The soak could not run to its verification (a driver failed, a wait timed out)."""


# --- input --------------------------------------------------------------------------------


def event_key(event_id: str) -> int:
    """A record's key in the :class:`Visibility` book: orders even, payments odd."""
    kind, _, number = event_id.partition("-")
    return 2 * int(number) + (1 if kind == "p" else 0)


def decode_row(row: Any) -> tuple[int, float] | None:
    """A consumer row ``(kind, event_id, event_time)`` -> (key, produce time); None for the
    aggregates (windows, customer totals)."""
    kind, event_id, event_time = row
    if kind != "event":
        return None
    stamp = event_time if event_time.tzinfo else event_time.replace(tzinfo=UTC)
    return event_key(event_id), stamp.timestamp()


class SteadyProducer(threading.Thread):
    """Sends the demo's events at ``rate`` a second until stopped: every ``every`` seconds
    the records due, each stamped with that moment as its event time, in one request (one
    record batch per partition)."""

    def __init__(self, bootstrap: str, topic: str, rate: int, every: float) -> None:
        super().__init__(daemon=True, name="soak-producer")
        from kafka import KafkaProducer

        self.topic, self.rate, self.every = topic, rate, every
        # The batches leave at flush(): linger only keeps each send from leaving alone.
        self.producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=60_000, acks=1)
        config = GeneratorConfig(
            events=10**9, seed=7, partitions=PARTITIONS, customers=CUSTOMERS, jitter_ms=0
        )
        self.events = iter_events(config)
        self.sent = 0
        self.last_ms = 0
        self.started = 0.0
        self.stopped = 0.0
        self.error: BaseException | None = None
        self._stop_event = threading.Event()

    def run(self) -> None:
        try:
            self.started = time.monotonic()
            while not self._stop_event.is_set():
                due = int(self.rate * (time.monotonic() - self.started))
                now_ms = int(time.time() * 1000)
                while self.sent < due:
                    event = next(self.events)
                    body = json.loads(event.value)
                    body["ts"] = iso_millis(now_ms)
                    self.producer.send(
                        self.topic,
                        key=event.key,
                        value=json.dumps(body, separators=(",", ":")).encode(),
                        partition=event.partition,
                    )
                    self.sent += 1
                    self.last_ms = now_ms
                self.producer.flush()
                self._stop_event.wait(self.every)
            self.producer.flush()
        except BaseException as err:  # handed to the main thread by check()
            self.error = err
        finally:
            self.stopped = time.monotonic()
            self.producer.close()

    def check(self) -> None:
        if self.error is not None:
            raise SoakFailed(f"the producer failed: {self.error!r}") from self.error

    def halt(self) -> None:
        """Stop sending (no wait)."""
        self._stop_event.set()

    def finish(self) -> None:
        """Stop sending, wait for the last records to be acknowledged."""
        self._stop_event.set()
        self.join(60)
        self.check()

    @property
    def achieved(self) -> float:
        seconds = (self.stopped or time.monotonic()) - self.started
        return self.sent / seconds if seconds > 0 else 0.0


# --- the drivers --------------------------------------------------------------------------


@dataclass
class Kill:
    t: float  # seconds since the start of production
    driver: int
    gt_last: int | None
    resumed_after_s: float | None = None  # SIGKILL -> the next driver's first new bundle


@dataclass
class Drivers:
    """The driver programs, one at a time, on one checkpoint, and their progress events."""

    job: DemoJob
    workdir: Path
    procs: list[ManagedProcess] = field(default_factory=list)
    track: Tracker = field(default_factory=Tracker)
    kills: list[Kill] = field(default_factory=list)
    _killed_at: float = 0.0  # time.time() of the last SIGKILL

    def __post_init__(self) -> None:
        self.tail = ProgressTail(Path(self.job.progress_path))

    @property
    def current(self) -> ManagedProcess:
        return self.procs[-1]

    @property
    def number(self) -> int:
        return len(self.procs)

    def start(self) -> None:
        n = self.number + 1
        self.job.driver = n
        self.job.stop_path = str(self.workdir / f"stop-{n}")
        proc = start_driver(self.job, self.workdir, "soak")
        self.procs.append(proc)

    def kill_and_restart(self, t: float) -> Kill:
        n = self.number
        self.current.kill()  # SIGKILL to the process group: Python, its JVM, its workers
        self.pump()
        kill = Kill(t, n, self.track.gt_last.get(n))
        self.kills.append(kill)
        self._killed_at = time.time()
        self.start()
        return kill

    def delivering(self) -> bool:
        """Whether the driver running has delivered a bundle (after the last kill, a new
        one): a kill is put off until then, so that each kill hits a driver that resumed."""
        if not self.kills:
            return self.track.gt_last.get(self.number, -1) >= 0
        return self.kills[-1].resumed_after_s is not None

    def pump(self) -> None:
        """Read new progress events; note when a killed driver's successor resumed."""
        for e in self.tail.new():
            self.track.add(e)
            kill = self.kills[-1] if self.kills else None
            if (
                kill is not None
                and kill.resumed_after_s is None
                and e["event"] == "commit"
                and e["driver"] == kill.driver + 1
                and e["action"] == "delivered"
                and e["epoch"] > (kill.gt_last if kill.gt_last is not None else -1)
            ):
                kill.resumed_after_s = float(e["t"]) - self._killed_at

    def check(self) -> None:
        n = self.number
        if n in self.track.failed or not self.current.running:
            raise SoakFailed(
                f"driver {n} stopped (exit code {self.current.returncode}): "
                f"{self.track.failed.get(n, '')}; last lines of "
                f"{self.current.log_path}:\n{tail(self.current.log_path, 40)}"
            )

    @property
    def snapshots(self) -> int:
        return sum(len(v) for v in self.track.snapshots.values())

    def wait(self, what: str, done: Any, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while True:
            self.pump()
            if done():
                return
            self.check()
            if time.monotonic() > deadline:
                raise SoakFailed(f"timed out after {timeout:.0f}s waiting for {what}")
            time.sleep(0.2)

    def stop(self, timeout: float) -> None:
        Path(self.job.stop_path).touch()
        deadline = time.monotonic() + timeout
        while self.current.running and time.monotonic() < deadline:
            self.pump()
            time.sleep(0.2)
        self.pump()
        if self.current.running or self.current.returncode != 0:
            raise SoakFailed(
                f"driver {self.number} did not stop cleanly (exit code "
                f"{self.current.returncode}); last lines:\n{tail(self.current.log_path, 40)}"
            )

    def close(self) -> None:
        for proc in self.procs:
            proc.stop(grace=15)


# --- the run ------------------------------------------------------------------------------


def count_objects(store: Any, layout: PipelineLayout) -> dict[str, int]:
    """Stored objects per top-level prefix of the pipeline (as :class:`PipelineLayout`
    names them)."""
    prefixes = {
        "source/": layout.source_start.rsplit("/", 1)[0] + "/",
        "epochs/": layout.epochs_prefix,
        "batches/": layout.batches_prefix(),
        "barrier/": layout.barrier_state.rsplit("/", 1)[0] + "/",
        "staging/": layout.staging_prefix,
        "snapshots/": layout.snapshots_prefix,
        "snapshot-blobs/": layout.snapshot_blobs_prefix,
        "coordinator/": layout.driver.rsplit("/", 1)[0] + "/",
    }
    return {name: len(store.list(prefix)) for name, prefix in prefixes.items()}


def run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:  # noqa: PLR0915 - the script
    from demo.verify import expected_from_records, read_file_consumer, verify

    run_id = uuid.uuid4().hex[:6]
    pipeline, topic = f"soak-{run_id}", f"soak-{run_id}"
    seconds = args.minutes * 60
    with ExitStack() as stack:
        services = Services(
            workdir / "services",
            kafka=args.bootstrap,
            zookeeper=args.zk_hosts,
            parts=("kafka", "zookeeper"),
        ).start()
        stack.callback(services.stop)
        for line in services.describe():
            print(f"service: {line}", flush=True)
        kafka = services.kafka("soak")
        stack.callback(kafka.close)
        kafka.create_topic(partitions=PARTITIONS, name=topic)
        consumer = workdir / "consumer"
        job = DemoJob(
            pipeline_id=pipeline,
            topic=topic,
            bootstrap=services.bootstrap,
            state_uri=f"file://{workdir / 'state'}",
            s3_options={},
            zookeeper_hosts=services.zookeeper_hosts,
            checkpoint=str(workdir / "checkpoint"),
            consumer="file",
            consumer_path=str(consumer),
            progress_path=str(workdir / "progress.jsonl"),
            max_offsets_per_trigger=max(1_000, 30 * args.rate),
            snapshot_period=f"{args.snapshot_seconds}s",
            shuffle_partitions=2,
            epochs_retained=args.epochs_retained,
            sparse_modulus=sparse_modulus(args),
        )
        drivers = Drivers(job, workdir)
        stack.callback(drivers.close)
        drivers.start()
        drivers.wait("driver 1's query", lambda: 1 in _started(drivers), args.timeout)
        print(f"driver 1 (pid {drivers.current.pid}) running; producing {args.rate}/s", flush=True)

        book = Visibility(decode_row)
        reader = FileReader(book, POLL_S, consumer, ("kind", "event_id", "event_time"))
        producer = SteadyProducer(services.bootstrap, topic, args.rate, args.send_every)
        store = open_store(job.state_uri)
        layout = PipelineLayout(pipeline)
        samples: list[Sample] = []
        reader.start()
        stack.callback(reader.stop)
        producer.start()
        stack.callback(producer.halt)
        # Minute 0 is the first bundle delivered: the session's first micro-batch (the
        # JVM's JIT, the Python workers' imports) is a start-up cost, not the soak's.
        drivers.wait("driver 1's first bundle", drivers.delivering, args.timeout)
        t0_wall, t0 = time.time(), time.monotonic()
        print(f"driver 1 delivered its first bundle: minute 0 ({producer.sent:,} produced)")
        kill_seconds = None if args.no_kills else args.kill_every_minutes * 60
        next_sample, next_kill = args.sample_seconds, kill_seconds
        previous = t0_wall
        probe = BrokerProbe(services.bootstrap, topic, PARTITIONS)
        stack.callback(probe.close)
        counted = len(drivers.track.events)
        while True:
            now = time.monotonic() - t0
            drivers.pump()
            drivers.check()
            reader.check()
            producer.check()
            if (
                next_kill is not None
                and next_kill < seconds
                and now >= next_kill
                and drivers.delivering()
            ):
                kill = drivers.kill_and_restart(now)
                print(
                    f"[{now / 60:5.1f} min] SIGKILL driver {kill.driver} at GT_last "
                    f"{kill.gt_last}; driver {drivers.number} started on the same checkpoint",
                    flush=True,
                )
                next_kill += kill_seconds
            if now >= next_sample:
                wall = time.time()
                latencies = book.seen_between(previous, wall)
                batches = [e for e in drivers.track.events[counted:] if e["event"] == "batch"]
                counted = len(drivers.track.events)
                root = drivers.current.pid if drivers.current.running else None
                sample = Sample(
                    t=now,
                    procs=sample_processes(root),
                    p50_ms=percentile(latencies, 0.5),
                    p99_ms=percentile(latencies, 0.99),
                    delivered=len(latencies),
                    per_second=len(latencies) / max(1e-9, wall - previous),
                    objects=count_objects(store, layout),
                    driver=drivers.number,
                    snapshots=drivers.snapshots,
                    add_batch_ms=median_duration(batches, "addBatch"),
                    latest_offset_ms=median_duration(batches, "latestOffset"),
                    broker_ms=probe.list_offsets_ms(),
                    heap=jvm_heap(jvm_pid(root)),
                    load=os.getloadavg()[0],
                )
                previous = wall
                samples.append(sample)
                print(sample.line(), flush=True)
                if now >= seconds:
                    break
                next_sample = min(next_sample + args.sample_seconds, seconds)
            time.sleep(0.2)

        producer.finish()
        produced, last_ms = producer.sent, producer.last_ms
        print(
            f"produced {produced:,} records ({producer.achieved:,.1f}/s); "
            f"{len(drivers.kills)} kills; {drivers.snapshots} snapshots; waiting for the rest",
            flush=True,
        )
        if job.sparse_modulus is None:
            drivers.wait(
                "every record to be visible",
                lambda: len(book.first_seen) >= produced,
                args.timeout,
            )
        else:  # the consumer sees a few of them: every record read is the mark
            drivers.wait(
                "every record to be read",
                lambda: drivers.track.max_offsets.get(drivers.number, 0) >= produced,
                args.timeout,
            )
        # Two rounds of heartbeats past the watermark close every window (python -m demo).
        stamp = last_ms + (WATERMARK_MINUTES + 2) * 60_000
        for round_ in (1, 2):
            kafka.produce(topic, (b.record() for b in ticks(PARTITIONS, stamp + round_ * 60_000)))
            target = produced + round_ * PARTITIONS
            drivers.wait(
                f"heartbeat round {round_}",
                lambda target=target: drivers.track.max_offsets.get(drivers.number, 0) >= target,
                args.timeout,
            )
        drivers.stop(timeout=120)
        reader.stop()
        reader.check()
        # The whole topic, read back from the broker: minutes, not seconds, after an hour.
        print(f"reading the topic back ({produced:,} records) to check exactly-once", flush=True)
        read_back = kafka.consume_all(topic, timeout=args.timeout)
        records = [(r.partition, r.offset, r.value) for r in read_back]
        expected = expected_from_records(records)
        if job.sparse_modulus is not None:
            expected = sparse_expected(expected, job.sparse_modulus)
        result = verify(read_file_consumer(consumer), expected)
        seen = [
            (at - t0_wall, 1000.0 * (at - book.produced_at[k])) for k, at in book.first_seen.items()
        ]
    return {
        "seconds": seconds,
        "samples": samples,
        "kills": drivers.kills,
        "snapshots": drivers.snapshots,
        "produced": produced,
        "achieved_rate": producer.achieved,
        "verification": result,
        "reader_duplicates": sum(book.duplicates.values()),
        "seen": seen,
        "pipeline": pipeline,
        "gt_last": max(drivers.track.gt_last.values(), default=-1),
    }


class BrokerProbe:
    """Times the broker's ListOffsets for the soak's topic, on a client of its own."""

    def __init__(self, bootstrap: str, topic: str, partitions: int) -> None:
        from kafka import KafkaConsumer, TopicPartition

        self.client = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
        self.partitions = [TopicPartition(topic, p) for p in range(partitions)]

    def list_offsets_ms(self, times: int = 3) -> float:
        """The median of ``times`` ListOffsets requests for every partition, in ms."""
        took = []
        for _ in range(times):
            started = time.perf_counter()
            self.client.end_offsets(self.partitions)
            took.append(1000.0 * (time.perf_counter() - started))
        return percentile(took, 0.5)

    def close(self) -> None:
        self.client.close()


def median_duration(batches: list[dict[str, Any]], phase: str) -> float:
    """The median of Spark's ``durationMs[phase]`` over ``batches`` (NaN if none)."""
    return percentile(
        [float(b["durations"][phase]) for b in batches if phase in b["durations"]], 0.5
    )


def sparse_modulus(args: argparse.Namespace) -> int | None:
    """``--sparse``: the offset modulus of :func:`demo.pipeline.sparse_output` that outputs
    a row every sixtieth of the run (a minute of an hour) at ``--rate``; None without it."""
    if not args.sparse:
        return None
    return max(1, round(float(args.rate) * float(args.minutes)))  # rate * (seconds / 60)


def sparse_expected(expected: Any, modulus: int) -> Any:
    """:class:`demo.verify.Expected` of :func:`demo.pipeline.sparse_output`: the records
    whose offset is a multiple of ``modulus``, and no aggregates."""
    from demo.verify import Expected

    events = expected.events[expected.events["src_offset"] % modulus == 0]
    return Expected(
        records=len(events),
        heartbeats=expected.heartbeats,
        events=events.reset_index(drop=True),
        windows=expected.windows.iloc[0:0],
        customers=expected.customers.iloc[0:0],
    )


def _started(drivers: Drivers) -> set[int]:
    return {e["driver"] for e in drivers.track.events if e["event"] == "query_started"}


# --- options and main ---------------------------------------------------------------------


def _positive(kind: type[float] | type[int], what: str) -> Any:
    def parse(text: str) -> float | int:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text!r}: expected {what} greater than 0")
        return value

    return parse


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.soak",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    number, integer = _positive(float, "a number"), _positive(int, "an integer")
    parser.add_argument("--minutes", type=number, default=60.0, help="of production (60)")
    parser.add_argument("--rate", type=integer, default=100, help="records a second (100)")
    parser.add_argument(
        "--send-every",
        type=number,
        default=5.0,
        help="seconds between the producer's sends, each one record batch per partition (5)",
    )
    parser.add_argument(
        "--kill-every-minutes", type=number, default=None, help="SIGKILL the driver (15)"
    )
    parser.add_argument(
        "--no-kills",
        action="store_true",
        help="one driver for the whole run, never killed: does its process grow?",
    )
    parser.add_argument(
        "--sparse",
        action="store_true",
        help="output about one row every sixtieth of the run (a minute of an hour): only "
        "the event rows whose offset is a multiple of rate x minutes",
    )
    parser.add_argument("--snapshot-seconds", type=integer, default=30, help="period (30)")
    parser.add_argument(
        "--sample-seconds",
        type=number,
        default=None,
        help="period (60, or a sixth of a shorter run)",
    )
    parser.add_argument(
        "--epochs-retained", type=integer, default=100, help="epochs kept below GT_last (100)"
    )
    parser.add_argument(
        "--timeout", type=number, default=600.0, help="seconds each wait may take (600)"
    )
    parser.add_argument("--bootstrap", default=os.environ.get("GTB_KAFKA_BOOTSTRAP"))
    parser.add_argument("--zk-hosts", default=os.environ.get("GTB_ZK_HOSTS"))
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO_ROOT / "results",
        help="directory of soak.json and soak.png (results/)",
    )
    args = parser.parse_args(argv)
    seconds = args.minutes * 60
    if args.sample_seconds is None:
        args.sample_seconds = min(60.0, seconds / 6)
    if args.sample_seconds > seconds / 6:
        parser.error(
            f"--sample-seconds {args.sample_seconds:g}: at most a sixth of the run "
            f"({seconds / 6:g} s), so that every sixth has a sample"
        )
    if args.no_kills and args.kill_every_minutes is not None:
        parser.error(
            f"--kill-every-minutes {args.kill_every_minutes:g}: not with --no-kills, which "
            "never kills the driver"
        )
    if args.kill_every_minutes is None:
        args.kill_every_minutes = 15.0
    if not args.no_kills and args.kill_every_minutes >= args.minutes:
        parser.error(
            f"--kill-every-minutes {args.kill_every_minutes:g}: less than --minutes "
            f"{args.minutes:g}, or no driver is ever killed"
        )
    if args.send_every >= args.sample_seconds:
        parser.error(
            f"--send-every {args.send_every:g}: less than --sample-seconds "
            f"{args.sample_seconds:g}, so that every sample sees records"
        )
    if args.snapshot_seconds >= seconds:
        parser.error(
            f"--snapshot-seconds {args.snapshot_seconds}: less than the run's {seconds:g} s"
        )
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"--out {args.out}: not a directory")
    return args


def _as_json(
    outcome: dict[str, Any], ratios: list[Any], args: argparse.Namespace
) -> dict[str, Any]:
    v = outcome["verification"]
    return {
        "options": {k: str(val) if isinstance(val, Path) else val for k, val in vars(args).items()},
        "samples": [s.to_json() for s in outcome["samples"]],
        "kills": [vars(k) for k in outcome["kills"]],
        "snapshots": outcome["snapshots"],
        "gt_last": outcome["gt_last"],
        "produced": outcome["produced"],
        "achieved_rate": outcome["achieved_rate"],
        "exactly_once": {
            "ok": v.ok,
            "records_in": v.records_in,
            "event_rows": v.event_rows,
            "missing": v.missing,
            "duplicates": v.duplicates,
            "unexpected": v.unexpected,
            "stateful_equal": v.stateful_equal,
            "reader_duplicates": outcome["reader_duplicates"],
            "details": v.details,
        },
        "ratios_met": sum(1 for r in ratios if r.met),
    }


def _terminate(signum: int, frame: object) -> None:
    # SIGTERM (a test's timeout, `kill`): unwind, so that the drivers and servers are stopped
    raise SystemExit(128 + signum)


def main(argv: list[str] | None = None) -> int:
    from demo.verify import render_table
    from demo.verify import table_rows as verification_rows

    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    started = time.monotonic()
    # Under --out, not a temporary directory: a failed run keeps its drivers' logs,
    # checkpoints and state for a look; a run that finishes removes them.
    work = Path(args.out) / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    try:
        outcome = run(args, work)
    except SoakFailed as err:
        print(f"SOAK FAILED: {err}\n(the run's drivers' logs and state are kept in {work})")
        return 2
    shutil.rmtree(work, ignore_errors=True)
    samples: list[Sample] = outcome["samples"]
    v = outcome["verification"]
    print()
    print_table(*table_rows(samples))
    print()
    kills = "; ".join(
        f"minute {k.t / 60:.1f} (driver {k.driver}, GT_last {k.gt_last}, resumed "
        + ("never" if k.resumed_after_s is None else f"{k.resumed_after_s:.1f} s later")
        + ")"
        for k in outcome["kills"]
    )
    extra = [
        ("kills", kills or "none"),
        ("snapshots", str(outcome["snapshots"])),
        ("produced", f"{outcome['produced']:,} at {outcome['achieved_rate']:,.1f}/s"),
    ]
    print(render_table(verification_rows(v, extra), "Exactly once (consumer vs. the topic):"))
    ratios = targets(
        samples, outcome["seconds"], outcome["seen"], lost=v.missing, duplicated=v.duplicates
    )
    print()
    print_table(
        ["benchmark", "measure", "value", "target", "verdict", "note"],
        [r.cells() for r in ratios],
    )
    print(f"load average: {load_average()}; wall time {time.monotonic() - started:.0f} s")
    args.out.mkdir(parents=True, exist_ok=True)
    write_results(args.out / "soak.json", ratios, _as_json(outcome, ratios, args))
    png = args.out / "soak.png"
    kills = (
        "one driver, never killed"
        if args.no_kills
        else f"SIGKILL every {args.kill_every_minutes:g} min"
    )
    sparse = f", sparse output (offset % {sparse_modulus(args)} == 0)" if args.sparse else ""
    plot(
        samples,
        [k.t for k in outcome["kills"]],
        png,
        f"gtbarrier soak: demo query{sparse}, {args.rate}/s, {kills}, snapshots every "
        f"{args.snapshot_seconds} s, {args.minutes:g} min ({os.cpu_count()} cores, load at "
        f"the end {load_average()})",
    )
    print(f"results: {args.out / 'soak.json'}; plot: {png}", flush=True)
    return 0 if v.ok and outcome["reader_duplicates"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
