"""Kafka producers kept across commits (sink/consumers/producer_pool.py), with fakes."""

from __future__ import annotations

import os
import uuid
from collections.abc import Hashable, Iterator
from typing import Any

import pytest
from kafka import KafkaProducer

from sink.bundle import Bundle
from sink.consumers import open_consumer
from sink.consumers.kafka.kafka_consumer import KafkaTopicConsumer
from sink.consumers.kafka.kafka_options import producer_config
from sink.consumers.producer_pool import MAX_IDLE_S, PRODUCERS, client_pool
from sink.faults import FaultInjector
from sink.options import SinkOptions
from state.errors import DeliveryFailed
from state.process_cache import ProcessCache
from tests.sink_helpers import Pipeline, gt_batch


class FakeProducer:
    def __init__(self) -> None:
        self.closed = False

    def close(self, timeout: float | None = None) -> None:
        self.closed = True


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


Pool = ProcessCache[Hashable, FakeProducer]


def take(pool: Pool, key: str) -> FakeProducer:
    """What a consumer does: the pooled producer, else a new one."""
    pooled = pool.take(key)
    return pooled if pooled is not None else FakeProducer()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def pool(clock: Clock) -> Pool:
    return client_pool("test producers", FakeProducer.close, clock=clock)


def test_the_pool_is_a_process_cache_of_lent_producers() -> None:
    assert isinstance(PRODUCERS, ProcessCache)
    assert PRODUCERS.max_idle == MAX_IDLE_S and PRODUCERS.capacity is None


def test_a_producer_given_back_is_taken_again(pool: Pool) -> None:
    first = take(pool, "k")
    pool.give_back("k", first)
    assert take(pool, "k") is first
    assert take(pool, "k") is not first  # taken out while in use
    assert not first.closed


def test_keys_do_not_mix(pool: Pool) -> None:
    a = take(pool, "a")
    pool.give_back("a", a)
    assert take(pool, "b") is not a


def test_one_idle_producer_per_key(pool: Pool) -> None:
    a, b = take(pool, "k"), take(pool, "k")
    pool.give_back("k", a)
    pool.give_back("k", b)
    assert b.closed and not a.closed
    assert len(pool) == 1


def test_producers_idle_too_long_are_closed(pool: Pool, clock: Clock) -> None:
    old = take(pool, "old")
    pool.give_back("old", old)
    clock.now += MAX_IDLE_S + 1
    fresh = take(pool, "other")
    assert old.closed and len(pool) == 0
    assert take(pool, "old") is not old
    pool.give_back("other", fresh)
    assert not fresh.closed


def test_clear_closes_every_idle_producer(pool: Pool) -> None:
    a = take(pool, "a")
    pool.give_back("a", a)
    pool.clear()
    assert a.closed and len(pool) == 0


def test_a_forked_child_never_takes_the_parents_producer(pool: Pool) -> None:
    parent = take(pool, "k")
    pool.give_back("k", parent)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child answers through the pipe
        ok = False
        try:
            child = take(pool, "k")
            ok = child is not parent and not parent.closed
        finally:
            os.write(write, b"1" if ok else b"0")
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    assert answer == b"1"
    assert take(pool, "k") is parent


# --- the kafka consumer gives back only a settled producer ------------------------------


class Answered:
    """A message the broker acknowledged."""

    is_done = True
    exception = None

    def failed(self) -> bool:
        return False


class Committed:
    """A transaction's commit, answered."""

    def wait(self, timeout_ms: int | None = None) -> bool:
        return True


class FakeTransactions:
    def __init__(self) -> None:
        self.commits = 0

    def begin_commit(self) -> Committed:
        self.commits += 1
        return Committed()


class FakeSender:
    def wakeup(self) -> None:
        pass

    def force_close(self) -> None:
        pass


class FakeKafkaProducer(FakeProducer):
    """kafka-python's transactional producer as the consumer uses it; ``refuse`` makes
    every send fail before the message is handed over."""

    refuse = False
    DEFAULT_CONFIG = KafkaProducer.DEFAULT_CONFIG  # option parsing reads the known settings

    def __init__(self, **config: Any) -> None:
        super().__init__()
        self.config = config
        self.sent: list[dict[str, Any]] = []
        self.inits = 0
        self.transactions = 0
        self._transaction_manager = FakeTransactions()
        self._sender = FakeSender()

    def init_transactions(self) -> None:
        self.inits += 1

    def begin_transaction(self) -> None:
        self.transactions += 1

    def send(self, topic: str, **message: Any) -> Answered:
        if self.refuse:
            from kafka.errors import KafkaTimeoutError

            raise KafkaTimeoutError("metadata not available")
        self.sent.append(message)
        return Answered()

    def flush(self, timeout: float | None = None) -> None:
        pass


