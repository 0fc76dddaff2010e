"""Kafka producers kept from one commit to the next in the same process.

Spark runs the sink's commits in one Python worker that it reuses for every micro-batch,
so ``consumer=kafka`` would otherwise build a ``KafkaProducer`` per bundle: a bootstrap
connection, ApiVersions, metadata, an idempotent producer id (and TLS/SASL where
configured). The pool keeps one idle producer per bootstrap and settings.

A producer is only ever given back by a consumer that knows it holds nothing: its last
delivery returned an acknowledgement, so every message it was handed was answered
(:meth:`~sink.consumers.kafka.KafkaTopicConsumer.close`). Any other end closes it, as
before. A producer is used by one consumer at a time (taken out while in use); one idle
longer than :data:`MAX_IDLE_S` is closed (Spark ends an idle worker after a minute
anyway). A forked child never uses its parent's producers (their sender threads and
sockets belong to the parent), and the idle ones are closed at interpreter exit.
"""

from __future__ import annotations

import atexit
import os
import threading
import time
from collections.abc import Callable, Hashable
from typing import Any

MAX_IDLE_S = 60.0


class ProducerPool:
    """Idle producers by key; see the module docstring."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._idle: dict[Hashable, tuple[Any, float]] = {}

    def take(self, key: Hashable, create: Callable[[], Any]) -> Any:
        """An idle producer for ``key`` (now the caller's), or a new one from ``create()``."""
        with self._lock:
            stale = self._evict()
            hit = self._idle.pop(key, None)
        _close_all(stale)
        return hit[0] if hit is not None else create()

    def give_back(self, key: Hashable, producer: Any) -> None:
        """Keep ``producer`` (which holds no message) for the next :meth:`take` of ``key``."""
        with self._lock:
            stale = self._evict()
            if os.getpid() == self._pid and key not in self._idle:
                self._idle[key] = (producer, self.clock())
                producer = None
        _close_all([*stale, *([producer] if producer is not None else [])])

    def close_all(self) -> None:
        with self._lock:
            if os.getpid() != self._pid:
                self._after_fork()
            idle = [p for p, _ in self._idle.values()]
            self._idle = {}
        _close_all(idle)

    def idle_count(self) -> int:
        with self._lock:
            return len(self._idle) if os.getpid() == self._pid else 0

    def _evict(self) -> list[Any]:
        """Forget a parent's producers; take out those idle too long (hold the lock)."""
        if os.getpid() != self._pid:
            self._after_fork()
        now = self.clock()
        old = [k for k, (_, since) in self._idle.items() if now - since > MAX_IDLE_S]
        return [self._idle.pop(k)[0] for k in old]

    def _after_fork(self) -> None:
        self._lock = threading.Lock()  # another thread of the parent may have held it
        self._pid = os.getpid()
        self._idle = {}


def _close_all(producers: list[Any]) -> None:
    for producer in producers:
        producer.close(timeout=0)  # nothing pending: a producer is pooled only when settled


PRODUCERS = ProducerPool()
os.register_at_fork(after_in_child=PRODUCERS._after_fork)
atexit.register(PRODUCERS.close_all)
