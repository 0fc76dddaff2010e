"""Reading ``GTBARRIER_PROFILE`` spans (:mod:`state.profiling`) and breaking micro-batches
down with them: which span ran in which trigger, per batch, per task and per record.

A trigger is one entry of Spark's ``StreamingQueryProgress``: it starts at its
``timestamp`` and lasts ``durationMs.triggerExecution``. A span belongs to the trigger in
whose window it starts. "Ours" is the wall time during which at least one of our spans
ran its own code (the union of their intervals, without the time a task waited for
Spark: :func:`own_time`); the rest of ``triggerExecution`` is Spark's own (scheduling,
planning, its offset and commit logs, the Python workers' start, moving rows between the
JVM and the Python workers, the query's own operators).
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

#: The breakdown's rows: (section, label, span name). Spans of other names get rows of
#: their own at the end of their section (by prefix), so new spans show up unasked.
ROWS: tuple[tuple[str, str, str], ...] = (
    ("driver hooks", "latestOffset", "driver.latestOffset"),
    ("driver hooks", "  epoch log (store)", "driver.epoch_log"),
    ("driver hooks", "  Kafka end offsets", "driver.kafka_offsets"),
    ("driver hooks", "initialOffset", "driver.initialOffset"),
    ("driver hooks", "AvailableNow target", "driver.availableNow"),
    ("driver hooks", "partitions", "driver.partitions"),
    ("driver hooks", "commit (source)", "driver.commit"),
    ("read tasks", "batch record (store)", "read.batch_record"),
    ("read tasks", "client setup", "read.client"),
    ("read tasks", "fetch", "read.fetch"),
    ("read tasks", "Arrow building", "read.arrow"),
    ("read tasks", "close", "read.close"),
    ("read tasks", "whole read task", "read.task"),
    ("sink write", "own work (sort, stage the part)", "write.own"),
    ("sink write", "whole write task", "write.stage"),
    ("sink write", "  of which waiting for input", "write.input"),
    ("commit", "process start", "commit.process"),
    ("commit", "imports", "commit.imports"),
    ("commit", "whole commit call", "commit.call"),
    ("commit", "  store + consumer clients", "commit.open"),
    ("commit", "  barrier protocol", "commit.total"),
    ("commit", "    read state (store)", "commit.read_state"),
    ("commit", "    recover in-flight", "commit.recover"),
    ("commit", "    CAS in flight (store)", "commit.cas_inflight"),
    ("commit", "    delivery (consumer)", "commit.deliver"),
    ("commit", "    CAS GT_last (store)", "commit.cas_gt_last"),
    ("commit", "    cleanup (store)", "commit.cleanup"),
    ("commit", "  close clients", "commit.close"),
)
SECTION_OF_PREFIX = {
    "driver": "driver hooks",
    "read": "read tasks",
    "write": "sink write",
    "commit": "commit",
}
#: Nested spans: not counted again in their section's total.
NESTED = {
    "driver.epoch_log",
    "driver.kafka_offsets",
    "write.stage",
    "write.input",
    "read.task",
    "commit.total",
    "commit.open",
    "commit.read_state",
    "commit.recover",
    "commit.cas_inflight",
    "commit.deliver",
    "commit.cas_gt_last",
    "commit.cleanup",
    "commit.close",
}
SPARK_KEYS = (
    "triggerExecution",
    "latestOffset",
    "queryPlanning",
    "getBatch",
    "addBatch",
    "walCommit",
    "commitOffsets",
)


@dataclass(frozen=True)
class Span:
    name: str
    start: float  # epoch seconds
    seconds: float
    pid: int
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def end(self) -> float:
        return self.start + self.seconds


def load_spans(directory: Path) -> list[Span]:
    """Every span written under ``directory`` (all processes), by start time."""
    spans = []
    for path in sorted(directory.glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            rec = json.loads(line)
            name, start, seconds, pid = (
                rec.pop("span"),
                rec.pop("start"),
                rec.pop("seconds"),
                rec.pop("pid"),
            )
            spans.append(Span(name, float(start), float(seconds), int(pid), rec))
    return sorted(spans, key=lambda s: s.start)


@dataclass(frozen=True)
class Trigger:
    """One micro-batch as Spark reported it."""

    batch_id: int
    start: float  # epoch seconds
    input_rows: int  # numInputRows: counts a source once per scan (the demo scans it 3x)
    records: int  # Kafka records the batch read (from its offsets), else input_rows
    durations_ms: dict[str, float]

    @property
    def seconds(self) -> float:
        return self.durations_ms.get("triggerExecution", 0.0) / 1000.0

    @property
    def end(self) -> float:
        return self.start + self.seconds

    @classmethod
    def from_progress(cls, progress: dict[str, Any]) -> Trigger:
        stamp = str(progress["timestamp"]).replace("Z", "+00:00")
        rows = int(progress.get("numInputRows", 0))
        return cls(
            batch_id=int(progress["batchId"]),
            start=datetime.fromisoformat(stamp).timestamp(),
            input_rows=rows,
            records=_kafka_records(progress) or rows,
            durations_ms={k: float(v) for k, v in (progress.get("durationMs") or {}).items()},
        )


def _kafka_records(progress: dict[str, Any]) -> int:
    """Records between the first source's start and end offsets (gtkafka's JSON), or 0."""
    sources = progress.get("sources") or []
    if not sources:
        return 0
    return max(0, _total(sources[0].get("endOffset")) - _total(sources[0].get("startOffset")))


def _total(offset: Any) -> int:
    if isinstance(offset, str):
        try:
            offset = json.loads(offset)
        except ValueError:
            return 0
    offsets = offset.get("offsets") if isinstance(offset, dict) else None
    if not isinstance(offsets, dict):
        return 0
    return sum(int(o) for parts in offsets.values() for o in parts.values())


def in_window(spans: Iterable[Span], start: float, end: float, slack: float = 0.002) -> list[Span]:
    """The spans that start in ``[start, end)`` (less ``slack``: Spark's timestamps are
    whole milliseconds, so a hook called at the trigger's start may seem to precede it)."""
    return [s for s in spans if start - slack <= s.start < end - slack]


def own_time(spans: Iterable[Span]) -> list[Span]:
    """The spans during which our code ran rather than waited for Spark: a read task's
    parts (not the whole task, which also waits while Spark consumes its batches), a
    write task's own time (at its end: the wait for its input comes first), the rest as
    they are."""
    out = []
    for s in spans:
        if s.name in ("read.task", "write.input", "write.own"):
            continue
        if s.name == "write.stage" and "input_s" in s.attrs:
            own = max(0.0, s.seconds - float(s.attrs["input_s"]))
            out.append(Span("write.own", s.end - own, own, s.pid))
            continue
        out.append(s)
    return out


def with_own_writes(spans: list[Span]) -> list[Span]:
    """``spans`` and, for every write task, a ``write.own`` span (its own time)."""
    return spans + [s for s in own_time(spans) if s.name == "write.own"]


def covered(spans: Iterable[Span], start: float, end: float) -> float:
    """Seconds of ``[start, end]`` covered by at least one span."""
    total = 0.0
    at = start
    for s in sorted(spans, key=lambda s: s.start):
        lo, hi = max(s.start, at), min(s.end, end)
        if hi > lo:
            total += hi - lo
            at = hi
    return total


@dataclass
class Row:
    """One line of a breakdown table."""

    section: str
    label: str
    name: str  # the span's name
    per_batch_ms: float  # median over the batches of the batch's sum
    count_per_batch: float  # spans (tasks, calls) per batch, mean
    per_span_ms: float  # all batches' sum / all batches' count
    per_record_us: float  # per_batch_ms / records per batch
    share: float  # per_batch_ms / median triggerExecution


@dataclass
class Breakdown:
    """The breakdown of one query at one batch size (the measured batches only)."""

    query: str
    batch_records: int
    triggers: list[Trigger]
    rows: list[Row]
    spark: dict[str, float]  # median durationMs per key
    ours_ms: float  # median union of our spans per batch
    rest_ms: float  # median triggerExecution - median ours
    load_average: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "query": self.query,
            "batch_records": self.batch_records,
            "load_average": self.load_average,
            "spark_ms": self.spark,
            "ours_ms": self.ours_ms,
            "rest_ms": self.rest_ms,
            "rows": [r.__dict__ for r in self.rows],
            "batches": [
                {
                    "batch_id": t.batch_id,
                    "start": t.start,
                    "input_rows": t.input_rows,
                    "records": t.records,
                    "durations_ms": t.durations_ms,
                }
                for t in self.triggers
            ],
        }


