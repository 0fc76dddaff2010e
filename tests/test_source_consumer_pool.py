"""The read tasks' consumer pool (datasource.consumer_pool) against the fake broker:
reuse without a seek, key separation, bounds, idle eviction, invalidation after errors."""

from __future__ import annotations

import threading
from collections.abc import Generator
from typing import Any, cast

import pyarrow as pa
import pytest

from datasource import consumer_pool
from datasource.consumer_pool import ConsumerPool, PoolKey, PoolStats, SingleConsumer
from datasource.offsets import OffsetRange
from datasource.options import KafkaSourceOptions
from datasource.partition_reader import KafkaInputPartition, read_partition
from datasource.range_reader import RangeReader
from datasource.schema import arrow_schema, source_schema
from state.errors import SourceUnavailable
from tests.source_fakes import FakeBroker, FakeConsumer, factory

SCHEMA = arrow_schema(source_schema(False))


class Clock:
    def __init__(self) -> None:
        self.now = 1_000.0

    def __call__(self) -> float:
        return self.now


def options(**extra: str) -> KafkaSourceOptions:
    return KafkaSourceOptions.parse(
        {"kafka.bootstrap.servers": "fake:9092", "subscribe": "t", **extra}
    )


@pytest.fixture
def broker() -> FakeBroker:
    b = FakeBroker(tansu=True)
    b.create("t", 3)
    for p in range(3):
        b.produce("t", p, 100, batch=7)
    return b


def read(
    broker: FakeBroker,
    pool: Any,
    r: OffsetRange,
    opts: KafkaSourceOptions | None = None,
    topic_id: str | None = None,
) -> list[int]:
    """The offsets read for ``r`` (of the topic ``topic_id``) with a consumer from ``pool``."""
    reader = RangeReader(opts or options(), r, consumer_factory=factory(broker), topic_id=topic_id)
    table = pa.Table.from_batches(list(reader.batches(4, SCHEMA, source=pool)), schema=SCHEMA)
    assert set(table.column("partition").to_pylist()) <= {r.partition}
    return list(table.column("offset").to_pylist())


def key(partition: int = 0, **extra: str) -> PoolKey:
    opts = options(**extra)
    return PoolKey.of(opts.bootstrap_servers, opts.consumer_config(), "t", partition)


def counts(pool: ConsumerPool) -> tuple[int, int, int, int, int]:
    s = pool.stats()
    return s.created, s.reused, s.seeks, s.evicted, s.invalidated


def test_a_consumer_at_the_next_start_is_reused_without_a_seek(broker: FakeBroker) -> None:
    pool = ConsumerPool()
    assert read(broker, pool, OffsetRange("t", 0, 0, 30)) == list(range(30))
    assert counts(pool) == (1, 0, 1, 0, 0)  # created, and sought to 0 once
    assert read(broker, pool, OffsetRange("t", 0, 30, 75)) == list(range(30, 75))
    assert counts(pool) == (1, 1, 1, 0, 0)  # the next range: no seek
    assert broker.calls["connect"] == 1
    # a replay (an earlier start) seeks; a jump forward moves through what was fetched
    assert read(broker, pool, OffsetRange("t", 0, 10, 20)) == list(range(10, 20))
    assert read(broker, pool, OffsetRange("t", 0, 50, 52)) == [50, 51]
    assert counts(pool) == (1, 3, 2, 0, 0)
    assert pool.stats() == PoolStats(1, 3, 2, 1, 0, 0, idle=1, in_use=0)
    assert not any(c.closed for c in broker.consumers)
    pool.close()
    assert all(c.closed for c in broker.consumers)


