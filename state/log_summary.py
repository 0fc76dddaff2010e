"""One INFO line per pipeline every so often, instead of one per epoch and per bundle.

The source logs each epoch it plans, and the sink each bundle it delivers, at DEBUG; a
process that plans or commits reports at INFO what it did since its last report, per
pipeline, once ``$GTBARRIER_LOG_SUMMARY_SECONDS`` (default 60) have passed::

    gtbarrier: pipeline orders: 12 epoch(s) planned (3,400 records), 12 bundle(s)
    delivered (3,400 rows) in the last 60 s; newest epoch 812, GT_last 811

The first event of a process is reported at once (an operator sees a started pipeline
work without waiting a whole interval); ``0`` reports every event. Each process reports
what it did itself: Spark plans epochs and commits bundles in Python workers of their
own on the driver, so the source's line counts epochs and the sink's bundles (one
process doing both, as in tests, says both in one line). Nothing runs in the background:
a report is made by the event that makes it due, and the source's ``stop`` makes the
last one (:meth:`Summaries.flush`).

:class:`SummaryWindow` is the pure part (the counts, and when a report is due, given the
time); :class:`Summaries` adds a clock, a lock and the logging.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from state.errors import ConfigError
from state.log_format import fields

SUMMARY_ENV = "GTBARRIER_LOG_SUMMARY_SECONDS"
DEFAULT_SUMMARY_SECONDS = 60.0

log = logging.getLogger(__name__)


def summary_interval(environ: Mapping[str, str] | None = None) -> float:
    """The seconds between two reports, from ``$GTBARRIER_LOG_SUMMARY_SECONDS`` (default
    60; 0 reports every event). Raises :class:`~state.errors.ConfigError` for a value
    that is not a number of seconds >= 0."""
    env = os.environ if environ is None else environ
    raw = env.get(SUMMARY_ENV, "").strip()
    if not raw:
        return DEFAULT_SUMMARY_SECONDS
    try:
        seconds = float(raw)
    except ValueError:
        seconds = -1.0
    if not seconds >= 0 or seconds == float("inf"):  # also NaN
        raise ConfigError(
            SUMMARY_ENV, raw, "a number of seconds >= 0", where="environment variable"
        )
    return seconds


@dataclass
class PipelineCounts:
    """What one pipeline did in this process since the last report."""

    epochs_planned: int = 0
    records_planned: int = 0
    bundles_delivered: int = 0
    rows_delivered: int = 0
    rows_refused: int = 0
    batches_dropped: int = 0
    newest_epoch: int | None = None
    gt_last: int | None = None

    def describe(self, pipeline: str, seconds: float) -> str:
        """The report's text: only what happened (a source's process plans, a sink's
        delivers)."""
        done = []
        if self.epochs_planned:
            done.append(
                f"{self.epochs_planned} epoch(s) planned ({self.records_planned:,} records)"
            )
        if self.bundles_delivered:
            done.append(
                f"{self.bundles_delivered} bundle(s) delivered ({self.rows_delivered:,} rows)"
            )
        if self.rows_refused:
            done.append(f"{self.rows_refused:,} row(s) refused into dead letters")
        if self.batches_dropped:
            done.append(f"{self.batches_dropped} replayed batch(es) dropped")
        where = []
        if self.newest_epoch is not None:
            where.append(f"newest epoch {self.newest_epoch}")
        if self.gt_last is not None:
            where.append(f"GT_last {self.gt_last}")
        text = f"gtbarrier: pipeline {pipeline}: {', '.join(done)} in the last {seconds:.0f} s"
        return f"{text}; {', '.join(where)}" if where else text


@dataclass(frozen=True)
class Report:
    """The counts of each pipeline over the last ``seconds``."""

    seconds: float
    pipelines: dict[str, PipelineCounts]


class SummaryWindow:
    """The counts since the last report, per pipeline, and when the next one is due.

    Pure: the caller passes the time (any monotonic clock, in seconds). A report is due
    when something was counted and either none was made yet or ``interval`` seconds have
    passed since the last one; :meth:`take` returns it and starts the next window.
    """

    def __init__(self, interval: float, now: float) -> None:
        self.interval = interval
        self._since = now
        self._reported = False
        self._counts: dict[str, PipelineCounts] = {}

    def _of(self, pipeline: str) -> PipelineCounts:
        return self._counts.setdefault(pipeline, PipelineCounts())

    def planned(self, pipeline: str, epoch: int, records: int) -> None:
        """Epoch ``epoch`` of ``pipeline`` was planned, ``records`` records."""
        counts = self._of(pipeline)
        counts.epochs_planned += 1
        counts.records_planned += records
        counts.newest_epoch = max(epoch, counts.newest_epoch or epoch)

    def delivered(self, pipeline: str, epoch: int, rows: int, refused: int = 0) -> None:
        """Bundle ``epoch`` of ``pipeline`` was delivered (``rows`` rows, ``refused`` more
        refused into dead letters); ``GT_last`` is now ``epoch``."""
        counts = self._of(pipeline)
        counts.bundles_delivered += 1
        counts.rows_delivered += rows
        counts.rows_refused += refused
        counts.gt_last = max(epoch, counts.gt_last or epoch)

    def dropped(self, pipeline: str) -> None:
        """A replayed batch of ``pipeline`` was dropped (its bundle at or below GT_last)."""
        self._of(pipeline).batches_dropped += 1

    def due(self, now: float) -> bool:
        """Whether a report is due at ``now``."""
        if not self._counts:
            return False
        return not self._reported or now - self._since >= self.interval

    def take(self, now: float) -> Report:
        """The counts since the last report (none: an empty report), and a new window
        from ``now``."""
        report = Report(max(0.0, now - self._since), self._counts)
        self._counts = {}
        self._since = now
        self._reported = True
        return report


class Summaries:
    """The process's reports (module docstring): counts events into a
    :class:`SummaryWindow` and logs a report, at INFO, when one is due."""

    def __init__(
        self,
        clock: Callable[[], float] = time.monotonic,
        interval: Callable[[], float] = summary_interval,
    ) -> None:
        self._clock = clock
        self._interval = interval
        self._lock = threading.Lock()
        self._window: SummaryWindow | None = None

    def planned(self, pipeline: str, epoch: int, records: int) -> None:
        self._count(lambda w: w.planned(pipeline, epoch, records))

    def delivered(self, pipeline: str, epoch: int, rows: int, refused: int = 0) -> None:
        self._count(lambda w: w.delivered(pipeline, epoch, rows, refused))

    def dropped(self, pipeline: str) -> None:
        self._count(lambda w: w.dropped(pipeline))

    def flush(self) -> None:
        """Report what was counted since the last report, due or not."""
        with self._lock:
            report = None if self._window is None else self._window.take(self._clock())
        if report is not None:
            _log(report)

    def _count(self, event: Callable[[SummaryWindow], None]) -> None:
        with self._lock:
            now = self._clock()
            if self._window is None:
                self._window = SummaryWindow(self._interval(), now)
            event(self._window)
            report = self._window.take(now) if self._window.due(now) else None
        if report is not None:
            _log(report)


def _log(report: Report) -> None:
    for pipeline, counts in report.pipelines.items():
        log.info(
            "%s",
            counts.describe(pipeline, report.seconds),
            extra=fields(
                pipeline=pipeline,
                # the newest epoch the report saw: planned here, else delivered here
                epoch=counts.newest_epoch if counts.newest_epoch is not None else counts.gt_last,
                event="summary",
                seconds=round(report.seconds, 3),
                epochs_planned=counts.epochs_planned,
                records_planned=counts.records_planned,
                bundles_delivered=counts.bundles_delivered,
                rows_delivered=counts.rows_delivered,
                rows_refused=counts.rows_refused,
                batches_dropped=counts.batches_dropped,
                gt_last=counts.gt_last,
            ),
        )


SUMMARIES = Summaries()
"""The process's one :class:`Summaries`."""
