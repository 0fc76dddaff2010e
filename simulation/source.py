"""The source as the simulator runs it: the product's stream reader over a simulated broker.

Each query run makes one :class:`~datasource.stream_reader.GlobalTimeKafkaStreamReader`
(as Spark makes one per query start) and calls its ``initialOffset``, ``latestOffset``
(with the reader's ``getDefaultReadLimit()``, as Spark passes it) and, after every
batch, ``commit``. Only the broker is the simulator's: :class:`SimOffsetReader`
answers from the fixed input log (no client, no network), so the reader's planning, its
rate limit (``maxOffsetsPerTrigger``), its epoch log records and its re-use of a recorded
epoch are the product's.

A driver's epoch size is ``SimConfig.max_per_partition`` records a partition; the reader
takes it as ``maxOffsetsPerTrigger`` = that many times the partitions. Every partition of
the input has the same length and every epoch starts all of them at the same offset, so
the product's split of the allowance gives each partition that many records.

:class:`PlanCheckedEpochLog` is the product's epoch log, which also hands every end the
reader asks it to record (the planning decision, before the first writer wins) to a check
(``the source plans within its limits``, :mod:`simulation.invariants`).

The broker (:class:`SimBroker`) holds the topic and, on a pipeline whose topic may be
recreated (``SimConfig.recreate``), the topic created again under a new id. A read task
(:func:`read_ranges`) plans the epoch's tasks as the product's reader does (its
``partitions``: the ranges and the topic ids recorded with the epoch) and runs, for each
task, the product's check against the broker's current ids
(``partition_reader._unless_recreated``) before it reads: the ranges it keeps are read
from the topic as it is now.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from pyspark.sql.types import StructType

from datasource import partition_reader, stream_reader
from datasource.offset_reader import ClusterView, OffsetReader
from datasource.options import KafkaSourceOptions
from datasource.schema import source_schema
from simulation.query import TOPIC, InputLog, Record
from state.layout import PipelineLayout
from state.protocol.epoch_log import EpochLog
from state.records.source_offset import Frontier, SourceOffset, TopicPartitionKey
from state.stores import StateStore

#: The simulated topic's id by incarnation, as a Metadata v10+ answer carries it: the
#: topic, then the topic deleted and created again.
TOPIC_IDS = ("00000000-0000-4000-8000-000000000001", "00000000-0000-4000-8000-000000000002")

#: What the reader is told of the store: a name only (the epoch log it is given is the
#: simulation's store view; the reader opens no store of its own).
STORE_URI = "memory://simulation-source"

#: Checks a planned epoch: (start, end asked to be recorded, the reader's max rows, the
#: topic ids it was planned under).
PlanCheck = Callable[[SourceOffset, SourceOffset, int, Mapping[str, str]], None]


class SimBroker:
    """The topic as the broker holds it now: ``logs[0]``, then, once :meth:`recreate` ran,
    ``logs[1]`` under a new id (the old topic's records are gone)."""

    def __init__(self, logs: tuple[InputLog, ...]) -> None:
        self.logs = logs
        self.incarnation = 0

    @property
    def log(self) -> InputLog:
        return self.logs[self.incarnation]

    @property
    def topic_id(self) -> str:
        return TOPIC_IDS[self.incarnation]

    def recreate(self) -> None:
        """The topic is deleted and created again (new id, new records)."""
        assert self.incarnation + 1 < len(self.logs), "the topic is recreated once"
        self.incarnation += 1

    def log_under(self, ids: Mapping[str, str] | None) -> InputLog:
        """The topic the id among ``ids`` names (no id: the first)."""
        tid = (ids or {}).get(TOPIC)
        return self.logs[TOPIC_IDS.index(tid)] if tid in TOPIC_IDS else self.logs[0]

    def current_ids(
        self, options: KafkaSourceOptions, topics: Collection[str]
    ) -> Mapping[str, str]:
        """The broker's current topic ids (``topic_id_check.CurrentIds``'s contract)."""
        return {TOPIC: self.topic_id} if TOPIC in topics else {}


@functools.cache
def source_options(
    pipeline_id: str, partitions: int, per_partition: int, retained: int, fail_on_data_loss: bool
) -> KafkaSourceOptions:
    """The source's options for a driver taking ``per_partition`` records a partition
    (``maxOffsetsPerTrigger``), parsed by the product (``KafkaSourceOptions.parse``).

    ``retained`` is ``state.epochsRetained`` (0: the simulation does not prune, and the
    product's default is left); ``failOnDataLoss`` is set only when false (the product's
    default is true)."""
    raw = {
        "kafka.bootstrap.servers": "simulated-broker:9092",
        "subscribe": TOPIC,
        "startingOffsets": "earliest",
        "maxOffsetsPerTrigger": str(per_partition * partitions),
        "pipeline.id": pipeline_id,
        "state.uri": STORE_URI,
    }
    if retained:
        raw["state.epochsRetained"] = str(retained)
    if not fail_on_data_loss:
        raw["failOnDataLoss"] = "false"
    return KafkaSourceOptions.parse(raw)


class SimOffsetReader(OffsetReader):
    """The broker's answers about the topic as it is now: every partition from 0 to its
    end, its topic id, every end certain (no Tansu defect, no lagging leader). It has no
    client: anything the reader asked beyond these answers would fail."""

    def __init__(
        self, options: KafkaSourceOptions, broker: SimBroker, clock: Callable[[], float]
    ) -> None:
        super().__init__(options, clock=clock)
        self.broker = broker

    @property
    def log(self) -> InputLog:
        return self.broker.log

    def _client(self) -> Any:
        raise AssertionError("the simulated broker has no Kafka client")

    def _partitions(self) -> dict[str, set[int]]:
        return {TOPIC: set(range(self.log.partitions))}

    def topic_partitions(self) -> dict[str, set[int]]:
        return self._partitions()

    @property
    def topic_ids(self) -> dict[str, str]:
        return {TOPIC: self.broker.topic_id}

    def earliest(self, tps: Iterable[TopicPartitionKey]) -> Frontier:
        return dict.fromkeys(tps, 0)

    def latest(self, tps: Iterable[TopicPartitionKey]) -> Frontier:
        end = self.log.end()
        return {tp: end[tp] for tp in tps}

    def young_view(self) -> ClusterView | None:
        return None  # every planning asks the broker: its answer never changes

    def view(self, *, fresh: bool = False, verify: bool = False) -> ClusterView:
        return ClusterView(
            self._clock(),
            self._partitions(),
            self.log.end(),
            {TOPIC: self.broker.topic_id},
            frozenset(),
            verified=True,
        )

    def close(self) -> None:
        pass


class PlanCheckedEpochLog(EpochLog):
    """The product's epoch log; every end a reader asks it to record is checked first."""

    def __init__(
        self, store: StateStore, layout: PipelineLayout, check: PlanCheck, max_rows: int
    ) -> None:
        super().__init__(store, layout)
        self.check = check
        self.max_rows = max_rows

    def record(
        self,
        start: SourceOffset,
        end: SourceOffset,
        topic_ids: Mapping[str, str] | None = None,
    ) -> SourceOffset:
        self.check(start, end, self.max_rows, topic_ids or {})
        return super().record(start, end, topic_ids)


@functools.cache
def _schema() -> StructType:
    return source_schema(False)


def open_reader(
    options: KafkaSourceOptions,
    broker: SimBroker,
    epoch_log: EpochLog,
    clock: Callable[[], float],
    sleep: Callable[[float], None],
) -> stream_reader.GlobalTimeKafkaStreamReader:
    """The product's stream reader (looked up through its module now) over the simulated
    broker and ``epoch_log``, on the simulation's clock and sleep, pruning in ``commit``
    itself (``prune_in_background=False``)."""
    return stream_reader.GlobalTimeKafkaStreamReader(
        options,
        _schema(),
        offset_reader=SimOffsetReader(options, broker, clock),
        epoch_log=epoch_log,
        clock=clock,
        sleep=sleep,
        prune_in_background=False,
    )


def read_ranges(
    reader: stream_reader.GlobalTimeKafkaStreamReader,
    broker: SimBroker,
    start: SourceOffset,
    end: SourceOffset,
) -> tuple[list[Record], bool]:
    """What the read tasks of the epoch from ``start`` to ``end`` read: the reader's own
    ``partitions`` (the ranges, and the topic ids recorded with the epoch), each task's
    ranges checked by the product (``partition_reader._unless_recreated``, looked up
    through its module now) against the broker's current ids, the ranges it keeps read
    from the topic as it is now. Also whether the check dropped a range that has records
    (``failOnDataLoss=false``); with true it raises :class:`~state.errors.DataLossError`."""
    kept: list[tuple[int, int, int]] = []
    dropped = False
    for task in reader.partitions(start.to_json(), end.to_json()):
        assert isinstance(task, partition_reader.KafkaInputPartition)
        ranges = [r for r in task.ranges if r.size > 0]
        checked = partition_reader._unless_recreated(
            reader.options, task.epoch, ranges, dict(task.topic_ids), broker.current_ids
        )
        dropped = dropped or len(checked) < len(ranges)
        kept.extend((r.partition, r.from_offset, r.until_offset) for r in checked)
    return broker.log.in_ranges(kept), dropped
