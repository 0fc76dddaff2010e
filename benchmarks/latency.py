"""End-to-end latency: produce time -> visible to a reader of the consumer.

    python -m benchmarks.latency                      # about 4 minutes on 2 quiet cores
    python -m benchmarks.latency --comparison-seconds 10 --repeat 1 --step-seconds 4

One Kafka broker (Tansu, started here or ``--bootstrap``), a PostgreSQL server
(started here or ``GTB_POSTGRES_DSN``) and a ZooKeeper (started here or
``--zk-hosts`` / ``GTB_ZK_HOSTS``). One SparkSession (``local[2]``) runs, one query at a
time, ``gtkafka`` (4 partitions, ``file://`` state) -> ``key, value, gt`` -> ``barrier``.

**Input.** This process produces records at a fixed rate (kafka-python, ``linger_ms=5``,
``acks=1``): every 5 ms it sends the records due by then. Each record's value is
``b"<sequence>,<time.time() at send()>"``, so its produce time travels with it into the
consumer. A step is a rate held for some seconds; after it, production pauses until
every record of the step is visible (so each step starts from an empty pipeline), at
most ``--drain-timeout`` seconds.

**Visibility.** A thread of this process polls the consumer from outside the query,
every ``--poll-ms`` (50 ms), and records for each record the first poll that returned
it:

* ``file``: lists ``consumer.path`` (the names a reader reads: ``bundle-*.parquet``,
  which appear by an atomic rename) and reads each new file's ``value`` column; the
  time is taken before the listing;
* ``postgres``: ``SELECT gt_epoch, value FROM <table> WHERE gt_epoch > <newest seen>``
  on an autocommit connection (READ COMMITTED: a bundle's rows appear with its
  transaction's commit); the time is taken before the statement;
* ``kafka``: a ``KafkaConsumer`` with ``isolation_level=read_committed`` assigned every
  partition of the output topic, ``poll(timeout_ms=<poll-ms>)``, ``fetch_max_wait_ms``
  = the poll interval; the time is taken when the poll returns. (Tansu, the test
  broker, lists no aborted transactions; nothing is aborted here.)

Clock: ``time.time()`` of this one process for both ends (same host, same clock). A
latency is thus an upper bound by at most one poll interval plus the poll's own
duration (reading the new files or rows). Every record is checked to be seen exactly
once (a second sighting is counted as a duplicate, a record never seen as missing).

**Runs** (each a new query on a new topic and pipeline, printed as it ends):

1. *Comparison* (``--comparison-rate``, 2,000/s; file consumer; trigger 0), after an
   unmeasured 2-second run of each variant (:func:`warm_ups`), in turn ``--repeat``
   times, the order reversed every other turn, the records of each variant's turns
   pooled: ``delivery=exactly-once``, ``delivery=at-least-once`` and
   exactly-once with a :class:`~gtbarrier.SnapshotCoordinator` (ZooKeeper) snapshotting
   every 5 s. Targets: exactly-once p99 <= 1.15x at-least-once p99; with snapshots p99
   <= 1.10x without; exactly-once p99 <= 2.2x the median micro-batch duration
   (``batchDuration`` of the batches that read input) of the same runs. With
   ``--driver-mode`` (``make bench``), two more variants: gtkafka ``readMode=driver``
   exactly-once and at-least-once; targets: its exactly-once p99 <= 0.6x executor
   mode's, and <= 1.15x its at-least-once p99.
2. *Per consumer* (file, postgres, kafka; exactly-once): trigger 0 at the
   ``--fixed-rates`` (1,000 and 10,000/s), and a 1-second processing-time trigger going up
   the ``--search-rates`` until a step is not sustained: its p99 reaches 2x the trigger
   interval, its records are not all visible within the drain timeout, or the producer
   could not reach 95% of the rate. The highest sustained rate is reported per consumer.

3. *Driver-side reads* (``--driver``; docs/performance.md, "Driver-side reads,
   measured"): the same topic read by ``gtkafka`` and by ``kafka_driver``
   (:class:`benchmarks.driver_reads.KafkaDriverSource`, read on the driver: PySpark's
   ``SimpleDataSourceStreamReader``), each -> ``value`` -> Spark's own ``parquet`` file
   sink (the barrier takes a gtkafka source only), at ``--comparison-rate``, trigger 0
   and 1 s, in turn ``--repeat`` times. Its reader (``spark-parquet``) reads the sink's
   ``_spark_metadata`` log, which names the files of a batch once it is committed, and
   then those files. Printed: each source's p50 and p99 and the ratio.

The source runs at its defaults unless ``--refresh-ms`` sets ``fetchOffset.refreshIntervalMs``
(1,000 ms): gtkafka caches Kafka's end offsets on the driver that long, so a batch may
be planned with ends up to a second old, and a record can wait for the next refresh as
well as for the next trigger.

Each reader also notes the bundle that carried a record (the file's name, ``gt_epoch``,
the ``gtb.bundle`` header), and so the *wait*: produce time -> the start of the
micro-batch that carried it (its ``StreamingQueryProgress.timestamp``); the rest of the
latency is that batch's work up to the delivery, and the poll.

Prints a table of every step and the targets (``<measure> = <value> (target ...: met)``),
writes ``--json`` for ``python -m benchmarks`` and ``<out>/latency.png`` (latency CDFs).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

from benchmarks.common import (
    REPO_ROOT,
    Ratio,
    kafka_bootstrap,
    load_average,
    local_spark,
    print_table,
    target_ratio,
    write_results,
)
from benchmarks.sink_bench import percentile
from sink.consumers.kafka.kafka_consumer import sink_header
from sink.consumers.kafka.kafka_rows import H_BUNDLE

CONSUMERS = ("file", "postgres", "kafka")
EO, ALO = "exactly-once", "at-least-once"
EO_TARGET, SNAPSHOT_TARGET, BATCH_TARGET = "<= 1.15x", "<= 1.10x", "<= 2.2x"
# readMode=driver (--driver-mode): its exactly-once p99 against executor mode's, and
# against its own at-least-once.
DRIVER_MODE_TARGET, DRIVER_MODE_EO_TARGET = "<= 0.6x", "<= 1.15x"
DRIVER_EO, DRIVER_ALO = "file exactly-once, readMode=driver", "file at-least-once, readMode=driver"
SNAPSHOT_PERIOD = "5s"
PARTITIONS = 4
SEARCH_TRIGGER_S = 1.0
SEARCH_BOUND = 2.0  # a sustained step's p99 stays under this many trigger intervals
PRODUCER_SHARE = 0.95  # of the rate asked, for a step to count as produced at that rate
QUANTILES = (0.5, 0.95, 0.99)
COMPARISON = ("file exactly-once", "file at-least-once", "file exactly-once, snapshots")
SPARK_PARQUET = "spark-parquet"  # Spark's own file sink: the driver-side reads' comparison
SOURCES = ("gtkafka", "kafka_driver")
#: kafka_driver's read per batch: more than a step produces, so that, as gtkafka without
#: maxOffsetsPerTrigger, it reads everything there is.
DRIVER_MAX_READ = 1_000_000


# --- the pure parts: values, bookkeeping, percentiles, the search's decision ---------------


def encode_value(seq: int, produced_at: float) -> bytes:
    """A record's value: its sequence number and produce time (``time.time()``)."""
    return b"%d,%.6f" % (seq, produced_at)


