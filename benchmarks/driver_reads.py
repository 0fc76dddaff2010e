"""Driver-side reads, measured: a Kafka source read on the driver against gtkafka's reads in
Python workers, for small micro-batches.

    python -m benchmarks.driver_reads                  # 10 measured batches of each, in turn
    python -m benchmarks.driver_reads --repeat 2

PySpark's :class:`~pyspark.sql.datasource.SimpleDataSourceStreamReader` reads on the
driver inside ``latestOffset``; the tasks then read the rows from Spark's block manager,
with no Python worker. Whether that is cheaper for a low-volume topic is what this
measures, in one SparkSession (``local[<cores>]``), one query after the other, each with
``processingTime=0``, its first batch left out, 100 records per batch from the same
8-partition topic:

* ``gtkafka -> noop``: gtkafka's reads, one Python worker task per batch;
* ``kafka_driver -> noop``: :class:`KafkaDriverSource`, a prototype made for this
  measure (not a product source: no epoch log, no exact-range checks beyond its own
  offsets), that reads the batch's records with kafka-python on the driver;
* ``python_floor -> noop`` and ``python_floor_driver -> noop``
  (:mod:`benchmarks.python_floor`): the same two ways of reading, with rows made in
  memory instead of read from Kafka: Spark's own share of each.

Printed: the median ``triggerExecution`` and phases of each and the ratio
``kafka_driver / gtkafka``. A driver-side read has limits of its own, which the numbers
do not show: every record passes through the driver, and PySpark gives the simple
reader no read limit (it reads what it decides to: here ``maxRecordsPerRead``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import DataSource, SimpleDataSourceStreamReader

from benchmarks.common import (
    add_repeat_option,
    best_in_turn,
    kafka_bootstrap,
    local_spark,
    print_table,
)
from benchmarks.fixed_cost import Run, measure
from benchmarks.source_bench import consumer_config, fill

NAME = "kafka_driver"
RECORDS = 100
PARTITIONS = 8
GTKAFKA = "gtkafka -> noop (read in a Python worker)"
KAFKA_DRIVER = "kafka_driver -> noop (read on the driver)"
FLOOR = "python_floor -> noop (rows made in a Python worker)"
FLOOR_DRIVER = "python_floor_driver -> noop (rows made on the driver)"

Offsets = dict[str, int]  # partition (as a string: offsets are JSON) -> next offset


def plan(start: Offsets, ends: Offsets, most: int) -> Offsets:
    """The end of the next read: at most ``most`` records past ``start``, shared evenly
    between the partitions that have records (a partition with fewer gives its share to
    the next ones), never past ``ends``."""
    end = dict(start)
    waiting = sorted((p for p in start if ends[p] > start[p]), key=int)
    left = most
    for i, p in enumerate(waiting):
        share = -(-left // (len(waiting) - i))  # ceil
        take = min(share, ends[p] - start[p])
        end[p] = start[p] + take
        left -= take
    return end


class KafkaDriverSource(DataSource):
    """``kafka_driver``: options ``bootstrap``, ``topic``, ``maxRecordsPerRead`` (100)."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def schema(self) -> str:
        return "key binary, value binary, partition int, offset long"

    def simpleStreamReader(self, schema: Any) -> SimpleDataSourceStreamReader:
        return KafkaDriverReader(
            self.options["bootstrap"],
            self.options["topic"],
            int(self.options.get("maxRecordsPerRead", str(RECORDS))),
        )


class KafkaDriverReader(SimpleDataSourceStreamReader):
    """Reads ``[start, end)`` of every partition with one kafka-python consumer, kept for
    the life of the driver's source process."""

    def __init__(self, bootstrap: str, topic: str, most: int) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.most = most
        self._consumer: Any = None

    def _client(self) -> Any:
        if self._consumer is None:
            from kafka import KafkaConsumer, TopicPartition

            consumer = KafkaConsumer(**consumer_config(self.bootstrap))
            parts = sorted(consumer.partitions_for_topic(self.topic) or ())
            consumer.assign([TopicPartition(self.topic, p) for p in parts])
            self._consumer = consumer
        return self._consumer

    def initialOffset(self) -> dict[str, Any]:
        consumer = self._client()
        return {
            str(tp.partition): consumer.beginning_offsets([tp])[tp] for tp in consumer.assignment()
        }

    def read(self, start: dict[str, Any]) -> tuple[Iterator[tuple[Any, ...]], dict[str, Any]]:
        consumer = self._client()
        # The larger of ListOffsets and the last fetch's high watermark: the harness's
        # Tansu answers ListOffsets with its last record batch's base offset plus one.
        latest = {
            str(tp.partition): max(n, consumer.highwater(tp) or 0)
            for tp, n in consumer.end_offsets(list(consumer.assignment())).items()
        }
        end = plan({p: int(o) for p, o in start.items()}, latest, self.most)
        return self.readBetweenOffsets(start, end), end

    def readBetweenOffsets(
        self, start: dict[str, Any], end: dict[str, Any]
    ) -> Iterator[tuple[Any, ...]]:
        from kafka import TopicPartition

        consumer = self._client()
        position = {p: int(o) for p, o in start.items()}
        # Every partition gets a position (else a poll asks for a reset policy) and only
        # those with records to read are fetched.
        wanted = {p for p, o in position.items() if o < int(end[p])}
        consumer.pause(*(TopicPartition(self.topic, int(p)) for p in position if p not in wanted))
        consumer.resume(*(TopicPartition(self.topic, int(p)) for p in wanted))
        for p, o in position.items():
            consumer.seek(TopicPartition(self.topic, int(p)), o)
        rows: list[tuple[Any, ...]] = []
        while any(position[p] < int(end[p]) for p in position):
            for tp, records in consumer.poll(timeout_ms=1_000).items():
                p = str(tp.partition)
                for r in records:
                    if position[p] <= r.offset < int(end[p]):
                        rows.append((r.key, r.value, tp.partition, r.offset))
                        position[p] = r.offset + 1
        return iter(rows)

    def commit(self, end: dict[str, Any]) -> None:
        pass

    def stop(self) -> None:
        if self._consumer is not None:
            self._consumer.close()


