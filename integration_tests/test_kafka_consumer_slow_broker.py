"""The kafka consumer when the broker answers Produce later than ``ack.timeoutMs``, or
writes a Produce request long after it was sent.

No Spark: write tasks run in-process (tests/sink_helpers.Pipeline), the barrier state is
in memory://, and the consumer talks to Tansu through a Kafka-aware proxy
(harness/kafka_proxy.py) that holds Produce responses, or Produce requests, back. Every
item must reach the output topic exactly once: a redelivery (in this process, or by a new
driver while the old one is a zombie) must never race messages that an earlier attempt's
producer still holds, has in flight, or has sent to a broker that has not written them.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import pytest

from harness import kafka_proxy
from harness.kafka_proxy import PRODUCE, HoldResponses, KafkaProxy
from sink.consumers import open_consumer
from sink.consumers.kafka.kafka_rows import H_BUNDLE, H_INDEX
from sink.faults import FaultInjector
from sink.options import SinkOptions
from state.errors import CommitStateUnknown
from state.stores import open_store
from tests.sink_helpers import Pipeline, gt_batch

pytestmark = pytest.mark.timeout(180)

ACK_MS = 1500
ITEMS_PER_PART = 1000


class HoldProduceRequests(KafkaProxy):
    """A proxy that holds every Produce *request* back ``hold`` seconds before the broker
    sees it (a request queued at a slow broker, or on a slow network): the broker writes
    it late, whatever the client has decided meanwhile. (Built on the proxy's plumbing:
    its hook sees responses only.)"""

    def __init__(self, target: str, hold: float) -> None:
        super().__init__(target)
        self.hold = hold
        self.held = 0
        self.forwarded = 0

    def _requests(
        self,
        client: Any,
        upstream: Any,
        pending: dict[int, tuple[int, int]],
        lock: threading.Lock,
    ) -> None:
        try:
            while (frame := kafka_proxy._read_frame(client)) is not None:
                api_key, api_version, correlation_id = kafka_proxy._HEADER.unpack_from(frame)
                with lock:
                    pending[correlation_id] = (api_key, api_version)
                if api_key == PRODUCE:
                    self.held += 1
                    time.sleep(self.hold)
                    self.forwarded += 1
                upstream.sendall(kafka_proxy._SIZE.pack(len(frame)) + frame)
        except OSError:
            pass
        finally:
            kafka_proxy._close(client, upstream)


def kafka_pipeline(bootstrap: str, topic: str, **extra: str) -> Pipeline:
    return _pipeline(bootstrap, topic, None, extra)


def restarted(p: Pipeline, bootstrap: str, topic: str, run_id: str) -> Pipeline:
    """A new run of ``p`` (its state store and query, as a driver restarted on the same
    checkpoint) that reaches the broker at ``bootstrap``."""
    new = _pipeline(bootstrap, topic, p.query_id, {})
    new.run_id = run_id
    return new


def _pipeline(bootstrap: str, topic: str, query_id: str | None, extra: dict[str, str]) -> Pipeline:
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
    if query_id is not None:
        p.query_id = query_id
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
    slow = HoldResponses(PRODUCE, delay=2.5, count=3)
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


def test_an_unsettled_delivery_is_retried_after_a_fence_and_lands_once(kafka: Any) -> None:
    """Produce answers do not come within the producer's delivery timeout: the attempt's
    outcome is unknown, so its producer is closed and the attempt fails retriably. The
    retry fences that producer (a new one with the pipeline's transactional.id) before it
    reads the tail, then sends what is missing: delivered by the same commit, once."""
    topic = kafka.create_topic(partitions=2)
    slow = HoldResponses(PRODUCE, delay=2.5, count=1_000)
    with KafkaProxy(kafka.bootstrap, slow) as proxy:
        p = kafka_pipeline(
            proxy.bootstrap,
            topic,
            **{"consumer.kafka.delivery.timeout.ms": "3000", "delivery.maxRetries": "1"},
        )

        class BrokerRecovers(list[float]):
            def append(self, seconds: float) -> None:  # the barrier's backoff before a retry
                slow.arm(0)
                super().append(seconds)

        p.sleeps = BrokerRecovers()
        try:
            outcome = commit_bundle(p, 0, 1)
        finally:
            p.consumer.close()
    assert slow.delayed > 0 and len(p.sleeps) == 1  # one failed attempt, one retry
    assert outcome.action == "delivered"
    assert p.state().gt_last == 1 and p.state().inflight is None
    assert_exactly_once(copies(kafka, topic), [1])


def test_a_zombies_produce_requests_written_late_never_duplicate_the_new_drivers_items(
    kafka: Any,
) -> None:
    """A driver delivering bundle 1 has its Produce requests held 8 s before the broker
    writes them; meanwhile a new driver takes the pipeline over, finds bundle 1 in flight,
    reads the topic's tail (nothing of bundle 1 there yet) and delivers it. The old driver's
    requests, written afterwards, must not land: every item once."""
    topic = kafka.create_topic(partitions=2)
    slow = HoldProduceRequests(kafka.bootstrap, hold=8.0)
    with slow:
        zombie = kafka_pipeline(
            slow.bootstrap,
            topic,
            **{
                # the held request is answered before the producer would give it up
                "consumer.kafka.request.timeout.ms": "15000",
                "consumer.kafka.delivery.timeout.ms": "20000",
                "delivery.maxRetries": "0",
            },
        )
        outcome: dict[str, Any] = {}

        def old_driver() -> None:
            try:
                outcome["zombie"] = commit_bundle(zombie, 0, 1)
            except Exception as err:  # fenced, or its delivery failed: either way it stops
                outcome["zombie"] = err
            finally:
                zombie.consumer.close()

        thread = threading.Thread(target=old_driver, name="zombie-driver", daemon=True)
        thread.start()
        deadline = time.monotonic() + 30
        while not (slow.held and zombie.store.get_or_none(zombie.layout.barrier_state)):
            assert time.monotonic() < deadline, "the old driver sent nothing"
            time.sleep(0.05)
        assert zombie.state().inflight is not None and slow.forwarded == 0

        new = restarted(zombie, kafka.bootstrap, topic, "run-b")
        try:
            taken_over = commit_bundle(new, 0, 1)  # the restart replays batch 0
        finally:
            new.consumer.close()
        assert (taken_over.recovered, taken_over.action) == (1, "dropped")
        assert slow.forwarded == 0, "the old driver's request landed before the scan"

        thread.join(timeout=60)
        assert not thread.is_alive()
    assert slow.forwarded >= 1  # the held request did reach the broker, late
    assert isinstance(outcome["zombie"], Exception)
    assert new.state().gt_last == 1 and new.state().inflight is None
    assert_exactly_once(copies(kafka, topic), [1])


def test_a_request_written_after_the_restart_never_duplicates_the_restarts_items(
    kafka: Any,
) -> None:
    """The first driver gives its delivery up (its producer resolved nothing within
    delivery.timeout.ms: a held request does not time out at the broker) and stops; the
    restart comes 5 s later, well past that bound, and redelivers; the held request is
    written after the restart's tail scan. It must not land."""
    topic = kafka.create_topic(partitions=2)
    slow = HoldProduceRequests(kafka.bootstrap, hold=10.0)
    with slow:
        first = kafka_pipeline(
            slow.bootstrap,
            topic,
            **{
                "consumer.kafka.request.timeout.ms": "2000",
                "consumer.kafka.delivery.timeout.ms": "3000",
                "delivery.maxRetries": "0",
            },
        )
        try:
            with pytest.raises(CommitStateUnknown):
                commit_bundle(first, 0, 1)
        finally:
            first.consumer.close()
        assert first.state().inflight is not None
        new = restarted(first, kafka.bootstrap, topic, "run-b")
        try:
            taken_over = commit_bundle(new, 0, 1)
        finally:
            new.consumer.close()
        assert (taken_over.recovered, taken_over.action) == (1, "dropped")
        assert slow.forwarded == 0, "the request landed before the restart's scan"
        deadline = time.monotonic() + 30
        while slow.forwarded == 0:
            assert time.monotonic() < deadline, "the held request never reached the broker"
            time.sleep(0.1)
        time.sleep(1.0)  # the broker has it: written, or refused
    assert_exactly_once(copies(kafka, topic), [1])