def test_a_consumer_that_read_the_topic_under_another_id_is_closed(broker: FakeBroker) -> None:
    """The topic was deleted and created again: a consumer that read the old one may stand
    exactly at the next range's start with the old topic's records fetched ahead."""
    pool = ConsumerPool()
    assert read(broker, pool, OffsetRange("t", 0, 0, 30), topic_id="old") == list(range(30))
    assert read(broker, pool, OffsetRange("t", 0, 30, 40), topic_id="old") == list(range(30, 40))
    assert counts(pool) == (1, 1, 1, 0, 0)
    first = broker.consumers[0]
    assert read(broker, pool, OffsetRange("t", 0, 40, 50), topic_id="new") == list(range(40, 50))
    assert counts(pool) == (2, 1, 2, 0, 1)  # closed, and a new one created and sought
    assert first.closed and not broker.consumers[1].closed
    # a plan without ids (a broker that gives none) cannot tell: the consumer is lent
    assert read(broker, pool, OffsetRange("t", 0, 50, 60)) == list(range(50, 60))
    assert read(broker, pool, OffsetRange("t", 0, 60, 70), topic_id="new") == list(range(60, 70))
    assert counts(pool) == (2, 3, 2, 0, 1)


def test_consumers_that_decode_headers_and_those_that_do_not_are_not_mixed(
    broker: FakeBroker,
) -> None:
    """A consumer decodes headers or skips them for its whole life (what it fetched
    ahead is decoded one way): a query with includeHeaders does not get one without."""
    pool = ConsumerPool()
    assert read(broker, pool, OffsetRange("t", 0, 0, 10)) == list(range(10))
    headers = options(includeHeaders="true")
    assert read(broker, pool, OffsetRange("t", 0, 10, 20), headers) == list(range(10, 20))
    assert counts(pool)[:2] == (2, 0)  # a second consumer, not the first one reused
    assert read(broker, pool, OffsetRange("t", 0, 20, 30), headers) == list(range(20, 30))
    assert counts(pool)[:2] == (2, 1)
    opts = options()  # the keys differ by the flag alone
    plain = PoolKey.of(opts.bootstrap_servers, opts.consumer_config(), "t", 0)
    assert plain != PoolKey.of(opts.bootstrap_servers, opts.consumer_config(), "t", 0, headers=True)


def test_a_consumer_behind_the_start_moves_through_what_it_fetched(broker: FakeBroker) -> None:
    """A pool hit behind the range's start: moved forward without a seek when the records
    it already fetched reach the start, sought otherwise; the range is read exactly."""
    pool = ConsumerPool()
    assert read(broker, pool, OffsetRange("t", 0, 0, 10)) == list(range(10))
    (consumer,) = broker.consumers
    tp = next(iter(consumer.assigned))
    consumer.fetched_to = 40  # fetched ahead: offsets 10..39
    assert read(broker, pool, OffsetRange("t", 0, 35, 45)) == list(range(35, 45))
    assert pool.stats().advanced == 1 and counts(pool)[:3] == (1, 1, 1)
    assert consumer.position(tp) == 45
    consumer.fetched_to = 50  # the start lies beyond what was fetched: a seek
    assert read(broker, pool, OffsetRange("t", 0, 60, 70)) == list(range(60, 70))
    assert pool.stats().advanced == 1 and counts(pool)[:3] == (1, 2, 2)
    consumer.fetched_to = None
    far = consumer_pool.MAX_ADVANCE_RECORDS
    broker.produce("t", 0, far + 10)
    assert read(broker, pool, OffsetRange("t", 0, 70 + far + 1, 70 + far + 3)) == [
        71 + far,
        72 + far,
    ]
    assert pool.stats().advanced == 1 and counts(pool)[:3] == (1, 3, 3)  # too far: sought


def test_a_consumer_that_moves_past_the_start_is_sought_back(broker: FakeBroker) -> None:
    """Offsets missing before the start (compaction, transaction markers): a poll while
    moving forward returns a record past the start; the consumer is sought back to it and
    that record is read, not lost."""
    broker.skip("t", 2, 5)  # offsets 100..104 hold no records
    broker.produce("t", 2, 10)  # 105..114
    pool = ConsumerPool()
    assert read(broker, pool, OffsetRange("t", 2, 0, 98)) == list(range(98))
    assert read(broker, pool, OffsetRange("t", 2, 103, 108)) == [105, 106, 107]
    assert pool.stats().advanced == 0 and counts(pool)[:3] == (1, 1, 2)
    # that range's last poll went past its end (5 records asked across the gap): sought
    assert read(broker, pool, OffsetRange("t", 2, 108, 115)) == list(range(108, 115))
    assert counts(pool)[:3] == (1, 2, 3)