def decode_value(value: bytes) -> tuple[int, float]:
    seq, _, at = bytes(value).partition(b",")
    return int(seq), float(at)


class Visibility:
    """Which records a reader has seen, and when each was first seen.

    :meth:`observe` is called by the polling thread with the values one poll returned and
    the poll's time; the other methods may be called from any thread.
    """

    def __init__(self, decode: Callable[[Any], tuple[int, float] | None] = decode_value) -> None:
        #: a value as its reader returns it -> (sequence, produce time), None for a row
        #: that carries no record of the input (e.g. an aggregate)
        self.decode = decode
        self._lock = threading.Lock()
        self.first_seen: dict[int, float] = {}
        self.produced_at: dict[int, float] = {}
        self.duplicates: dict[int, int] = {}  # sequence -> sightings after the first
        self.bundle: dict[int, int] = {}  # sequence -> the bundle that carried it

    def observe(self, items: Iterable[tuple[Any, int | None]], at: float) -> None:
        """``items``: each value seen with the id of the bundle that carried it (if known)."""
        with self._lock:
            for value, bundle in items:
                decoded = self.decode(value)
                if decoded is None:
                    continue
                seq, produced = decoded
                if seq in self.first_seen:
                    self.duplicates[seq] = self.duplicates.get(seq, 0) + 1
                else:
                    self.first_seen[seq] = at
                    self.produced_at[seq] = produced
                    if bundle is not None:
                        self.bundle[seq] = bundle

    def seen(self, seqs: range) -> int:
        """How many of ``seqs`` have been seen."""
        with self._lock:
            return sum(1 for s in seqs if s in self.first_seen)

    def missing(self, seqs: range) -> list[int]:
        with self._lock:
            return [s for s in seqs if s not in self.first_seen]

    def latencies_ms(self, seqs: range) -> list[float]:
        """First sighting minus produce time, in ms, of each record of ``seqs`` seen."""
        with self._lock:
            return [
                1000.0 * (self.first_seen[s] - self.produced_at[s])
                for s in seqs
                if s in self.first_seen
            ]

    def seen_between(self, since: float, until: float) -> list[float]:
        """First sighting minus produce time, in ms, of every record first seen in
        ``(since, until]`` (``time.time()`` seconds)."""
        with self._lock:
            return [
                1000.0 * (at - self.produced_at[s])
                for s, at in self.first_seen.items()
                if since < at <= until
            ]

    def waits_ms(self, seqs: range, batch_start: Mapping[int, float]) -> list[float]:
        """Produce time -> the start of the micro-batch that carried the record, in ms, of
        each record of ``seqs`` seen in a bundle whose batch started at
        ``batch_start[bundle]``."""
        with self._lock:
            return [
                1000.0 * (batch_start[self.bundle[s]] - self.produced_at[s])
                for s in seqs
                if s in self.bundle and self.bundle[s] in batch_start
            ]

    def unexpected(self, seqs: range) -> list[int]:
        """Records seen that are not in ``seqs`` (none are produced outside a run's range)."""
        with self._lock:
            return [s for s in self.first_seen if s not in seqs]


def quantiles(values: Sequence[float]) -> dict[str, float]:
    """p50, p95 and p99 (nearest rank, as every benchmark here)."""
    return {f"p{round(q * 100)}": percentile(list(values), q) for q in QUANTILES}


def step_verdict(
    *, rate: int, achieved: float, drained: bool, p99_ms: float, bound_ms: float
) -> tuple[bool, str]:
    """Is a step of the rate search sustained, and if not, why."""
    if achieved < PRODUCER_SHARE * rate:
        return False, f"the producer reached {achieved:,.0f}/s only"
    if not drained:
        return False, "its records were not all visible within the drain timeout"
    if not p99_ms < bound_ms:
        return False, f"p99 {p99_ms:,.0f} ms >= {bound_ms:,.0f} ms"
    return True, f"p99 {p99_ms:,.0f} ms < {bound_ms:,.0f} ms"


def highest_sustained(steps: Sequence[tuple[int, bool]]) -> int | None:
    """The highest rate of the ascending steps ``(rate, sustained)`` before the first one
    not sustained (None if the first was not)."""
    best = None
    for rate, sustained in steps:
        if not sustained:
            break
        best = rate
    return best


# --- readers of the consumers ------------------------------------------------------------


