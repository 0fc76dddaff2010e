"""``consumer=kafka``: :class:`KafkaTopicConsumer`, which sends each item as a message of
``consumer.topic`` and finds a bundle again by the tail of the topic.

The sink input is shaped like the input of Spark's Kafka sink: ``value`` (binary or
string, required), and optionally ``key`` (binary or string), ``headers``
(``array<struct<key: string, value: binary>>``) and ``partition`` (int). Other columns
(``gt``, ``topic``, ``offset``...) are not sent; ``consumer.topic`` names the topic.

Every message carries, after the item's own headers::

    gtb.bundle  bundle id (the epoch)         gtb.index  the item's index in the bundle
    gtb.gt      the bundle's global time      gtb.count  the number of items in the bundle

An item may carry ``gtb.*`` headers of its own (relayed from another gtbarrier pipeline
read with ``includeHeaders=true``): the sink's are the *last* of each name, which is what
the tail scan reads (as Kafka's ``Headers.lastHeader`` does, and ``dict(headers)`` in
Python).

Items are sent in ``gt`` order with ``acks=all`` and one request in flight per connection,
so each partition holds a prefix of the bundle's items sent to it even if the driver dies
in the middle. ``last_bundle()`` reads the tail of every partition of the topic: the newest
bundle whose items are all there (any older bundle is complete: the barrier never sends a
bundle before the previous one was acknowledged). Delivering a bundle again first reads
which of its indices are already in the topic and sends only the missing ones, so a bundle
interrupted half-way is completed, never repeated.

A tail scan is only right if nothing sent before it can land after it, and no time bound
promises that (a broker writes a request whenever it reads it; a zombie driver may still
be sending). So the producer is transactional, with one ``transactional.id`` per
pipeline, each delivery attempt one transaction, and every scan is preceded by a new
producer's ``init_transactions()`` (:meth:`KafkaTopicConsumer._fence`): the broker then
aborts what an older producer left open and refuses its later requests. The scan reads
``read_committed``, as the topic's readers should (docs/sink.md, "Transactions").

An attempt waits for the producer's verdict on each message before it ends
(:meth:`KafkaTopicConsumer._settle`): after ``ack.timeoutMs``, up to
``delivery.timeout.ms``; late acknowledgements deliver the bundle, and anything else
closes the producer and fails the attempt retriably: the retry fences it before it scans
(docs/sink.md, "A slow broker").

The end of a partition is the larger of ListOffsets and a fetch's high watermark: the
Tansu broker answers ListOffsets "latest" with the base offset of the last record batch
plus one, which is too small whenever that batch holds more than one record.

The output topic should be written only by this sink (messages without ``gtb.*``
headers are skipped, but the tail scan reads through them).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from sink.bundle import Bundle
from sink.consumers.base import Ack, Consumer, LastBundle
from sink.consumers.kafka.kafka_options import (
    KafkaTopicSettings,
    connection_arguments,
    producer_config,
)
from sink.consumers.kafka.kafka_rows import H_BUNDLE, H_COUNT, H_GT, H_INDEX, messages
from sink.consumers.producer_pool import PRODUCERS
from sink.faults import FaultInjector
from sink.staging import Staging
from state.errors import CommitStateUnknown, ConfigError, DeliveryFailed
from state.kafka_errors import translate_kafka_error

T = TypeVar("T")

SCAN_CHUNK = 2000
# Beyond the producer's delivery.timeout.ms: its sender thread expires batches on its loop.
SETTLE_MARGIN_S = 2.0


@dataclass
class PartitionTail:
    """What the end of one partition says about the newest bundle in it."""

    newest: int | None = None
    count: int = 0
    indices: set[int] = field(default_factory=set)
    older: int | None = None


@dataclass
class _Attempt:
    """The messages one delivery attempt handed to the producer."""

    wanted: int
    futures: list[Any] = field(default_factory=list)
    all_sent: bool = False
    last_send: float = 0.0
    driver_bytes: int = 0


def _rejected(err: BaseException | None) -> bool:
    """The broker answered ``err`` for the message's request and did not store it.

    Client-side time-outs, lost connections and the broker's retriable answers after the
    retries ran out (``RequestTimedOut`` among them) say nothing certain: the request may
    have been, or may still be, written.
    """
    import kafka.errors as kerr

    return isinstance(err, kerr.BrokerResponseError) and not err.retriable


_NULL = object()
"""The value of a message with neither key nor value (see :func:`_value_serializer`)."""


def _value_serializer() -> Any:
    """The producer's value serializer: bytes as they are, :data:`_NULL` as null."""
    from kafka.serializer import Serializer

    class NullableValue(Serializer):  # type: ignore[misc]
        def serialize(self, topic: str, headers: Any, data: Any) -> bytes | None:
            return None if data is _NULL else data

    return NullableValue()


