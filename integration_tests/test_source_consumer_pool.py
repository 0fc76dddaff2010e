"""gtkafka's pooled consumers against the real broker.

* Interleaved ranges, task failures mid-range, a broker restart and ranges that start
  ahead of their consumer: a pooled consumer never serves a record from a wrong position
  (every read is exactly its range, record by record), and the pool reuses, seeks, moves
  forward and invalidates as it should.
* A query's rows (key, value, gt) are identical with and without the pool and with and
  without packing small ranges into one task; every batch has its batch record.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from datasource.consumer_pool import MAX_ADVANCE_RECORDS, ConsumerPool
from datasource.offsets import OffsetRange
from datasource.options import KafkaSourceOptions
from datasource.range_reader import RangeReader, client_factory
from datasource.schema import arrow_schema, source_schema
from harness.kafka import KafkaHelper
from harness.kafka_proxy import FETCH, HoldResponses, KafkaProxy
from integration_tests.source_support import gtkafka_options, run_to_end
from state.layout import PipelineLayout
from state.protocol.epoch_log import epoch_of_batch
from state.stores import StoreConfig, open_store

SCHEMA = arrow_schema(source_schema(False))


class TaskKilled(Exception):
    """The failure injected into a read task."""


class FlakyConsumers:
    """Creates real consumers whose ``poll`` raises once armed, after ``after`` more polls."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.created = 0
        self.after: int | None = None

    def arm(self, after: int) -> None:
        self.after = after

    def __call__(self, **config: Any) -> Any:
        self.created += 1
        return _Flaky(self.client(**config), self)


class _Flaky:
    def __init__(self, consumer: Any, control: FlakyConsumers) -> None:
        self._consumer = consumer
        self._control = control

    def poll(self, *args: Any, **kwargs: Any) -> Any:
        control = self._control
        if control.after is not None:
            if control.after == 0:
                control.after = None
                raise TaskKilled("the task failed mid-range")
            control.after -= 1
        return self._consumer.poll(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._consumer, name)


def produce(
    kafka: KafkaHelper, topic: str, partitions: int, per_partition: int, tag: str
) -> dict[tuple[int, int], bytes]:
    """Produce distinct values; ``{(partition, offset): value}`` from the broker's answers."""
    records = [
        (None, f"{tag}-{p}-{i}".encode(), None, p)
        for i in range(per_partition)
        for p in range(partitions)
    ]
    sent = kafka.produce(topic, records, batch_size=100)
    return {(m.partition, m.offset): r[1] for m, r in zip(sent, records, strict=True)}


def read_exactly(
    pool: ConsumerPool,
    consumers: Any,
    opts: KafkaSourceOptions,
    expected: dict[tuple[int, int], bytes],
    r: OffsetRange,
) -> None:
    """Read ``r`` with a consumer from ``pool``: exactly its records, in order."""
    reader = RangeReader(opts, r, consumer_factory=consumers)
    table = pa.Table.from_batches(list(reader.batches(3, SCHEMA, source=pool)), SCHEMA)
    got = list(
        zip(
            table.column("partition").to_pylist(),
            table.column("offset").to_pylist(),
            table.column("value").to_pylist(),
            strict=True,
        )
    )
    offsets = range(r.from_offset, r.until_offset)
    want = [(r.partition, o, expected[(r.partition, o)]) for o in offsets]
    assert got == want, f"{r}: read {len(got)} records, first {got[:1]}, want {want[:1]}"
    assert {g["epoch"] for g in table.column("gt").to_pylist()} == {3}


def pool_options(kafka: KafkaHelper, topic: str, client: str) -> KafkaSourceOptions:
    return KafkaSourceOptions.parse(
        {
            "kafka.bootstrap.servers": kafka.bootstrap,
            "subscribe": topic,
            "kafka.max.poll.records": "50",  # several polls per range
            "kafkaConsumer.pollTimeoutMs": "60000",
            "kafkaConsumer.client": client,
        }
    )


