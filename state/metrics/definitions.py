"""Every metric gtbarrier serves, declared once: its name, type, labels, HELP line, where
its value comes from and which endpoint serves it.

:mod:`state.metrics.families` builds each scrape's families from these
definitions (the HELP line is the definition's), and ``python -m scripts.option_docs
--write`` renders the table of docs/operations.md from them (:func:`markdown_table`); its
``--check`` fails when the two differ. A new metric is one definition here, the lines
that compute its value there, and the field of :mod:`state.metrics.reading` it is
computed from (a store's record: a field of ``StoreFacts``, which both endpoints read).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)

Kind = Literal["gauge", "counter", "histogram"]

BOTH = "both"
DRIVER = "the driver"


@dataclass(frozen=True)
class MetricDef:
    """One metric family. ``name``: a counter's without ``_total``. ``help``: its HELP line.
    ``source`` and ``served`` (Markdown): where its value comes from, and which endpoint
    serves it, for the docs. ``labels_doc``: the labels cell when the labels need words."""

    name: str
    kind: Kind
    labels: tuple[str, ...]
    help: str
    source: str
    served: str = BOTH
    labels_doc: str | None = None

    def gauge(self) -> GaugeMetricFamily:
        """A new, empty family of this gauge, to add samples to."""
        assert self.kind == "gauge", self
        return GaugeMetricFamily(self.name, self.help, labels=list(self.labels))

    def counter(self) -> CounterMetricFamily:
        """A new, empty family of this counter."""
        assert self.kind == "counter", self
        return CounterMetricFamily(self.name, self.help, labels=list(self.labels))

    def histogram(self) -> HistogramMetricFamily:
        """A new, empty family of this histogram."""
        assert self.kind == "histogram", self
        return HistogramMetricFamily(self.name, self.help, labels=list(self.labels))

    @property
    def series(self) -> tuple[str, ...]:
        """The series names a scrape shows for it."""
        if self.kind == "counter":
            return (f"{self.name}_total",)
        if self.kind == "histogram":
            return tuple(f"{self.name}_{s}" for s in ("bucket", "sum", "count"))
        return (self.name,)

    def doc_cells(self) -> tuple[str, ...]:
        """The docs table's row: series, type, labels, from, served by."""
        shown = self.series[0] if self.kind == "counter" else self.name
        labels = self.labels_doc or ", ".join(f"`{label}`" for label in self.labels)
        return (f"`{shown}`", self.kind, labels, self.source, self.served)


P = ("pipeline",)