class Reader(threading.Thread):
    """Polls a consumer every ``interval`` seconds into a :class:`Visibility`."""

    def __init__(self, book: Visibility, interval: float) -> None:
        super().__init__(daemon=True, name=f"latency-{type(self).__name__}")
        self.book = book
        self.interval = interval
        self.polls = 0
        self.error: BaseException | None = None
        self._stop_event = threading.Event()

    def poll(self) -> tuple[list[tuple[Any, int | None]], float]:
        """The values newly visible with the ids of their bundles, and the time they were
        seen at."""
        raise NotImplementedError

    def close(self) -> None:
        """Release the reader's client (called in its thread, after the last poll)."""

    def run(self) -> None:
        try:
            while not self._stop_event.is_set():
                began = time.monotonic()
                values, at = self.poll()
                self.polls += 1
                self.book.observe(values, at)
                self._stop_event.wait(max(0.0, self.interval - (time.monotonic() - began)))
        except BaseException as err:  # handed to the main thread by check()
            self.error = err
        finally:
            self.close()

    def check(self) -> None:
        if self.error is not None:
            raise RuntimeError(f"{self.name} failed: {self.error!r}") from self.error

    def stop(self) -> None:
        self._stop_event.set()
        self.join(30)


class FileReader(Reader):
    """Reads the ``columns`` of each new bundle file of a ``file`` consumer: a value is that
    column's value if there is one column, else the row's tuple of them."""

    def __init__(
        self, book: Visibility, interval: float, path: Path, columns: Sequence[str] = ("value",)
    ) -> None:
        super().__init__(book, interval)
        self.path = path
        self.columns = tuple(columns)
        self.read: set[str] = set()

    def poll(self) -> tuple[list[tuple[Any, int | None]], float]:
        import pyarrow.parquet as pq

        at = time.time()
        try:
            names = sorted(
                e.name
                for e in os.scandir(self.path)
                if e.name.startswith("bundle-") and e.name.endswith(".parquet")
            )
        except FileNotFoundError:
            return [], at
        values: list[tuple[Any, int | None]] = []
        for name in names:
            if name not in self.read:
                self.read.add(name)
                table = pq.read_table(self.path / name, columns=list(self.columns))
                bundle = int(name.removeprefix("bundle-").removesuffix(".parquet"))
                cells = [table.column(c).to_pylist() for c in self.columns]
                rows = cells[0] if len(cells) == 1 else list(zip(*cells, strict=True))
                values += [(v, bundle) for v in rows]
        return values, at


class SparkFileReader(Reader):
    """Reads the ``value`` column of the files Spark's file sink committed: its
    ``_spark_metadata`` log names a batch's files once the batch is committed (written
    by an atomic rename); a file is read when a log entry first names it, with the
    entry's batch id as its bundle."""

    def __init__(self, book: Visibility, interval: float, path: Path) -> None:
        super().__init__(book, interval)
        self.path = path
        self.logs: set[str] = set()
        self.files: set[str] = set()

    def poll(self) -> tuple[list[tuple[Any, int | None]], float]:
        import json
        from urllib.parse import unquote, urlparse

        import pyarrow.parquet as pq

        at = time.time()
        try:
            # log files are named <batch> or <batch>.compact; the others are temporary
            names = [
                e.name
                for e in os.scandir(self.path / "_spark_metadata")
                if e.name.split(".")[0].isdigit() and e.name.count(".") <= 1
            ]
        except FileNotFoundError:
            return [], at
        values: list[tuple[Any, int | None]] = []
        for name in sorted(names, key=lambda n: int(n.split(".")[0])):
            if name in self.logs:
                continue
            self.logs.add(name)
            batch = int(name.split(".")[0])
            for line in (self.path / "_spark_metadata" / name).read_text().splitlines()[1:]:
                entry = json.loads(line)
                if entry.get("action") != "add" or entry["path"] in self.files:
                    continue
                self.files.add(entry["path"])
                table = pq.read_table(unquote(urlparse(entry["path"]).path), columns=["value"])
                values += [(v, batch) for v in table.column("value").to_pylist()]
        return values, at


class PostgresReader(Reader):
    def __init__(self, book: Visibility, interval: float, dsn: str, table: str) -> None:
        super().__init__(book, interval)
        self.dsn, self.table = dsn, table
        self.newest = -1
        self.conn: Any = None

    def poll(self) -> tuple[list[tuple[bytes, int | None]], float]:
        import psycopg

        if self.conn is None:
            self.conn = psycopg.connect(self.dsn, autocommit=True)
        at = time.time()
        try:
            rows = self.conn.execute(
                f"SELECT gt_epoch, value FROM {self.table} WHERE gt_epoch > %s",
                (self.newest,),
            ).fetchall()
        except psycopg.errors.UndefinedTable:  # the consumer creates it with its first bundle
            return [], at
        if rows:
            self.newest = max(epoch for epoch, _ in rows)
        return [(bytes(value), int(epoch)) for epoch, value in rows], at

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()


class KafkaReader(Reader):
    def __init__(self, book: Visibility, interval: float, bootstrap: str, topic: str) -> None:
        super().__init__(book, interval)
        from kafka import KafkaConsumer, TopicPartition

        self.timeout_ms = max(1, round(1000 * interval))

        self.consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            isolation_level="read_committed",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            fetch_max_wait_ms=self.timeout_ms,
        )
        self.consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])

    def run(self) -> None:
        # poll() waits up to the interval for records itself: no sleep between polls
        self.interval = 0.0
        super().run()

    def poll(self) -> tuple[list[tuple[bytes, int | None]], float]:
        batches = self.consumer.poll(timeout_ms=self.timeout_ms)
        at = time.time()
        return [
            (r.value, sink_header(r.headers, H_BUNDLE))
            for records in batches.values()
            for r in records
        ], at

    def close(self) -> None:
        self.consumer.close()


# --- one query --------------------------------------------------------------------------


@dataclass(frozen=True)
class RunSpec:
    label: str
    consumer: str
    delivery: str
    trigger_s: float
    rates: tuple[int, ...]
    seconds: float
    snapshots: bool = False
    search: bool = False  # stop at the first step that is not sustained
    source: str = "gtkafka"  # or kafka_driver (into spark-parquet only)
    read_mode: str = "executors"  # gtkafka's readMode


