"""The kafka consumer when the broker answers Produce later than ``ack.timeoutMs``.

No Spark: write tasks run in-process (tests/sink_helpers.Pipeline), the barrier state is
in memory://, and the consumer talks to Tansu through a Kafka-aware proxy
(integration_tests/kafka_proxy.py) that holds Produce responses back. Every item must
reach the output topic exactly once: a redelivery must never race messages that the
first attempt's producer still holds or has in flight.
"""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest

from harness.kafka_proxy import PRODUCE, Action, KafkaProxy
from sink.consumers import open_consumer
from sink.consumers.kafka import H_BUNDLE, H_INDEX
from sink.faults import FaultInjector
from sink.options import SinkOptions
from state.errors import CommitStateUnknown
from state.stores import open_store
from tests.sink_helpers import Pipeline, gt_batch

pytestmark = pytest.mark.timeout(180)

ACK_MS = 1500
ITEMS_PER_PART = 1000


class SlowProduce:
    """A proxy hook: hold the next ``count`` Produce responses back ``delay`` s each."""

    def __init__(self, count: int, delay: float) -> None:
        self.remaining = count
        self.delay = delay
        self.delayed = 0
        self._lock = threading.Lock()

    def __call__(self, api_key: int, api_version: int, payload: bytes) -> Action | None:
        if api_key != PRODUCE:
            return None
        with self._lock:
            if self.remaining <= 0:
                return None
            self.remaining -= 1
            self.delayed += 1
        return Action(delay=self.delay)


def kafka_pipeline(bootstrap: str, topic: str, **extra: str) -> Pipeline:
    raw = {
        "pipeline.id": "p1",
        "consumer": "kafka",
        "consumer.kafka.bootstrap.servers": bootstrap,
        "consumer.topic": topic,
        "ack.timeoutMs": str(ACK_MS),
        # small record batches: the bundle needs many Produce requests, one at a time
        "consumer.kafka.batch.size": "4096",
        **extra,
    }
    p = Pipeline(SinkOptions.parse({**raw, "state.uri": "memory://unused"}))
    p.options = SinkOptions.parse({**raw, "state.uri": f"memory://{p.query_id}"})
    p.store = open_store(p.options.store)
    p.consumer = open_consumer(p.options, p.store, FaultInjector())  # type: ignore[assignment]
    p.staging = p.consumer.staging
    return p


def commit_bundle(p: Pipeline, batch_id: int, epoch: int) -> Any:
    p.record_batch(batch_id, epoch)
    parts = [
        gt_batch(epoch, part, range(batch_id * ITEMS_PER_PART, (batch_id + 1) * ITEMS_PER_PART))
        for part in range(2)
    ]
    msgs = [p.write(batch_id, [batch], partition=i) for i, batch in enumerate(parts)]
    return p.barrier().commit(msgs, batch_id)


def copies(kafka: Any, topic: str) -> Counter[tuple[int, int]]:
    """How many messages the topic holds per ``(bundle, index)``."""
    out: Counter[tuple[int, int]] = Counter()
    for rec in kafka.consume_all(topic):
        headers = dict(rec.headers)
        out[(int(headers[H_BUNDLE]), int(headers[H_INDEX]))] += 1
    return out


def assert_exactly_once(found: Counter[tuple[int, int]], bundles: list[int]) -> None:
    expected = {(b, i) for b in bundles for i in range(2 * ITEMS_PER_PART)}
    duplicates = {k: n for k, n in found.items() if n > 1}
    missing = expected - set(found)
    assert not duplicates and not missing and set(found) == expected, (
        f"{sum(n - 1 for n in duplicates.values())} duplicate message(s) "
        f"({len(duplicates)} items, e.g. {sorted(duplicates)[:3]}), {len(missing)} missing, "
        f"{len(found)} distinct of {len(expected)}"
    )


def test_late_produce_answers_are_awaited_not_redelivered(kafka: Any) -> None:
    """Produce answers 2.5 s late (ack.timeoutMs 1.5 s): the attempt waits for the late
    acknowledgements instead of sending the bundle again; every item lands once."""
    topic = kafka.create_topic(partitions=2)
    slow = SlowProduce(count=3, delay=2.5)
    with KafkaProxy(kafka.bootstrap, slow) as proxy:
        p = kafka_pipeline(proxy.bootstrap, topic)
        try:
            outcome = commit_bundle(p, 0, 1)
            assert outcome.action == "delivered"
            assert slow.delayed == 3
            # the broker is fast again: the next bundle goes through as usual
            assert commit_bundle(p, 1, 2).action == "delivered"
        finally:
            p.consumer.close()
    assert p.state().gt_last == 2 and p.state().inflight is None
    assert_exactly_once(copies(kafka, topic), [1, 2])


def test_unsettled_delivery_stops_instead_of_redelivering(kafka: Any) -> None:
    """Produce answers never come within the producer's delivery timeout: the outcome is
    unknowable in-process, so the commit stops (the bundle stays in flight) without a
    second attempt; the restart resolves it from the topic's tail, exactly once."""
    topic = kafka.create_topic(partitions=2)
    slow = SlowProduce(count=1_000, delay=2.5)
    with KafkaProxy(kafka.bootstrap, slow) as proxy:
        p = kafka_pipeline(proxy.bootstrap, topic, **{"consumer.kafka.delivery.timeout.ms": "3000"})
        try:
            with pytest.raises(CommitStateUnknown) as info:
                commit_bundle(p, 0, 1)
        finally:
            p.consumer.close()
        assert not info.value.retriable and "may still land" in str(info.value)
        notes = "\n".join(getattr(info.value, "__notes__", []))
        assert "after 1 attempt(s)" in notes and "restarting the query resolves it" in notes
        inflight = p.state().inflight
        assert inflight is not None and inflight.bundle_id == 1
        # the restart: a new run with a new consumer, and a broker that answers in time
        slow.remaining = 0
        p.consumer = open_consumer(p.options, p.store, FaultInjector())  # type: ignore[assignment]
        p.run_id = "run-b"
        try:
            outcome = commit_bundle(p, 1, 2)
        finally:
            p.consumer.close()
    assert outcome.recovered == 1 and outcome.action == "delivered"
    assert_exactly_once(copies(kafka, topic), [1, 2])