GT_LAST = MetricDef(
    "gtbarrier_gt_last",
    "gauge",
    P,
    "GT_last: the epoch of the last bundle the consumer acknowledged (-1: none); from the "
    "barrier state",
    "the barrier state: the epoch of the last bundle the consumer acknowledged (-1: none)",
)
OWNER_GENERATION = MetricDef(
    "gtbarrier_owner_generation",
    "gauge",
    P,
    "The generation of the driver run that owns the barrier (grows by one at every claim); "
    "from the barrier state",
    "the barrier state: the generation of the run that owns the barrier (a step: a restart "
    "or a takeover)",
)
BUNDLES_DELIVERED = MetricDef(
    "gtbarrier_bundles_delivered",
    "counter",
    P,
    "Bundles the consumer acknowledged: epochs at or below GT_last (or a later epoch "
    "committed with an empty bundle) that read records, less bundles skipped as lost; from "
    "the barrier state and the epoch log",
    "the barrier state and the epoch log: epochs at or below `GT_last` that read records, "
    "less bundles an operator skipped as lost (an epoch whose rows the query filtered out "
    "entirely counts too)",
)
REPLAYED_DROPPED = MetricDef(
    "gtbarrier_replayed_bundles_dropped",
    "counter",
    P,
    "Replayed batches whose bundle the barrier dropped: batches that read an epoch at or "
    "below GT_last (or a later epoch committed with an empty bundle) another batch had read; "
    "from the batch records",
    "the batch records: batches that read an epoch at or below `GT_last` that another batch "
    "had read (replays whose bundle the barrier dropped; a batch that read an epoch and "
    "never committed, its checkpoint lost, counts too)",
)
DEADLETTER_ROWS = MetricDef(
    "gtbarrier_deadletter_rows",
    "counter",
    P,
    "Rows the consumer's target refused, written to dead letters (errors.tolerance=all); "
    "from the pipeline's dead-letter files",
    "the dead-letter files (`errors.deadLetter.path`): rows the consumer's target refused",
    "the exporter, with `--dead-letters`",
)
OFFSETS_BEHIND = MetricDef(
    "gtbarrier_source_offsets_behind",
    "gauge",
    ("pipeline", "topic", "partition"),
    "Offsets between Kafka's end and the end of the newest epoch the source planned, per "
    "partition; read at the scrape (Kafka's answer kept at most a few seconds) when the "
    "endpoint has the source's Kafka settings, else the last completed batch's",
    "the source's lag: Kafka's end minus the end of the newest planned epoch, read at the "
    "scrape (Kafka's answer kept at most 2 s), so it grows while the query is stuck; "
    "absent (and `gtbarrier_up` 0) when Kafka does not answer within 4 s",
    "the driver at each scrape with `source_ends`, else from each batch's progress "
    "(gtkafka's `latestOffset` against its end offset: it stands still while no batch "
    "completes); the exporter with `--bootstrap`, at each scrape",
)
SNAPSHOT_AGE = MetricDef(
    "gtbarrier_snapshot_age_seconds",
    "gauge",
    P,
    "Seconds since the snapshot of the resume point was accepted; from the resume point "
    "(ZooKeeper, or the state store without it)",
    "the resume point (ZooKeeper's znode, or the store's record without ZooKeeper): seconds "
    "since its snapshot was accepted",
    "both (the exporter: ZooKeeper's with `--zookeeper`)",
)
SNAPSHOTS = MetricDef(
    "gtbarrier_snapshots",
    "counter",
    ("pipeline", "outcome"),
    "Snapshots this driver process took, by outcome (accepted: the resume point moved to "
    "it; abandoned: not accepted in time); per process, from 0 at its start",
    "the coordinator's snapshots, per process",
    DRIVER,
    "`pipeline`, `outcome` (`accepted`, `abandoned`)",
)
PLANNED_EPOCH = MetricDef(
    "gtbarrier_planned_epoch",
    "gauge",
    P,
    "The newest epoch the source planned (-1: none); from the epoch log. Above "
    "gtbarrier_delivered_epoch: work waits for the sink",
    "the epoch log: the newest epoch the source planned (-1: none). Above "
    "`gtbarrier_delivered_epoch`: work waits for the sink",
)
DELIVERED_EPOCH = MetricDef(
    "gtbarrier_delivered_epoch",
    "gauge",
    P,
    "The newest epoch the barrier finished: GT_last, or a later epoch committed with an "
    "empty bundle (-1: none); from the barrier state",
    "the barrier state: the newest epoch the barrier finished (`GT_last`, or a later epoch "
    "committed with an empty bundle)",
)
INFLIGHT_EPOCH = MetricDef(
    "gtbarrier_inflight_epoch",
    "gauge",
    P,
    "The epoch of the bundle in flight (-1: none); from the barrier state",
    "the barrier state: the epoch of the bundle in flight (-1: none)",
)
INFLIGHT_AGE = MetricDef(
    "gtbarrier_inflight_age_seconds",
    "gauge",
    P,
    "Seconds the bundle now in flight has been in flight, as this process saw it from "
    "scrape to scrape (0: none in flight)",
    "seconds that bundle has been in flight, as this process saw it from scrape to scrape "
    "(0: none)",
)
LAST_PROGRESS = MetricDef(
    "gtbarrier_last_progress_timestamp_seconds",
    "gauge",
    P,
    "Unix time this process last saw the barrier's progress move (or first read it): "
    "time() minus it is how long nothing was delivered",
    "Unix time this process last saw `gtbarrier_delivered_epoch` move (or first read it): "
    "`time() -` it is how long nothing was delivered",
)
SOURCE_END = MetricDef(
    "gtbarrier_source_end_offset",
    "gauge",
    ("pipeline", "topic", "partition"),
    "Kafka's end offset per partition, read at the scrape: its rate() is the input rate, so "
    "no input and a stuck pipeline differ",
    "Kafka's end offset read at the scrape: `rate()` of it is the input rate, so no input "
    "and a stuck pipeline differ",
    "the driver with `source_ends`; the exporter with `--bootstrap`",
)
MICROBATCH_DURATION = MetricDef(
    "gtbarrier_microbatch_duration_seconds",
    "histogram",
    P,
    "Duration of each micro-batch that read rows, as Spark's progress reports it (its "
    "batchDuration: planning, reading, staging and the barrier's delivery, end to end); per "
    "process, observed by the driver since it started",
    "the duration of each micro-batch that read rows, end to end (Spark's `batchDuration`: "
    "planning, reading, staging and the barrier's delivery), from Spark's progress, per process",
    DRIVER,
)
UP = MetricDef(
    "gtbarrier_up",
    "gauge",
    P,
    "1: this scrape read all of the pipeline's state; 0: it could not (the store or "
    "ZooKeeper did not answer: the other families are left out; Kafka did not: the source's "
    "lag and end offsets are left out)",
    "1: this scrape read all of the pipeline's state; 0: the store or ZooKeeper did not "
    "answer (every other gtbarrier metric is then left out), or Kafka did not (the source's "
    "lag and end offsets are left out, the rest served)",
)
SCRAPE_ERRORS = MetricDef(
    "gtbarrier_scrape_errors",
    "counter",
    ("pipeline", "error"),
    "Scrapes of this process that could not read the pipeline, by error type (per process: "
    "a restart starts again at 0)",
    "scrapes of this process that could not read the pipeline, per process",
    BOTH,
    "`pipeline`, `error` (the error's type)",
)

#: Every metric, in the docs table's order.
METRICS: tuple[MetricDef, ...] = (
    GT_LAST,
    OWNER_GENERATION,
    BUNDLES_DELIVERED,
    REPLAYED_DROPPED,
    DEADLETTER_ROWS,
    OFFSETS_BEHIND,
    SNAPSHOT_AGE,
    SNAPSHOTS,
    UP,
    SCRAPE_ERRORS,
    PLANNED_EPOCH,
    DELIVERED_EPOCH,
    INFLIGHT_EPOCH,
    INFLIGHT_AGE,
    LAST_PROGRESS,
    SOURCE_END,
    MICROBATCH_DURATION,
)

#: The series every scrape adds to the pipeline's own (``scrape_families``).
SCRAPE_SERIES: frozenset[str] = frozenset((*UP.series, *SCRAPE_ERRORS.series))

#: Every series name a scrape may show: what the dashboard's and the alerts' expressions
#: may name.
SERIES_NAMES: frozenset[str] = frozenset(s for m in METRICS for s in m.series)

HEADERS = ("metric", "type", "labels", "from", "served by")


def markdown_table() -> str:
    """The docs table of :data:`METRICS`."""
    lines = ["| " + " | ".join(HEADERS) + " |", "|" + "---|" * len(HEADERS)]
    lines += ["| " + " | ".join(m.doc_cells()) + " |" for m in METRICS]
    return "\n".join(lines) + "\n"
