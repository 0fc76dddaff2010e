"""A Python worker's read tasks through its consumer pool, with each read client.

    python -m benchmarks.pooled_reads                  # 64 partitions, 312 records a range
    python -m benchmarks.pooled_reads --partitions 16 --batches 6

No Spark, one process: the read tasks of a Python worker, as
:func:`datasource.partition_reader.read_partition` runs them, with the worker's
:class:`~datasource.consumer_pool.ConsumerPool` (its evictor thread on, so idle
librdkafka consumers are parked as in a worker). Each batch is two tasks of half the
partitions' ranges each (the two Python workers of ``local[2]``, one after the other).
For each read client of ``kafkaConsumer.client``, in turn, two shapes:

* ``backlog``: every batch's records are in the topic before the first batch, and the
  batches are read back to back (a query catching up, ``availableNow``, short triggers):
  a pooled consumer reads on from what it fetched ahead;
* ``live``: before each batch, a pause of ``--pause`` seconds (longer than the pool's
  :data:`~datasource.consumer_pool.PARK_AFTER_S`: librdkafka's consumers are parked), then
  the batch's records are produced and read (a query with a trigger interval): every
  consumer must fetch its range anew.

Each run has a Tansu broker of its own (unless ``--bootstrap``). Printed per client and
shape: the first batch (it creates the consumers) and the median
of the others, in ms, and librdkafka against kafka-python.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from collections.abc import Callable
from typing import Any

from benchmarks.common import kafka_bootstrap, load_average, print_table
from benchmarks.consumer_reuse import librdkafka_installed

CLIENTS = ("kafka-python", "confluent")


def read_batches(
    bootstrap: str,
    client: str,
    *,
    partitions: int,
    per_range: int,
    batches: int,
    live: bool,
    pause_s: float,
    new_topic: Callable[[], str],
    produce: Callable[[str, int], None],
) -> list[float]:
    """Milliseconds of each batch (two tasks) read with ``client`` from a new topic."""
    from datasource.consumer_pool import ConsumerPool
    from datasource.offsets import OffsetRange
    from datasource.options import KafkaSourceOptions
    from datasource.partition_reader import KafkaInputPartition, read_partition
    from datasource.schema import arrow_schema, source_schema

    topic = new_topic()
    if not live:
        produce(topic, batches)
    options = KafkaSourceOptions.parse(
        {"kafka.bootstrap.servers": bootstrap, "subscribe": topic, "kafkaConsumer.client": client}
    )
    schema = arrow_schema(source_schema(False))
    pool = ConsumerPool(evictor=True)
    times = []
    try:
        for b in range(batches):
            if live:
                time.sleep(pause_s)
                produce(topic, 1)
            ranges = [
                OffsetRange(topic, p, b * per_range, (b + 1) * per_range) for p in range(partitions)
            ]
            half = (partitions + 1) // 2
            began = time.perf_counter()
            rows = 0
            for i, task in enumerate((ranges[:half], ranges[half:])):
                part = KafkaInputPartition(b, tuple(task), index=i)
                for batch in read_partition(options, part, schema, task=None, source=pool):
                    rows += batch.num_rows
            times.append((time.perf_counter() - began) * 1000)
            if rows != partitions * per_range:
                raise RuntimeError(f"{client}: read {rows} records, not {partitions * per_range}")
    finally:
        pool.close()
    return times


def run_on_its_broker(args: argparse.Namespace, client: str, *, live: bool) -> list[float]:
    """:func:`read_batches` on a broker of its own (a Tansu started for the run, unless
    ``--bootstrap``): Tansu's answers slow down as it holds more topics and record
    batches, which would favour whichever run came first."""
    with kafka_bootstrap(args.bootstrap) as bootstrap:
        from harness.kafka import KafkaBroker, KafkaHelper

        helper: Any = KafkaHelper(KafkaBroker.external_at(bootstrap), "pooled")

        def new_topic() -> str:
            return str(helper.create_topic(partitions=args.partitions))

        def produce(topic: str, batches: int) -> None:
            records = [
                (None, b"v" * 100, None, p)
                for _ in range(batches * args.per_range)
                for p in range(args.partitions)
            ]
            helper.produce(topic, records, batch_size=args.per_range)

        try:
            return read_batches(
                bootstrap,
                client,
                partitions=args.partitions,
                per_range=args.per_range,
                batches=args.batches,
                live=live,
                pause_s=args.pause,
                new_topic=new_topic,
                produce=produce,
            )
        finally:
            helper.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.pooled_reads", description=__doc__)
    parser.add_argument("--partitions", type=int, default=64)
    parser.add_argument("--per-range", type=int, default=312, help="records per range")
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--pause", type=float, default=2.5, help="seconds before a live batch")
    parser.add_argument("--bootstrap", default=os.environ.get("GTB_KAFKA_BOOTSTRAP"))
    args = parser.parse_args(argv)
    if args.batches < 2:
        parser.error(f"--batches: expected at least 2, got {args.batches}")
    clients = CLIENTS if librdkafka_installed() else CLIENTS[:1]
    if len(clients) == 1:
        print("confluent-kafka is not installed: librdkafka is not measured")
    results: dict[tuple[str, str], list[float]] = {}
    for shape in ("backlog", "live"):
        for client in clients:
            times = run_on_its_broker(args, client, live=shape == "live")
            results[(shape, client)] = times
            print(
                f"  {shape:8} {client:12}: first {times[0]:.0f} ms, then median "
                f"{statistics.median(times[1:]):.1f} ms a batch",
                flush=True,
            )
    rows = []
    for (shape, client), times in results.items():
        base = results[(shape, CLIENTS[0])]
        rows.append(
            [
                shape,
                client,
                f"{args.partitions} x {args.per_range}",
                f"{times[0]:.0f}",
                f"{statistics.median(times[1:]):.1f}",
                f"{statistics.median(times[1:]) / statistics.median(base[1:]):.2f}",
            ]
        )
    print_table(
        ["shape", "client", "ranges x records", "first batch ms", "median ms", "vs kafka-python"],
        rows,
    )
    print(f"(load average {load_average()})")


if __name__ == "__main__":
    main()
