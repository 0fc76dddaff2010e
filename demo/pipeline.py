"""The demo's streaming job: gtkafka -> parse -> enrich -> aggregate -> barrier.

::

    events = spark.readStream.format("gtkafka")...          # orders and payments (JSON):
             .schema("value binary, partition int, offset long")   # only what it reads
    shared = events.repartition(value, partition, offset)    # one scan for the three branches
    parsed = from_json(value) + watermark on event_time
    enriched = parsed JOIN categories JOIN exchange rates    # stateless: USD amounts, departments
    output = union(
        enriched rows                                         # kind = "event", one per input record
        revenue per category per 1-minute window              # kind = "category_minute" (watermark)
        running totals per customer (applyInPandasWithState)  # kind = "customer_total"
    )
    output.writeStream.format("barrier")...                  # exactly-once into the consumer

One query, one ``gtkafka`` source, one ``barrier`` sink, append mode. Every output row
has the columns of :data:`OUTPUT_SCHEMA`; ``kind`` says which of the three it is. Each
micro-batch runs the source once: the three branches share one exchange over it
(:func:`read_once`).

Run as a program (``python -m demo.pipeline JOB.json``) it is the demo's *driver*: it
starts Spark, asks the :class:`~gtbarrier.SnapshotCoordinator` to ``recover()`` (which
materialises a lost checkpoint from the last snapshot in S3), starts the query, lets the
coordinator snapshot it, and writes what happens as JSON lines to the job's progress
file (:mod:`demo.progress`) until the job's stop file appears. ``python -m demo`` runs
it in a subprocess so that it can be killed with SIGKILL.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pandas as pd

from demo.catalog import CATEGORIES, CURRENCIES
from demo.progress import ProgressWriter

EVENT_SCHEMA = (
    "type STRING, order_id STRING, payment_id STRING, customer_id STRING, category STRING, "
    "quantity INT, amount BIGINT, currency STRING, method STRING, ts TIMESTAMP"
)

# Every output row, whatever its kind. Columns a kind does not use are null.
OUTPUT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("kind", "string"),  # event | category_minute | customer_total
    ("event_id", "string"),  # event: the order or payment id
    ("event_type", "string"),  # event: order | payment
    ("customer_id", "string"),  # event, customer_total
    ("category", "string"),  # event (orders), category_minute
    ("department", "string"),  # event (orders), category_minute
    ("currency", "string"),  # event
    ("amount", "bigint"),  # event: minor units of `currency`
    ("amount_usd_cents", "bigint"),  # event: converted; category_minute: revenue; customer: ordered
    ("paid_usd_cents", "bigint"),  # customer_total: paid so far
    ("balance_usd_cents", "bigint"),  # customer_total: ordered - paid
    ("orders", "bigint"),  # category_minute, customer_total: number of orders
    ("payments", "bigint"),  # customer_total: number of payments
    ("event_time", "timestamp"),  # event
    ("window_start", "timestamp"),  # category_minute
    ("window_end", "timestamp"),  # category_minute
    ("src_partition", "int"),  # event: where the record was in Kafka
    ("src_offset", "bigint"),  # event
)
OUTPUT_SCHEMA = ", ".join(f"{name} {dtype}" for name, dtype in OUTPUT_COLUMNS)

CUSTOMER_STATE_SCHEMA = "ordered BIGINT, paid BIGINT, orders BIGINT, payments BIGINT"
CUSTOMER_COLUMNS = ["customer_id", "ordered", "paid", "orders", "payments"]
CUSTOMER_OUTPUT_SCHEMA = (
    "customer_id STRING, ordered BIGINT, paid BIGINT, orders BIGINT, payments BIGINT"
)


@dataclass
class DemoJob:
    """Everything a driver needs; written as JSON by ``python -m demo`` for each driver."""

    pipeline_id: str
    topic: str
    bootstrap: str
    state_uri: str
    s3_options: dict[str, str]  # the state store's options (s3.*, and gcs.* or azure.*)
    zookeeper_hosts: str | None
    checkpoint: str
    consumer: str  # file | http | postgres | iceberg
    consumer_path: str | None = None
    consumer_url: str | None = None
    consumer_dsn: str | None = None  # postgres
    consumer_table: str | None = None  # postgres
    progress_path: str = "progress.jsonl"
    stop_path: str = "stop"
    driver: int = 1
    master: str = "local[2]"
    spark_conf: dict[str, str] = field(default_factory=dict)
    max_offsets_per_trigger: int = 1000
    window: str = "1 minute"
    watermark_delay: str = "5 minutes"
    snapshot_period: str = "5s"
    retain: int = 3
    zookeeper_session_timeout: str = "5s"
    driver_wait: str = "90s"
    delivery: str = "exactly-once"
    use_coordinator: bool = True
    shuffle_partitions: int = 4
    output_partitions: int | None = 2
    # epochs kept below GT_last (state.epochsRetained, the coordinator's epochs_retained);
    # None: their default
    epochs_retained: int | None = None
    # Sparse output (the soak's): only the event rows whose Kafka offset is a multiple of
    # this (:func:`sparse_output`); None: every row
    sparse_modulus: int | None = None

    def save(self, path: Path) -> None:
        path.write_text(json.dumps(asdict(self), indent=2, sort_keys=True))

    @classmethod
    def load(cls, path: Path) -> DemoJob:
        return cls(**json.loads(path.read_text()))

    def source_options(self) -> dict[str, str]:
        return {
            "kafka.bootstrap.servers": self.bootstrap,
            "subscribe": self.topic,
            "startingOffsets": "earliest",
            "maxOffsetsPerTrigger": str(self.max_offsets_per_trigger),
            "pipeline.id": self.pipeline_id,
            "state.uri": self.state_uri,
            **self.s3_options,
            **(
                {}
                if self.epochs_retained is None
                else {"state.epochsRetained": str(self.epochs_retained)}
            ),
        }

    def sink_options(self, fencing_token: int | None) -> dict[str, str]:
        opts = {
            "pipeline.id": self.pipeline_id,
            "state.uri": self.state_uri,
            "consumer": self.consumer,
            "delivery": self.delivery,
            **self.s3_options,
        }
        if self.consumer == "http":
            assert self.consumer_url is not None
            opts["consumer.url"] = self.consumer_url
        elif self.consumer == "postgres":
            assert self.consumer_dsn is not None and self.consumer_table is not None
            opts["consumer.postgres.dsn"] = self.consumer_dsn
            opts["consumer.postgres.table"] = self.consumer_table
        elif self.consumer == "iceberg":
            assert self.consumer_path is not None
            opts.update(iceberg_options(self.consumer_path))
        else:
            assert self.consumer_path is not None
            opts["consumer.path"] = self.consumer_path
        if fencing_token is not None:
            opts["fencing.token"] = str(fencing_token)
        return opts


ICEBERG_TABLE = "demo.output"


def iceberg_options(directory: str) -> dict[str, str]:
    """``--consumer iceberg``: pyiceberg's SQL catalog on SQLite and a ``file://`` warehouse
    under ``directory``."""
    return {
        "consumer.iceberg.table": ICEBERG_TABLE,
        "consumer.iceberg.catalog.uri": f"sqlite:///{directory}/catalog.db",
        "consumer.iceberg.catalog.warehouse": f"file://{directory}/warehouse",
    }


# --- the query ------------------------------------------------------------------------

#: The columns of gtkafka's rows the query reads.
SOURCE_COLUMNS = ("value", "partition", "offset")
#: The source's schema as the query declares it: only the columns it reads. A Python data
#: source gets no column pruning from Spark; with the whole schema every read task would
#: build, and the JVM convert, nine columns (``gt``: a struct with the topic again) for
#: three.
SOURCE_SCHEMA = "value binary, partition int, offset long"


def read_source(spark: Any, options: dict[str, str]) -> Any:
    """The streaming gtkafka DataFrame of ``options``, with the columns the query reads."""
    return spark.readStream.format("gtkafka").schema(SOURCE_SCHEMA).options(**options).load()


def read_once(source: Any, columns: Sequence[str]) -> Any:
    """``source``, a streaming DataFrame as its data source returns it, narrowed to
    ``columns`` (every column of it that the query reads) and hash-partitioned by all of
    them: an exchange that every branch of a query built on the result shares, so that a
    micro-batch runs the source once however many branches read it.

    Spark plans each branch of a union (or a self-join) with its own copy of the source and
    runs each copy's scan: for a Python data source, its read tasks and their Python
    workers, once per branch. An exchange whose subtree is the same in every branch is run
    once (Spark's ReuseExchange: the executed plan shows ``ReusedExchange`` in the other
    branches). The subtree stays the same only when no branch moves anything below it:

    * column pruning keeps, below a repartition, the columns it partitions by and those the
      branch reads: partitioned by every column any branch reads, every branch keeps all;
    * Spark pushes a filter through a repartition: every filter of a branch must stop above
      it. ``withWatermark`` stops a filter that reads the event-time column, so the
      watermark goes above this exchange and each filter reads that column
      (:func:`_above_watermark`).

    The partitioning is by hash, not round-robin: a map task that is run again sends each
    row to the same partition. Stateful operators still get their own exchange by their
    keys, as Spark requires, above this one.
    """
    return source.select(*columns).repartition(*columns)


def _above_watermark(condition: Any) -> Any:
    """``condition`` as a filter predicate that Spark keeps above ``withWatermark`` (and so
    above :func:`read_once`'s exchange): it reads the event-time column, and is null (the
    row dropped) where that column is null."""
    from pyspark.sql import functions as F  # noqa: N812 - the usual PySpark alias

    return F.when(F.col("event_time").isNotNull(), condition)


def parse_events(raw: Any, watermark_delay: str) -> Any:
    """gtkafka rows -> typed events with an event-time watermark (heartbeats included),
    the source read once for every branch of the query (:func:`read_once`)."""
    from pyspark.sql import functions as F  # noqa: N812 - the usual PySpark alias

    return (
        read_once(raw, SOURCE_COLUMNS)
        .select(
            F.from_json(F.col("value").cast("string"), EVENT_SCHEMA).alias("e"),
            F.col("partition").alias("src_partition"),
            F.col("offset").alias("src_offset"),
        )
        .select("e.*", "src_partition", "src_offset")
        .withColumnRenamed("ts", "event_time")
        .withWatermark("event_time", watermark_delay)
    )


def reference_tables(spark: Any) -> tuple[Any, Any]:
    """The static dimension tables the stream is enriched with (small: broadcast joins)."""
    categories = spark.createDataFrame(
        [(c.name, c.department) for c in CATEGORIES], "category STRING, department STRING"
    )
    rates = spark.createDataFrame(
        [(c.code, c.usd_micro_cents) for c in CURRENCIES], "currency STRING, usd_micro BIGINT"
    )
    return categories, rates


def enrich(events: Any, categories: Any, rates: Any) -> Any:
    """Stateless: drop heartbeats, add the department and the amount in US cents."""
    from pyspark.sql import functions as F  # noqa: N812 - the usual PySpark alias

    # Spark's optimizer pushes a filter below the watermark unless the filter reads the
    # event-time column; pushed below, it would hide the heartbeats from the watermark.
    business = _above_watermark(F.col("type").isin("order", "payment"))
    return (
        events.where(business)
        .join(F.broadcast(categories), "category", "left")
        .join(F.broadcast(rates), "currency", "left")
        .withColumn("amount_usd_cents", F.expr("amount * usd_micro div 1000000"))
        .withColumn(
            "event_id",
            F.when(F.col("type") == "order", F.col("order_id")).otherwise(F.col("payment_id")),
        )
    )


def _output(df: Any, **columns: Any) -> Any:
    """``df`` projected to :data:`OUTPUT_COLUMNS`: the given expressions, nulls elsewhere."""
    from pyspark.sql import functions as F  # noqa: N812 - the usual PySpark alias

    exprs = []
    for name, dtype in OUTPUT_COLUMNS:
        expr = columns.pop(name, None)
        if expr is None:
            expr = F.lit(None)
        exprs.append(expr.cast(dtype).alias(name))
    if columns:
        raise ValueError(f"not output columns: {sorted(columns)}")
    return df.select(*exprs)


def customer_totals(
    key: tuple[str], batches: Iterator[pd.DataFrame], state: Any
) -> Iterator[pd.DataFrame]:
    """applyInPandasWithState: one customer's running totals, emitted once per micro-batch.

    Totals are sums, so the order of rows within a batch does not matter; the state is
    what the coordinator's snapshots carry across a lost driver. (Called once per
    customer and batch: numpy rather than pandas indexing keeps it cheap.)"""
    ordered, paid, orders, payments = state.get if state.exists else (0, 0, 0, 0)
    for pdf in batches:
        is_order = pdf["event_type"].to_numpy() == "order"
        amounts = pdf["amount_usd_cents"].to_numpy()
        n = int(is_order.sum())
        on_orders = int(amounts[is_order].sum())
        ordered += on_orders
        paid += int(amounts.sum()) - on_orders
        orders += n
        payments += len(is_order) - n
    state.update((ordered, paid, orders, payments))
    yield pd.DataFrame([(key[0], ordered, paid, orders, payments)], columns=CUSTOMER_COLUMNS)


def shop_outputs(events: Any, categories: Any, rates: Any, window: str) -> Any:
    """The three outputs of the demo, unioned (a streaming DataFrame, append mode).

    ``events`` have their watermark above the exchange of :func:`read_once` (as
    :func:`parse_events` returns them): every filter here reads the event-time column, so
    that the three branches share that exchange and a micro-batch reads its source once."""
    from pyspark.sql import functions as F  # noqa: N812 - the usual PySpark alias
    from pyspark.sql.streaming.state import GroupStateTimeout

    enriched = enrich(events, categories, rates)
    rows = _output(
        enriched,
        kind=F.lit("event"),
        event_id=F.col("event_id"),
        event_type=F.col("type"),
        customer_id=F.col("customer_id"),
        category=F.col("category"),
        department=F.col("department"),
        currency=F.col("currency"),
        amount=F.col("amount"),
        amount_usd_cents=F.col("amount_usd_cents"),
        event_time=F.col("event_time"),
        src_partition=F.col("src_partition"),
        src_offset=F.col("src_offset"),
    )
    revenue = (
        enriched.where(_above_watermark(F.col("type") == "order"))
        .groupBy(F.window("event_time", window).alias("w"), "category", "department")
        .agg(F.sum("amount_usd_cents").alias("revenue"), F.count("*").alias("n"))
    )
    per_minute = _output(
        revenue,
        kind=F.lit("category_minute"),
        category=F.col("category"),
        department=F.col("department"),
        amount_usd_cents=F.col("revenue"),
        orders=F.col("n"),
        window_start=F.col("w.start"),
        window_end=F.col("w.end"),
    )
    totals = (
        enriched.select("customer_id", F.col("type").alias("event_type"), "amount_usd_cents")
        .groupBy("customer_id")
        .applyInPandasWithState(
            customer_totals,
            CUSTOMER_OUTPUT_SCHEMA,
            CUSTOMER_STATE_SCHEMA,
            "append",
            GroupStateTimeout.NoTimeout,
        )
    )
    per_customer = _output(
        totals,
        kind=F.lit("customer_total"),
        customer_id=F.col("customer_id"),
        amount_usd_cents=F.col("ordered"),
        paid_usd_cents=F.col("paid"),
        balance_usd_cents=F.col("ordered") - F.col("paid"),
        orders=F.col("orders"),
        payments=F.col("payments"),
    )
    return rows.unionByName(per_minute).unionByName(per_customer)


def sparse_output(outputs: Any, modulus: int) -> Any:
    """:func:`shop_outputs` narrowed to the event rows whose Kafka offset is a multiple of
    ``modulus`` (at ``r`` records a second over the topic, about one row every ``modulus /
    r`` seconds), with every operator of the query still running.

    The aggregates' rows are dropped by a predicate on a column they compute (``orders <
    0``: a count is never negative), not by ``kind``: Spark pushes the filter into each
    branch of the union, where a predicate on the literal ``kind`` folds to false and Spark
    prunes the branch, its stateful operators with it. The events' predicate reads the
    event time (:func:`_above_watermark`), so that it stays above the watermark and the
    shared exchange of :func:`read_once` (heartbeats still move the watermark)."""
    from pyspark.sql import functions as F  # noqa: N812 - the usual PySpark alias

    if modulus < 1:
        raise ValueError(f"sparse_modulus: expected an integer >= 1, got {modulus}")
    kept_event = _above_watermark(F.col("src_offset") % modulus == 0)
    return outputs.where(
        F.when(F.col("kind") == "event", kept_event).otherwise(F.col("orders") < 0)
    )


def build_query(spark: Any, job: DemoJob, fencing_token: int | None) -> Any:
    """Start the demo query (gtkafka -> ... -> barrier) on ``job.checkpoint``."""
    raw = read_source(spark, job.source_options())
    categories, rates = reference_tables(spark)
    out = shop_outputs(parse_events(raw, job.watermark_delay), categories, rates, job.window)
    if job.sparse_modulus is not None:
        out = sparse_output(out, job.sparse_modulus)
    if job.output_partitions:
        # Fewer, larger parts per bundle: each write task stages one part.
        out = out.coalesce(job.output_partitions)
    return (
        out.writeStream.format("barrier")
        .options(**job.sink_options(fencing_token))
        .outputMode("append")
        .option("checkpointLocation", job.checkpoint)
        .queryName(f"demo_{job.pipeline_id.replace('-', '_')}_{job.driver}")
        .start()
    )


# --- the driver program ---------------------------------------------------------------


def spark_session(job: DemoJob, workdir: Path) -> Any:
    """A SparkSession for ``job.master`` with gtbarrier's data sources registered."""
    from pyspark.sql import SparkSession

    from gtbarrier import register_all

    repo = str(Path(__file__).resolve().parents[1])
    builder = (
        SparkSession.builder.appName(f"gtbarrier-demo-driver-{job.driver}")
        .master(job.master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", str(job.shuffle_partitions))
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.local.dir", str(workdir / "spark-local"))
        .config("spark.sql.warehouse.dir", str(workdir / "spark-warehouse"))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={workdir / 'derby'}")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
    )
    if job.master.startswith("spark://"):
        # Executors of a standalone cluster import datasource, sink, state and demo (the
        # applyInPandasWithState function) from the repository; install the package on
        # every worker instead in a real deployment.
        builder = builder.config("spark.executorEnv.PYTHONPATH", repo)
    for key, value in job.spark_conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register_all(spark)
    return spark


class _Watcher:
    """Turns the query's progress, the barrier's GT_last and accepted snapshots into
    progress events."""

    def __init__(self, out: ProgressWriter, metrics_path: Path) -> None:
        self.out = out
        self.metrics_path = metrics_path
        self.metrics_offset = 0
        self.seen: set[tuple[str, int]] = set()
        self.gt_last: int | None = None
        self.accepted = 0

    def poll(self, query: Any, coord: Any) -> None:
        from state.coordinator.batches import completed_batch_from_progress

        for progress in list(query.recentProgress):
            ident = (str(progress["runId"]), int(progress["batchId"]))
            if ident in self.seen:
                continue
            self.seen.add(ident)
            raw = json.loads(progress.json)
            batch = completed_batch_from_progress(raw)
            self.out.emit(
                "batch",
                batch_id=batch.batch_id,
                epoch=batch.epoch,
                # Kafka records the batch read (numInputRows counts them once per scan of
                # the source, which the query's three branches share: the same number).
                rows=records_read(raw),
                input_rows=batch.num_input_rows,
                duration_ms=batch.duration_ms,
                offsets=_offsets_total(batch.frontier),
                watermark=(progress["eventTime"] or {}).get("watermark"),
                durations=dict(progress["durationMs"] or {}),
            )
        self._poll_commits()
        if coord is not None:
            status = coord.status()
            gt_last = status.get("gt_last")
            if gt_last is not None and (self.gt_last is None or gt_last > self.gt_last):
                self.gt_last = gt_last
                self.out.emit("gt_last", gt_last=gt_last)
            last = status.get("last_snapshot")
            if status["snapshots_accepted"] > self.accepted and last is not None:
                self.accepted = status["snapshots_accepted"]
                self.out.emit("snapshot", **last)

    def _poll_commits(self) -> None:
        """The barrier's per-commit records (delivered / dropped / empty) since last time."""
        if not self.metrics_path.exists():
            return
        with open(self.metrics_path) as f:
            f.seek(self.metrics_offset)
            while line := f.readline():
                if not line.endswith("\n"):
                    break
                self.metrics_offset += len(line)
                rec = json.loads(line)
                self.out.emit(
                    "commit",
                    batch_id=rec["batch_id"],
                    epoch=rec["epoch"],
                    action=rec["action"],
                    rows=rec["rows"],
                )
                if rec["action"] == "delivered" and (
                    self.gt_last is None or rec["epoch"] > self.gt_last
                ):
                    self.gt_last = rec["epoch"]
                    self.out.emit("gt_last", gt_last=rec["epoch"])


def _json(value: Any) -> Any:
    return json.loads(value) if isinstance(value, str) else value


def _offsets_total(frontier: Any) -> int:
    offsets = frontier.get("offsets", {}) if isinstance(frontier, dict) else {}
    return sum(int(o) for parts in offsets.values() for o in parts.values())


def records_read(progress: dict[str, Any]) -> int:
    """The Kafka records a micro-batch of the demo's query read: its gtkafka source's end
    offsets minus its start offsets, summed. ``progress`` is a StreamingQueryProgress as
    JSON (``json.loads(progress.json)``) of a query with that one source."""
    (source,) = progress["sources"]
    end = _offsets_total(_json(source.get("endOffset")))
    return end - _offsets_total(_json(source.get("startOffset")))


def run_driver(job: DemoJob, workdir: Path) -> int:
    """The driver program: recover, start, watch, report; stop when the stop file appears."""
    out = ProgressWriter(Path(job.progress_path), driver=job.driver)
    out.emit("driver_started", pid=os.getpid(), checkpoint=job.checkpoint, master=job.master)
    metrics = workdir / f"commits-{job.driver}.jsonl"
    os.environ["GTBARRIER_METRICS"] = str(metrics)  # the sink's commits append here
    spark = spark_session(job, workdir)
    out.emit("spark_ready", version=spark.version)

    coord: Any = None
    token: int | None = None
    if job.use_coordinator:
        from gtbarrier import SnapshotCoordinator

        retained: dict[str, Any] = (
            {} if job.epochs_retained is None else {"epochs_retained": job.epochs_retained}
        )
        coord = SnapshotCoordinator(
            spark,
            pipeline_id=job.pipeline_id,
            state_uri=job.state_uri,
            checkpoint_location=job.checkpoint,
            zookeeper_hosts=job.zookeeper_hosts,
            snapshot_period=job.snapshot_period,
            retain=job.retain,
            drain_timeout="60s",
            reset_timeout="120s",
            state_options=job.s3_options,
            driver_wait=job.driver_wait,
            zookeeper_session_timeout=job.zookeeper_session_timeout,
            **retained,
        )
        started = time.monotonic()
        result = coord.recover()
        out.emit(
            "recovered",
            action=result.action,
            reason=result.reason,
            batch_id=result.batch_id,
            seconds=round(time.monotonic() - started, 3),
        )
        token = coord.fencing_token
    query = build_query(spark, job, token)
    if coord is not None:
        coord.watch(query)
    out.emit("query_started", query_id=str(query.id), run_id=str(query.runId))

    watcher = _Watcher(out, metrics)
    stop = Path(job.stop_path)
    code = 0
    try:
        while True:
            watcher.poll(query, coord)
            if not query.isActive:
                error = query.exception()
                out.emit("failed", error=str(error)[:2000] if error else "query stopped")
                code = 1
                break
            if stop.exists():
                break
            time.sleep(0.25)
    finally:
        if query.isActive:
            query.stop()
        watcher.poll(query, coord)
        if coord is not None:
            coord.close()
        spark.stop()
    out.emit("driver_stopped", code=code)
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo.pipeline", description=__doc__)
    parser.add_argument("job", type=Path, help="the job file written by `python -m demo`")
    args = parser.parse_args(argv)
    job = DemoJob.load(args.job)
    return run_driver(job, args.job.parent)


if __name__ == "__main__":
    sys.exit(main())