def sink_headers(bundle: Bundle, index: int, count: int) -> list[tuple[str, bytes]]:
    """The headers the sink appends to item ``index`` of the ``count`` items of ``bundle``:
    each a decimal number in ASCII (golden in ``tests/golden/consumers/``)."""
    return [
        (H_BUNDLE, str(bundle.bundle_id).encode()),
        (H_GT, str(bundle.gt).encode()),
        (H_INDEX, str(index).encode()),
        (H_COUNT, str(count).encode()),
    ]


def sink_header(headers: Sequence[tuple[str, bytes | None]], name: str) -> int | None:
    """The sink's header ``name`` of a message: the *last* one of that name (Kafka's
    ``Headers.lastHeader``). The sink appends its headers after the item's own, and an item
    relayed from another gtbarrier pipeline carries that pipeline's ``gtb.*`` headers
    first. None if there is none or it is not a number (not written by the sink)."""
    for key, value in reversed(headers):
        if key == name:
            try:
                return int(value) if value is not None else None
            except ValueError:
                return None
    return None


class KafkaTopicConsumer(Consumer):
    name = "kafka"

    def __init__(
        self,
        settings: KafkaTopicSettings,
        staging: Staging,
        faults: FaultInjector,
        *,
        ack_timeout: float,
        pipeline_id: str | None = None,
    ) -> None:
        super().__init__(staging, faults)
        self.settings = settings
        self.bootstrap = settings.bootstrap
        self.topic = settings.topic
        self.ack_timeout = ack_timeout
        # Secret references resolved here: a consumer is opened in the process that makes
        # its clients (a commit's), never pickled. The pool key shows secrets as
        # fingerprints, which still tell other credentials apart.
        self.config = producer_config(settings, ack_timeout, pipeline_id)
        self.delivery_timeout = int(self.config["delivery_timeout_ms"]) / 1000.0
        self._producer: Any = None
        self._settled = False  # the last delivery was acknowledged: the producer holds nothing
        # The producer was made by _fence() and has not begun a transaction since: the
        # topic's tail cannot have grown behind a scan made now.
        self._fresh = False
        config = tuple(sorted((k, repr(v)) for k, v in self.config.items()))
        self._pool_key = (self.bootstrap, config)

    def describe(self) -> str:
        return f"kafka consumer {self.topic}@{self.bootstrap}"

    # --- delivery -----------------------------------------------------------------------

    def producer(self) -> Any:
        """This consumer's producer: one an earlier commit of this process left settled in
        the pool (:mod:`sink.consumers.producer_pool`), or a new one (:meth:`_fence`).

        A pooled producer may have been fenced by another driver since: its next
        transaction then fails (``ProducerFenced``) and nothing of it is written."""
        if self._producer is None:
            pooled = PRODUCERS.take(self._pool_key)
            if pooled is None:
                self._fence()
            else:
                self._producer = pooled
        return self._producer

    def _fence(self) -> None:
        """Fence every older producer of the pipeline, then hold the new one.

        A new producer's ``init_transactions()`` makes the broker bump the transactional
        id's epoch, abort the transaction an older producer left open (on Kafka, after
        completing one it had begun to commit), and refuse from then on every request of an
        older epoch, also one already on its way to the broker (held in a queue or on the
        network), or sent by a zombie driver. So a tail scan made after this sees all that
        any older producer of the pipeline will ever have written: what it lacks, only this
        producer can add. No time bound can promise that: a broker writes a request when it
        reads it, whenever that is.
        """
        from kafka import KafkaProducer

        self._discard_producer()
        idle = PRODUCERS.take(self._pool_key)  # this process's own, fenced below
        if idle is not None:
            idle.close(timeout=0)

        def new() -> Any:
            producer = KafkaProducer(
                bootstrap_servers=self.bootstrap,
                value_serializer=_value_serializer(),
                **self.config,
            )
            try:
                producer.init_transactions()
            except BaseException:
                producer.close(timeout=0)
                raise
            return producer

        self._producer = self._kafka(
            f"starting a producer with transactional.id {self.config['transactional_id']!r}", new
        )
        self._fresh = True

    def _kafka(self, what: str, fn: Callable[[], T]) -> T:
        """``fn()``; a kafka-python failure becomes :class:`DeliveryFailed` when retriable."""
        try:
            return fn()
        except Exception as err:
            translated = translate_kafka_error(
                err,
                servers=self.bootstrap,
                what=f"{self.describe()}: {what}",
                retriable=DeliveryFailed,
            )
            if translated is err:
                raise
            raise translated from err

    def deliver(self, bundle: Bundle, *, redelivery: bool = False) -> Ack:
        """Send the bundle's missing items in one transaction, wait until the broker has
        answered for each, and commit it.

        A redelivery first fences every older producer of the pipeline (:meth:`_fence`),
        then reads which items are in the topic: nothing sent before can land after that
        read. An attempt whose outcome is unknown closes its producer and fails retriably;
        the retry, a redelivery, fences it.
        """
        from kafka.errors import KafkaError, KafkaTimeoutError

        self._settled = False
        if redelivery and not self._fresh:
            self._fence()
        present = self._scan().get(bundle.bundle_id, set()) if redelivery else set()
        attempt = _Attempt(wanted=bundle.rows - len(present))
        try:
            producer = self.producer()
            self._fresh = False
            producer.begin_transaction()
            self._send(producer, bundle, present, attempt)
            producer.flush(timeout=self.ack_timeout)
        except Exception as err:
            if not attempt.futures:
                # its transaction may be in an error state: the next attempt starts afresh
                self._discard_producer()
                if isinstance(err, KafkaError):
                    raise DeliveryFailed(
                        f"{self.describe()}: bundle {bundle.bundle_id}: no message was handed "
                        f"to the producer: {type(err).__name__}: {err}"
                    ) from err
                raise
            self._settle(bundle, attempt, err)
            # Every message handed over has its answer now, so a redelivery's tail scan
            # sees all that landed. A flush that merely timed out after the last send was
            # a slow broker: the answers decide, as if the flush had waited for them.
            if not (isinstance(err, KafkaTimeoutError) and attempt.all_sent):
                if isinstance(err, KafkaError):
                    raise CommitStateUnknown(
                        f"{self.describe()}: bundle {bundle.bundle_id}: "
                        f"{len(attempt.futures)} of {attempt.wanted} message(s) handed to the "
                        f"producer, then {type(err).__name__}: {err}"
                    ) from err
                raise
        else:
            self._settle(bundle, attempt, None)
        rejected = [f.exception for f in attempt.futures if f.failed()]
        if rejected:
            self._discard_producer()
            raise CommitStateUnknown(
                f"{self.describe()}: bundle {bundle.bundle_id}: the broker rejected "
                f"{len(rejected)} of {len(attempt.futures)} message(s): {rejected[0]!r}"
            )
        self._commit_transaction(bundle)
        self._settled = True
        return Ack(bundle.bundle_id, bundle.rows, attempt.driver_bytes)

    def _commit_transaction(self, bundle: Bundle) -> None:
        """Commit the attempt's transaction, waiting at most ``ack.timeoutMs``.

        kafka-python's ``commit_transaction()`` waits for the answer without a bound, and a
        producer fenced meanwhile may get none (Tansu: the fenced EndTxn is retried for
        ever), so the commit is started and awaited here. Without a verdict in time the
        producer is closed and the attempt fails retriably: the retry's fence settles the
        transaction (Kafka completes a commit it began before it bumps the epoch) and its
        tail scan sees whether it was committed.
        """
        from kafka.errors import KafkaError

        producer = self._producer
        try:
            result = producer._transaction_manager.begin_commit()
            producer._sender.wakeup()
            committed = result.wait(timeout_ms=int(self.ack_timeout * 1000))
        except KafkaError as err:
            self._discard_producer()
            raise CommitStateUnknown(
                f"{self.describe()}: bundle {bundle.bundle_id}: committing its transaction "
                f"failed: {type(err).__name__}: {err}"
            ) from err
        if not committed:
            self._discard_producer()
            raise CommitStateUnknown(
                f"{self.describe()}: bundle {bundle.bundle_id}: its transaction's commit was "
                f"not answered within {self.ack_timeout:.0f}s; the producer was closed"
            )

    def _send(self, producer: Any, bundle: Bundle, present: set[int], attempt: _Attempt) -> None:
        count = bundle.rows
        half = count // 2
        index = 0
        for table in bundle.tables(self.staging):
            for value, key, headers, partition in messages(table):
                if index not in present:
                    all_headers = [*headers, *sink_headers(bundle, index, count)]
                    try:
                        future = producer.send(
                            self.topic,
                            # kafka-python refuses a message with neither key nor value
                            # before its serializer runs; Kafka takes one (Spark's sink
                            # sends it): the sink's serializer turns this marker into null.
                            value=_NULL if value is None and key is None else value,
                            key=key,
                            headers=all_headers,
                            partition=partition,
                        )
                    except ValueError as err:
                        # a partition the producer's metadata lacks (added since it was
                        # fetched: the retry's new producer fetches it again)
                        raise DeliveryFailed(
                            f"{self.describe()}: bundle {bundle.bundle_id}, item {index}: {err}"
                        ) from err
                    attempt.futures.append(future)
                    attempt.last_send = time.monotonic()
                    attempt.driver_bytes += len(value or b"") + len(key or b"")
                index += 1
                if index == half and self.faults.armed("after_deliver", bundle.bundle_id):
                    producer.flush(timeout=self.ack_timeout)
                    self.faults.at("after_deliver", bundle.bundle_id)
        attempt.all_sent = True

    def _settle(self, bundle: Bundle, attempt: _Attempt, cause: BaseException | None) -> None:
        """Wait until the broker has answered for every message of ``attempt``.

        The producer resolves every message within its ``delivery.timeout.ms`` after
        ``send()`` (acknowledged, rejected, or expired), so that is the bound. Returns when
        every message was acknowledged or rejected by the broker: nothing of this attempt
        can land later, and a redelivery's tail scan sees the whole truth. Otherwise (no
        answer in time, or a time-out / lost connection that may have left a request at the
        broker) the producer is closed, so that nothing it still holds is ever sent, and the
        attempt fails retriably (:class:`CommitStateUnknown`): the retry is a redelivery,
        which fences this producer before it reads the topic's tail (:meth:`_fence`), so a
        request still on its way is refused by the broker rather than written twice.
        """
        from kafka.errors import KafkaError

        deadline = attempt.last_send + self.delivery_timeout + SETTLE_MARGIN_S
        producer = self._producer
        try:
            if producer is not None:
                producer.flush(timeout=max(0.0, deadline - time.monotonic()))
        except KafkaError:
            pass  # judged below from the messages themselves
        pending = sum(1 for f in attempt.futures if not f.is_done)
        unsure = [f.exception for f in attempt.futures if f.failed() and not _rejected(f.exception)]
        if not pending and not unsure:
            return
        self._discard_producer()
        what = (
            f"{pending} message(s) still unanswered {self.delivery_timeout:.0f}s after the "
            "last send"
            if pending
            else f"{len(unsure)} message(s) failed without a broker answer ({unsure[0]!r})"
        )
        then = "" if cause is None else f", then {type(cause).__name__}: {cause}"
        raise CommitStateUnknown(
            f"{self.describe()}: bundle {bundle.bundle_id}: {len(attempt.futures)} of "
            f"{attempt.wanted} message(s) handed to the producer{then}; {what}. The producer "
            "was closed; a redelivery fences it before it reads the topic"
        ) from cause

    def _discard_producer(self) -> None:
        """Close the producer so that nothing it still holds can be sent later."""
        from kafka.errors import KafkaError

        producer, self._producer = self._producer, None
        if producer is None:
            return
        try:
            producer.close(timeout=0)  # flushes nothing pending, then stops the sender at once
        except KafkaError:
            # kafka-python's close() flushes first and gives up on a timeout before it stops
            # its sender thread; stop the sender without sending what it holds (its
            # messages fail), then close.
            producer._sender.force_close()
            producer.close(timeout=self.ack_timeout)

    # --- the tail of the topic ----------------------------------------------------------

    def last_bundle(self) -> LastBundle | None:
        """The newest bundle all of whose items are in the topic (as a ``read_committed``
        reader sees it), read after fencing every older producer of the pipeline."""
        if not self._fresh:
            self._fence()
        tails = self._tails()
        newest = [t.newest for t in tails if t.newest is not None]
        if not newest:
            return None
        top = max(newest)
        indices: set[int] = set()
        count = 0
        for t in tails:
            if t.newest == top:
                indices |= t.indices
                count = t.count
        if len(indices) >= count:
            return LastBundle(top, top)
        older = [b for t in tails for b in (t.newest, t.older) if b is not None and b < top]
        return LastBundle(max(older), max(older)) if older else None

    def _scan(self) -> dict[int, set[int]]:
        """``{bundle id: indices present}`` for the newest bundle of each partition."""
        out: dict[int, set[int]] = {}
        for t in self._tails():
            if t.newest is not None:
                out.setdefault(t.newest, set()).update(t.indices)
        return out

    def _tails(self) -> list[PartitionTail]:
        from kafka import KafkaConsumer as KafkaReader
        from kafka import TopicPartition

        reader = self._kafka(
            "connecting to read the topic's tail",
            lambda: KafkaReader(
                bootstrap_servers=self.bootstrap,
                enable_auto_commit=False,
                group_id=None,
                request_timeout_ms=max(int(self.ack_timeout * 1000), 10_000) + 1000,
                max_partition_fetch_bytes=8 << 20,
                bootstrap_timeout_ms=int(self.ack_timeout * 1000),
                # what a reader of the topic sees: on Kafka, not the items of an aborted
                # attempt (Tansu shows them to every reader, and so counts them too)
                isolation_level="read_committed",
                **connection_arguments(self.config),
            ),
        )

        def scan() -> list[PartitionTail]:
            partitions = reader.partitions_for_topic(self.topic)
            if not partitions:
                raise ConfigError(
                    "consumer.topic",
                    self.topic,
                    f"a topic that exists on {self.bootstrap}",
                    where="barrier",
                )
            tps = [TopicPartition(self.topic, p) for p in sorted(partitions)]
            reader.assign(tps)
            begins = reader.beginning_offsets(tps)
            ends = self._ends(reader, tps)
            return [self._tail(reader, tp, begins[tp], ends[tp]) for tp in tps]

        try:
            return self._kafka("reading the topic's tail", scan)
        finally:
            reader.close()

    def _ends(self, reader: Any, tps: list[Any]) -> dict[Any, int]:
        """Each partition's end: max(ListOffsets, fetch high watermark) (Tansu, see above)."""
        listed: dict[Any, int] = reader.end_offsets(tps)
        nonempty = [tp for tp in tps if listed[tp] > 0]
        for tp in tps:
            reader.seek(tp, max(0, listed[tp] - 1))
        deadline = time.monotonic() + max(self.ack_timeout, 10.0)
        while any(reader.highwater(tp) is None for tp in nonempty):
            if time.monotonic() > deadline:
                raise DeliveryFailed(
                    f"{self.describe()}: no fetch answer (high watermark) within "
                    f"{self.ack_timeout:.0f}s"
                )
            reader.poll(timeout_ms=200)
        return {tp: max(listed[tp], reader.highwater(tp) or 0) for tp in tps}

    def _tail(self, reader: Any, tp: Any, begin: int, end: int) -> PartitionTail:
        tail = PartitionTail()
        stop = end
        while stop > begin:
            start = max(begin, stop - SCAN_CHUNK)
            records = self._read_range(reader, tp, start, stop)
            for rec in reversed(records):
                headers = list(rec.headers or [])
                bundle = sink_header(headers, H_BUNDLE)
                if bundle is None:
                    continue
                if tail.newest is None:
                    tail.newest = bundle
                    tail.count = sink_header(headers, H_COUNT) or 0
                if bundle == tail.newest:
                    index = sink_header(headers, H_INDEX)
                    if index is not None:
                        tail.indices.add(index)
                elif bundle < tail.newest:
                    tail.older = bundle
                    return tail
            stop = start
        return tail

    def _read_range(self, reader: Any, tp: Any, start: int, stop: int) -> list[Any]:
        reader.seek(tp, start)
        out: list[Any] = []
        deadline = time.monotonic() + max(self.ack_timeout, 10.0)
        while reader.position(tp) < stop:
            if time.monotonic() > deadline:
                raise DeliveryFailed(
                    f"{self.describe()}: reading {tp.topic}-{tp.partition} [{start}, {stop}) "
                    "timed out"
                )
            for records in reader.poll(timeout_ms=200).values():
                out.extend(r for r in records if start <= r.offset < stop)
        return out

    def close(self) -> None:
        """Give a settled producer back to the process's pool; close any other."""
        if self._producer is not None and self._settled:
            producer, self._producer = self._producer, None
            PRODUCERS.give_back(self._pool_key, producer)
            return
        self._discard_producer()