def test_polls_never_pass_the_range_end(broker: FakeBroker) -> None:
    """A consumer returned to the pool stands exactly at its range's end."""
    pool = ConsumerPool()
    opts = options(**{"kafka.max.poll.records": "8"})
    read(broker, pool, OffsetRange("t", 1, 0, 13), opts)
    (consumer,) = broker.consumers
    assert consumer.position(next(iter(consumer.assigned))) == 13


def test_position_is_checked_on_the_consumer_too(broker: FakeBroker) -> None:
    pool = ConsumerPool()
    read(broker, pool, OffsetRange("t", 0, 0, 10))
    (consumer,) = broker.consumers
    tp = next(iter(consumer.assigned))
    consumer.positions[tp] = 40  # moved behind the pool's back
    assert read(broker, pool, OffsetRange("t", 0, 10, 20)) == list(range(10, 20))
    assert counts(pool)[:3] == (1, 1, 2)  # reused, but sought


def test_keys_separate_partitions_configurations_and_clusters(broker: FakeBroker) -> None:
    pool = ConsumerPool()
    read(broker, pool, OffsetRange("t", 0, 0, 10))
    read(broker, pool, OffsetRange("t", 1, 0, 10))
    read(broker, pool, OffsetRange("t", 0, 10, 20), options(**{"kafka.max.poll.records": "5"}))
    other = KafkaSourceOptions.parse({"kafka.bootstrap.servers": "other:9092", "subscribe": "t"})
    read(broker, pool, OffsetRange("t", 0, 10, 20), other)
    assert counts(pool)[:2] == (4, 0)
    assert len({id(c) for c in broker.consumers}) == 4
    # same partition, configuration and cluster: the first one again
    read(broker, pool, OffsetRange("t", 0, 10, 20))
    assert counts(pool)[:3] == (4, 1, 4)
    assert key(0) != key(1) and key(0) != key(0, **{"kafka.client.id": "x"})
    assert key(0) == key(0)


def test_capacity_closes_the_least_recently_used(broker: FakeBroker) -> None:
    pool = ConsumerPool(capacity=2)
    for p in (0, 1, 2):
        read(broker, pool, OffsetRange("t", p, 0, 5))
    assert pool.stats().idle == 2 and pool.stats().evicted == 1
    first = broker.consumers[0]
    assert first.closed and not any(c.closed for c in broker.consumers[1:])
    # partition 1 and 2 are still pooled
    read(broker, pool, OffsetRange("t", 1, 5, 9))
    read(broker, pool, OffsetRange("t", 2, 5, 9))
    assert counts(pool)[:2] == (3, 2)


def test_lending_never_blocks_beyond_capacity(broker: FakeBroker) -> None:
    pool = ConsumerPool(capacity=1)
    create = factory(broker)
    leases = [
        pool.acquire(key(p), 0, lambda: create(**options().consumer_config())) for p in (0, 1, 2)
    ]
    assert pool.stats().in_use == 3
    for lease in leases:
        lease.position = 0
        pool.release(lease, ok=True)
    stats = pool.stats()
    assert (stats.in_use, stats.idle, stats.evicted) == (0, 1, 2)


def test_idle_consumers_are_closed_after_the_timeout(broker: FakeBroker) -> None:
    clock = Clock()
    pool = ConsumerPool(idle_timeout=300.0, clock=clock)
    read(broker, pool, OffsetRange("t", 0, 0, 5))
    read(broker, pool, OffsetRange("t", 1, 0, 5))
    clock.now += 200
    read(broker, pool, OffsetRange("t", 1, 5, 10))  # partition 1 used again
    clock.now += 150
    assert pool.evict_idle() == 1  # partition 0: idle 350 s
    assert broker.consumers[0].closed and not broker.consumers[1].closed
    clock.now += 300
    # an expired consumer is never lent: a new one is created
    assert read(broker, pool, OffsetRange("t", 1, 10, 12)) == [10, 11]
    assert counts(pool) == (3, 1, 3, 2, 0)
    assert broker.consumers[1].closed