@dataclass
class Step:
    rate: int
    seqs: range
    seconds: float
    drained: bool
    latencies_ms: list[float]
    batch_ms: list[float]
    sustained: bool | None = None
    why: str = ""
    wait_ms: list[float] = field(default_factory=list)  # produce -> its batch's start

    @property
    def achieved(self) -> float:
        return len(self.seqs) / self.seconds if self.seconds else 0.0


@dataclass
class RunResult:
    spec: RunSpec
    steps: list[Step]
    produced: int
    seen: int
    duplicates: int
    missing: int
    unexpected: int
    min_latency_ms: float
    snapshots_taken: int = 0
    polls: int = 0

    def latencies(self) -> list[float]:
        return [ms for s in self.steps for ms in s.latencies_ms]

    def batch_ms(self) -> list[float]:
        return [ms for s in self.steps for ms in s.batch_ms]


@dataclass
class Context:
    spark: Any
    args: argparse.Namespace
    bootstrap: str
    workdir: Path
    postgres_dsn: str | None
    postgres_schema: str | None
    zk_hosts: str | None
    producer: Any = None
    results: list[RunResult] = field(default_factory=list)


def create_topic(bootstrap: str, topic: str) -> None:
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])
    finally:
        admin.close()


def produce(
    producer: Any, topic: str, first: int, rate: int, seconds: float
) -> tuple[range, float]:
    """Send ``rate`` records a second for ``seconds`` (sequences from ``first``), each
    stamped with the time of its ``send()``, then flush; returns the sequences sent and
    the seconds from the start to the last ``send()`` (longer than ``seconds`` when the
    producer cannot keep up)."""
    seq = first
    began = time.monotonic()
    last = began
    while True:
        elapsed = time.monotonic() - began
        due = first + min(int(rate * elapsed), int(rate * seconds))
        while seq < due:
            producer.send(topic, value=encode_value(seq, time.time()))
            seq += 1
            last = time.monotonic()
        if elapsed >= seconds:
            break
        time.sleep(0.005)
    producer.flush()
    return range(first, seq), max(last - began, seconds)


def wait_visible(book: Visibility, seqs: range, reader: Reader, query: Any, timeout: float) -> bool:
    """Wait until every record of ``seqs`` was seen (False after ``timeout`` seconds)."""
    deadline = time.monotonic() + timeout
    while book.seen(seqs) < len(seqs):
        reader.check()
        if query.exception() is not None:
            raise RuntimeError(f"the query failed: {query.exception()}")
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def batch_starts(progress: Sequence[dict[str, Any]]) -> dict[int, float]:
    """The start (``time.time()`` seconds) of every micro-batch that read input, by batch
    id. A fresh pipeline on a fresh checkpoint plans epoch *k* in batch *k*, and a bundle's
    id is its epoch: these are the starts of the batches that carried each bundle."""
    return {
        int(p["batchId"]): datetime.fromisoformat(p["timestamp"].replace("Z", "+00:00")).timestamp()
        for p in progress
        if p.get("numInputRows", 0) > 0
    }


def batch_durations(progress: Sequence[dict[str, Any]], since: float, until: float) -> list[float]:
    """``batchDuration`` of the batches that read input and began in [since, until]
    (``time.time()`` seconds)."""
    starts = batch_starts(progress)
    return [
        float(p["batchDuration"])
        for p in progress
        if p.get("numInputRows", 0) > 0 and since <= starts[int(p["batchId"])] <= until
    ]


def sink_options(
    ctx: Context, spec: RunSpec, run: str
) -> tuple[dict[str, str], Callable[[Visibility], Reader]]:
    """The consumer's options of one run, and how to make its reader."""
    interval = ctx.args.poll_ms / 1000.0
    if spec.consumer == SPARK_PARQUET:
        out = ctx.workdir / f"out-{run}"
        return {"path": str(out)}, lambda b: SparkFileReader(b, interval, out)
    if spec.consumer == "file":
        out = ctx.workdir / f"out-{run}"
        return {"consumer": "file", "consumer.path": str(out)}, lambda b: FileReader(
            b, interval, out
        )
    if spec.consumer == "postgres":
        assert ctx.postgres_dsn is not None and ctx.postgres_schema is not None
        dsn, table = ctx.postgres_dsn, f"{ctx.postgres_schema}.lat_{run}"
        return {
            "consumer": "postgres",
            "consumer.postgres.dsn": dsn,
            "consumer.postgres.table": table,
        }, lambda b: PostgresReader(b, interval, dsn, table)
    topic = f"latency-out-{run}"
    create_topic(ctx.bootstrap, topic)
    return {
        "consumer": "kafka",
        "consumer.kafka.bootstrap.servers": ctx.bootstrap,
        "consumer.topic": topic,
    }, lambda b: KafkaReader(b, interval, ctx.bootstrap, topic)


