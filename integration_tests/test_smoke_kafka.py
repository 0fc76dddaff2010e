"""Smoke tests: the Tansu broker fixture really stores and serves records."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
from kafka import TopicPartition

from harness.kafka import KafkaBroker, KafkaHelper, broker_answers_metadata
from harness.ports import LOOPBACK

pytestmark = pytest.mark.timeout(120)


def test_produce_consume_in_batches(kafka: KafkaHelper) -> None:
    topic = kafka.create_topic(partitions=3)
    n = 6000
    records = [(b"k%d" % i, b"value-%06d" % i, [("idx", str(i).encode())], i % 3) for i in range(n)]
    t0 = time.monotonic()
    meta = kafka.produce(topic, records, batch_size=1000)
    rate = n / (time.monotonic() - t0)
    print(f"produced {n} records in batches of 1000 at {rate:,.0f} records/s")
    assert [m.partition for m in meta] == [i % 3 for i in range(n)]
    # offsets per partition are dense and in send order
    for p in range(3):
        assert [m.offset for m in meta if m.partition == p] == list(range(n // 3))

    got = kafka.consume_all(topic)
    assert len(got) == n
    by_value = {r.value: r for r in got}
    for i in range(0, n, 997):
        r = by_value[b"value-%06d" % i]
        assert r.key == b"k%d" % i
        assert r.partition == i % 3
        assert r.offset == i // 3
        assert list(r.headers) == [("idx", str(i).encode())]
    assert kafka.end_offsets(topic) == {0: n // 3, 1: n // 3, 2: n // 3}


def test_end_offsets_take_the_fetch_high_watermark(kafka: KafkaHelper) -> None:
    """Tansu's ListOffsets says (base offset of the last batch) + 1; the helper must not
    trust it alone. Two batches of 100 records: the true end is 200."""
    topic = kafka.create_topic(partitions=1)
    kafka.produce_values(topic, [b"a%d" % i for i in range(100)], partition=0, batch_size=100)
    kafka.produce_values(topic, [b"b%d" % i for i in range(100)], partition=0, batch_size=100)
    consumer = kafka.consumer()
    try:
        listed = consumer.end_offsets([TopicPartition(topic, 0)])[TopicPartition(topic, 0)]
    finally:
        consumer.close()
    print(f"ListOffsets latest = {listed}, true end = 200")
    assert kafka.end_offsets(topic) == {0: 200}
    assert listed in (101, 200)  # 101 on Tansu (the defect), 200 on Apache Kafka
    assert len(kafka.consume_all(topic)) == 200


def test_broker_stop_start_on_the_same_port(kafka: KafkaHelper) -> None:
    """A restarted broker answers on the same bootstrap address. Tansu's memory storage
    starts empty again: topics created before the stop are gone."""
    before = kafka.create_topic(partitions=2)
    kafka.produce_values(before, [b"x"] * 10)
    broker = kafka.broker
    old_pid = broker.pid
    broker.stop()
    assert not broker.running
    broker.start()
    assert broker.pid != old_pid
    admin = kafka.admin()
    try:
        assert before not in admin.list_topics()
    finally:
        admin.close()
    after = kafka.create_topic(partitions=2)
    kafka.produce_values(after, [b"y%d" % i for i in range(1000)])
    assert sum(kafka.end_offsets(after).values()) == 1000
    assert sorted(r.value for r in kafka.consume_all(after)) == sorted(
        b"y%d" % i for i in range(1000)
    )


def test_durable_broker_keeps_records_across_a_restart(kafka_durable: KafkaHelper) -> None:
    topic = kafka_durable.create_topic(partitions=2)
    kafka_durable.produce_values(topic, [b"d%d" % i for i in range(2000)], batch_size=500)
    before = kafka_durable.end_offsets(topic)
    assert sum(before.values()) == 2000
    broker = kafka_durable.broker
    broker.stop()
    broker.start()
    assert kafka_durable.end_offsets(topic) == before
    kafka_durable.produce_values(topic, [b"e%d" % i for i in range(100)], partition=0)
    values = sorted(r.value for r in kafka_durable.consume_all(topic))
    assert values == sorted([b"d%d" % i for i in range(2000)] + [b"e%d" % i for i in range(100)])


def test_first_start_moves_off_a_taken_port(tmp_path: Path) -> None:
    """Another process may bind the free port before the broker does: the fixture's first
    start then moves to a new port."""
    with socket.socket() as squatter:
        squatter.bind((LOOPBACK, 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        broker = KafkaBroker(tmp_path)
        broker._use_port(taken)
        try:
            broker.start_on_free_port()
            assert broker.port != taken
            assert broker_answers_metadata(broker.bootstrap)
            assert broker.log_path is not None
            assert "AddrInUse" in broker.log_path.read_text()
        finally:
            broker.stop()
