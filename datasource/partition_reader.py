"""Executor side: read the offset ranges of one Spark task into Arrow record batches.

Mirrors Spark's ``KafkaDataConsumer``: a task reads its ranges one after another, each
exactly ``[from, until)``, with a consumer assigned to the range's partition (no group)
and positioned at the range's start; termination never depends on an empty poll.
Consumers come from the Python worker's pool (:mod:`datasource.consumer_pool`): nothing
unpicklable ever sits on the reader, and a consumer that already stands at a range's
start is used without a seek. Polls ask for at most the records left in the range, so a
consumer returned to the pool stands exactly at the range's end (the next batch's start)
and keeps what it fetched ahead. A consumer created here polls row tuples
(:mod:`datasource.record_rows`), collected by :class:`datasource.arrow_builder.ArrowBuilder`.

The one task of a streaming batch marked ``records_batch`` writes the batch record
(:mod:`state.protocol.batch_records`) before its first row; the others touch no store.

Missing records:

* below the partition's log start (retention) or past its end (a recreated topic):
  :class:`DataLossError` with ``failOnDataLoss=true``; otherwise a warning, the gap is
  skipped and counted (:attr:`RangeReader.skipped`, logged when the range ends);
* the ranges of a topic whose id is not the one the epoch was planned under (deleted and
  created again since, :mod:`datasource.topic_id_check`): the same, for the whole ranges,
  before the task's first fetch;
* gaps above the log start (compacted records, transaction markers) are normal and skipped.

No progress for ``kafkaConsumer.pollTimeoutMs`` raises :class:`SourceUnavailable` naming
the bootstrap servers.

Timing spans (:mod:`state.profiling`): ``read.client`` (getting the consumer),
``read.fetch`` (the polls of a range), ``read.arrow`` (building record batches) and
``read.batch_record`` (the batch record's write), each with the attributes ``partition``
(the task's index in its batch), ``ranges`` (how many ranges the span covers) and
``records``; the spans of one range add ``range`` and ``created`` (a new consumer), and
``read.client`` adds ``sought``.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, cast

from pyspark.sql.datasource import InputPartition

from datasource import record_rows
from datasource.arrow_builder import ArrowBuilder
from datasource.consumer_pool import (
    POOL,
    ConsumerPool,
    ConsumerSource,
    Lease,
    PoolKey,
    SingleConsumer,
)
from datasource.librdkafka_consumer import CLIENT as LIBRDKAFKA
from datasource.librdkafka_consumer import LibrdkafkaConsumer
from datasource.offsets import OffsetRange, ranges_between, task_ranges
from datasource.options import KafkaSourceOptions
from datasource.topic_id_check import CurrentIds, current_topic_ids, recreated
from state import profiling
from state.errors import DataLossError, RetriableError, SourceUnavailable
from state.kafka_errors import is_retriable_kafka_error, kafka_call, translate_kafka_error
from state.layout import PipelineLayout
from state.protocol.batch_records import write_batch_record
from state.records.source_offset import SourceOffset
from state.spark_task import StreamingTask
from state.stores import StateStore, open_store

log = logging.getLogger(__name__)

ARROW_BATCH_ROWS = 10_000


@dataclass(frozen=True)
class KafkaInputPartition(InputPartition):
    """One Spark task's work: consecutive ranges of an epoch, read one after another.

    ``records_batch`` marks the one partition of a streaming batch that writes the batch
    record (the first; a marker with no ranges when all of the epoch's ranges are empty).
    ``index`` is the partition's position in the batch (for logs and timing spans).
    ``topic_ids`` are the ids of the ranges' topics when the epoch was planned (where the
    broker gives ids): a pooled consumer that read a topic under another id is not used.
    """

    epoch: int
    ranges: tuple[OffsetRange, ...] = ()
    records_batch: bool = False
    index: int = 0
    topic_ids: tuple[tuple[str, str], ...] = ()

    @property
    def records(self) -> int:
        return sum(r.size for r in self.ranges)


def input_partitions(
    epoch: int,
    tasks: list[tuple[OffsetRange, ...]],
    *,
    records_batch: bool,
    topic_ids: Mapping[str, str] | None = None,
) -> list[KafkaInputPartition]:
    """One partition per task; with ``records_batch`` the first one records the batch.
    Each carries the ``topic_ids`` of the topics its ranges read."""
    ids = topic_ids or {}
    return [
        KafkaInputPartition(
            epoch,
            ranges,
            records_batch and i == 0,
            i,
            tuple(sorted((t, ids[t]) for t in {r.topic for r in ranges} if t in ids)),
        )
        for i, ranges in enumerate(tasks)
    ]


def consumer_source(options: KafkaSourceOptions) -> ConsumerSource:
    """The process's pool (configured by ``options``), or a consumer for one task."""
    if options.pool_enabled:
        return POOL.configure(options.pool_capacity, options.pool_idle_timeout_s)
    return SingleConsumer()


