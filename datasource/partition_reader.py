"""Executor side: read one offset range of one partition into Arrow record batches.

Mirrors Spark's ``KafkaDataConsumer``: a kafka-python consumer is created inside
``read()`` (nothing unpicklable ever sits on the reader), assigned to the partition
(no group), sought to the range's start, and polled until the range's end offset is
reached; termination never depends on an empty poll. Exactly ``[from, until)`` is read.

Missing records:

* below the partition's log start (retention) or past its end (a recreated topic):
  :class:`DataLossError` with ``failOnDataLoss=true``; otherwise a warning, the gap is
  skipped and counted (:attr:`RangeReader.skipped`, logged when the range ends);
* gaps above the log start (compacted records, transaction markers) are normal and skipped.

No progress for ``kafkaConsumer.pollTimeoutMs`` raises :class:`SourceUnavailable` naming
the bootstrap servers.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import InputPartition

from datasource.batch_record import BatchContext, write_batch_record
from datasource.offsets import OffsetRange
from datasource.options import KafkaSourceOptions
from state.errors import DataLossError, SourceUnavailable
from state.kafka_errors import is_retriable_kafka_error, kafka_call, translate_kafka_error
from state.layout import PipelineLayout
from state.records.gt import arrow_array as gt_array
from state.store import open_store

log = logging.getLogger(__name__)

ARROW_BATCH_ROWS = 10_000


@dataclass(frozen=True)
class KafkaInputPartition(InputPartition):
    """One Spark task's work: a range of an epoch, or a marker (``range is None``).

    A marker partition reads nothing; it exists so that every data batch writes its batch
    record even when all of its Kafka ranges are empty.
    """

    epoch: int
    range: OffsetRange | None


def read_partition(
    options: KafkaSourceOptions,
    partition: KafkaInputPartition,
    arrow_schema: Any,
    *,
    context: BatchContext | None,
    consumer_factory: Callable[..., Any] | None = None,
) -> Iterator[Any]:
    """Write the batch record (streaming only), then yield the range as RecordBatches."""
    if context is not None and options.store is not None and options.pipeline_id is not None:
        write_batch_record(
            open_store(options.store), PipelineLayout(options.pipeline_id), context, partition.epoch
        )
    if partition.range is None or partition.range.size == 0:
        return
    reader = RangeReader(options, partition.range, consumer_factory=consumer_factory)
    yield from reader.batches(partition.epoch, arrow_schema)


class RangeReader:
    """Reads ``[from, until)`` of one topic-partition."""

    def __init__(
        self,
        options: KafkaSourceOptions,
        range_: OffsetRange,
        *,
        consumer_factory: Callable[..., Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.options = options
        self.range = range_
        self.skipped = 0
        self.rows = 0
        self._factory = consumer_factory
        self._clock = clock

    def _consumer(self) -> Any:
        factory = self._factory
        if factory is None:
            from kafka import KafkaConsumer

            factory = KafkaConsumer
        config = self.options.consumer_config()
        return kafka_call(
            self.options.bootstrap_servers,
            f"connecting to read {self.range}",
            lambda: factory(**config),
        )

    def batches(self, epoch: int, arrow_schema: Any) -> Iterator[Any]:
        import kafka.errors as kerr
        from kafka import TopicPartition

        r = self.range
        builder = ArrowBuilder(arrow_schema, epoch, r.topic, r.partition)
        consumer = self._consumer()
        tp = TopicPartition(r.topic, r.partition)
        poll_timeout = self.options.poll_timeout_ms / 1000.0
        try:
            consumer.assign([tp])
            consumer.seek(tp, r.from_offset)
            next_offset = r.from_offset
            last_progress = self._clock()
            while next_offset < r.until_offset:
                try:
                    polled = consumer.poll(timeout_ms=min(1_000, self.options.poll_timeout_ms))
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
                first = records[0].offset
                if first > next_offset:
                    self._gap(consumer, next_offset, first)
                if records[-1].offset >= r.until_offset:
                    records = [rec for rec in records if rec.offset < r.until_offset]
                    next_offset = r.until_offset
                if records:
                    builder.add(records)
                    next_offset = max(next_offset, records[-1].offset + 1)
                    while builder.rows >= ARROW_BATCH_ROWS:
                        self.rows += ARROW_BATCH_ROWS
                        yield builder.flush(ARROW_BATCH_ROWS)
            if builder.rows:
                self.rows += builder.rows
                yield builder.flush()
        finally:
            consumer.close()
        if self.skipped:
            log.warning(
                "gtkafka: skipped %d lost record(s) of %s (failOnDataLoss=false); read %d",
                self.skipped,
                r,
                self.rows,
            )

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


class ArrowBuilder:
    """Collects ConsumerRecords column by column and emits Arrow RecordBatches."""

    def __init__(self, arrow_schema: Any, epoch: int, topic: str, partition: int) -> None:
        self.schema = arrow_schema
        self.epoch = epoch
        self.topic = topic
        self.partition = partition
        self.with_headers = "headers" in arrow_schema.names
        self._reset()

    def _reset(self) -> None:
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.timestamp_types: list[int] = []
        self.headers: list[list[tuple[str, bytes | None]]] = []

    @property
    def rows(self) -> int:
        return len(self.offsets)

    def add(self, records: list[Any]) -> None:
        self.keys.extend([r.key for r in records])
        self.values.extend([r.value for r in records])
        self.offsets.extend([r.offset for r in records])
        self.timestamps.extend([r.timestamp for r in records])
        self.timestamp_types.extend([r.timestamp_type for r in records])
        if self.with_headers:
            self.headers.extend([r.headers or [] for r in records])

    def flush(self, limit: int | None = None) -> Any:
        """A RecordBatch of the first ``limit`` rows collected (all by default)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        n = self.rows if limit is None else min(limit, self.rows)
        taken = self._take(n)
        schema = self.schema
        offsets = pa.array(taken.offsets, pa.int64())
        topic = pa.array([self.topic] * n, pa.string())
        partition = pa.array([self.partition] * n, pa.int32())
        millis = pa.array(taken.timestamps, pa.int64())
        timestamps = pc.multiply(millis, 1000).cast(schema.field("timestamp").type)
        gt = gt_array(pa.array([self.epoch] * n, pa.int64()), topic, partition, offsets)
        columns = [
            pa.array(taken.keys, pa.binary()),
            pa.array(taken.values, pa.binary()),
            topic,
            partition,
            offsets,
            timestamps,
            pa.array(taken.timestamp_types, pa.int32()),
        ]
        if self.with_headers:
            columns.append(pa.array(taken.headers, schema.field("headers").type))
        columns.append(gt)
        return pa.RecordBatch.from_arrays(columns, schema=schema)

    def _take(self, n: int) -> ArrowBuilder:
        """Move the first ``n`` rows into a new builder (which is returned)."""
        taken = ArrowBuilder.__new__(ArrowBuilder)
        if n == self.rows:
            taken.__dict__.update(self.__dict__)
            self._reset()
            return taken
        taken.keys, self.keys = self.keys[:n], self.keys[n:]
        taken.values, self.values = self.values[:n], self.values[n:]
        taken.offsets, self.offsets = self.offsets[:n], self.offsets[n:]
        taken.timestamps, self.timestamps = self.timestamps[:n], self.timestamps[n:]
        taken.timestamp_types, self.timestamp_types = (
            self.timestamp_types[:n],
            self.timestamp_types[n:],
        )
        taken.headers, self.headers = self.headers[:n], self.headers[n:]
        return taken