def break_down(
    query: str, triggers: Sequence[Trigger], spans: Sequence[Span], load: str = ""
) -> Breakdown:
    """Per-batch, per-span and per-record figures of every span name seen in the batches."""
    if not triggers:
        raise ValueError(f"{query}: no measured micro-batch")
    per_batch = [with_own_writes(in_window(spans, t.start, t.end)) for t in triggers]
    records = statistics.median(t.records for t in triggers) or 1
    trigger_ms = statistics.median(t.seconds * 1000 for t in triggers) or 1.0
    names = [name for _, _, name in ROWS]
    seen = {s.name for batch in per_batch for s in batch}
    extra = sorted(seen - set(names))
    layout = list(ROWS) + [(SECTION_OF_PREFIX.get(n.split(".")[0], "other"), n, n) for n in extra]
    rows = []
    for section, label, name in layout:
        sums = [sum(s.seconds for s in batch if s.name == name) * 1000 for batch in per_batch]
        counts = [sum(1 for s in batch if s.name == name) for batch in per_batch]
        if not any(counts):
            continue
        median_ms = statistics.median(sums)
        rows.append(
            Row(
                section,
                label,
                name,
                median_ms,
                sum(counts) / len(counts),
                sum(sums) / max(1, sum(counts)),
                1000 * median_ms / records,
                median_ms / trigger_ms,
            )
        )
    ours = [
        covered(own_time(batch), t.start, t.end) * 1000
        for batch, t in zip(per_batch, triggers, strict=True)
    ]
    spark = {
        key: statistics.median(t.durations_ms.get(key, 0.0) for t in triggers) for key in SPARK_KEYS
    }
    return Breakdown(
        query,
        int(records),
        list(triggers),
        rows,
        spark,
        statistics.median(ours),
        trigger_ms - statistics.median(ours),
        load,
    )


