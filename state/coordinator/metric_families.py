"""The metric families of one pipeline, computed from what one scrape read.

Pure: :func:`metric_families` turns a :class:`PipelineReading` (the stored records, the
resume point, the source's lag, the dead letters, and what the driver process observed)
into Prometheus metric families; the reading is done elsewhere
(:mod:`state.coordinator.metrics_server`). Nothing here is a counter kept in memory that a
restart would lose, except what :class:`DriverObservations` holds, which is per process
by nature (each such metric says so in its HELP).

A metric whose source was not read (no ``--bootstrap``, no dead-letter path, no resume
point, a process that observes nothing) is left out, not shown as 0.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from prometheus_client.core import (
    Metric,
)

from state.coordinator.metric_definitions import (
    BUNDLE_DELIVERY_SECONDS,
    BUNDLES_DELIVERED,
    DEADLETTER_ROWS,
    DELIVERED_EPOCH,
    GT_LAST,
    INFLIGHT_AGE,
    INFLIGHT_EPOCH,
    LAST_PROGRESS,
    METRICS,
    OFFSETS_BEHIND,
    OWNER_GENERATION,
    PLANNED_EPOCH,
    REPLAYED_DROPPED,
    SCRAPE_ERRORS,
    SCRAPE_SERIES,
    SERIES_NAMES,
    SNAPSHOT_AGE,
    SNAPSHOTS,
    SOURCE_END,
    UP,
    MetricDef,
)
from state.lag import Lag
from state.records.barrier import BarrierState
from state.records.floor import FloorRecord
from state.records.resume_point import ResumePoint
from state.records.source_offset import TopicPartitionKey

# Upper bounds (seconds) of the delivery histogram's buckets; +Inf is added.
DELIVERY_BUCKETS: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

__all__ = [
    "DELIVERY_BUCKETS",
    "METRICS",
    "SCRAPE_SERIES",
    "SERIES_NAMES",
    "DeliveryHistogram",
    "DriverObservations",
    "EpochFacts",
    "PipelineReading",
    "ProgressTimes",
    "ProgressWatch",
    "SnapshotCounts",
    "bundles_delivered",
    "metric_families",
    "offsets_behind",
    "replays_dropped",
    "scrape_families",
]


@dataclass(frozen=True)
class EpochFacts:
    """What the metrics need of one recorded epoch: its number and how many Kafka records
    its offset ranges hold (0: the epoch read nothing, so it made no bundle)."""

    epoch: int
    records: int


@dataclass(frozen=True)
class DeliveryHistogram:
    """Cumulative bucket counts (``le`` -> count, the last one ``+Inf``), count and sum."""

    buckets: tuple[tuple[str, int], ...]
    count: int
    total: float


class DriverObservations:
    """What the driver process sees of its query, batch by batch (thread-safe).

    Per process by nature: Spark hands each completed micro-batch's progress to the
    driver once, and a restarted driver starts again from nothing. It holds the newest
    lag the source reported (Kafka's latest offsets against the batch's end) and the
    durations of the batches that read rows.
    """

    def __init__(self, bounds: Sequence[float] = DELIVERY_BUCKETS) -> None:
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

    def histogram(self) -> DeliveryHistogram:
        with self._lock:
            counts, total = list(self._counts), self._sum
        cumulative: list[tuple[str, int]] = []
        running = 0
        for bound, n in zip((*self._bounds, math.inf), counts, strict=True):
            running += n
            cumulative.append(("+Inf" if math.isinf(bound) else repr(bound), running))
        return DeliveryHistogram(tuple(cumulative), running, total)

    def behind(self) -> dict[TopicPartitionKey, int] | None:
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
    """What one scrape read of pipeline ``pipeline`` (None: not read, or not there).

    ``barrier``: the barrier state (None: never written). ``epochs``: the recorded
    epochs at or below the barrier's progress (``GT_last``, or a later epoch committed
    with an empty bundle). ``batches_per_epoch``: per epoch, how many batch
    records read it. ``floor``: where the pruned epoch log begins; ``epochs`` and
    ``batches_per_epoch`` then cover only what lies at or above it, and the floor's
    counts what lay below. ``resume``: the resume point. ``behind``: offsets behind Kafka's end per
    partition; ``ends``: Kafka's end offsets read at the scrape (their rate is the input
    rate). ``planned_epoch``: the newest epoch the source recorded (None: none yet).
    ``dead_letter_rows``: rows in the pipeline's dead-letter files. ``delivery`` and
    ``snapshots``: what the driver process observed.
    """

    pipeline: str
    barrier: BarrierState | None = None
    epochs: Sequence[EpochFacts] | None = None
    batches_per_epoch: Mapping[int, int] | None = None
    floor: FloorRecord | None = None
    resume: ResumePoint | None = None
    behind: Mapping[TopicPartitionKey, int] | None = None
    dead_letter_rows: int | None = None
    delivery: DeliveryHistogram | None = None
    snapshots: SnapshotCounts | None = None
    planned_epoch: int | None = None
    ends: Mapping[TopicPartitionKey, int] | None = None


def bundles_delivered(
    barrier: BarrierState, epochs: Iterable[EpochFacts], floor: FloorRecord | None = None
) -> int:
    """Bundles the consumer acknowledged: the epochs at or below the barrier's progress
    (``GT_last``, or a later epoch committed with an empty bundle:
    :attr:`~state.records.barrier.BarrierState.progress`) that read records (an epoch
    that read nothing makes no bundle; the pruned ones are counted by the ``floor``, which
    may be above ``GT_last``), less those an operator skipped as lost."""
    made = sum(1 for e in epochs if e.epoch <= barrier.progress and e.records > 0)
    pruned = 0 if floor is None else floor.epochs_with_records
    skipped = sum(1 for s in barrier.skipped if s.bundle_id <= barrier.gt_last)
    return max(0, pruned + made - skipped)


def replays_dropped(
    progress: int, batches_per_epoch: Mapping[int, int], floor: FloorRecord | None = None
) -> int:
    """Batches that read an epoch at or below the barrier's ``progress`` (as for
    :func:`bundles_delivered`) which an earlier batch had read: the barrier dropped their
    bundles (the first batch of each epoch committed it); those of pruned epochs are
    counted by the ``floor``."""
    pruned = 0 if floor is None else floor.replays_dropped
    return pruned + sum(
        max(0, n - 1) for epoch, n in batches_per_epoch.items() if epoch <= progress
    )


@dataclass(frozen=True)
class ProgressTimes:
    """When this process first saw the bundle now in flight (None: none in flight), and
    when it last saw the barrier's progress move (or first saw it at all)."""

    inflight_since: float | None
    progressed_at: float