def start_query(
    ctx: Context,
    spec: RunSpec,
    *,
    topic: str,
    pipeline: str,
    state: str,
    checkpoint: Path,
    options: dict[str, str],
    source: dict[str, str],
) -> Any:
    """Start the run's query: its source (``gtkafka`` with ``source`` options, or
    ``kafka_driver``) into the barrier with the consumer's ``options``, or into Spark's
    parquet sink."""
    spark = ctx.spark
    if spec.source == "kafka_driver":
        from benchmarks.driver_reads import NAME, KafkaDriverSource

        spark.dataSource.register(KafkaDriverSource)
        df = (
            spark.readStream.format(NAME)
            .option("bootstrap", ctx.bootstrap)
            .option("topic", topic)
            .option("maxRecordsPerRead", str(DRIVER_MAX_READ))
            .load()
        )
    else:
        df = (
            spark.readStream.format("gtkafka")
            .option("kafka.bootstrap.servers", ctx.bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("pipeline.id", pipeline)
            .option("state.uri", state)
            .options(**source)
            .load()
        )
    if spec.consumer == SPARK_PARQUET:
        writer = df.select("value").writeStream.format("parquet").options(**options)
    else:
        writer = (
            df.select("key", "value", "gt")
            .writeStream.format("barrier")
            .options(**{"pipeline.id": pipeline, "state.uri": state, "delivery": spec.delivery})
            .options(**options)
        )
    query = (
        writer.option("checkpointLocation", str(checkpoint))
        .trigger(processingTime=f"{spec.trigger_s:g} seconds")
        .start()
    )
    return query


def run_query(ctx: Context, spec: RunSpec) -> RunResult:  # noqa: PLR0915 - one scripted run
    from gtbarrier import SnapshotCoordinator

    args, spark = ctx.args, ctx.spark
    run = uuid.uuid4().hex[:8]
    pipeline, topic = f"latency-{run}", f"latency-{run}"
    state = f"file://{ctx.workdir}/state-{run}"
    checkpoint = ctx.workdir / f"cp-{run}"
    create_topic(ctx.bootstrap, topic)
    options, make_reader = sink_options(ctx, spec, run)
    source = (
        {"fetchOffset.refreshIntervalMs": str(args.refresh_ms)}
        if args.refresh_ms is not None
        else {}
    )
    source["readMode"] = spec.read_mode
    book = Visibility()
    reader = make_reader(book)
    coord = None
    if spec.snapshots:
        coord = SnapshotCoordinator(
            spark,
            pipeline_id=pipeline,
            state_uri=state,
            checkpoint_location=checkpoint,
            zookeeper_hosts=ctx.zk_hosts,
            snapshot_period=SNAPSHOT_PERIOD,
        )
        coord.recover()
        options["fencing.token"] = str(coord.fencing_token)
    query = start_query(
        ctx,
        spec,
        topic=topic,
        pipeline=pipeline,
        state=state,
        checkpoint=checkpoint,
        options=options,
        source=source,
    )
    steps: list[Step] = []
    reader.start()
    try:
        if coord is not None:
            coord.watch(query)
        # The query's first batch starts its Python workers and plans: a few records go
        # through it before anything is measured, and are checked like the others.
        first, _ = produce(ctx.producer, topic, 0, 100, 0.1)
        if not wait_visible(book, first, reader, query, args.drain_timeout * 4):
            raise TimeoutError(f"{spec.label}: the first records never became visible")
        nxt = first.stop
        windows: list[tuple[float, float]] = []
        for rate in spec.rates:
            since = time.time()
            seqs, seconds = produce(ctx.producer, topic, nxt, rate, spec.seconds)
            nxt = seqs.stop
            drained = wait_visible(book, seqs, reader, query, args.drain_timeout)
            windows.append((since, time.time()))
            step = Step(rate, seqs, seconds, drained, book.latencies_ms(seqs), [])
            p = quantiles(step.latencies_ms)
            if spec.search:
                step.sustained, step.why = step_verdict(
                    rate=rate,
                    achieved=step.achieved,
                    drained=drained,
                    p99_ms=p["p99"],
                    bound_ms=SEARCH_BOUND * 1000.0 * spec.trigger_s,
                )
            steps.append(step)
            print(
                f"  {spec.label}: {rate:,}/s (produced {step.achieved:,.0f}/s, "
                f"{len(seqs):,} records): p50 {p['p50']:,.0f} ms, p95 {p['p95']:,.0f} ms, "
                f"p99 {p['p99']:,.0f} ms"
                + (
                    f"; {'sustained' if step.sustained else 'NOT sustained'}: {step.why}"
                    if spec.search
                    else ""
                ),
                flush=True,
            )
            if spec.search and not step.sustained:
                break
        everything = range(0, nxt)
        wait_visible(book, everything, reader, query, args.drain_timeout * 4)
        # a last look for late duplicates
        time.sleep(2 * args.poll_ms / 1000.0)
    finally:
        query.stop()
        reader.stop()
        if coord is not None:
            coord.close()
    # A batch's progress is posted after its commit: read once the query has stopped.
    progress = query.recentProgress
    starts = batch_starts(progress)
    for step, (since, until) in zip(steps, windows, strict=True):
        step.batch_ms = batch_durations(progress, since, until)
        step.wait_ms = book.waits_ms(step.seqs, starts)
    reader.check()
    lat = book.latencies_ms(everything)
    return RunResult(
        spec,
        steps,
        produced=len(everything),
        seen=book.seen(everything),
        duplicates=sum(book.duplicates.values()),
        missing=len(book.missing(everything)),
        unexpected=len(book.unexpected(everything)),
        min_latency_ms=min(lat) if lat else float("nan"),
        snapshots_taken=coord.accepted if coord is not None else 0,
        polls=reader.polls,
    )


# --- the plan -------------------------------------------------------------------------


def driver_label(source: str, trigger_s: float) -> str:
    """The label of a driver-side reads run: ``source`` into Spark's parquet sink."""
    return f"{source} -> parquet, trigger {trigger_s:g} s"


def driver_turns(args: argparse.Namespace) -> list[list[RunSpec]]:
    """The driver-side reads' turns: each source into Spark's parquet sink, trigger 0 and
    1 s, the order reversed every other turn."""
    rate = (args.comparison_rate,)
    variants = [
        RunSpec(
            driver_label(source, trigger),
            SPARK_PARQUET,
            EO,
            trigger,
            rate,
            args.comparison_seconds,
            source=source,
        )
        for trigger in (0.0, SEARCH_TRIGGER_S)
        for source in SOURCES
    ]
    return [variants if i % 2 == 0 else variants[::-1] for i in range(args.repeat)]


def driver_report(results: Sequence[RunResult]) -> None:
    """Each source's pooled p50 / p99 into Spark's parquet sink, per trigger, and the
    ratio kafka_driver / gtkafka; nothing for a trigger without both sources' runs."""
    for trigger in (0.0, SEARCH_TRIGGER_S):
        runs = {source: pooled(results, driver_label(source, trigger)) for source in SOURCES}
        if not all(latencies for latencies, _ in runs.values()):
            continue
        q = {source: quantiles(latencies) for source, (latencies, _) in runs.items()}
        batch = {source: percentile(batches, 0.5) for source, (_, batches) in runs.items()}
        g, d = q["gtkafka"], q["kafka_driver"]
        print(
            f"driver-side reads, trigger {trigger:g} s: kafka_driver p50 {d['p50']:,.0f} / "
            f"p99 {d['p99']:,.0f} ms (median batch {batch['kafka_driver']:,.0f} ms), "
            f"gtkafka p50 {g['p50']:,.0f} / p99 {g['p99']:,.0f} ms (median batch "
            f"{batch['gtkafka']:,.0f} ms); p99 kafka_driver / gtkafka = {d['p99'] / g['p99']:.2f}",
            flush=True,
        )


def plan(args: argparse.Namespace) -> tuple[list[list[RunSpec]], list[RunSpec]]:
    """The comparison's turns and the per-consumer runs."""
    rate = (args.comparison_rate,)
    variants = [
        RunSpec("file exactly-once", "file", EO, 0.0, rate, args.comparison_seconds),
        RunSpec("file at-least-once", "file", ALO, 0.0, rate, args.comparison_seconds),
        RunSpec(
            "file exactly-once, snapshots",
            "file",
            EO,
            0.0,
            rate,
            args.comparison_seconds,
            snapshots=True,
        ),
    ]
    if args.driver_mode:
        variants += [
            RunSpec(label, "file", delivery, 0.0, rate, args.comparison_seconds, read_mode="driver")
            for label, delivery in ((DRIVER_EO, EO), (DRIVER_ALO, ALO))
        ]
    turns = [variants if i % 2 == 0 else variants[::-1] for i in range(args.repeat)]
    per_consumer = []
    for consumer in args.consumers:
        per_consumer.append(
            RunSpec(f"{consumer} trigger 0", consumer, EO, 0.0, args.fixed_rates, args.step_seconds)
        )
        per_consumer.append(
            RunSpec(
                f"{consumer} trigger 1 s",
                consumer,
                EO,
                SEARCH_TRIGGER_S,
                args.search_rates,
                args.step_seconds,
                search=True,
            )
        )
    return turns, per_consumer


def warm_ups(turns: Sequence[Sequence[RunSpec]]) -> list[RunSpec]:
    """Short unmeasured runs before the comparison: one of each of its variants (2 s at
    1,000 records/s), or one at-least-once run without a comparison."""
    variants = list(turns[0]) if turns else [RunSpec("warm-up", "file", ALO, 0.0, (), 0.0)]
    return [
        replace(spec, label=f"warm-up: {spec.label}", rates=(1000,), seconds=2.0)
        for spec in variants
    ]


def pooled(results: Sequence[RunResult], label: str) -> tuple[list[float], list[float]]:
    """The latencies and batch durations of every run of ``label``, pooled."""
    runs = [r for r in results if r.spec.label == label]
    return [ms for r in runs for ms in r.latencies()], [ms for r in runs for ms in r.batch_ms()]


def targets(results: Sequence[RunResult], args: argparse.Namespace) -> list[Ratio]:
    eo, eo_batches = pooled(results, "file exactly-once")
    alo, _ = pooled(results, "file at-least-once")
    snap, _ = pooled(results, "file exactly-once, snapshots")
    ratios: list[Ratio] = []
    rate = f"{args.comparison_rate:,}/s, trigger 0, file"
    if eo and alo:
        e, a = quantiles(eo), quantiles(alo)
        ratios.append(
            target_ratio(
                "latency",
                "latency: exactly-once p99 / at-least-once p99",
                e["p99"] / a["p99"],
                EO_TARGET,
                f"{e['p99']:,.0f} vs {a['p99']:,.0f} ms; p50 {e['p50']:,.0f} vs "
                f"{a['p50']:,.0f} ms ({rate})",
            )
        )
    if eo and snap:
        e, s = quantiles(eo), quantiles(snap)
        taken = sum(r.snapshots_taken for r in results if r.spec.snapshots)
        ratios.append(
            target_ratio(
                "latency",
                f"latency: p99 with snapshots every {SNAPSHOT_PERIOD} / without",
                s["p99"] / e["p99"],
                SNAPSHOT_TARGET,
                f"{s['p99']:,.0f} vs {e['p99']:,.0f} ms, {taken} snapshots ({rate})",
            )
        )
    if eo and eo_batches:
        e, batch = quantiles(eo), percentile(eo_batches, 0.5)
        ratios.append(
            target_ratio(
                "latency",
                "latency: exactly-once p99 / median micro-batch duration",
                e["p99"] / batch,
                BATCH_TARGET,
                f"{e['p99']:,.0f} vs {batch:,.0f} ms ({rate})",
            )
        )
    ratios += driver_mode_targets(results, rate)
    bound = f"p99 < {SEARCH_BOUND * SEARCH_TRIGGER_S:g} s"
    for consumer in args.consumers:
        run = next((r for r in results if r.spec.search and r.spec.consumer == consumer), None)
        if run is None:
            continue
        best = highest_sustained([(s.rate, bool(s.sustained)) for s in run.steps])
        failed = next((s for s in run.steps if not s.sustained), None)
        at_best = next((s for s in run.steps if s.rate == best), None)
        note = (
            f"p99 {quantiles(at_best.latencies_ms)['p99']:,.0f} ms there; " if at_best else ""
        ) + (
            f"{failed.rate:,}/s not sustained: {failed.why}"
            if failed
            else f"every rate up to {run.steps[-1].rate:,}/s sustained"
        )
        shown = f"{best:,}/s" if best else f"none (from {run.steps[0].rate:,}/s)"
        print(
            f"latency: {consumer}: highest sustained rate ({bound}, trigger 1 s) = {shown}; {note}",
            flush=True,
        )
        ratios.append(
            Ratio(
                "latency",
                f"latency: {consumer}: highest rate with {bound} (trigger 1 s)",
                float(best or 0),
                "-",
                None,
                unit="records/s",
                note=note,
            )
        )
    return ratios


def driver_mode_targets(results: Sequence[RunResult], rate: str) -> list[Ratio]:
    """``--driver-mode``'s two targets: readMode=driver's exactly-once p99 against
    executor mode's, and against readMode=driver at-least-once; none without their runs."""
    eo, _ = pooled(results, "file exactly-once")
    driver_eo, _ = pooled(results, DRIVER_EO)
    driver_alo, _ = pooled(results, DRIVER_ALO)
    ratios: list[Ratio] = []
    if driver_eo and eo:
        d, e = quantiles(driver_eo), quantiles(eo)
        ratios.append(
            target_ratio(
                "latency",
                "latency: readMode=driver exactly-once p99 / executors exactly-once p99",
                d["p99"] / e["p99"],
                DRIVER_MODE_TARGET,
                f"{d['p99']:,.0f} vs {e['p99']:,.0f} ms; p50 {d['p50']:,.0f} vs "
                f"{e['p50']:,.0f} ms ({rate})",
            )
        )
    if driver_eo and driver_alo:
        d, a = quantiles(driver_eo), quantiles(driver_alo)
        ratios.append(
            target_ratio(
                "latency",
                "latency: readMode=driver exactly-once p99 / at-least-once p99",
                d["p99"] / a["p99"],
                DRIVER_MODE_EO_TARGET,
                f"{d['p99']:,.0f} vs {a['p99']:,.0f} ms; p50 {d['p50']:,.0f} vs "
                f"{a['p50']:,.0f} ms ({rate})",
            )
        )
    return ratios


def report(results: Sequence[RunResult]) -> None:
    print()
    rows = []
    for r in results:
        for s in r.steps:
            q = quantiles(s.latencies_ms)
            rows.append(
                [
                    r.spec.label
                    + (f" ({r.snapshots_taken} snapshots)" if r.spec.snapshots else ""),
                    f"{s.rate:,}",
                    f"{s.achieved:,.0f}",
                    f"{len(s.seqs):,}",
                    f"{q['p50']:,.0f}",
                    f"{q['p95']:,.0f}",
                    f"{q['p99']:,.0f}",
                    f"{percentile(s.batch_ms, 0.5):,.0f}",
                    f"{percentile(s.wait_ms, 0.5):,.0f}",
                    f"{percentile(s.wait_ms, 0.99):,.0f}",
                    "-" if s.sustained is None else ("yes" if s.sustained else "NO"),
                ]
            )
    print_table(
        [
            "run",
            "rate /s",
            "produced /s",
            "records",
            "p50 ms",
            "p95 ms",
            "p99 ms",
            "batch p50 ms",
            "wait p50 ms",
            "wait p99 ms",
            "sustained",
        ],
        rows,
    )
    print()


def to_json(results: Sequence[RunResult]) -> dict[str, Any]:
    """Per run: the exactly-once bookkeeping and, per step, the percentiles and a CDF
    (the latency at every percent)."""
    return {
        "runs": [
            {
                "label": r.spec.label,
                "source": r.spec.source,
                "consumer": r.spec.consumer,
                "delivery": r.spec.delivery,
                "read_mode": r.spec.read_mode,
                "snapshots": r.spec.snapshots,
                "trigger_s": r.spec.trigger_s,
                "produced": r.produced,
                "seen": r.seen,
                "duplicates": r.duplicates,
                "missing": r.missing,
                "unexpected": r.unexpected,
                "min_latency_ms": r.min_latency_ms,
                "snapshots_taken": r.snapshots_taken,
                "polls": r.polls,
                "steps": [
                    {
                        "rate": s.rate,
                        "produced": len(s.seqs),
                        "achieved_rate": s.achieved,
                        "drained": s.drained,
                        "sustained": s.sustained,
                        "why": s.why,
                        "batch_ms_p50": percentile(s.batch_ms, 0.5),
                        "batches": len(s.batch_ms),
                        "wait_p50_ms": percentile(s.wait_ms, 0.5),
                        "wait_p99_ms": percentile(s.wait_ms, 0.99),
                        **{f"{k}_ms": v for k, v in quantiles(s.latencies_ms).items()},
                        "cdf_ms": [percentile(s.latencies_ms, i / 100) for i in range(101)],
                    }
                    for s in r.steps
                ],
            }
            for r in results
        ]
    }


def plot(results: Sequence[RunResult], args: argparse.Namespace, path: Path) -> None:
    from matplotlib.figure import Figure  # no pyplot: no global backend

    fig = Figure(figsize=(13, 4.5))
    left, right = fig.subplots(1, 2)

    def cdf(ax: Any, values: list[float], label: str, **style: Any) -> None:
        if not values:
            return
        ordered = sorted(values)
        n = len(ordered)
        ax.plot(ordered, [(i + 1) / n for i in range(n)], label=label, **style)

    for label in COMPARISON:
        cdf(left, pooled(results, label)[0], label)
    left.set_title(f"file consumer, {args.comparison_rate:,} records/s, trigger 0")
    for r in results:
        if r.spec.label in COMPARISON:
            continue
        for s in r.steps:
            if s.rate in args.fixed_rates:
                cdf(
                    right,
                    s.latencies_ms,
                    f"{r.spec.label}, {s.rate:,}/s",
                    color=f"C{CONSUMERS.index(r.spec.consumer)}",
                    linestyle="-" if r.spec.trigger_s == 0 else "--",
                    linewidth=1.0 if s.rate == min(args.fixed_rates) else 2.0,
                )
    right.set_title(
        "exactly-once per consumer (solid: trigger 0, dashed: 1 s; thick: the higher rate)",
        fontsize=10,
    )
    for ax in (left, right):
        ax.set_xlabel("produce -> visible to a reader, ms")
        ax.set_ylabel("fraction of records")
        ax.set_xscale("log")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7, loc="lower right")
    fig.suptitle(
        f"gtbarrier end-to-end latency ({os.cpu_count()} cores, poll every {args.poll_ms} ms, "
        f"load {load_average()})"
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)