@pytest.mark.timeout(300)
def test_pooled_consumers_never_read_from_a_wrong_position(
    kafka_durable: KafkaHelper, read_client: str
) -> None:
    kafka = kafka_durable
    topic = kafka.create_topic(partitions=3)
    expected = produce(kafka, topic, 3, 600, "a")
    opts = pool_options(kafka, topic, read_client)
    pool = ConsumerPool()
    consumers = FlakyConsumers(client_factory(opts))

    def read(partition: int, begin: int, end: int) -> None:
        read_exactly(pool, consumers, opts, expected, OffsetRange(topic, partition, begin, end))

    def fail(partition: int, begin: int, end: int, after_polls: int) -> None:
        consumers.arm(after_polls)
        with pytest.raises(TaskKilled):
            read(partition, begin, end)

    def counts() -> tuple[int, int, int, int]:
        s = pool.stats()
        return s.created, s.reused, s.seeks, s.invalidated

    read(0, 0, 200)
    read(1, 0, 150)
    read(0, 200, 400)  # continues where partition 0's consumer stands: no seek
    assert counts() == (2, 1, 2, 0)
    read(0, 100, 300)  # a replay: sought back
    fail(2, 0, 600, after_polls=2)  # stops inside the range: that consumer is dropped
    assert counts() == (3, 2, 4, 1)
    read(2, 0, 600)  # the retry: a new consumer, exactly the range
    read(0, 300, 450)
    assert counts() == (4, 3, 5, 1)

    kafka.broker.stop()
    kafka.broker.start()
    # pooled consumers with dead connections: reconnect, and read exactly their ranges
    read(1, 150, 600)
    read(0, 450, 600)
    expected.update(produce(kafka, topic, 3, 300, "b"))
    read(2, 600, 900)
    read(0, 600, 750)
    fail(1, 600, 900, after_polls=1)
    read(1, 600, 900)
    read(1, 100, 200)  # far behind: sought
    read(1, 200, 900)
    created, reused, seeks, invalidated = counts()
    assert created == consumers.created
    assert created - invalidated == 3  # each dropped consumer was replaced once
    if read_client == "kafka-python":
        assert invalidated == 2 and created == 5
        # reused without a seek: every read that continued where its consumer stood
        assert (reused, seeks) == (10, 7)
        assert reused - (seeks - created) == 8
    else:
        # librdkafka reconnects with a backoff that grew while the broker was down, so a
        # reused consumer's first poll after the restart may come back empty at the high
        # watermark it last saw; it is then exchanged for a new one (renewed) or not,
        # depending on that timing. The two failed tasks' consumers are dropped either way.
        assert invalidated >= 2
    pool.close()


@pytest.mark.timeout(300)
def test_a_consumer_behind_its_range_moves_through_what_it_fetched(
    kafka_durable: KafkaHelper, read_client: str
) -> None:
    """A pooled consumer standing before the range's start (another worker read the
    ranges in between) moves forward through the records it has fetched already, without
    a seek; a range before it, or past what it fetched, is sought. Every read is exact.
    (A pool without an evictor thread never parks librdkafka's consumers: both clients
    keep what they fetched ahead.)"""
    kafka = kafka_durable
    topic = kafka.create_topic(partitions=1)
    expected = produce(kafka, topic, 1, 1200, "a")
    opts = pool_options(kafka, topic, read_client)
    pool = ConsumerPool()
    # (created, reused, seeks, advanced) after each step below
    steps = [(1, 1, 1, 1), (1, 2, 2, 1), (1, 4, 2, 3), (1, 6, 3, 3)]

    def read(begin: int, end: int) -> None:
        read_exactly(pool, None, opts, expected, OffsetRange(topic, 0, begin, end))

    def counts() -> tuple[int, int, int, int]:
        s = pool.stats()
        return s.created, s.reused, s.seeks, s.advanced

    read(0, 50)  # its first fetch holds the whole partition (1 MB of fetch size)
    read(100, 200)
    assert counts() == steps[0]
    read(150, 250)  # behind the start: sought back, never moved forward
    assert counts() == steps[1]
    read(300, 310)
    read(1190, 1200)
    assert counts() == steps[2]
    expected.update(produce(kafka, topic, 1, 6000, "b"))
    read(1200, 1210)  # where it stands: reused as it is
    read(1211 + MAX_ADVANCE_RECORDS, 1221 + MAX_ADVANCE_RECORDS)  # too far: sought
    assert counts() == steps[3]
    pool.close()