class ProgressWatch:
    """Dates what the stored records do not: the bundle in flight and the barrier's last
    progress, as this process sees them from scrape to scrape (a restarted exporter dates
    them from its first scrape). Pure: the caller gives the time."""

    def __init__(self) -> None:
        self._progress: int | None = None
        self._progressed_at = 0.0
        self._inflight: int | None = None
        self._inflight_since: float | None = None

    def observe(self, *, progress: int, inflight: int | None, now: float) -> ProgressTimes:
        """The barrier's ``progress`` and the epoch ``inflight`` (None: none) at ``now``."""
        if self._progress is None or progress != self._progress:
            self._progress, self._progressed_at = progress, now
        if inflight != self._inflight:
            self._inflight = inflight
            self._inflight_since = None if inflight is None else now
        return ProgressTimes(self._inflight_since, self._progressed_at)


def metric_families(
    reading: PipelineReading, now: float, progress: ProgressTimes | None = None
) -> list[Metric]:
    """The pipeline's metric families at time ``now`` (Unix seconds); with ``progress``
    (:class:`ProgressWatch`), the age of the bundle in flight and the last progress."""
    label = [reading.pipeline]
    out: list[Metric] = []
    barrier = reading.barrier
    out += _progress_families(reading, now, progress)
    if barrier is not None:
        gt = GT_LAST.gauge()
        gt.add_metric(label, barrier.gt_last)
        out.append(gt)
        if barrier.owner is not None:
            generation = OWNER_GENERATION.gauge()
            generation.add_metric(label, barrier.owner.generation)
            out.append(generation)
        if reading.epochs is not None:
            delivered = BUNDLES_DELIVERED.counter()
            delivered.add_metric(label, bundles_delivered(barrier, reading.epochs, reading.floor))
            out.append(delivered)
        if reading.batches_per_epoch is not None:
            dropped = REPLAYED_DROPPED.counter()
            dropped.add_metric(
                label, replays_dropped(barrier.progress, reading.batches_per_epoch, reading.floor)
            )
            out.append(dropped)
    if reading.dead_letter_rows is not None:
        refused = DEADLETTER_ROWS.counter()
        refused.add_metric(label, reading.dead_letter_rows)
        out.append(refused)
    if reading.behind is not None:
        behind = OFFSETS_BEHIND.gauge()
        for (topic, partition), n in sorted(reading.behind.items()):
            behind.add_metric([reading.pipeline, topic, str(partition)], n)
        out.append(behind)
    point = reading.resume
    if point is not None and point.snapshot is not None:
        age = SNAPSHOT_AGE.gauge()
        age.add_metric(label, max(0.0, now - point.created_at))
        out.append(age)
    if reading.snapshots is not None:
        snapshots = SNAPSHOTS.counter()
        snapshots.add_metric([reading.pipeline, "accepted"], reading.snapshots.accepted)
        snapshots.add_metric([reading.pipeline, "abandoned"], reading.snapshots.abandoned)
        out.append(snapshots)
    if reading.delivery is not None:
        hist = BUNDLE_DELIVERY_SECONDS.histogram()
        hist.add_metric(
            label,
            buckets=[(le, float(n)) for le, n in reading.delivery.buckets],
            sum_value=reading.delivery.total,
        )
        out.append(hist)
    return out