def test_configure_applies_the_query_options() -> None:
    pool = ConsumerPool()
    assert pool.configure(3, 1.5) is pool
    assert (pool.capacity, pool.idle_timeout) == (3, 1.5)
    opts = options(**{"kafkaConsumer.pool.capacity": "3", "kafkaConsumer.pool.idleTimeout": "2m"})
    assert (opts.pool_enabled, opts.pool_capacity, opts.pool_idle_timeout_s) == (True, 3, 120.0)


def test_an_error_while_in_use_invalidates_the_consumer(broker: FakeBroker) -> None:
    pool = ConsumerPool()
    opts = options(**{"kafkaConsumer.pollTimeoutMs": "1000"})
    read(broker, pool, OffsetRange("t", 0, 0, 10), opts)
    broker.down = True
    with pytest.raises(SourceUnavailable):
        read(broker, pool, OffsetRange("t", 0, 10, 20), opts)
    assert counts(pool) == (1, 1, 1, 0, 1)
    assert broker.consumers[0].closed and pool.stats().idle == 0
    broker.down = False
    assert read(broker, pool, OffsetRange("t", 0, 10, 20), opts) == list(range(10, 20))
    assert counts(pool)[0] == 2


def test_a_task_stopped_mid_range_invalidates_its_consumer(broker: FakeBroker) -> None:
    """Spark stops reading a task's output (the generator is closed): the consumer stood
    somewhere inside the range, so it is never lent again."""
    pool = ConsumerPool()
    broker.produce("t", 2, 25_000)
    part = KafkaInputPartition(0, (OffsetRange("t", 2, 0, 25_100),))
    # read_partition is a generator function: Spark closes it when it stops reading
    it = cast(
        Generator[Any, None, None],
        read_partition(
            options(), part, SCHEMA, task=None, consumer_factory=factory(broker), source=pool
        ),
    )
    assert next(it).num_rows == 10_000
    it.close()
    assert counts(pool) == (1, 0, 1, 0, 1)
    assert broker.consumers[0].closed
    assert read(broker, pool, OffsetRange("t", 2, 0, 100)) == list(range(100))


def test_a_failure_after_reading_part_of_a_range_never_leaks_a_position(
    broker: FakeBroker,
) -> None:
    """An exception mid-range, then the same range again: exactly the range, from a new
    consumer; then the next range reuses that one without a seek."""
    pool = ConsumerPool()
    broker.produce("t", 0, 30_000)
    boom = RuntimeError("task killed")
    calls = {"n": 0}
    original = FakeConsumer.poll

    def failing_poll(
        self: FakeConsumer, timeout_ms: int = 0, max_records: int | None = None
    ) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:
            raise boom
        return original(self, timeout_ms, max_records)

    r = OffsetRange("t", 0, 0, 25_000)
    FakeConsumer.poll = failing_poll  # type: ignore[method-assign]
    try:
        with pytest.raises(RuntimeError, match="task killed"):
            read(broker, pool, r)
    finally:
        FakeConsumer.poll = original  # type: ignore[method-assign]
    assert counts(pool) == (1, 0, 1, 0, 1)
    assert read(broker, pool, r) == list(range(25_000))
    assert read(broker, pool, OffsetRange("t", 0, 25_000, 25_050)) == list(range(25_000, 25_050))
    assert counts(pool) == (2, 1, 2, 0, 1)


def test_a_reused_consumer_that_cannot_report_its_position_is_replaced(
    broker: FakeBroker,
) -> None:
    pool = ConsumerPool()
    read(broker, pool, OffsetRange("t", 0, 0, 10))
    (consumer,) = broker.consumers

    def broken(tp: Any, timeout_ms: int | None = None) -> int:
        raise RuntimeError("no position")

    consumer.position = broken  # type: ignore[method-assign]
    assert read(broker, pool, OffsetRange("t", 0, 10, 20)) == list(range(10, 20))
    assert counts(pool) == (2, 0, 2, 0, 1)
    assert consumer.closed