def read_partition(  # noqa: PLR0913 - keyword-only task and injectable consumer source
    options: KafkaSourceOptions,
    partition: KafkaInputPartition,
    arrow_schema: Any,
    *,
    task: StreamingTask | None,
    consumer_factory: Callable[..., Any] | None = None,
    source: ConsumerSource | None = None,
    current_ids: CurrentIds | None = None,
) -> Iterator[Any]:
    """The task's ranges as RecordBatches of at most :data:`ARROW_BATCH_ROWS` rows; the
    marked partition of a streaming batch writes the batch record first.

    Before its first fetch, a task whose plan names topic ids compares them with the
    broker's (``current_ids``, by default one Metadata request:
    :mod:`datasource.topic_id_check`): the ranges of a topic recreated since the epoch was
    planned are lost records (:func:`_unless_recreated`), never read.

    The write runs on a thread of its own while the task fetches its first records (the
    store's round trip overlaps the first Kafka fetch); no row is yielded before it is
    written. A marker partition, which reads nothing, writes it in line.
    """
    with profiling.span("read.task", partition=partition.index):
        # (the whole task, including the time Spark spends consuming its batches)
        store = _batch_record_store(options, partition, task)
        batches = _read_ranges(
            options,
            partition,
            arrow_schema,
            consumer_factory=consumer_factory,
            source=source,
            current_ids=current_ids,
        )
        if store is None:
            yield from batches
            return
        assert task is not None and options.pipeline_id is not None
        timer = profiling.StepTimer(on=profiling.enabled())
        with timer.step("overlapped"):
            layout = PipelineLayout(options.pipeline_id)
            write = BatchRecordWrite(store, layout, task, partition.epoch)
            first = next(batches, None)
        # The write's own time hides behind the first fetch; the span is how long the task
        # waited for it after its first rows were there.
        with profiling.span(
            "read.batch_record",
            partition=partition.index,
            ranges=len(partition.ranges),
            records=partition.records,
            overlapped_s=timer.seconds.get("overlapped"),
        ):
            write.wait()
        if first is not None:
            yield first
            yield from batches


def _batch_record_store(
    options: KafkaSourceOptions, partition: KafkaInputPartition, task: StreamingTask | None
) -> StateStore | None:
    """The store the partition writes its batch record to; None if it writes none (not the
    marked partition, not a streaming batch, or a source without a pipeline)."""
    if (
        not partition.records_batch
        or task is None
        or options.store is None
        or options.pipeline_id is None
    ):
        return None
    return open_store(options.store)


class BatchRecordWrite:
    """The batch record's write, on a thread of its own; :meth:`wait` for it to end."""

    def __init__(
        self, store: StateStore, layout: PipelineLayout, task: StreamingTask, epoch: int
    ) -> None:
        self._error: BaseException | None = None
        self._thread = threading.Thread(
            target=self._write,
            args=(store, layout, task, epoch),
            name="gtkafka-batch-record",
            daemon=True,
        )
        self._thread.start()

    def _write(
        self, store: StateStore, layout: PipelineLayout, task: StreamingTask, epoch: int
    ) -> None:
        try:
            write_batch_record(store, layout, task.query_id, task.batch_id, epoch)
        except BaseException as err:  # handed to the task's thread by wait()
            self._error = err

    def wait(self) -> None:
        """Return once the record is written; raise what the write raised."""
        self._thread.join()
        if self._error is not None:
            raise self._error


