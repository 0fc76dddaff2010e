"""Kafka producers kept across commits (sink/consumers/producer_pool.py), with fakes."""

from __future__ import annotations

import os
from typing import Any

import pytest

from sink.consumers.kafka import KafkaTopicConsumer
from sink.consumers.producer_pool import MAX_IDLE_S, PRODUCERS, ProducerPool
from sink.faults import FaultInjector
from sink.options import SinkOptions
from sink.staging import StoreStaging
from state.stores import open_store


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


@pytest.fixture
def pool() -> ProducerPool:
    return ProducerPool(clock=Clock())


def test_a_producer_given_back_is_taken_again(pool: ProducerPool) -> None:
    first = pool.take("k", FakeProducer)
    pool.give_back("k", first)
    assert pool.take("k", FakeProducer) is first
    assert pool.take("k", FakeProducer) is not first  # taken out while in use
    assert not first.closed


def test_keys_do_not_mix(pool: ProducerPool) -> None:
    a = pool.take("a", FakeProducer)
    pool.give_back("a", a)
    assert pool.take("b", FakeProducer) is not a


def test_one_idle_producer_per_key(pool: ProducerPool) -> None:
    a, b = pool.take("k", FakeProducer), pool.take("k", FakeProducer)
    pool.give_back("k", a)
    pool.give_back("k", b)
    assert b.closed and not a.closed
    assert pool.idle_count() == 1


def test_producers_idle_too_long_are_closed(pool: ProducerPool) -> None:
    clock = pool.clock
    assert isinstance(clock, Clock)
    old = pool.take("old", FakeProducer)
    pool.give_back("old", old)
    clock.now += MAX_IDLE_S + 1
    fresh = pool.take("other", FakeProducer)
    assert old.closed and pool.idle_count() == 0
    assert pool.take("old", FakeProducer) is not old
    pool.give_back("other", fresh)
    assert not fresh.closed


def test_close_all(pool: ProducerPool) -> None:
    a = pool.take("a", FakeProducer)
    pool.give_back("a", a)
    pool.close_all()
    assert a.closed and pool.idle_count() == 0


def test_a_forked_child_never_takes_the_parents_producer(pool: ProducerPool) -> None:
    parent = pool.take("k", FakeProducer)
    pool.give_back("k", parent)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child answers through the pipe
        ok = False
        try:
            child = pool.take("k", FakeProducer)
            ok = child is not parent and not parent.closed
        finally:
            os.write(write, b"1" if ok else b"0")
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    assert answer == b"1"
    assert pool.take("k", FakeProducer) is parent


# --- the kafka consumer gives back only a settled producer ------------------------------


def kafka_consumer(memory_uri: str) -> KafkaTopicConsumer:
    options = SinkOptions.parse(
        {
            "pipeline.id": "p1",
            "state.uri": memory_uri,
            "consumer": "kafka",
            "consumer.kafka.bootstrap.servers": "127.0.0.1:9",
            "consumer.topic": "out",
        }
    )
    staging = StoreStaging(open_store(options.store))
    return KafkaTopicConsumer(options, staging, FaultInjector())


def test_a_settled_producer_goes_back_to_the_pool(memory_uri: str) -> None:
    consumer = kafka_consumer(memory_uri)
    producer = FakeProducer()
    PRODUCERS.give_back(consumer._pool_key, producer)
    try:
        assert consumer.producer() is producer  # the pooled one: nothing connects
        consumer._settled = True  # what a delivery that returned an Ack leaves
        consumer.close()
        assert not producer.closed
        again = kafka_consumer(memory_uri)
        assert again.producer() is producer
        again.close()  # never delivered: not known to be settled
        assert producer.closed
    finally:
        PRODUCERS.close_all()


def test_an_unsettled_producer_is_closed(memory_uri: str) -> None:
    consumer = kafka_consumer(memory_uri)
    producer: Any = FakeProducer()
    consumer._producer = producer
    consumer._settled = False  # a delivery raised: messages may still be on their way
    consumer.close()
    assert producer.closed
    assert PRODUCERS.idle_count() == 0
