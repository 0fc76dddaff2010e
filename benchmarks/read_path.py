"""The read path's CPU per record, without Spark: gtkafka's task loop vs a plain consumer.

    python -m benchmarks.read_path                      # 400,000 records, 8 partitions
    python -m benchmarks.read_path --records 100000 --repeat 5

Fills one topic (a Tansu broker started here, or ``--bootstrap``) and reads all of it in
this one process, several times, alternating:

* ``plain kafka-python``: one consumer (gtkafka's settings) assigned every partition,
  polling until it has every record, touching each record's value (as
  ``benchmarks.source_bench``'s plain loop);
* ``gtkafka task``: :func:`datasource.partition_reader.read_partition` over one task
  holding every partition's range (pooling off: a new consumer per task, like the plain
  loop), consuming the Arrow RecordBatches it yields;
* ``gtkafka task, ConsumerRecords``: the same without :mod:`datasource.record_rows`
  (kafka-python's own records, as before it), for a before/after in one run;
* ``gtkafka task, librdkafka``: the same task read with ``kafkaConsumer.client=confluent``
  (when confluent-kafka is installed);
* ``kafka-python parse only``/``record_rows parse only`` (``--synthetic``, no broker):
  the record decoding alone over batches built in memory.

CPU time (``time.process_time``: every thread of this process, so kafka-python's IO
thread too) per record is the figure: it hardly depends on the machine's load, unlike
wall time; both are printed, the best of ``--repeat`` runs, with the load average.
"""

from __future__ import annotations

import argparse
import os
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from benchmarks.common import kafka_bootstrap, load_average, print_table
from benchmarks.consumer_reuse import librdkafka_installed
from benchmarks.source_bench import consumer_config, fill


@dataclass(frozen=True)
class Run:
    mode: str
    records: int
    cpu_s: float
    wall_s: float

    @property
    def cpu_us(self) -> float:
        return self.cpu_s / self.records * 1e6


def timed(mode: str, body: Callable[[], int]) -> Run:
    cpu, wall = time.process_time(), time.perf_counter()
    n = body()
    return Run(mode, n, time.process_time() - cpu, time.perf_counter() - wall)


def plain(bootstrap: str, topic: str, partitions: int, records: int) -> int:
    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(**consumer_config(bootstrap))
    tps = [TopicPartition(topic, p) for p in range(partitions)]
    consumer.assign(tps)
    consumer.seek_to_beginning(*tps)
    count = size = 0
    while count < records:
        for batch in consumer.poll(timeout_ms=1000).values():
            for record in batch:
                count += 1
                size += len(record.value)
    consumer.close()
    return count


@contextmanager
def without_record_rows() -> Iterator[None]:
    from datasource import record_rows

    install = record_rows.install
    record_rows.install = lambda consumer, **_: False
    try:
        yield
    finally:
        record_rows.install = install


def gtkafka_task(
    bootstrap: str, topic: str, partitions: int, records: int, client: str = "kafka-python"
) -> int:
    from datasource.offsets import OffsetRange
    from datasource.options import KafkaSourceOptions
    from datasource.partition_reader import KafkaInputPartition, read_partition
    from datasource.schema import arrow_schema, source_schema

    options = KafkaSourceOptions.parse(
        {
            "kafka.bootstrap.servers": bootstrap,
            "subscribe": topic,
            "kafkaConsumer.pool.enabled": "false",
            "kafkaConsumer.client": client,
        }
    )
    per = records // partitions
    ranges = tuple(OffsetRange(topic, p, 0, per) for p in range(partitions))
    schema = arrow_schema(source_schema(False))
    rows = 0
    for batch in read_partition(options, KafkaInputPartition(1, ranges), schema, task=None):
        rows += batch.num_rows
    return rows


def synthetic(records: int) -> list[Run]:
    """The decoding alone: kafka-python's records vs record_rows, batches in memory."""
    from kafka import TopicPartition
    from kafka.consumer.fetcher import Fetcher
    from kafka.record.default_records import DefaultRecordBatchBuilder
    from kafka.record.memory_records import MemoryRecords

    from datasource import record_rows

    data = bytearray()
    for base in range(0, records, 4000):
        builder = DefaultRecordBatchBuilder(2, 0, False, -1, -1, -1, 1 << 30)
        for i in range(min(4000, records - base)):
            builder.append(i, 1_700_000_000_000 + i, b"%08d" % (base + i), b"v" * 92, [])
        batch = builder.build()
        batch[0:8] = base.to_bytes(8, "big")
        data += batch
    tp = TopicPartition("t", 0)

    def parse(cls: Any) -> Callable[[], int]:
        def body() -> int:
            part = cls(0, tp, MemoryRecords(bytes(data)))
            n = 0
            while part:
                n += len(part.take(10_000))
            return n

        return body

    return [
        timed("kafka-python parse only", parse(Fetcher.PartitionRecords)),
        timed("record_rows parse only", parse(record_rows._row_partition_records())),
    ]


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.read_path", description=__doc__)
    parser.add_argument("--records", type=int, default=400_000)
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--bootstrap", default=os.environ.get("GTB_KAFKA_BOOTSTRAP"))
    parser.add_argument("--synthetic", action="store_true", help="no broker: decoding only")
    args = parser.parse_args(argv)
    records = args.records - args.records % args.partitions
    runs: dict[str, list[Run]] = {}
    if args.synthetic:
        for _ in range(args.repeat):
            for run in synthetic(records):
                runs.setdefault(run.mode, []).append(run)
    else:
        with kafka_bootstrap(args.bootstrap) as bootstrap:
            topic = f"readpath-{uuid.uuid4().hex[:8]}"
            fill(bootstrap, topic, args.partitions, records, min(2, args.partitions))
            modes: list[tuple[str, Callable[[], int]]] = [
                ("plain kafka-python", lambda: plain(bootstrap, topic, args.partitions, records)),
                ("gtkafka task", lambda: gtkafka_task(bootstrap, topic, args.partitions, records)),
            ]

            def before() -> int:
                with without_record_rows():
                    return gtkafka_task(bootstrap, topic, args.partitions, records)

            modes.append(("gtkafka task, ConsumerRecords", before))
            if librdkafka_installed():
                modes.append(
                    (
                        "gtkafka task, librdkafka",
                        lambda: gtkafka_task(
                            bootstrap, topic, args.partitions, records, client="confluent"
                        ),
                    )
                )
            else:
                print("confluent-kafka is not installed: librdkafka is not measured")
            for _ in range(args.repeat):
                for mode, body in modes:
                    run = timed(mode, body)
                    if run.records != records:
                        raise RuntimeError(f"{mode} read {run.records} records, not {records}")
                    runs.setdefault(mode, []).append(run)
    best = {mode: min(rs, key=lambda r: r.cpu_s) for mode, rs in runs.items()}
    base = next(iter(best.values()))
    print_table(
        ["mode", "records", "CPU us/record", "wall s", "records/s (wall)", "CPU vs first"],
        [
            [
                r.mode,
                f"{r.records:,}",
                f"{r.cpu_us:.2f}",
                f"{r.wall_s:.2f}",
                f"{r.records / r.wall_s:,.0f}",
                f"{r.cpu_s / base.cpu_s:.2f}",
            ]
            for r in best.values()
        ],
    )
    print(f"(best of {args.repeat}; load average {load_average()})")


if __name__ == "__main__":
    main()