def test_a_failing_create_leaves_the_pool_consistent(broker: FakeBroker) -> None:
    pool = ConsumerPool()
    broker.down = True
    with pytest.raises(SourceUnavailable):
        read(broker, pool, OffsetRange("t", 0, 0, 10))
    assert pool.stats() == PoolStats()


def test_concurrent_borrowers_never_share_a_consumer(broker: FakeBroker) -> None:
    pool = ConsumerPool()
    create = factory(broker)
    barrier = threading.Barrier(4)
    got: list[Any] = []
    lock = threading.Lock()

    def borrow() -> None:
        barrier.wait()
        lease = pool.acquire(key(0), 0, lambda: create(**options().consumer_config()))
        with lock:
            got.append(lease.consumer)
        barrier.wait()  # all four hold theirs at once
        lease.position = 0
        pool.release(lease, ok=True)

    threads = [threading.Thread(target=borrow) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(c) for c in got}) == 4
    assert pool.stats().idle == 4 and pool.stats().in_use == 0


def test_without_the_pool_a_task_uses_one_consumer(broker: FakeBroker) -> None:
    single = SingleConsumer()
    for p in (0, 1, 2):
        assert read(broker, single, OffsetRange("t", p, 0, 5)) == list(range(5))
    assert single.created == 1 and broker.calls["connect"] == 1
    single.close()
    assert broker.consumers[0].closed


def test_a_fresh_lease_is_a_new_consumer_and_idle_ones_stay_idle(broker: FakeBroker) -> None:
    pool = ConsumerPool()
    assert read(broker, pool, OffsetRange("t", 0, 0, 30)) == list(range(30))
    idle = broker.consumers[0]
    lease = pool.acquire(key(), 30, factory(broker), fresh=True)
    assert lease.created and lease.consumer is not idle
    assert pool.stats() == PoolStats(created=2, seeks=2, idle=1, in_use=1)
    pool.release(lease, ok=True)
    assert pool.stats().idle == 2 and not idle.closed
    pool.close()


def test_without_the_pool_a_fresh_lease_closes_the_old_consumer(broker: FakeBroker) -> None:
    single = SingleConsumer()
    first = single.acquire(key(), 0, factory(broker))
    again = single.acquire(key(1), 0, factory(broker))
    assert first.created and not again.created and again.consumer is first.consumer
    fresh = single.acquire(key(1), 0, factory(broker), fresh=True)
    assert fresh.created and fresh.consumer is not first.consumer and first.consumer.closed
    assert single.created == 2
    single.close()
    assert fresh.consumer.closed


class Parkable:
    """A consumer stand-in that can be parked (as the librdkafka consumer can)."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def park(self) -> None:
        self.events.append("park")

    def unpark(self) -> None:
        self.events.append("unpark")

    def assign(self, partitions: list[Any]) -> None:
        self.events.append("assign")

    def seek(self, tp: Any, offset: int) -> None:
        self.events.append(f"seek {offset}")

    def position(self, tp: Any) -> int:
        return 10

    def close(self) -> None:
        self.events.append("close")


def test_idle_consumers_are_parked_only_once_idle_long_enough_and_unparked_when_lent() -> None:
    clock = Clock()
    pool = ConsumerPool(clock=clock)
    consumer = Parkable()
    lease = pool.acquire(key(), 0, lambda: consumer)
    assert pool.park_idle(0.0) == 0  # lent: never parked
    lease.position = 10
    pool.release(lease, ok=True)
    clock.now += consumer_pool.PARK_AFTER_S / 2
    pool.park_idle()
    assert "park" not in consumer.events  # back-to-back batches keep what it fetched
    clock.now += consumer_pool.PARK_AFTER_S
    pool.park_idle()
    assert consumer.events[-1] == "park"
    again = pool.acquire(key(), 10, Parkable)
    assert again.consumer is consumer and consumer.events[-1] == "unpark"  # lent: fetches
    assert not again.sought
    pool.release(again, ok=True)
    pool.close()
    assert consumer.events[-1] == "close"
