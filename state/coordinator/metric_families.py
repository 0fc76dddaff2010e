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
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

from state.lag import Lag
from state.records.barrier import BarrierState
from state.records.floor import FloorRecord
from state.records.resume_point import ResumePoint
from state.records.source_offset import TopicPartitionKey

# Upper bounds (seconds) of the delivery histogram's buckets; +Inf is added.
DELIVERY_BUCKETS: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)

GT_LAST = "gtbarrier_gt_last"
BUNDLES_DELIVERED = "gtbarrier_bundles_delivered"
BUNDLE_DELIVERY_SECONDS = "gtbarrier_bundle_delivery_seconds"
REPLAYED_DROPPED = "gtbarrier_replayed_bundles_dropped"
DEADLETTER_ROWS = "gtbarrier_deadletter_rows"
OFFSETS_BEHIND = "gtbarrier_source_offsets_behind"
SNAPSHOT_AGE = "gtbarrier_snapshot_age_seconds"
SNAPSHOTS = "gtbarrier_snapshots"
OWNER_GENERATION = "gtbarrier_owner_generation"
UP = "gtbarrier_up"
PLANNED_EPOCH = "gtbarrier_planned_epoch"
DELIVERED_EPOCH = "gtbarrier_delivered_epoch"
INFLIGHT_EPOCH = "gtbarrier_inflight_epoch"
INFLIGHT_AGE = "gtbarrier_inflight_age_seconds"
LAST_PROGRESS = "gtbarrier_last_progress_timestamp_seconds"
SOURCE_END = "gtbarrier_source_end_offset"
SCRAPE_ERRORS = "gtbarrier_scrape_errors"

# The series every scrape adds to the pipeline's own (:func:`scrape_families`).
SCRAPE_SERIES: frozenset[str] = frozenset({UP, f"{SCRAPE_ERRORS}_total"})