# --- servers and main -------------------------------------------------------------------


@contextmanager
def postgres(workdir: Path, wanted: bool) -> Iterator[tuple[str | None, str | None]]:
    """The DSN and a fresh schema of a PostgreSQL server (``GTB_POSTGRES_DSN`` or started)."""
    if not wanted:
        yield None, None
        return
    from harness.postgres import PostgresSchema, PostgresServer
    from harness.server import serving

    with ExitStack() as stack:
        server = PostgresServer.from_env() or PostgresServer(workdir / "postgres")
        stack.enter_context(serving(server, "postgres"))
        if not server.external:
            stack.callback(server.remove)
            stack.callback(server.shutdown)
        schema = PostgresSchema(server)
        stack.callback(schema.drop)
        yield schema.dsn, schema.schema


@contextmanager
def zookeeper(workdir: Path, given: str | None) -> Iterator[str]:
    from harness.server import serving
    from harness.zookeeper import ZooKeeperServer

    server = ZooKeeperServer.external_at(given) if given else ZooKeeperServer(workdir / "zookeeper")
    with serving(server, "zookeeper"):
        yield server.hosts


def _rates(text: str) -> tuple[int, ...]:
    return tuple(int(r) for r in text.split(",") if r.strip())


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.latency",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--comparison-rate", type=int, default=2000, help="records/s")
    parser.add_argument("--comparison-seconds", type=float, default=15.0)
    parser.add_argument("--repeat", type=int, default=2, help="turns of the comparison")
    parser.add_argument("--fixed-rates", type=_rates, default=(1000, 10000))
    parser.add_argument("--search-rates", type=_rates, default=(1000, 10000, 20000, 40000))
    parser.add_argument("--step-seconds", type=float, default=6.0)
    parser.add_argument("--drain-timeout", type=float, default=30.0, help="seconds")
    parser.add_argument("--poll-ms", type=int, default=50, help="the readers' poll interval")
    parser.add_argument(
        "--refresh-ms",
        type=int,
        default=None,
        help="gtkafka's fetchOffset.refreshIntervalMs (default: the source's own, 1,000 ms)",
    )
    parser.add_argument(
        "--consumers",
        type=lambda v: tuple(c.strip() for c in v.split(",") if c.strip()),
        default=CONSUMERS,
    )
    parser.add_argument("--skip-comparison", action="store_true")
    parser.add_argument(
        "--driver",
        action="store_true",
        help="also gtkafka and kafka_driver (read on the driver) into Spark's parquet sink",
    )
    parser.add_argument(
        "--driver-mode",
        action="store_true",
        help="the comparison also runs gtkafka with readMode=driver, exactly-once and "
        "at-least-once, against executor mode",
    )
    parser.add_argument("--bootstrap", default=os.environ.get("GTB_KAFKA_BOOTSTRAP"))
    parser.add_argument("--zk-hosts", default=os.environ.get("GTB_ZK_HOSTS"))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "results")
    args = parser.parse_args(argv)
    unknown = set(args.consumers) - set(CONSUMERS)
    if unknown:
        parser.error(f"--consumers: unknown {sorted(unknown)}; known: {', '.join(CONSUMERS)}")
    return args


