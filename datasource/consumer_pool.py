"""Kafka consumers for the read tasks: a per-process pool, or one consumer per task.

Creating a kafka-python consumer costs a bootstrap connection, a Metadata and an
ApiVersions round trip and an IO thread. Spark's Python workers are reused across tasks
(``spark.python.worker.reuse``, on by default), so a module-level pool (:data:`POOL`)
keeps consumers from one task to the next, as Spark's own ``KafkaDataConsumer`` pool does:

* keyed by :class:`PoolKey`: the cluster (bootstrap servers), the whole consumer
  configuration, whether it decodes headers (``includeHeaders``) and the topic-partition;
  a pooled consumer is assigned to exactly that partition;
* a consumer is lent to one task at a time (:meth:`ConsumerPool.acquire` takes it out of
  the pool, :meth:`ConsumerPool.release` puts it back; thread-safe);
* a consumer whose position is where the next range starts is lent without a seek, so
  the records it fetched ahead are used. One that stands a little before the start (it
  read an earlier range of the partition than the last one, in another task of this
  worker) is moved forward through the records it has already fetched, without a round
  trip to the broker, when those reach the start (:func:`advance_in_buffer`); otherwise
  it is sought to the range's start, which drops what it had fetched;
* bounded: at most ``capacity`` consumers (idle plus lent); the least recently used idle
  ones are closed first. A pool never blocks: when every consumer is lent it may exceed
  its capacity for a while, as Spark's does;
* a consumer that can stop fetching while it is idle (one with a ``park()`` method: the
  librdkafka consumer, :mod:`datasource.librdkafka_consumer`) is parked once it has been
  idle for :data:`PARK_AFTER_S` (by the evictor thread, or :meth:`ConsumerPool.park_idle`),
  and fetches again from its position as soon as it is lent. Not at once: parking drops
  what it fetched ahead, which the next batch's range of its partition would read without
  a round trip;
* an idle consumer is closed after ``idle_timeout`` seconds (checked on every use and by
  a daemon thread of the module's pool);
* a consumer lent to a task that fails (any exception, including the ``GeneratorExit``
  of a task whose output Spark stopped reading) is closed and dropped, never lent again;
* a consumer that read its topic under another topic id than the task's plan names is
  closed and dropped: the topic was deleted and created again since, and what the
  consumer fetched ahead belongs to the old topic (its offsets may be the very ones the
  next range of the new topic starts at).

:class:`SingleConsumer` is the same interface without pooling
(``kafkaConsumer.pool.enabled=false``): one consumer for the ranges of one task, assigned
and sought per range, closed when the task ends.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Any, Protocol

from state.process_cache import ProcessCache

log = logging.getLogger(__name__)

#: Spark's defaults for ``spark.kafka.consumer.cache.capacity`` and ``.timeout``.
DEFAULT_CAPACITY = 64
DEFAULT_IDLE_TIMEOUT_S = 300.0
#: The longest pause of the module pool's evictor thread (Spark's evictor runs every 1m).
EVICTOR_INTERVAL_S = 60.0
#: How long a consumer that can be parked stays idle before it is (see the module doc),
#: and how often the module pool's evictor thread looks for such consumers.
PARK_AFTER_S = 1.0
PARK_INTERVAL_S = 0.5
#: The most records a pooled consumer is moved forward through (decoded and dropped)
#: instead of a seek: about the CPU of one fetch round trip on a local broker.
MAX_ADVANCE_RECORDS = 4_096


@dataclass(frozen=True)
class PoolKey:
    """Which consumers are interchangeable: same cluster, configuration, header decoding
    (:func:`datasource.record_rows.install`), partition and client (``kafkaConsumer.client``)."""

    servers: str
    config: tuple[tuple[str, str], ...]
    topic: str
    partition: int
    headers: bool = False
    client: str = "kafka-python"

    @classmethod
    def of(  # noqa: PLR0913 - the key's fields, the last two keyword-only
        cls,
        servers: str,
        config: Mapping[str, Any],
        topic: str,
        partition: int,
        *,
        headers: bool = False,
        client: str = "kafka-python",
    ) -> PoolKey:
        fingerprint = tuple(sorted((k, repr(v)) for k, v in config.items()))
        return cls(servers, fingerprint, topic, partition, headers, client)

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition}@{self.servers}"


@dataclass(frozen=True)
class PoolStats:
    """Counters since the pool was created (or :meth:`ConsumerPool.reset_stats`)."""

    created: int = 0
    reused: int = 0
    seeks: int = 0
    advanced: int = 0
    evicted: int = 0
    invalidated: int = 0
    idle: int = 0
    in_use: int = 0


@dataclass(eq=False)
class Lease:
    """A consumer lent to a task, assigned to ``key``'s partition and positioned at the
    range's start. Before releasing it, the task sets ``position`` to where the consumer
    stands (its next offset), or leaves ``None`` when that is not known for sure."""

    key: PoolKey
    consumer: Any
    tp: Any  # kafka.TopicPartition
    position: int | None = None
    #: The id of the topic the consumer read, as the plans of its tasks named it (None:
    #: not named, the broker gives no ids).
    topic_id: str | None = None
    #: How this lease began: a new consumer, whether it was sought, and how many records
    #: it was moved forward through instead (for spans, tests).
    created: bool = False
    sought: bool = True
    advanced: int = 0


class ConsumerSource(Protocol):
    """Where a read task gets its consumer for one range."""

    def acquire(
        self,
        key: PoolKey,
        start: int,
        create: Callable[[], Any],
        *,
        topic_id: str | None = None,
        fresh: bool = False,
    ) -> Lease:
        """A consumer for ``key`` positioned at ``start``; with ``fresh``, one created by
        this call (nothing it knows of the partition predates the call)."""
        ...

    def release(self, lease: Lease, *, ok: bool) -> None:
        """Give ``lease`` back; ``ok=False``: it failed while in use, and is closed."""
        ...


def _topic_partition(key: PoolKey) -> Any:
    from kafka import TopicPartition

    return TopicPartition(key.topic, key.partition)


def _close(consumer: Any, why: str) -> None:
    """Close a consumer that is no longer used; a failure to close is logged, not raised
    (the consumer is dropped either way, and a task may be failing already)."""
    try:
        consumer.close()
    except Exception:
        log.warning("gtkafka: closing a Kafka consumer (%s) failed", why, exc_info=True)


class ConsumerPool:
    """Idle consumers by :class:`PoolKey`, lent one task at a time (see the module doc).

    The idle consumers are a :class:`~state.process_cache.ProcessCache` under keys
    ``(PoolKey, n)`` (several consumers of one partition may be idle at once); the pool
    adds what is its own: counting lent consumers against the capacity, positioning a
    reused consumer, its counters and the evictor thread.
    """

    def __init__(
        self,
        capacity: int = DEFAULT_CAPACITY,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT_S,
        *,
        clock: Callable[[], float] = time.monotonic,
        evictor: bool = False,
    ) -> None:
        self.capacity = capacity
        self._evictor = evictor
        self._evictor_thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()  # the counters and the evictor thread
        self._in_use = 0
        self._counts = PoolStats()
        self._returned = itertools.count()
        self._idle: ProcessCache[tuple[PoolKey, int], Lease] = ProcessCache(
            "Kafka consumers",
            max_idle=idle_timeout,
            close=self._evict,
            after_fork=self._forget_parent,
            clock=clock,
        )

    @property
    def idle_timeout(self) -> float:
        assert self._idle.max_idle is not None
        return self._idle.max_idle

    # --- settings and counters -------------------------------------------------------

    def configure(self, capacity: int, idle_timeout: float) -> ConsumerPool:
        """Apply a query's pool options (the last task's options win in a shared process)."""
        with self._lock:
            self.capacity = capacity
            self._idle.max_idle = idle_timeout
        return self

    def stats(self) -> PoolStats:
        idle = len(self._idle)
        with self._lock:
            return replace(self._counts, idle=idle, in_use=self._in_use)

    def reset_stats(self) -> None:
        with self._lock:
            self._counts = PoolStats()

    # --- lending ---------------------------------------------------------------------

    def acquire(
        self,
        key: PoolKey,
        start: int,
        create: Callable[[], Any],
        *,
        topic_id: str | None = None,
        fresh: bool = False,
    ) -> Lease:
        """A consumer for ``key`` positioned at ``start``: an idle one if the pool has
        one (sought only if it stands elsewhere), else a new one from ``create()``; with
        ``fresh``, always a new one (idle ones stay idle).

        With ``topic_id`` (the id of the topic the task's plan reads), an idle consumer
        that read the topic under another id is closed instead of lent.
        """
        lease = None if fresh else self._take_idle(key, topic_id)
        with self._lock:
            self._in_use += 1
        if lease is None:
            self._evict_over_capacity()
        try:
            if lease is not None and not self._reuse(lease, start):
                lease = None
            if lease is None:
                lease = self._create(key, start, create)
        except BaseException:
            with self._lock:
                self._in_use -= 1
            raise
        if topic_id is not None:
            lease.topic_id = topic_id
        return lease

    def _take_idle(self, key: PoolKey, topic_id: str | None) -> Lease | None:
        """The newest idle consumer of ``key`` that may read the topic ``topic_id``;
        those that read it under another id are closed on the way."""
        while (taken := self._idle.take_newest(lambda k: k[0] == key)) is not None:
            lease = taken[1]
            if topic_id is None or lease.topic_id == topic_id:
                return lease
            log.info(
                "gtkafka: closing the pooled consumer of %s: it read the topic under id %s, "
                "the task reads it under id %s (the topic was deleted and created again)",
                key,
                lease.topic_id,
                topic_id,
            )
            with self._lock:
                self._count(invalidated=1)
            _close(lease.consumer, "topic recreated")
        return None

    def release(self, lease: Lease, *, ok: bool) -> None:
        """Return ``lease``; ``ok=False`` (the task failed while using it) closes it."""
        with self._lock:
            self._in_use -= 1
            if not ok:
                self._count(invalidated=1)
        if not ok:
            log.info("gtkafka: dropping the pooled consumer of %s after an error", lease.key)
            _close(lease.consumer, "invalidated")
            return
        self._idle.give_back((lease.key, next(self._returned)), lease)
        self._evict_over_capacity()
        self._start_evictor()

    @contextmanager
    def lease(self, key: PoolKey, start: int, create: Callable[[], Any]) -> Iterator[Lease]:
        """:meth:`acquire` and :meth:`release` around a block; an exception invalidates."""
        leased = self.acquire(key, start, create)
        ok = False
        try:
            yield leased
            ok = True
        finally:
            self.release(leased, ok=ok)

    def evict_idle(self) -> int:
        """Close the consumers idle for ``idle_timeout`` or longer; how many were closed."""
        return self._idle.evict_idle()

    def park_idle(self, idle_for: float = PARK_AFTER_S) -> int:
        """Park the consumers that can be parked and have been idle for ``idle_for`` s or
        longer (see the module doc); how many were looked at."""
        return self._idle.visit_idle(idle_for, _park)

    def close(self) -> None:
        """Close every idle consumer (lent ones are closed or kept when released), and end
        the evictor thread (the next release starts another)."""
        with self._lock:
            thread, self._evictor_thread = self._evictor_thread, None
        if thread is not None:
            self._stop.set()
        while (taken := self._idle.take_newest(lambda _: True)) is not None:
            _close(taken[1].consumer, "pool closed")

    # --- internals ---------------------------------------------------------------------

    def _evict(self, lease: Lease) -> None:
        """The cache's ``close``: a consumer idle too long, or beyond the capacity."""
        with self._lock:
            self._count(evicted=1)
        log.debug("gtkafka: closing the pooled consumer of %s (evicted)", lease.key)
        _close(lease.consumer, "evicted")

    def _evict_over_capacity(self) -> None:
        """Close the least recently used idle consumers beyond the capacity (lent ones
        count, including one about to be created)."""
        with self._lock:
            lent, capacity = self._in_use, self.capacity
        excess = len(self._idle) + lent - capacity
        if excess > 0:
            self._idle.evict_oldest(excess)

    def _forget_parent(self) -> None:
        """A forked child does not own its parent's consumers (nor their IO threads)."""
        self._lock = threading.Lock()
        self._in_use = 0
        self._evictor_thread = None

    def _reuse(self, lease: Lease, start: int) -> bool:
        """Position an idle consumer at ``start``; ``False`` if it turned out unusable
        (it is then closed and counted as invalidated)."""
        consumer, tp = lease.consumer, lease.tp
        advanced = 0
        try:
            # Both must agree: what the last task saw, and what the consumer says now.
            known = lease.position
            if known is not None and consumer.position(tp) != known:
                known = None
            if known is not None and known < start <= known + MAX_ADVANCE_RECORDS:
                advanced = advance_in_buffer(consumer, tp, start)
            if known == start or advanced:
                seeks = 0
            else:
                consumer.seek(tp, start)
                seeks = 1
        except Exception as err:
            log.warning(
                "gtkafka: the pooled consumer of %s cannot be positioned at %d (%s: %s); "
                "closing it and creating a new one",
                lease.key,
                start,
                type(err).__name__,
                err,
            )
            with self._lock:
                self._count(invalidated=1)
            _close(consumer, "invalidated")
            return False
        _unpark(lease)  # lent: it fetches from the range's start at once
        lease.position = None  # unknown until the task says where it stopped
        lease.created, lease.sought, lease.advanced = False, bool(seeks), advanced
        with self._lock:
            self._count(reused=1, seeks=seeks, advanced=1 if advanced else 0)
        return True

    def _create(self, key: PoolKey, start: int, create: Callable[[], Any]) -> Lease:
        consumer = create()
        tp = _topic_partition(key)
        try:
            consumer.assign([tp])
            consumer.seek(tp, start)
        except BaseException:
            _close(consumer, "failed to assign")
            raise
        with self._lock:
            self._count(created=1, seeks=1)
        return Lease(key, consumer, tp, created=True)

    def _count(self, **deltas: int) -> None:
        c = self._counts
        self._counts = replace(c, **{k: getattr(c, k) + v for k, v in deltas.items()})

    def _start_evictor(self) -> None:
        if not self._evictor or self._evictor_thread is not None:
            return
        with self._lock:
            if self._evictor_thread is not None:
                return
            self._stop = threading.Event()
            thread = threading.Thread(
                target=self._evict_forever,
                args=(self._stop,),
                name="gtkafka-consumer-evictor",
                daemon=True,
            )
            self._evictor_thread = thread
        thread.start()

    def _evict_forever(self, stop: threading.Event) -> None:
        """Park idle consumers every :data:`PARK_INTERVAL_S`, evict idle ones every
        ``idle_timeout / 2`` (1 s to :data:`EVICTOR_INTERVAL_S`), until ``stop``."""
        last_eviction = time.monotonic()
        while not stop.wait(PARK_INTERVAL_S):
            try:
                self.park_idle()
                interval = max(1.0, min(EVICTOR_INTERVAL_S, self.idle_timeout / 2))
                if time.monotonic() - last_eviction >= interval:
                    last_eviction = time.monotonic()
                    self.evict_idle()
            except Exception:
                log.warning("gtkafka: evicting idle Kafka consumers failed", exc_info=True)


def _park(lease: Lease) -> None:
    """Park the idle consumer of ``lease`` if it can be parked (it then fetches nothing
    until it is next read)."""
    park = getattr(lease.consumer, "park", None)
    if park is not None:
        park()


def _unpark(lease: Lease) -> None:
    """Let the consumer of ``lease`` fetch again if it was parked."""
    unpark = getattr(lease.consumer, "unpark", None)
    if unpark is not None:
        unpark()


def advance_in_buffer(consumer: Any, tp: Any, start: int) -> int:
    """Move ``consumer`` (assigned ``tp``, standing before ``start``) forward to ``start``
    by dropping records it has already fetched, never waiting for the broker.

    Returns how many offsets it moved (the consumer then stands exactly at ``start``), or
    0 when it could not: nothing fetched reaches ``start`` yet, or a poll returned a
    record at or past ``start`` (offsets missing before it: compaction, transaction
    markers). The caller must then seek, which puts the position right whatever the
    polls consumed.
    """
    origin = position = consumer.position(tp)
    while position < start:
        # timeout 0: only what the fetcher holds already (it may send the next fetch).
        polled = consumer.poll(timeout_ms=0, max_records=start - position)
        moved = consumer.position(tp)
        if not polled.get(tp) or moved <= position:
            return 0
        position = moved
    return position - origin if position == start else 0


class SingleConsumer:
    """No pool: one consumer for the ranges of one task, closed by :meth:`close`.

    Each range assigns it to the range's partition and seeks; a failure closes it (the
    next range, if any, creates another).
    """

    def __init__(self) -> None:
        self._consumer: Any = None
        self.created = 0

    def acquire(
        self,
        key: PoolKey,
        start: int,
        create: Callable[[], Any],
        *,
        topic_id: str | None = None,
        fresh: bool = False,
    ) -> Lease:
        # Assigned and sought for every range: nothing fetched for an earlier range (of
        # a topic under another id, say) is ever returned, so topic_id needs no check.
        new = fresh or self._consumer is None
        if new:
            self.close()
            self._consumer = create()
            self.created += 1
        tp = _topic_partition(key)
        try:
            self._consumer.assign([tp])
            self._consumer.seek(tp, start)
        except BaseException:
            self.close()
            raise
        return Lease(key, self._consumer, tp, created=new, topic_id=topic_id)

    def release(self, lease: Lease, *, ok: bool) -> None:
        if not ok:
            self.close()

    def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            _close(consumer, "task done")


#: The pool of this process (a Spark Python worker), shared by every task it runs.
POOL = ConsumerPool(evictor=True)