@pytest.fixture
def kafka_pipeline(monkeypatch: pytest.MonkeyPatch) -> Iterator[Pipeline]:
    import kafka

    options = SinkOptions.parse(
        {
            "pipeline.id": "p1",
            "state.uri": f"memory://{uuid.uuid4().hex}",
            "consumer": "kafka",
            "consumer.kafka.bootstrap.servers": "127.0.0.1:9",
            "consumer.topic": "out",
        }
    )
    monkeypatch.setattr(kafka, "KafkaProducer", FakeKafkaProducer)
    monkeypatch.setattr(FakeKafkaProducer, "refuse", False)
    PRODUCERS.clear()
    yield Pipeline(options)
    PRODUCERS.clear()


def kafka_consumer(p: Pipeline) -> KafkaTopicConsumer:
    consumer = open_consumer(p.options, p.store, FaultInjector())
    assert isinstance(consumer, KafkaTopicConsumer)
    return consumer


def bundle(p: Pipeline) -> Bundle:
    p.record_batch(0, 1)
    return Bundle.from_messages("p1", 1, 0, [p.write(0, [gt_batch(1, 0, [0, 1])])])


def test_a_settled_producer_goes_back_to_the_pool(kafka_pipeline: Pipeline) -> None:
    consumer = kafka_consumer(kafka_pipeline)
    ack = consumer.deliver(bundle(kafka_pipeline))  # every message answered: settled
    producer = consumer.producer()
    assert ack.rows == 2 and isinstance(producer, FakeKafkaProducer) and len(producer.sent) == 2
    assert (producer.inits, producer.transactions) == (1, 1)
    assert producer._transaction_manager.commits == 1
    consumer.close()
    assert not producer.closed and len(PRODUCERS) == 1
    again = kafka_consumer(kafka_pipeline)
    assert again.producer() is producer  # the pooled one: nothing connects
    again.close()  # never delivered: not known to be settled
    assert producer.closed and len(PRODUCERS) == 0


def test_a_redelivery_fences_with_a_new_producer_even_when_one_is_pooled(
    kafka_pipeline: Pipeline, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pooled producer may be behind a zombie's: the tail scan of a redelivery is made
    only after a new producer's init_transactions, and the idle one is closed."""
    consumer = kafka_consumer(kafka_pipeline)
    consumer.deliver(bundle(kafka_pipeline))
    pooled = consumer.producer()
    consumer.close()
    assert len(PRODUCERS) == 1
    scans: list[Any] = []
    again = kafka_consumer(kafka_pipeline)

    def tails() -> list[Any]:
        scans.append(again._producer)
        return []

    monkeypatch.setattr(again, "_tails", tails)
    again.deliver(bundle(kafka_pipeline), redelivery=True)
    fresh = again.producer()
    assert fresh is not pooled and pooled.closed and len(PRODUCERS) == 0
    assert isinstance(fresh, FakeKafkaProducer) and fresh.inits == 1
    assert scans == [fresh]  # the scan came after the fence
    assert again.last_bundle() is None  # a scan of its own, after a fence of its own
    assert fresh.closed and scans[-1] is not fresh
    again.close()


def test_the_producer_is_transactional_per_pipeline(kafka_pipeline: Pipeline) -> None:
    consumer = kafka_consumer(kafka_pipeline)
    producer = consumer.producer()
    assert isinstance(producer, FakeKafkaProducer)
    assert producer.config["transactional_id"] == "gtbarrier.p1.out"
    assert producer.config["transaction_timeout_ms"] == 120_000 + 60_000 + 60_000
    assert (producer.config["acks"], producer.config["retries"]) == ("all", 5)
    consumer.close()
    named = SinkOptions.parse(
        {
            "pipeline.id": "p1",
            "state.uri": "memory://x",
            "consumer": "kafka",
            "consumer.kafka.bootstrap.servers": "127.0.0.1:9",
            "consumer.topic": "out",
            "consumer.kafka.transactional.id": "billing-out",
        }
    )
    assert producer_config(named.settings, 30.0, "p1")["transactional_id"] == "billing-out"  # type: ignore[arg-type]


def test_an_unsettled_producer_is_closed(kafka_pipeline: Pipeline) -> None:
    consumer = kafka_consumer(kafka_pipeline)
    producer = consumer.producer()
    FakeKafkaProducer.refuse = True
    with pytest.raises(DeliveryFailed, match="no message was handed to the producer"):
        consumer.deliver(bundle(kafka_pipeline))
    consumer.close()
    assert producer.closed
    assert len(PRODUCERS) == 0