@pytest.mark.timeout(120)
def test_a_parked_librdkafka_consumer_fetches_nothing_and_reads_on_exactly(
    kafka: KafkaHelper,
) -> None:
    """The pool parks an idle librdkafka consumer (``park_idle``): it then sends no Fetch
    at all, which is what keeps a topic re-created meanwhile from crashing librdkafka.
    Lent again, it reads on from where it stands without a seek, and one that stands
    before its range is sought (parking dropped what it had fetched ahead)."""
    topic = kafka.create_topic(partitions=1)
    expected = produce(kafka, topic, 1, 300, "a")
    with KafkaProxy(kafka.bootstrap) as proxy:
        opts = KafkaSourceOptions.parse(
            {
                "kafka.bootstrap.servers": proxy.bootstrap,
                "subscribe": topic,
                "kafkaConsumer.pollTimeoutMs": "60000",
                "kafkaConsumer.client": "confluent",
            }
        )
        pool = ConsumerPool()

        def read(begin: int, end: int) -> None:
            read_exactly(pool, None, opts, expected, OffsetRange(topic, 0, begin, end))

        read(0, 50)
        time.sleep(1.0)  # caught up: the consumer long-polls for more
        assert pool.park_idle(0) == 1
        time.sleep(1.5)  # the Fetch it had in flight is answered (fetch.max.wait.ms 500)
        fetches = proxy.seen[FETCH]
        time.sleep(2.0)
        assert proxy.seen[FETCH] == fetches, "a parked consumer kept fetching"
        read(50, 100)  # where it stands: no seek
        s = pool.stats()
        assert (s.created, s.reused, s.seeks, s.advanced) == (1, 1, 1, 0)
        assert pool.park_idle(0) == 1
        read(120, 200)  # ahead of it, nothing fetched to move through: sought
        s = pool.stats()
        assert (s.created, s.reused, s.seeks, s.advanced) == (1, 2, 2, 0)
        pool.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_a_pooled_consumers_old_high_watermark_is_not_data_loss(
    kafka: KafkaHelper, fail_on_data_loss: str, read_client: str
) -> None:
    """A pooled consumer remembers the high watermark of its last Fetch answer, which may
    be long gone: the partition has grown since. A poll that returns nothing (the broker is
    slow to answer) must not read that old mark as "the partition now ends before the
    range": that would fail the query with a DataLossError, or, with
    failOnDataLoss=false, skip records that are there. Only a fresh answer of the broker
    may say that records are gone."""
    topic = kafka.create_topic(partitions=1)
    expected = produce(kafka, topic, 1, 100, "a")
    slow = HoldResponses(FETCH, delay=2.5)  # longer than one poll of a range (1 s)
    with KafkaProxy(kafka.bootstrap, slow) as proxy:
        opts = KafkaSourceOptions.parse(
            {
                "kafka.bootstrap.servers": proxy.bootstrap,
                "subscribe": topic,
                "failOnDataLoss": fail_on_data_loss,
                "kafkaConsumer.pollTimeoutMs": "30000",
                "kafkaConsumer.client": read_client,
            }
        )
        pool = ConsumerPool()

        def read(begin: int, end: int) -> None:
            read_exactly(pool, None, opts, expected, OffsetRange(topic, 0, begin, end))

        read(0, 100)  # the consumer's last Fetch answer: high watermark 100
        time.sleep(1.0)  # the Fetch it sent ahead is answered (nothing new) meanwhile
        # Held from before the produce: librdkafka keeps fetching while its consumer is
        # idle in the pool, and would have the new records before the next read otherwise.
        slow.arm(2)
        expected.update(produce(kafka, topic, 1, 100, "b"))
        read(100, 200)  # reused where it stands; its first poll comes back empty
        assert slow.delayed >= 1, "no Fetch answer was held back: the test proved nothing"
        stats = pool.stats()
        # the reused consumer, whose mark could be old, was exchanged for a new one once
        assert (stats.created, stats.reused, stats.invalidated) == (2, 1, 1), stats
        pool.close()


def rows_of(capture: list[tuple[int, list[Any]]]) -> list[tuple[bytes, bytes, Any]]:
    return sorted(
        (r.key, r.value, (r.gt.epoch, r.gt.topic, r.gt.partition, r.gt.offset))
        for _, rows in capture
        for r in rows
    )


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_query_rows_are_identical_with_and_without_pooling_and_packing(
    spark: Any, kafka: KafkaHelper, tmp_path: Path, read_client: str
) -> None:
    topic = kafka.create_topic(partitions=8)
    kafka.produce(
        topic,
        [(b"k%d" % i, b"v%d" % i, None, i % 8) for i in range(4000)],
        batch_size=400,
    )
    variants = {
        "pooled, packed": {},
        "pooled, a task per range": {"minRecordsPerTask": "0"},
        "no pool, split and packed": {
            "kafkaConsumer.pool.enabled": "false",
            "maxRecordsPerPartition": "40",
            "minRecordsPerTask": "300",
        },
        "no pool, a task per range": {
            "kafkaConsumer.pool.enabled": "false",
            "minRecordsPerTask": "0",
        },
    }
    results: dict[str, list[tuple[bytes, bytes, Any]]] = {}
    lock = threading.Lock()
    for i, (name, extra) in enumerate(variants.items()):
        state = f"file://{tmp_path / f'state-{i}'}"
        opts = gtkafka_options(
            kafka.bootstrap,
            topic,
            state,
            maxOffsetsPerTrigger="1000",
            **{"kafkaConsumer.client": read_client},
        )
        opts.update(extra, **{"pipeline.id": f"pool-{i}-{topic[-8:]}"})
        capture: list[tuple[int, list[Any]]] = []

        def on_batch(df: Any, batch_id: int, capture: list[Any] = capture) -> None:
            rows = df.select("key", "value", "gt").collect()
            with lock:
                capture.append((batch_id, rows))

        query = run_to_end(spark, opts, tmp_path / f"checkpoint-{i}", on_batch)
        results[name] = rows_of(capture)
        assert len(capture) >= 4, name
        store = open_store(StoreConfig.from_options(opts))
        layout = PipelineLayout(opts["pipeline.id"])
        for batch_id, rows in capture:
            assert epoch_of_batch(store, layout, query.id, batch_id) == rows[0].gt.epoch

    first = results["pooled, packed"]
    assert len(first) == 4000
    assert {(gt[2], gt[3]) for _, _, gt in first} == {(p, o) for p in range(8) for o in range(500)}
    for name, rows in results.items():
        assert rows == first, name
