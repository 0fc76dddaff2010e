"""Why 64 partitions read slower than 1: what a small range costs by how its consumer is got.

    python -m benchmarks.consumer_reuse                 # 8 batches of 32 ranges x 312 records
    python -m benchmarks.consumer_reuse --batches 20

No Spark, one process: the shape of one read task of the partition scaling benchmark at
64 partitions (200,000 records in about 10 batches, packed into 2 tasks of 32 ranges of
about 312 records), read batch after batch, four ways with kafka-python and gtkafka's
consumer settings:

* ``1 partition``: the same records per batch from a 1-partition topic, one consumer
  (the benchmark's reference);
* ``pooled consumer per partition``: a consumer per partition, created in the first batch
  and standing at the next range's start afterwards (a pool hit without a seek);
* ``new consumer per range``: a consumer created, assigned and sought for every range
  (a pool miss: what a range costs when its task runs in a Python worker that has no
  consumer for the partition);
* ``one consumer for all 32``: one consumer assigned every partition of the task,
  records fetched past a range's end kept for the next batch.

The same with librdkafka (the ``confluent-kafka`` package, when installed; the evaluation
of a second executor read client): a consumer per partition, pooled or new per range,
and one consumer per task assigned every range at its start (librdkafka fetches all of
a consumer's partitions from their leader in one request); a record fetched past a
range's end is dropped, as a re-assignment at the next batch's starts drops it.

Printed: the mean wall time per task and batch over all batches (creations included),
and its ratio to the 1-partition read, with the load average.
"""

from __future__ import annotations

import argparse
import statistics
import time
import uuid
from collections.abc import Callable
from typing import Any

from benchmarks.common import kafka_bootstrap, load_average, print_table
from benchmarks.source_bench import consumer_config, fill
from datasource.librdkafka_consumer import installed


def _consumer(bootstrap: str) -> Any:
    from kafka import KafkaConsumer

    return KafkaConsumer(**consumer_config(bootstrap))


def _read_range(consumer: Any, tp: Any, start: int, until: int) -> int:
    """Poll one assigned partition until ``[start, until)`` is read; the count read."""
    got, next_offset = 0, start
    while next_offset < until:
        records = consumer.poll(timeout_ms=1_000, max_records=until - next_offset).get(tp, [])
        got += sum(1 for r in records if r.offset < until)
        if records:
            next_offset = records[-1].offset + 1
    return got


def one_partition(bootstrap: str, topic: str, per_task: int, batches: int) -> list[float]:
    from kafka import TopicPartition

    tp = TopicPartition(topic, 0)
    consumer = _consumer(bootstrap)
    consumer.assign([tp])
    consumer.seek(tp, 0)
    times = []
    try:
        for b in range(batches):
            t0 = time.perf_counter()
            n = _read_range(consumer, tp, b * per_task, (b + 1) * per_task)
            times.append(time.perf_counter() - t0)
            assert n == per_task, n
    finally:
        consumer.close()
    return times


def per_partition(
    bootstrap: str, topic: str, ranges: int, per_range: int, batches: int, *, new_each: bool
) -> list[float]:
    from kafka import TopicPartition

    consumers: dict[int, Any] = {}
    times = []
    try:
        for b in range(batches):
            t0 = time.perf_counter()
            n = 0
            for p in range(ranges):
                tp = TopicPartition(topic, p)
                if new_each or p not in consumers:
                    if p in consumers:
                        consumers.pop(p).close()
                    consumer = _consumer(bootstrap)
                    consumer.assign([tp])
                    consumer.seek(tp, b * per_range)
                    consumers[p] = consumer
                n += _read_range(consumers[p], tp, b * per_range, (b + 1) * per_range)
            times.append(time.perf_counter() - t0)
            assert n == ranges * per_range, n
    finally:
        for consumer in consumers.values():
            consumer.close()
    return times


def one_for_all(
    bootstrap: str, topic: str, ranges: int, per_range: int, batches: int
) -> list[float]:
    from kafka import TopicPartition

    tps = [TopicPartition(topic, p) for p in range(ranges)]
    consumer = _consumer(bootstrap)
    consumer.assign(tps)
    for tp in tps:
        consumer.seek(tp, 0)
    ahead: dict[Any, list[Any]] = {tp: [] for tp in tps}
    times = []
    try:
        for b in range(batches):
            t0 = time.perf_counter()
            until = (b + 1) * per_range
            next_offset = dict.fromkeys(tps, b * per_range)
            n = 0

            def take(
                tp: Any, records: list[Any], until: int = until, seen: dict[Any, int] = next_offset
            ) -> int:
                ahead[tp] = [r for r in records if r.offset >= until]
                if records:
                    seen[tp] = max(seen[tp], records[-1].offset + 1)
                return sum(1 for r in records if r.offset < until)

            for tp in tps:
                n += take(tp, ahead[tp])
            while any(next_offset[tp] < until for tp in tps):
                for tp, records in consumer.poll(timeout_ms=1_000).items():
                    n += take(tp, ahead[tp] + records)
            times.append(time.perf_counter() - t0)
            assert n == ranges * per_range, n
    finally:
        consumer.close()
    return times


# --- librdkafka (confluent-kafka) ------------------------------------------------------


def _rd_consumer(bootstrap: str) -> Any:
    from confluent_kafka import Consumer

    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "gtbarrier-consumer-reuse",  # librdkafka needs one; never joined
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "fetch.max.bytes": 50 * 1024 * 1024,
            "max.partition.fetch.bytes": 1024 * 1024,
        }
    )


