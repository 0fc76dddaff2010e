"""Executor side: read one ``[from, until)`` range of a topic-partition with a Kafka
consumer, into an :class:`~datasource.arrow_builder.ArrowBuilder`.

Mirrors Spark's ``KafkaDataConsumer``: the consumer is assigned to the range's partition
(no group) and positioned at the range's start; termination never depends on an empty
poll, and polls ask for at most the records left in the range, so that a consumer
returned to the pool (:mod:`datasource.consumer_pool`) stands exactly at the range's end.

Missing records inside the range:

* below the partition's log start (retention) or past its end (a recreated topic):
  :class:`DataLossError` with ``failOnDataLoss=true``; otherwise a warning, the gap is
  skipped and counted (:attr:`RangeReader.skipped`, logged when the range ends);
* gaps above the log start (compacted records, transaction markers) are normal and skipped.

No progress for ``kafkaConsumer.pollTimeoutMs`` raises :class:`SourceUnavailable` naming
the bootstrap servers. A task's ranges, its batch record and the topic-id check before its
first fetch are :mod:`datasource.partition_reader`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from typing import Any, cast

from datasource import record_rows
from datasource.arrow_builder import ArrowBuilder
from datasource.consumer_pool import ConsumerSource, Lease, PoolKey, SingleConsumer
from datasource.librdkafka_consumer import CLIENT as LIBRDKAFKA
from datasource.librdkafka_consumer import LibrdkafkaConsumer
from datasource.offsets import OffsetRange
from datasource.options import KafkaSourceOptions
from state import profiling
from state.errors import DataLossError, RetriableError, SourceUnavailable
from state.kafka_errors import is_retriable_kafka_error, kafka_call, translate_kafka_error

log = logging.getLogger(__name__)

#: The most rows of one Arrow record batch a read yields.
ARROW_BATCH_ROWS = 10_000


def client_factory(options: KafkaSourceOptions) -> Callable[..., Any]:
    """What makes an executor's consumer from kafka-python arguments
    (:meth:`~datasource.options.KafkaSourceOptions.consumer_config`), as
    ``kafkaConsumer.client`` chooses: kafka-python's ``KafkaConsumer``, or
    :class:`~datasource.librdkafka_consumer.LibrdkafkaConsumer`."""
    if options.client == LIBRDKAFKA:
        return LibrdkafkaConsumer
    from kafka import KafkaConsumer

    return cast("Callable[..., Any]", KafkaConsumer)


class RangeReader:
    """Reads ``[from, until)`` of one topic-partition (of the topic with id ``topic_id``,
    where the plan knows it)."""

    def __init__(
        self,
        options: KafkaSourceOptions,
        range_: OffsetRange,
        *,
        consumer_factory: Callable[..., Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
        topic_id: str | None = None,
    ) -> None:
        self.options = options
        self.range = range_
        self.topic_id = topic_id
        self.skipped = 0
        self.rows = 0
        self._factory = consumer_factory
        self._clock = clock

    def _create(self, config: dict[str, Any]) -> Any:
        """A consumer of the reader's factory, or of the client ``kafkaConsumer.client``
        names (:func:`client_factory`), whose polls return rows where the client allows."""
        factory = self._factory or client_factory(self.options)
        consumer = kafka_call(
            self.options.bootstrap_servers,
            f"connecting to read {self.range}",
            lambda: factory(**config),
        )
        record_rows.install(consumer, headers=self.options.include_headers)
        return consumer

    def batches(
        self, epoch: int, arrow_schema: Any, *, source: ConsumerSource | None = None
    ) -> Iterator[Any]:
        """The range alone as RecordBatches (a consumer of its own unless ``source``)."""
        builder = ArrowBuilder(arrow_schema, epoch)
        consumers = SingleConsumer() if source is None else source
        try:
            yield from self.read_into(builder, consumers)
        finally:
            if source is None:
                assert isinstance(consumers, SingleConsumer)
                consumers.close()
        if builder.rows:
            yield builder.flush()

    def _key(self, config: Mapping[str, Any]) -> PoolKey:
        r = self.range
        return PoolKey.of(
            self.options.bootstrap_servers,
            config,
            r.topic,
            r.partition,
            headers=self.options.include_headers,
            client=self.options.client,
        )

    def acquire(
        self,
        source: ConsumerSource,
        *,
        task: int = 0,
        config: dict[str, Any] | None = None,
    ) -> Lease:
        """A consumer from ``source``, positioned at the range's start (the span
        ``read.client``); ``config``: the consumer settings, if the caller has them."""
        r = self.range
        config = self.options.consumer_config() if config is None else config
        with profiling.span(
            "read.client", partition=task, ranges=1, range=r, records=r.size
        ) as client:
            lease = source.acquire(
                self._key(config),
                r.from_offset,
                lambda: self._create(config),
                topic_id=self.topic_id,
            )
            client.update(created=lease.created, sought=lease.sought, advanced=lease.advanced)
        return lease

    def read_into(
        self,
        builder: ArrowBuilder,
        source: ConsumerSource,
        *,
        task: int = 0,
        lease: Lease | None = None,
    ) -> Iterator[Any]:
        """Add the range's records to ``builder``, yielding every full RecordBatch.

        The consumer is ``lease`` (taken from ``source`` by :meth:`acquire`) or comes from
        ``source`` now, and goes back to it; if anything fails while it is in use (or the
        caller stops reading), it is released as failed.
        """
        r = self.range
        config = self.options.consumer_config()
        if lease is None:
            lease = self.acquire(source, task=task, config=config)
        held: list[Lease] = [lease]  # the lease in use; empty while it is being renewed

        def renew(stale: Lease, offset: int) -> Lease:
            log.debug(
                "gtkafka: the reused consumer of %s came back empty at %d, at or past the "
                "high watermark it last saw; reading on with a new consumer",
                r,
                offset,
            )
            held.clear()
            source.release(stale, ok=False)
            lease = source.acquire(
                self._key(config),
                offset,
                lambda: self._create(config),
                topic_id=self.topic_id,
                fresh=True,
            )
            held.append(lease)
            return lease

        ok = False
        try:
            yield from self._read(lease, builder, int(config["max_poll_records"]), task, renew)
            ok = True
        finally:
            if held:
                source.release(held[0], ok=ok)
        if self.skipped:
            log.warning(
                "gtkafka: skipped %d lost record(s) of %s (failOnDataLoss=false); read %d",
                self.skipped,
                r,
                self.rows,
            )

    def _read(  # noqa: PLR0912, PLR0915 - one loop over the broker's answers, each branch one kind of answer
        self,
        lease: Lease,
        builder: ArrowBuilder,
        max_poll: int,
        task: int,
        renew: Callable[[Lease, int], Lease],
    ) -> Iterator[Any]:
        """The records of the range into ``builder`` (yielding full batches), read with
        ``lease``; ``renew(lease, offset)`` exchanges it for a new consumer at ``offset``.
        """
        import kafka.errors as kerr

        r = self.range
        consumer, tp = lease.consumer, lease.tp
        as_rows = not record_rows.installed(consumer)
        poll_timeout = self.options.poll_timeout_ms / 1000.0
        timer = profiling.StepTimer(on=profiling.enabled())
        next_offset = r.from_offset
        last_progress = self._clock()
        while next_offset < r.until_offset:
            try:
                with timer.step("fetch"):
                    polled = consumer.poll(
                        timeout_ms=min(1_000, self.options.poll_timeout_ms),
                        max_records=min(max_poll, r.until_offset - next_offset),
                    )
            except kerr.OffsetOutOfRangeError:
                next_offset = self._out_of_range(consumer, tp, next_offset)
                last_progress = self._clock()
                continue
            except Exception as err:
                translated = translate_kafka_error(
                    err, servers=self.options.bootstrap_servers, what=f"reading {r}"
                )
                if translated is err:
                    raise
                raise translated from err
            records = polled.get(tp)
            if not records:
                position = consumer.position(tp)
                if position is not None and position > next_offset:
                    # Skipped control batches (transaction markers) or compacted offsets.
                    next_offset = min(position, r.until_offset)
                    last_progress = self._clock()
                    continue
                high = consumer.highwater(tp)
                if high is not None and high <= next_offset:
                    if not lease.created:
                        # A consumer that read before this range was planned may hold the
                        # mark of an old Fetch answer (the partition has grown since); only
                        # the answers to a new consumer's Fetches can tell that the
                        # partition ends before the range.
                        lease = renew(lease, next_offset)
                        consumer = lease.consumer
                        continue
                    # The partition ends before the range does: it was truncated or recreated.
                    self._lost(next_offset, r.until_offset, f"the partition now ends at {high}")
                    next_offset = r.until_offset
                    break
                if self._clock() - last_progress > poll_timeout:
                    if not self._partition_exists(consumer):
                        self._lost(next_offset, r.until_offset, "the partition was deleted")
                        next_offset = r.until_offset
                        break
                    raise SourceUnavailable(
                        f"Kafka at {self.options.bootstrap_servers} returned no records of "
                        f"{r} at offset {next_offset} within kafkaConsumer.pollTimeoutMs="
                        f"{self.options.poll_timeout_ms}"
                    )
                continue
            last_progress = self._clock()
            if as_rows:
                records = record_rows.rows_of(records)
            first = records[0][0]
            if first < next_offset:
                # Never expected: the consumer stood before where this range has got to.
                raise RetriableError(
                    f"gtkafka: the consumer of {r} returned offset {first} while reading "
                    f"from {next_offset}; the task is retried with a new consumer"
                )
            if first > next_offset:
                self._gap(consumer, next_offset, first)
            if records[-1][0] >= r.until_offset:
                records = [rec for rec in records if rec[0] < r.until_offset]
                next_offset = r.until_offset
            if records:
                with timer.step("arrow"):
                    builder.add(r.topic, r.partition, records)
                self.rows += len(records)
                next_offset = max(next_offset, records[-1][0] + 1)
                while builder.rows >= ARROW_BATCH_ROWS:
                    with timer.step("arrow"):
                        batch = builder.flush(ARROW_BATCH_ROWS)
                    yield batch
        if not self.skipped:
            # Where the consumer stands (past the range's end if a poll returned records
            # beyond it): the pool lends it for a range starting there without a seek.
            lease.position = consumer.position(tp)
        if timer.on:
            attrs = {
                "partition": task,
                "ranges": 1,
                "range": r,
                "records": self.rows,
                "created": lease.created,
            }
            for step in ("fetch", "arrow"):  # the polls' and the builder's sums, per range
                seconds = timer.seconds.get(step, 0.0)
                profiling.record(f"read.{step}", timer.started, seconds, **attrs)

    def _partition_exists(self, consumer: Any) -> bool:
        """Whether the range's partition still exists (fresh metadata)."""
        try:
            consumer.topics()  # forces a Metadata request
            return self.range.partition in (consumer.partitions_for_topic(self.range.topic) or ())
        except Exception as err:
            if is_retriable_kafka_error(err):
                return True  # unreachable: report it as such, not as data loss
            raise

    def _gap(self, consumer: Any, expected: int, got: int) -> None:
        """Records ``[expected, got)`` were not returned: lost to retention, or compacted?"""
        beginning = self._beginning(consumer)
        if beginning > expected:
            self._lost(expected, min(beginning, got), f"the log now starts at {beginning}")

    def _out_of_range(self, consumer: Any, tp: Any, offset: int) -> int:
        """The broker refused ``offset``; skip to the log start or the end, or fail."""
        beginning = self._beginning(consumer)
        if offset < beginning:
            until = min(beginning, self.range.until_offset)
            self._lost(offset, until, f"the log now starts at {beginning}")
            consumer.seek(tp, until)
            return until
        self._lost(offset, self.range.until_offset, "the offset is past the end of the partition")
        return self.range.until_offset

    def _beginning(self, consumer: Any) -> int:
        from kafka import TopicPartition

        tp = TopicPartition(self.range.topic, self.range.partition)
        answer = kafka_call(
            self.options.bootstrap_servers,
            f"ListOffsets(earliest) of {self.range}",
            lambda: consumer.beginning_offsets([tp], timeout_ms=self.options.poll_timeout_ms),
        )
        return int(answer[tp])

    def _lost(self, begin: int, end: int, why: str) -> None:
        what = (
            f"records [{begin}, {end}) of {self.range.topic}-{self.range.partition} "
            f"(batch range {self.range}) are gone from Kafka at "
            f"{self.options.bootstrap_servers}: {why}"
        )
        if self.options.fail_on_data_loss:
            raise DataLossError(
                f"{what}. Set failOnDataLoss=false to skip lost records with a warning."
            )
        log.warning("gtkafka: %s; skipping them (failOnDataLoss=false)", what)
        self.skipped += end - begin
