"""Clients kept from one commit to the next in the same process: Kafka producers here, and
(through :func:`client_pool`) the PostgreSQL consumer's connections.

Spark runs the sink's commits in one Python worker that it reuses for every micro-batch,
so ``consumer=kafka`` would otherwise build a ``KafkaProducer`` per bundle: a bootstrap
connection, ApiVersions, metadata, an idempotent producer id (and TLS/SASL where
configured). The pool keeps one idle producer per bootstrap and settings.

A producer is only ever given back by a consumer that knows it holds nothing: its last
delivery returned an acknowledgement, so every message it was handed was answered
(:meth:`~sink.consumers.kafka.kafka_consumer.KafkaTopicConsumer.close`). Any other end
closes it, as before. The pools are :class:`~state.process_cache.ProcessCache`\\ s of lent values: a
client is used by one consumer at a time (taken out while in use, one idle client per
key), one idle longer than :data:`MAX_IDLE_S` is closed (Spark ends an idle worker after a
minute anyway), a forked child never uses its parent's clients (their threads and sockets
belong to the parent), and the idle ones are closed at interpreter exit.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

from state.process_cache import ProcessCache

V = TypeVar("V")

MAX_IDLE_S = 60.0


def client_pool(
    name: str, close: Callable[[V], None], *, clock: Callable[[], float] = time.monotonic
) -> ProcessCache[Hashable, V]:
    """A pool of lent clients by key, with the policy of the module docstring; ``close``
    closes a client that holds nothing pending."""
    return ProcessCache(name, max_idle=MAX_IDLE_S, close=close, close_at_exit=True, clock=clock)


def close_producer(producer: Any) -> None:
    """Close a pooled producer at once: it holds nothing (pooled only when settled)."""
    producer.close(timeout=0)


PRODUCERS: ProcessCache[Hashable, Any] = client_pool("kafka producers", close_producer)
"""Idle ``KafkaProducer``\\ s by (bootstrap servers, producer settings)."""
