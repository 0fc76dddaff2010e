"""Read throughput of gtkafka against a plain kafka-python consumer loop, side by side.

    python -m benchmarks.source_bench                  # 2,000,000 records of ~100 bytes
    python -m benchmarks.source_bench --records 200000 # a quick run

Fills one topic (8 partitions by default) on one broker (a Tansu broker started here, or
``--bootstrap``), then measures on the same data:

* ``plain kafka-python``: one process per core available to Spark, each assigned an
  equal share of the partitions, polling until it has every record (the loop touches
  each record's value);
* ``gtkafka AvailableNow -> noop``: a ``Trigger.AvailableNow`` streaming query on
  ``gtkafka`` into Spark's ``noop`` sink, on ``local[cores]``, after one small warm-up
  query (the JVM's first job is slow; the plain loop has no JVM to warm; ``--no-warmup``
  leaves it out, for quick runs whose numbers are shapes only);
  it is timed from ``start()`` to its end, and also, as Spark's ``processedRowsPerSecond``
  does, inside its triggers only (without the query's start and stop, a fixed 2-4 s that
  any Python streaming source pays);
* ``gtkafka batch read -> noop``: the same records through ``spark.read``.

Both sides use the same kafka-python consumer settings (gtkafka's defaults). The table
shows records/s and the ratio to the plain loop; the target is >= 0.9.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import signal
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import Any

from benchmarks.common import kafka_bootstrap, local_spark, print_table

RECORD_BYTES = 100
KEY_BYTES = 8


@dataclass(frozen=True)
class Result:
    mode: str
    workers: int
    records: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.records / self.seconds


def consumer_config(bootstrap: str) -> dict[str, Any]:
    """gtkafka's executor consumer settings, used by both sides."""
    from datasource.options import KafkaSourceOptions

    opts = KafkaSourceOptions.parse({"kafka.bootstrap.servers": bootstrap, "subscribe": "x"})
    return opts.consumer_config()


# --- filling the topic -----------------------------------------------------------------


def _produce(bootstrap: str, topic: str, partitions: list[int], per_partition: int) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=20, batch_size=512 * 1024, acks=1
    )
    value = b"v" * (RECORD_BYTES - KEY_BYTES)
    for i in range(per_partition):
        for p in partitions:
            producer.send(topic, key=b"%08d" % i, value=value, partition=p)
    producer.flush()
    producer.close()


def fill(bootstrap: str, topic: str, partitions: int, records: int, workers: int) -> None:
    from kafka import KafkaAdminClient
    from kafka.admin import NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        admin.create_topics([NewTopic(topic, partitions, 1)])
    finally:
        admin.close()
    per_partition = records // partitions
    shares = [list(range(partitions))[i::workers] for i in range(workers)]
    ctx = mp.get_context("spawn")
    procs = [
        ctx.Process(target=_produce, args=(bootstrap, topic, share, per_partition))
        for share in shares
        if share
    ]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join()
        if proc.exitcode != 0:
            raise RuntimeError(f"producer process exited with {proc.exitcode}")


# --- the plain consumer loop -------------------------------------------------------------


@dataclass(frozen=True)
class ConsumeJob:
    bootstrap: str
    topic: str
    partitions: list[int]
    expected: int


def _consume(job: ConsumeJob, start: Any, out: Any) -> None:
    from kafka import KafkaConsumer, TopicPartition

    start.wait()
    consumer = KafkaConsumer(**consumer_config(job.bootstrap))
    tps = [TopicPartition(job.topic, p) for p in job.partitions]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    count = 0
    size = 0
    while count < job.expected:
        for records in consumer.poll(timeout_ms=1000).values():
            for record in records:
                count += 1
                size += len(record.value)
    consumer.close()
    out.put((count, size))


def plain_consumer(bootstrap: str, topic: str, partitions: int, records: int, cores: int) -> Result:
    per_partition = records // partitions
    shares = [list(range(partitions))[i::cores] for i in range(cores)]
    shares = [s for s in shares if s]
    ctx = mp.get_context("spawn")
    start = ctx.Event()
    out = ctx.Queue()
    procs = [
        ctx.Process(
            target=_consume,
            args=(ConsumeJob(bootstrap, topic, share, per_partition * len(share)), start, out),
        )
        for share in shares
    ]
    for proc in procs:
        proc.start()
    time.sleep(2.0)  # let every process import kafka-python before the clock starts
    began = time.perf_counter()
    start.set()
    got = sum(out.get(timeout=3600)[0] for _ in procs)
    elapsed = time.perf_counter() - began
    for proc in procs:
        proc.join()
    if got != per_partition * partitions:
        raise RuntimeError(f"plain consumers read {got} records, expected {records}")
    return Result("plain kafka-python", len(procs), got, elapsed)


# --- gtkafka ---------------------------------------------------------------------------