def table(b: Breakdown) -> tuple[list[str], list[list[str]]]:
    """Headers and rows of a breakdown table (section totals first in each section)."""
    headers = ["part", "per batch ms", "share", "n/batch", "per task ms", "per record us"]
    out: list[list[str]] = []
    trigger_ms = b.spark.get("triggerExecution", 0.0) or 1.0
    for key in SPARK_KEYS:
        ms = b.spark.get(key, 0.0)
        out.append([f"Spark {key}", f"{ms:,.0f}", f"{ms / trigger_ms:.0%}", "", "", ""])
    out.append(
        ["ours (union of spans)", f"{b.ours_ms:,.0f}", f"{b.ours_ms / trigger_ms:.0%}", "", "", ""]
    )
    out.append(
        ["rest: Spark's own", f"{b.rest_ms:,.0f}", f"{b.rest_ms / trigger_ms:.0%}", "", "", ""]
    )
    section = None
    for r in b.rows:
        if r.section != section:
            section = r.section
            total = sum(
                x.per_batch_ms for x in b.rows if x.section == section and x.name not in NESTED
            )
            out.append(
                [
                    f"[{section}] (tasks: summed over parallel tasks)"
                    if section in ("read tasks", "sink write")
                    else f"[{section}]",
                    f"{total:,.0f}",
                    f"{total / trigger_ms:.0%}",
                    "",
                    "",
                    "",
                ]
            )
        out.append(
            [
                "  " + r.label,
                f"{r.per_batch_ms:,.1f}",
                f"{r.share:.0%}",
                f"{r.count_per_batch:.1f}",
                f"{r.per_span_ms:,.1f}",
                f"{r.per_record_us:,.1f}",
            ]
        )
    return headers, out