def run(spark: Any, name: str, *, workdir: Path, batches: int, bootstrap: str, topic: str) -> Run:
    """One query of the four, ``batches`` + 1 batches of 100 records, the first left out."""
    from benchmarks import python_floor as floor

    floor.register(spark)
    spark.dataSource.register(KafkaDriverSource)
    reader = spark.readStream
    if name == GTKAFKA:
        df = (
            reader.format("gtkafka")
            .option("pipeline.id", f"driver-reads-{uuid.uuid4().hex[:8]}")
            .option("state.uri", (workdir / f"state-{uuid.uuid4().hex[:8]}").as_uri())
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", str(RECORDS))
            .load()
        )
    elif name == KAFKA_DRIVER:
        df = reader.format(NAME).option("bootstrap", bootstrap).option("topic", topic).load()
    else:
        df = (
            reader.format(floor.DRIVER_NAME if name == FLOOR_DRIVER else floor.NAME)
            .option("rowsPerBatch", RECORDS)
            .option("maxBatches", batches + 1)
            .load()
        )
    query = (
        df.writeStream.format("noop")
        .option("checkpointLocation", str(workdir / f"cp-{uuid.uuid4().hex[:8]}"))
        .trigger(processingTime="0 seconds")
        .start()
    )
    return measure(query, name, batches, 600)


def report(runs: list[Run]) -> None:
    phases = sorted({k for r in runs for k in r.phases})
    print()
    print_table(
        ["query (100 records per batch)", "batches", "triggerExecution p50 ms", *phases, "load"],
        [
            [
                r.query,
                str(len(r.trigger_ms)),
                f"{r.median:,.0f}",
                *(f"{statistics.median(r.phases.get(ph) or [0.0]):,.0f}" for ph in phases),
                r.load,
            ]
            for r in runs
        ],
    )
    by = {r.query: r for r in runs}
    print(
        f"\nkafka_driver / gtkafka = {by[KAFKA_DRIVER].median / by[GTKAFKA].median:.2f} "
        f"({by[KAFKA_DRIVER].median:,.0f} vs {by[GTKAFKA].median:,.0f} ms); "
        f"python_floor_driver / python_floor = "
        f"{by[FLOOR_DRIVER].median / by[FLOOR].median:.2f}"
    )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.driver_reads", description=__doc__)
    parser.add_argument("--batches", type=int, default=10, help="measured batches of each")
    parser.add_argument("--cores", type=int, default=os.cpu_count() or 1)
    parser.add_argument("--bootstrap", default=os.environ.get("GTB_KAFKA_BOOTSTRAP"))
    add_repeat_option(parser, "run the queries this many times in turn; each keeps its best run")
    args = parser.parse_args(argv)
    with (
        kafka_bootstrap(args.bootstrap) as bootstrap,
        tempfile.TemporaryDirectory(prefix="gtb-driver-reads-") as tmp,
        local_spark(args.cores) as spark,
    ):
        names = (GTKAFKA, KAFKA_DRIVER, FLOOR, FLOOR_DRIVER)
        # Each Kafka query reads a topic of its own, so that a turn starts at offset 0.
        topics: list[str] = []

        def kafka_topic() -> str:
            topic = f"driver-reads-{uuid.uuid4().hex[:8]}"
            fill(bootstrap, topic, PARTITIONS, RECORDS * (args.batches + 3), 1)
            topics.append(topic)
            return topic

        def variant(name: str) -> Callable[[int], Run]:
            def one(_turn: int) -> Run:
                kafka = name in (GTKAFKA, KAFKA_DRIVER)
                return run(
                    spark,
                    name,
                    workdir=Path(tmp),
                    batches=args.batches,
                    bootstrap=bootstrap,
                    topic=kafka_topic() if kafka else "",
                )

            return one

        runs = best_in_turn([variant(name) for name in names], args.repeat, cost=lambda r: r.median)
    report(runs)


if __name__ == "__main__":
    main()