def gtkafka_stream(
    spark: Any, bootstrap: str, topic: str, workdir: str, extra: dict[str, str]
) -> list[Result]:
    run = uuid.uuid4().hex[:8]
    options = {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "pipeline.id": f"bench-{run}",
        "state.uri": f"file://{workdir}/state",
        **extra,
    }
    df = spark.readStream.format("gtkafka").options(**options).load()
    began = time.perf_counter()
    query = (
        df.writeStream.format("noop")
        .option("checkpointLocation", f"{workdir}/checkpoint-{run}")
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination()
    elapsed = time.perf_counter() - began
    if query.exception() is not None:
        raise RuntimeError(f"gtkafka query failed: {query.exception()}")
    progress = query.recentProgress
    rows = sum(p["numInputRows"] for p in progress)
    in_batches = sum(p["durationMs"].get("triggerExecution", 0) for p in progress) / 1000.0
    workers = spark.sparkContext.defaultParallelism
    return [
        Result("gtkafka AvailableNow -> noop", workers, rows, elapsed),
        # Spark's own measure (processedRowsPerSecond): the triggers only, without the
        # query's start and stop (about 2-4 s here, the same for any Python source).
        Result("  same query, inside its triggers", workers, rows, in_batches),
    ]


def gtkafka_batch(spark: Any, bootstrap: str, topic: str, records: int) -> Result:
    df = (
        spark.read.format("gtkafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .load()
    )
    began = time.perf_counter()
    df.write.format("noop").mode("overwrite").save()
    elapsed = time.perf_counter() - began
    return Result(
        "gtkafka batch read -> noop", spark.sparkContext.defaultParallelism, records, elapsed
    )


def settle(limit: float, cores: int) -> None:
    """Wait (at most ``limit`` seconds) until the 1-minute load average is <= ``cores``."""
    deadline = time.monotonic() + limit
    while os.getloadavg()[0] > cores and time.monotonic() < deadline:
        time.sleep(5)
    if limit:
        print(f"(load average {os.getloadavg()[0]:.1f} at the start of a measurement)")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=2_000_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument(
        "--cores",
        type=int,
        default=os.cpu_count() or 1,
        help="cores available to Spark (local[N]) = plain consumer processes",
    )
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get("GTB_KAFKA_BOOTSTRAP"),
        help="an existing broker (default: start a Tansu broker)",
    )
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="measure each mode this many times, alternating; report the best",
    )
    parser.add_argument(
        "--settle",
        type=float,
        default=0.0,
        help="before each measurement, wait up to this many seconds for the 1-minute load "
        "average to fall to the core count (for shared machines)",
    )
    parser.add_argument(
        "--max-offsets-per-trigger",
        type=int,
        default=None,
        help="rate-limit the AvailableNow query's batches",
    )
    parser.add_argument(
        "--no-warmup", action="store_true", help="no warm-up query first (quick runs)"
    )
    args = parser.parse_args(argv)
    records = args.records - args.records % args.partitions
    # SIGTERM unwinds like Ctrl-C, so the broker started here is stopped.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))

    with (
        kafka_bootstrap(args.bootstrap) as bootstrap,
        tempfile.TemporaryDirectory(prefix="gtb-bench-") as workdir,
    ):
        topic = f"bench-{uuid.uuid4().hex[:8]}"
        warmup = f"{topic}-warmup"
        began = time.perf_counter()
        fill(bootstrap, topic, args.partitions, records, args.cores)
        if not args.no_warmup:
            fill(bootstrap, warmup, args.partitions, 20_000, args.cores)
        print(
            f"filled {topic}: {records:,} records of ~{RECORD_BYTES} bytes over "
            f"{args.partitions} partitions in {time.perf_counter() - began:.1f}s "
            f"({args.cores} cores, broker {bootstrap})"
        )
        extra = {}
        if args.max_offsets_per_trigger:
            extra["maxOffsetsPerTrigger"] = str(args.max_offsets_per_trigger)
        runs: dict[str, list[Result]] = {}
        with local_spark(args.cores) as spark:
            if not args.no_warmup:
                gtkafka_stream(spark, bootstrap, warmup, workdir, {})
            for _ in range(args.repeat):
                measured = []
                settle(args.settle, args.cores)
                measured.append(
                    plain_consumer(bootstrap, topic, args.partitions, records, args.cores)
                )
                settle(args.settle, args.cores)
                measured.extend(gtkafka_stream(spark, bootstrap, topic, workdir, extra))
                settle(args.settle, args.cores)
                measured.append(gtkafka_batch(spark, bootstrap, topic, records))
                for result in measured:
                    if result.records != records:
                        raise RuntimeError(
                            f"{result.mode} read {result.records} records, expected {records}"
                        )
                    runs.setdefault(result.mode, []).append(result)
        results = [min(rs, key=lambda r: r.seconds) for rs in runs.values()]
        if args.repeat > 1:
            for mode, rs in runs.items():
                print(f"{mode}: " + ", ".join(f"{r.rate:,.0f}/s" for r in rs))

    base = results[0].rate
    print_table(
        ["mode", "workers", "records", "seconds", "records/s", "ratio"],
        [
            [
                r.mode,
                r.workers,
                f"{r.records:,}",
                f"{r.seconds:.1f}",
                f"{r.rate:,.0f}",
                f"{r.rate / base:.2f}",
            ]
            for r in results
        ],
    )


if __name__ == "__main__":
    main()
