"""The metric families of one pipeline, computed from what one scrape read.

Pure: :func:`metric_families` turns a :class:`~state.metrics.reading.PipelineReading` (the
store's facts, the resume point, the source's lag, the dead letters, and what the driver
process observed) into Prometheus metric families, each from its definition
(:mod:`state.metrics.definitions`); the reading is done elsewhere
(:mod:`state.metrics.reading`). Nothing here is a counter kept in memory that a restart
would lose, except what :class:`~state.metrics.reading.DriverObservations` holds, which is
per process by nature (each such metric says so in its HELP).

A metric whose source was not read (no ``--bootstrap``, no dead-letter path, no resume
point, a process that observes nothing) is left out, not shown as 0.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from prometheus_client.core import (
    Metric,
)

from state.metrics.definitions import (
    BUNDLES_DELIVERED,
    DEADLETTER_ROWS,
    DELIVERED_EPOCH,
    GT_LAST,
    INFLIGHT_AGE,
    INFLIGHT_EPOCH,
    LAST_PROGRESS,
    MICROBATCH_DURATION,
    OFFSETS_BEHIND,
    OWNER_GENERATION,
    PLANNED_EPOCH,
    REPLAYED_DROPPED,
    SCRAPE_ERRORS,
    SNAPSHOT_AGE,
    SNAPSHOTS,
    SOURCE_END,
    UP,
    MetricDef,
)
from state.metrics.reading import EpochFacts, PipelineReading
from state.records.barrier import BarrierState
from state.records.floor import FloorRecord

__all__ = [
    "ProgressTimes",
    "ProgressWatch",
    "bundles_delivered",
    "metric_families",
    "replays_dropped",
    "scrape_families",
]


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
    facts = reading.facts
    barrier = facts.barrier
    out += _progress_families(reading, now, progress)
    if barrier is not None:
        gt = GT_LAST.gauge()
        gt.add_metric(label, barrier.gt_last)
        out.append(gt)
        if barrier.owner is not None:
            generation = OWNER_GENERATION.gauge()
            generation.add_metric(label, barrier.owner.generation)
            out.append(generation)
        delivered = BUNDLES_DELIVERED.counter()
        delivered.add_metric(label, bundles_delivered(barrier, facts.epochs, facts.floor))
        out.append(delivered)
        dropped = REPLAYED_DROPPED.counter()
        dropped.add_metric(
            label, replays_dropped(barrier.progress, facts.batches_per_epoch, facts.floor)
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
    if reading.microbatches is not None:
        hist = MICROBATCH_DURATION.histogram()
        hist.add_metric(
            label,
            buckets=[(le, float(n)) for le, n in reading.microbatches.buckets],
            sum_value=reading.microbatches.total,
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
    if reading.facts.planned_epoch is not None:
        out.append(_gauge(PLANNED_EPOCH, name, reading.facts.planned_epoch))
    barrier = reading.facts.barrier
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