def main(argv: list[str] | None = None) -> None:
    from kafka import KafkaProducer

    args = parse_args(argv)
    turns, per_consumer = plan(args)
    if args.skip_comparison:
        turns = []
    with ExitStack() as stack:
        workdir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="gtb-latency-")))
        bootstrap = stack.enter_context(kafka_bootstrap(args.bootstrap))
        dsn, schema = stack.enter_context(postgres(workdir, "postgres" in args.consumers))
        zk = stack.enter_context(zookeeper(workdir, args.zk_hosts)) if turns else None
        spark = stack.enter_context(
            local_spark(2, **{"spark.sql.streaming.numRecentProgressUpdates": "2000"})
        )
        producer = KafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, acks=1)
        stack.callback(producer.close)
        ctx = Context(spark, args, bootstrap, workdir, dsn, schema, zk, producer)
        # Unmeasured: the session's first query pays the JVM's JIT and the workers'
        # imports, and each variant's first run its own first uses (the commit's
        # exactly-once steps, the coordinator's ZooKeeper session and snapshot code).
        for spec in warm_ups(turns):
            run_query(ctx, spec)
        print("  warm-up done", flush=True)
        for i, turn in enumerate(turns):
            for spec in turn:
                ctx.results.append(run_query(ctx, spec))
            print(f"  comparison turn {i + 1}/{len(turns)} done", flush=True)
        for spec in per_consumer:
            ctx.results.append(run_query(ctx, spec))
        for i, turn in enumerate(driver_turns(args) if args.driver else []):
            for spec in turn:
                ctx.results.append(run_query(ctx, spec))
            print(f"  driver-side reads turn {i + 1}/{args.repeat} done", flush=True)
    report(ctx.results)
    driver_report(ctx.results)
    checks = [
        r
        for r in ctx.results
        if r.missing or r.duplicates or r.unexpected or not r.min_latency_ms >= 0
    ]
    for r in checks:
        print(
            f"CHECK FAILED: {r.spec.label}: {r.missing} missing, {r.duplicates} duplicates, "
            f"{r.unexpected} unexpected, min latency {r.min_latency_ms:.1f} ms"
        )
    ratios = targets(ctx.results, args)
    print(f"load average: {load_average()}")
    write_results(args.json, ratios, to_json(ctx.results))
    png = args.out / "latency.png"
    plot(ctx.results, args, png)
    print(f"plot: {png}")
    if checks:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
