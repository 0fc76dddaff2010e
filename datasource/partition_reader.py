"""Executor side: read the offset ranges of one Spark task into Arrow record batches.

A task reads its ranges one after another, each exactly ``[from, until)``, by a
:class:`~datasource.range_reader.RangeReader` (the broker loop: positioning, polls, gaps,
lost records). Consumers come from the Python worker's pool
(:mod:`datasource.consumer_pool`): nothing unpicklable ever sits on the reader, and a
consumer that already stands at a range's start is used without a seek. A consumer created
here polls row tuples (:mod:`datasource.record_rows`), collected by
:class:`datasource.arrow_builder.ArrowBuilder`.

The one task of a streaming batch marked ``records_batch`` writes the batch record
(:mod:`state.protocol.batch_records`) before its first row; the others touch no store.

Before its first fetch, a task compares the ids its epoch was planned under with the
broker's (:mod:`datasource.topic_id_check`): the ranges of a topic deleted and created
again since are lost, a :class:`DataLossError` with ``failOnDataLoss=true``, otherwise a
warning and skipped whole. Records missing inside a range are the range reader's.

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
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition

from datasource.arrow_builder import ArrowBuilder
from datasource.consumer_pool import (
    POOL,
    ConsumerPool,
    ConsumerSource,
    Lease,
    SingleConsumer,
)
from datasource.librdkafka_consumer import CLIENT as LIBRDKAFKA
from datasource.offsets import OffsetRange, ranges_between, task_ranges
from datasource.options import KafkaSourceOptions
from datasource.range_reader import RangeReader
from datasource.topic_id_check import CurrentIds, current_topic_ids, recreated
from state import profiling
from state.errors import DataLossError
from state.layout import PipelineLayout
from state.protocol.batch_records import write_batch_record
from state.records.source_offset import SourceOffset
from state.spark_task import StreamingTask
from state.stores import StateStore, open_store

log = logging.getLogger(__name__)


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
    """The task's ranges as RecordBatches of at most
    :data:`~datasource.range_reader.ARROW_BATCH_ROWS` rows; the marked partition of a
    streaming batch writes the batch record first.

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