def _read_ranges(  # noqa: PLR0913 - keyword-only injectable consumers and ids
    options: KafkaSourceOptions,
    partition: KafkaInputPartition,
    arrow_schema: Any,
    *,
    consumer_factory: Callable[..., Any] | None,
    source: ConsumerSource | None,
    current_ids: CurrentIds | None,
) -> Iterator[Any]:
    task = partition.index
    ids = dict(partition.topic_ids)
    ranges = _unless_recreated(
        options,
        partition.epoch,
        [r for r in partition.ranges if r.size > 0],
        ids,
        current_ids or current_topic_ids,
    )
    if not ranges:
        return
    consumers = consumer_source(options) if source is None else source
    builder = ArrowBuilder(arrow_schema, partition.epoch)
    readers = [
        RangeReader(options, r, consumer_factory=consumer_factory, topic_id=ids.get(r.topic))
        for r in ranges
    ]
    # Leases taken before their range is read: with librdkafka, every range's pooled
    # consumer at once, so that those the pool parked fetch side by side (a parked
    # consumer fetches nothing until it is lent; one by one, each range would wait a
    # round trip). kafka-python's consumers fetch only inside a poll: one at a time.
    ahead: list[Lease | None] = [None] * len(readers)
    try:
        if options.client == LIBRDKAFKA and isinstance(consumers, ConsumerPool):
            for i, reader in enumerate(readers):
                ahead[i] = reader.acquire(consumers, task=task)
        for i, reader in enumerate(readers):
            lease, ahead[i] = ahead[i], None
            yield from reader.read_into(builder, consumers, task=task, lease=lease)
        if builder.rows:
            with profiling.span(
                "read.arrow", partition=task, ranges=len(ranges), records=builder.rows
            ):
                batch = builder.flush()
            yield batch
    finally:
        for lease in ahead:
            if lease is not None:  # never read: still sound, where its range starts
                consumers.release(lease, ok=True)
        if isinstance(consumers, SingleConsumer) and source is None:
            consumers.close()


def _unless_recreated(
    options: KafkaSourceOptions,
    epoch: int,
    ranges: list[OffsetRange],
    planned: Mapping[str, str],
    current_ids: CurrentIds,
) -> list[OffsetRange]:
    """``ranges`` without those of topics deleted and created again since the epoch was
    planned under the ids ``planned`` (one lookup of ``current_ids`` for the task's
    topics; none if the plan names no ids). Their records are gone: with
    ``failOnDataLoss=true`` a :class:`DataLossError` naming each such topic, its recorded
    and its current id and the ranges; otherwise a warning, and they are skipped.
    """
    named = {r.topic: planned[r.topic] for r in ranges if r.topic in planned}
    if not named:
        return ranges
    gone = recreated(named, current_ids(options, set(named)))
    if not gone:
        return ranges
    lost = [r for r in ranges if r.topic in gone]
    topics = "; ".join(
        f"topic '{t}' was planned under topic id {named[t]}, the broker now gives it "
        f"topic id {gone[t]} (deleted and created again)"
        for t in sorted(gone)
    )
    what = (
        f"the records of epoch {epoch} in {', '.join(str(r) for r in lost)} are gone from "
        f"Kafka at {options.bootstrap_servers}: {topics}; the same offsets name other "
        "records now"
    )
    if options.fail_on_data_loss:
        raise DataLossError(
            f"{what}. Set failOnDataLoss=false to skip lost records with a warning."
        )
    log.warning(
        "gtkafka: %s; skipping %d lost record(s) (failOnDataLoss=false)",
        what,
        sum(r.size for r in lost),
    )
    return [r for r in ranges if r.topic not in gone]


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


def plan_partitions(
    options: KafkaSourceOptions,
    start: SourceOffset,
    end: SourceOffset,
    *,
    topic_ids: Mapping[str, str] | None = None,
) -> list[InputPartition]:
    """The epoch's tasks (:func:`~datasource.offsets.task_ranges`); the first one writes
    the batch record, and an epoch whose ranges are all empty gets a marker that does.
    Each task carries the ``topic_ids`` of the topics it reads."""
    if start.same_as(end):
        return []
    tasks = task_ranges(
        ranges_between(start.offsets, end.offsets),
        min_partitions=options.min_partitions,
        max_records_per_partition=options.max_records_per_partition,
        min_records_per_task=options.min_records_per_task,
    )
    parts: list[InputPartition] = list(
        input_partitions(start.epoch, tasks, records_batch=True, topic_ids=topic_ids)
    )
    if not parts and start.epoch != end.epoch:
        parts.append(KafkaInputPartition(start.epoch, (), records_batch=True))
    return parts