def _rd_read(consumer: Any, ends: dict[int, tuple[int, int]]) -> int:
    """Consume until every partition ``p`` of ``ends`` (``p -> (start, until)``) reached
    ``until``; the count of records in the ranges (records past an end are dropped)."""
    next_offset = {p: start for p, (start, _) in ends.items()}
    got = 0
    while (left := sum(max(0, until - next_offset[p]) for p, (_, until) in ends.items())) > 0:
        # consume() returns once it has num_messages or at its timeout: ask for what is
        # left (the ranges have no gaps here), so it never waits out the timeout.
        for message in consumer.consume(num_messages=min(left, 100_000), timeout=1.0):
            if message.error() is not None:
                raise RuntimeError(f"librdkafka: {message.error()}")
            p, offset = message.partition(), message.offset()
            if offset < ends[p][1]:
                got += 1
            next_offset[p] = max(next_offset[p], offset + 1)
    return got


def rd_per_partition(
    bootstrap: str, topic: str, ranges: int, per_range: int, batches: int, *, new_each: bool
) -> list[float]:
    from confluent_kafka import TopicPartition

    consumers: dict[int, Any] = {}
    replaced: list[Any] = []
    times = []
    try:
        for b in range(batches):
            t0 = time.perf_counter()
            n = 0
            start, until = b * per_range, (b + 1) * per_range
            for p in range(ranges):
                if new_each or p not in consumers:
                    if p in consumers:
                        # Closed after the task, untimed: a close waits for the fetch in
                        # flight (up to fetch.wait.max.ms), which a pool would do aside.
                        replaced.append(consumers.pop(p))
                    consumer = _rd_consumer(bootstrap)
                    consumer.assign([TopicPartition(topic, p, start)])
                    consumers[p] = consumer
                n += _rd_read(consumers[p], {p: (start, until)})
            times.append(time.perf_counter() - t0)
            assert n == ranges * per_range, n
            for consumer in replaced:
                consumer.close()
            replaced.clear()
    finally:
        for consumer in [*consumers.values(), *replaced]:
            consumer.close()
    return times


def rd_one_partition(bootstrap: str, topic: str, per_task: int, batches: int) -> list[float]:
    """The 1-partition reference read with librdkafka."""
    return rd_per_partition(bootstrap, topic, 1, per_task, batches, new_each=False)


def rd_one_for_all(
    bootstrap: str, topic: str, ranges: int, per_range: int, batches: int
) -> list[float]:
    from confluent_kafka import TopicPartition

    consumer = _rd_consumer(bootstrap)
    times = []
    try:
        for b in range(batches):
            t0 = time.perf_counter()
            start, until = b * per_range, (b + 1) * per_range
            consumer.assign([TopicPartition(topic, p, start) for p in range(ranges)])
            n = _rd_read(consumer, dict.fromkeys(range(ranges), (start, until)))
            times.append(time.perf_counter() - t0)
            assert n == ranges * per_range, n
    finally:
        consumer.close()
    return times


def librdkafka_installed() -> bool:
    """Whether confluent-kafka is installed (the librdkafka rows are measured)."""
    return installed()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.consumer_reuse", description=__doc__
    )
    parser.add_argument("--ranges", type=int, default=32, help="ranges (partitions) per task")
    parser.add_argument("--per-range", type=int, default=312, help="records per range")
    parser.add_argument("--batches", type=int, default=8)
    parser.add_argument("--bootstrap", default=None)
    args = parser.parse_args(argv)
    per_task = args.ranges * args.per_range
    with kafka_bootstrap(args.bootstrap) as bootstrap:
        many = f"reuse-{uuid.uuid4().hex[:8]}"
        single = f"reuse1-{uuid.uuid4().hex[:8]}"
        fill(bootstrap, many, args.ranges, per_task * args.batches, 4)
        fill(bootstrap, single, 1, per_task * args.batches, 1)
        shape = (args.ranges, args.per_range, args.batches)
        modes: list[tuple[str, Callable[[], list[float]]]] = [
            ("1 partition", lambda: one_partition(bootstrap, single, per_task, args.batches)),
            (
                "pooled consumer per partition",
                lambda: per_partition(bootstrap, many, *shape, new_each=False),
            ),
            (
                "new consumer per range",
                lambda: per_partition(bootstrap, many, *shape, new_each=True),
            ),
            ("one consumer for all ranges", lambda: one_for_all(bootstrap, many, *shape)),
        ]
        if librdkafka_installed():
            modes += [
                (
                    "librdkafka: 1 partition",
                    lambda: rd_one_partition(bootstrap, single, per_task, args.batches),
                ),
                (
                    "librdkafka: pooled consumer per partition",
                    lambda: rd_per_partition(bootstrap, many, *shape, new_each=False),
                ),
                (
                    "librdkafka: new consumer per range (closed after the task)",
                    lambda: rd_per_partition(bootstrap, many, *shape, new_each=True),
                ),
                (
                    "librdkafka: one consumer for all ranges",
                    lambda: rd_one_for_all(bootstrap, many, *shape),
                ),
            ]
        else:
            print("confluent-kafka is not installed: the librdkafka rows are not measured")
        rows: list[list[object]] = []
        reference = 0.0
        for name, run in modes:
            mean_ms = statistics.fmean(run()) * 1000
            reference = reference or mean_ms
            rows.append([name, f"{mean_ms:.1f}", f"{mean_ms / reference:.2f}", load_average()])
    print(
        f"\none task of {args.ranges} ranges x {args.per_range:,} records, {args.batches} "
        "batches, mean wall time per task and batch (creations included)"
    )
    print_table(["consumer", "ms per task-batch", "vs 1 partition", "load average"], rows)


if __name__ == "__main__":
    main()