def scrape_families(pipeline: str, *, up: bool, errors: Mapping[str, int]) -> list[Metric]:
    """Whether this scrape read the pipeline (``up``), and the reads that failed in this
    process so far, by error type: a scrape that cannot read shows up 0, not nothing."""
    gauge = UP.gauge()
    gauge.add_metric([pipeline], 1.0 if up else 0.0)
    counter = SCRAPE_ERRORS.counter()
    for error, count in sorted(errors.items()):
        counter.add_metric([pipeline, error], count)
    return [gauge, counter]


def _gauge(metric: MetricDef, pipeline: str, value: float) -> Metric:
    family = metric.gauge()
    family.add_metric([pipeline], value)
    return family


def _progress_families(
    reading: PipelineReading, now: float, progress: ProgressTimes | None
) -> list[Metric]:
    """Where the pipeline is: planned, delivered, in flight and since when; Kafka's end."""
    out: list[Metric] = []
    name = reading.pipeline
    if reading.planned_epoch is not None:
        out.append(
            _gauge(
                PLANNED_EPOCH,
                name,
                reading.planned_epoch,
            )
        )
    barrier = reading.barrier
    if barrier is not None:
        inflight = barrier.inflight
        out.append(
            _gauge(
                DELIVERED_EPOCH,
                name,
                barrier.progress,
            )
        )
        out.append(
            _gauge(
                INFLIGHT_EPOCH,
                name,
                -1 if inflight is None else inflight.epoch,
            )
        )
        if progress is not None:
            since = progress.inflight_since
            out.append(
                _gauge(
                    INFLIGHT_AGE,
                    name,
                    0.0 if since is None or inflight is None else max(0.0, now - since),
                )
            )
            out.append(
                _gauge(
                    LAST_PROGRESS,
                    name,
                    progress.progressed_at,
                )
            )
    if reading.ends is not None:
        ends = SOURCE_END.gauge()
        for (topic, partition), n in sorted(reading.ends.items()):
            ends.add_metric([name, topic, str(partition)], n)
        out.append(ends)
    return out