# Every series name a scrape may show (a counter's with its _total, a histogram's with
# _bucket, _sum and _count): what the dashboard's expressions may name.
SERIES_NAMES: frozenset[str] = frozenset(
    {
        GT_LAST,
        f"{BUNDLES_DELIVERED}_total",
        f"{BUNDLE_DELIVERY_SECONDS}_bucket",
        f"{BUNDLE_DELIVERY_SECONDS}_sum",
        f"{BUNDLE_DELIVERY_SECONDS}_count",
        f"{REPLAYED_DROPPED}_total",
        f"{DEADLETTER_ROWS}_total",
        OFFSETS_BEHIND,
        SNAPSHOT_AGE,
        f"{SNAPSHOTS}_total",
        OWNER_GENERATION,
        PLANNED_EPOCH,
        DELIVERED_EPOCH,
        INFLIGHT_EPOCH,
        INFLIGHT_AGE,
        LAST_PROGRESS,
        SOURCE_END,
        *SCRAPE_SERIES,
    }
)


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
        gt = GaugeMetricFamily(
            GT_LAST,
            "GT_last: the epoch of the last bundle the consumer acknowledged (-1: none); "
            "from the barrier state",
            labels=["pipeline"],
        )
        gt.add_metric(label, barrier.gt_last)
        out.append(gt)
        if barrier.owner is not None:
            generation = GaugeMetricFamily(
                OWNER_GENERATION,
                "The generation of the driver run that owns the barrier (grows by one at "
                "every claim); from the barrier state",
                labels=["pipeline"],
            )
            generation.add_metric(label, barrier.owner.generation)
            out.append(generation)
        if reading.epochs is not None:
            delivered = CounterMetricFamily(
                BUNDLES_DELIVERED,
                "Bundles the consumer acknowledged: epochs at or below GT_last (or a later "
                "epoch committed with an empty bundle) that read records, less bundles "
                "skipped as lost; from the barrier state and the epoch log",
                labels=["pipeline"],
            )
            delivered.add_metric(label, bundles_delivered(barrier, reading.epochs, reading.floor))
            out.append(delivered)
        if reading.batches_per_epoch is not None:
            dropped = CounterMetricFamily(
                REPLAYED_DROPPED,
                "Replayed batches whose bundle the barrier dropped: batches that read an "
                "epoch at or below GT_last (or a later epoch committed with an empty "
                "bundle) another batch had read; from the batch records",
                labels=["pipeline"],
            )
            dropped.add_metric(
                label, replays_dropped(barrier.progress, reading.batches_per_epoch, reading.floor)
            )
            out.append(dropped)
    if reading.dead_letter_rows is not None:
        refused = CounterMetricFamily(
            DEADLETTER_ROWS,
            "Rows the consumer's target refused, written to dead letters "
            "(errors.tolerance=all); from the pipeline's dead-letter files",
            labels=["pipeline"],
        )
        refused.add_metric(label, reading.dead_letter_rows)
        out.append(refused)
    if reading.behind is not None:
        behind = GaugeMetricFamily(
            OFFSETS_BEHIND,
            "Offsets between Kafka's end and the end of the newest epoch the source "
            "planned, per partition; the source's lag reading",
            labels=["pipeline", "topic", "partition"],
        )
        for (topic, partition), n in sorted(reading.behind.items()):
            behind.add_metric([reading.pipeline, topic, str(partition)], n)
        out.append(behind)
    point = reading.resume
    if point is not None and point.snapshot is not None:
        age = GaugeMetricFamily(
            SNAPSHOT_AGE,
            "Seconds since the snapshot of the resume point was accepted; from the resume "
            "point (ZooKeeper, or the state store without it)",
            labels=["pipeline"],
        )
        age.add_metric(label, max(0.0, now - point.created_at))
        out.append(age)
    if reading.snapshots is not None:
        snapshots = CounterMetricFamily(
            SNAPSHOTS,
            "Snapshots this driver process took, by outcome (accepted: the resume point "
            "moved to it; abandoned: not accepted in time); per process, from 0 at its start",
            labels=["pipeline", "outcome"],
        )
        snapshots.add_metric([reading.pipeline, "accepted"], reading.snapshots.accepted)
        snapshots.add_metric([reading.pipeline, "abandoned"], reading.snapshots.abandoned)
        out.append(snapshots)
    if reading.delivery is not None:
        hist = HistogramMetricFamily(
            BUNDLE_DELIVERY_SECONDS,
            "Duration of each micro-batch that read rows, as Spark's progress reports it "
            "(planning, reading, staging and the barrier's delivery); per process, observed "
            "by the driver since it started",
            labels=["pipeline"],
        )
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
    gauge = GaugeMetricFamily(
        UP,
        "1: this scrape read the pipeline's state; 0: it could not (the store, ZooKeeper or "
        "Kafka did not answer; the other families are then left out)",
        labels=["pipeline"],
    )
    gauge.add_metric([pipeline], 1.0 if up else 0.0)
    counter = CounterMetricFamily(
        SCRAPE_ERRORS,
        "Scrapes of this process that could not read the pipeline, by error type (per "
        "process: a restart starts again at 0)",
        labels=["pipeline", "error"],
    )
    for error, count in sorted(errors.items()):
        counter.add_metric([pipeline, error], count)
    return [gauge, counter]


def _gauge(name: str, doc: str, pipeline: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=["pipeline"])
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
                "The newest epoch the source planned (-1: none); from the epoch log. Above "
                "gtbarrier_delivered_epoch: work waits for the sink",
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
                "The newest epoch the barrier finished: GT_last, or a later epoch committed "
                "with an empty bundle (-1: none); from the barrier state",
                name,
                barrier.progress,
            )
        )
        out.append(
            _gauge(
                INFLIGHT_EPOCH,
                "The epoch of the bundle in flight (-1: none); from the barrier state",
                name,
                -1 if inflight is None else inflight.epoch,
            )
        )
        if progress is not None:
            since = progress.inflight_since
            out.append(
                _gauge(
                    INFLIGHT_AGE,
                    "Seconds the bundle now in flight has been in flight, as this process "
                    "saw it from scrape to scrape (0: none in flight)",
                    name,
                    0.0 if since is None or inflight is None else max(0.0, now - since),
                )
            )
            out.append(
                _gauge(
                    LAST_PROGRESS,
                    "Unix time this process last saw the barrier's progress move (or first "
                    "read it): time() minus it is how long nothing was delivered",
                    name,
                    progress.progressed_at,
                )
            )
    if reading.ends is not None:
        ends = GaugeMetricFamily(
            SOURCE_END,
            "Kafka's end offset per partition, read at the scrape: its rate() is the input "
            "rate, so no input and a stuck pipeline differ",
            labels=["pipeline", "topic", "partition"],
        )
        for (topic, partition), n in sorted(reading.ends.items()):
            ends.add_metric([name, topic, str(partition)], n)
        out.append(ends)
    return out
