"""Dead letters: the optional topic (``errors.deadLetter.topic``): a bundle's dead
letters as messages with their context headers (:func:`topic_messages`), sent once
(:class:`DeadLetterTopic`).

After the file, each refused row is also sent to a Kafka topic, as Kafka Connect's dead
letter queue does, with its context in headers (:data:`CONTEXT_HEADERS`): the row's
``key`` and ``value`` columns as they were when the input has them (binary or string),
else the row as a JSON object. The messages
are a bundle of :class:`~sink.consumers.kafka.kafka_consumer.KafkaTopicConsumer`
(``gtb.bundle``, ``gtb.index``, ``gtb.count`` headers), so they are exactly once the same
way: a bundle the topic holds completely is not sent again, one it holds in part is
completed from its first missing index. The topic belongs to one pipeline, as the
directory does. Its producer's settings, ``errors.deadLetter.kafka.*``, are the kafka
consumer's kind (:func:`sink.consumers.kafka.kafka_options.producer_settings`): checked
when parsed (TLS and SASL included), kept as given (a secret reference unresolved),
resolved where the producer and its tail scan's reader are made.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import pyarrow as pa

from sink.bundle import Bundle
from sink.dead_letters.dead_letter_format import (
    ADDED_COLUMNS,
    BUNDLE_COLUMN,
    COLUMN_COLUMN,
    REASON_COLUMN,
    json_rows,
)
from sink.dead_letters.dead_letter_settings import KAFKA_PREFIX
from sink.faults import FaultInjector
from sink.staging import Staging
from state.records.gt import GT_COLUMN
from state.records.inflight_bundle import StagedPart

H_PIPELINE = "gtb.errors.pipeline"
H_BUNDLE = "gtb.errors.bundle"
H_REASON = "gtb.errors.reason"
H_COLUMN = "gtb.errors.column"
H_TOPIC = "gtb.errors.topic"
H_PARTITION = "gtb.errors.partition"
H_OFFSET = "gtb.errors.offset"
H_EPOCH = "gtb.errors.epoch"
CONTEXT_HEADERS = (
    H_PIPELINE,
    H_BUNDLE,
    H_REASON,
    H_COLUMN,
    H_TOPIC,
    H_PARTITION,
    H_OFFSET,
    H_EPOCH,
)
"""The headers of a dead-letter message, after the row's own ``headers`` (if any):
pipeline, bundle, reason, column (absent when the row as a whole was refused) and, when the
row has a ``gt``, the Kafka record it came from (topic, partition, offset) and its epoch."""

_HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
_TEXT = (pa.binary(), pa.large_binary(), pa.string(), pa.large_string())


def topic_messages(table: pa.Table, pipeline_id: str) -> pa.Table:
    """A bundle's dead-letter rows (as its file holds them) as messages: ``key``, ``value``
    and ``headers`` columns, as
    :class:`~sink.consumers.kafka.kafka_consumer.KafkaTopicConsumer` sends them (no
    ``partition`` column: the producer picks one by key)."""
    names = table.column_names
    inputs = table.select([n for n in names if n not in ADDED_COLUMNS])

    def raw(name: str) -> list[bytes | None] | None:
        if name not in names or table.schema.field(name).type not in _TEXT:
            return None
        column = table.column(name)
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            column = column.cast(pa.binary())
        values: list[bytes | None] = column.to_pylist()
        return values

    keys = raw("key") or [None] * table.num_rows
    values = raw("value")
    if values is None:
        values = [json.dumps(row, separators=(",", ":")).encode() for row in json_rows(inputs)]
    own = (
        table.column("headers").to_pylist()
        if "headers" in names and table.schema.field("headers").type == _HEADER_TYPE
        else [None] * table.num_rows
    )
    gts = table.column(GT_COLUMN).to_pylist() if GT_COLUMN in names else [None] * table.num_rows
    reasons = table.column(REASON_COLUMN).to_pylist()
    columns = table.column(COLUMN_COLUMN).to_pylist()
    bundles = table.column(BUNDLE_COLUMN).to_pylist()
    headers = []
    for i in range(table.num_rows):
        context = [
            (H_PIPELINE, pipeline_id.encode()),
            (H_BUNDLE, str(bundles[i]).encode()),
            (H_REASON, str(reasons[i]).encode()),
        ]
        if columns[i] is not None:
            context.append((H_COLUMN, str(columns[i]).encode()))
        gt = gts[i]
        if gt is not None and None not in gt.values():
            context += [
                (H_TOPIC, str(gt["topic"]).encode()),
                (H_PARTITION, str(gt["partition"]).encode()),
                (H_OFFSET, str(gt["offset"]).encode()),
                (H_EPOCH, str(gt["epoch"]).encode()),
            ]
        headers.append([*(own[i] or []), *({"key": k, "value": v} for k, v in context)])
    return pa.table(
        {
            "key": pa.array(keys, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "headers": pa.array(headers, _HEADER_TYPE),
        }
    )


class _OneTable(Staging):
    """A staging area of one table, the messages of one dead-letter bundle, made when
    first read (a topic that holds them already never needs them)."""

    def __init__(self, table: Callable[[], pa.Table]) -> None:
        self._make = table
        self._table: pa.Table | None = None

    @property
    def root_prefix(self) -> str:
        return "dead-letters/"

    def write_part(self, location: str, table: pa.Table) -> int:
        raise NotImplementedError("the dead-letter messages are made, never staged")

    def read_part(self, location: str) -> pa.Table:
        if self._table is None:
            self._table = self._make()
        return self._table

    def list(self, prefix: str) -> list[str]:
        return []

    def delete(self, location: str) -> None:
        """Nothing to delete: the table is in memory."""


def dead_letter_transactional_id(pipeline_id: str) -> str:
    """The ``transactional.id`` of the dead-letter topic's producers: the pipeline's own,
    but not that of its kafka consumer (``gtbarrier.<pipeline>``), which it would fence."""
    return f"gtbarrier.{pipeline_id}.dead-letters"


@dataclass(frozen=True)
class DeadLetterTopic:
    """``errors.deadLetter.topic`` on ``bootstrap``, with producer settings ``config``
    (``errors.deadLetter.kafka.*`` as parsed: references resolved only in :meth:`ensure`,
    where the clients are made)."""

    bootstrap: str
    topic: str
    config: tuple[tuple[str, str], ...] = ()
    ack_timeout: float = 30.0

    def describe(self) -> str:
        return f"dead-letter topic {self.topic}@{self.bootstrap}"

    def ensure(self, pipeline_id: str, bundle_id: int, rows: Callable[[], pa.Table]) -> bool:
        """Send bundle ``bundle_id``'s dead letters (``rows``, as the file holds them; read
        only if needed) unless the topic holds them all; whether anything was sent.

        Through :class:`~sink.consumers.kafka.kafka_consumer.KafkaTopicConsumer`, whose
        producer is transactional and whose tail scan first fences older producers of the
        same ``transactional.id``: a bundle the topic holds completely is not sent again, one
        it holds in part is completed from its first missing index."""
        from sink.consumers.kafka.kafka_consumer import KafkaTopicConsumer
        from sink.consumers.kafka.kafka_options import KafkaTopicSettings

        config = dict(self.config)
        config.setdefault("transactional.id", dead_letter_transactional_id(pipeline_id))
        settings = KafkaTopicSettings(
            bootstrap=self.bootstrap,
            topic=self.topic,
            config=tuple(sorted(config.items())),
            option_prefix=KAFKA_PREFIX,
        )
        staged = _OneTable(lambda: topic_messages(rows(), pipeline_id))
        sender = KafkaTopicConsumer(
            settings,
            staged,
            FaultInjector(),  # the barrier's faults name the bundle's own steps, not these
            ack_timeout=self.ack_timeout,
            pipeline_id=pipeline_id,
        )
        try:
            last = sender.last_bundle()
            if last is not None and last.bundle_id >= bundle_id:
                return False
            count = staged.read_part("dead-letters").num_rows
            bundle = Bundle(
                pipeline_id=pipeline_id,
                epoch=bundle_id,
                query_id="",
                batch_id=0,
                parts=(StagedPart("dead-letters", count, 0),),
                has_gt=False,
                ordered=True,
            )
            sender.deliver(bundle, redelivery=True)
        finally:
            sender.close()
        return True
