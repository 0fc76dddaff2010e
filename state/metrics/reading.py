"""What one scrape reads of a pipeline: the store's facts, and what a process adds to them.

:class:`StoreFacts` is what the state store holds (the barrier state, the epoch log up to
the barrier's progress, the batch records); epoch and batch records never change once
written, so a :class:`StateReader` reads each one once and only lists the new ones
afterwards. :class:`PipelineReading` embeds those facts and adds what the store does not
hold: the resume point (ZooKeeper's, or the store's), Kafka's end offsets and the lag
against them (:mod:`state.metrics.source_lag`), the dead-letter rows, and what the driver
process observed (:class:`DriverObservations`, :class:`SnapshotCounts`). The driver's endpoint
(:mod:`state.coordinator.driver_metrics`) and ``gtbarrier exporter`` each build one per
scrape, the facts from a :class:`StateReader`; :mod:`state.metrics.families` turns it into
metric families.

A metric computed from the store's records reads them here (a field of
:class:`StoreFacts`, filled by :meth:`StateReader.read`), so both endpoints serve it
without a line of their own. Needs no ``prometheus_client``.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from state.lag import Lag
from state.layout import PipelineLayout
from state.protocol.barrier_state import load_barrier_state
from state.protocol.batch_records import batch_record_keys, read_batch_record_at
from state.protocol.epoch_log import EpochLog
from state.records.barrier import BarrierState
from state.records.floor import FloorRecord
from state.records.resume_point import ResumePoint
from state.records.source_offset import Frontier, TopicPartitionKey
from state.stores import StateStore

__all__ = [
    "MICROBATCH_BUCKETS",
    "DriverObservations",
    "DurationHistogram",
    "EpochFacts",
    "PipelineReading",
    "SnapshotCounts",
    "StateReader",
    "StoreFacts",
    "offsets_behind",
]

# Upper bounds (seconds) of the micro-batch duration histogram's buckets; +Inf is added.
MICROBATCH_BUCKETS: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


@dataclass(frozen=True)
class EpochFacts:
    """What the metrics need of one recorded epoch: its number and how many Kafka records
    its offset ranges hold (0: the epoch read nothing, so it made no bundle)."""

    epoch: int
    records: int


@dataclass(frozen=True)
class StoreFacts:
    """What the state store holds for the metrics (the defaults: a store where nothing
    was written).

    ``barrier``: None if it was never written. ``epochs``: the recorded epochs at or
    below the barrier's progress (``GT_last``, or a later epoch committed with an empty
    bundle). ``batches_per_epoch``: per epoch, how many batch records read it.
    ``planned``: where the newest planned epoch ends (the source's start before any), per
    partition; None before the source started. ``floor``: where the pruned epoch log
    begins (None: nothing pruned); ``epochs`` and ``batches_per_epoch`` hold only what
    lies at or above it, the floor's counts the rest. ``planned_epoch``: the newest
    recorded epoch (None: none).
    """

    barrier: BarrierState | None = None
    epochs: tuple[EpochFacts, ...] = ()
    batches_per_epoch: Mapping[int, int] = field(default_factory=dict)
    planned: Frontier | None = None
    floor: FloorRecord | None = None
    planned_epoch: int | None = None


class StateReader:
    """Reads :class:`StoreFacts` from ``store``; immutable records are read once."""

    def __init__(self, store: StateStore, layout: PipelineLayout) -> None:
        self.store = store
        self.layout = layout
        self._epochs: dict[int, tuple[EpochFacts, Frontier]] = {}
        self._batches: dict[str, int] = {}

    def read(self) -> StoreFacts:
        """The store's facts now (raises the store's errors)."""
        held = load_barrier_state(self.store, self.layout)
        state, version = held.state, held.version
        epoch_log = EpochLog(self.store, self.layout)
        floor = epoch_log.floor()
        lowest = 0 if floor is None else floor.epoch
        # below the floor: counted by the floor, and no longer remembered here
        self._epochs = {n: facts for n, facts in self._epochs.items() if n >= lowest}
        self._batches = {k: e for k, e in self._batches.items() if e >= lowest}
        numbers = [n for n in epoch_log.epoch_numbers() if n >= lowest]
        unread = epoch_log.read_epochs(n for n in numbers if n not in self._epochs)
        for n, record in unread.items():
            start, end = dict(record.start.offsets), dict(record.end.offsets)
            self._epochs[n] = (EpochFacts(n, Lag.between(start, end).total), end)
        keys = batch_record_keys(self.store, self.layout)
        for key in keys:
            if key not in self._batches:
                batch = read_batch_record_at(self.store, key)
                if batch is not None and batch.epoch >= lowest:
                    self._batches[key] = batch.epoch
        present = set(keys)
        per_epoch = Counter(e for k, e in self._batches.items() if k in present)
        if floor is not None and floor.segments:
            for batch in epoch_log.compacted_batches(floor):
                key = self.layout.batch(batch.query_id, batch.batch_id)
                if key not in present and batch.epoch >= lowest:
                    per_epoch[batch.epoch] += 1
        known = [n for n in numbers if n in self._epochs]
        planned: Frontier | None
        if known:
            planned = self._epochs[known[-1]][1]
        else:
            origin = epoch_log.start()
            planned = None if origin is None else dict(origin.offsets)
        return StoreFacts(
            barrier=None if version is None else state,
            epochs=tuple(self._epochs[n][0] for n in known if n <= state.progress),
            batches_per_epoch=dict(per_epoch),
            planned=planned,
            floor=floor,
            planned_epoch=max(numbers) if numbers else None,
        )


@dataclass(frozen=True)
class DurationHistogram:
    """Cumulative bucket counts (``le`` -> count, the last one ``+Inf``), count and sum."""

    buckets: tuple[tuple[str, int], ...]
    count: int
    total: float


class DriverObservations:
    """What the driver process sees of its query, batch by batch (thread-safe).

    Per process by nature: Spark hands each completed micro-batch's progress to the
    driver once, and a restarted driver starts again from nothing. It holds the newest
    lag the source reported (Kafka's latest offsets against the batch's end) and the
    durations of the micro-batches that read rows.
    """

    def __init__(self, bounds: Sequence[float] = MICROBATCH_BUCKETS) -> None:
        self._lock = threading.Lock()
        self._bounds = tuple(sorted(bounds))
        self._counts = [0] * (len(self._bounds) + 1)
        self._sum = 0.0
        self._behind: dict[TopicPartitionKey, int] | None = None

    def observe_batch(
        self,
        *,
        rows: int,
        seconds: float,
        end: Mapping[TopicPartitionKey, int] | None,
        latest: Mapping[TopicPartitionKey, int] | None,
    ) -> None:
        """One completed batch: ``seconds`` is observed if it read rows; the lag is
        ``latest - end`` per partition of ``end`` (never below 0) when both are known."""
        with self._lock:
            if rows > 0 and math.isfinite(seconds) and seconds >= 0:
                index = next(
                    (i for i, b in enumerate(self._bounds) if seconds <= b), len(self._bounds)
                )
                self._counts[index] += 1
                self._sum += seconds
            if end is not None and latest is not None:
                self._behind = offsets_behind(end, latest)

    def histogram(self) -> DurationHistogram:
        """The micro-batch durations observed so far, cumulative as Prometheus shows them."""
        with self._lock:
            counts, total = list(self._counts), self._sum
        cumulative: list[tuple[str, int]] = []
        running = 0
        for bound, n in zip((*self._bounds, math.inf), counts, strict=True):
            running += n
            cumulative.append(("+Inf" if math.isinf(bound) else repr(bound), running))
        return DurationHistogram(tuple(cumulative), running, total)

    def behind(self) -> dict[TopicPartitionKey, int] | None:
        """The newest lag reported (None: none yet)."""
        with self._lock:
            return None if self._behind is None else dict(self._behind)


def offsets_behind(
    position: Mapping[TopicPartitionKey, int], latest: Mapping[TopicPartitionKey, int]
) -> dict[TopicPartitionKey, int]:
    """``latest - position`` per partition in both, never below 0 (the source's lag)."""
    return dict(Lag.between(position, latest).behind)


@dataclass(frozen=True)
class SnapshotCounts:
    """Snapshots this driver process accepted and abandoned (per process)."""

    accepted: int
    abandoned: int


@dataclass(frozen=True)
class PipelineReading:
    """What one scrape read of pipeline ``pipeline``: the store's ``facts``, and beside
    them what the store does not hold (None: not read, or not there).

    ``resume``: the resume point. ``behind``: offsets behind Kafka's end per partition;
    ``ends``: Kafka's end offsets read at the scrape (their rate is the input rate).
    ``dead_letter_rows``: rows in the pipeline's dead-letter files. ``microbatches`` (the
    durations of the micro-batches that read rows) and ``snapshots``: what the driver
    process observed. ``errors``: the type names of the errors that kept a part out of
    this reading (Kafka that did not answer: no ``behind`` and no ``ends``); the scrape
    counts them and shows ``gtbarrier_up`` 0, serving what was read.
    """

    pipeline: str
    facts: StoreFacts = field(default_factory=StoreFacts)
    resume: ResumePoint | None = None
    behind: Mapping[TopicPartitionKey, int] | None = None
    ends: Mapping[TopicPartitionKey, int] | None = None
    dead_letter_rows: int | None = None
    microbatches: DurationHistogram | None = None
    snapshots: SnapshotCounts | None = None
    errors: tuple[str, ...] = ()
