"""What one barrier commit did: :class:`CommitOutcome`, its log line and its metrics line.

The log line (INFO for a dropped batch and for rows refused, DEBUG otherwise; a delivered
bundle is counted into the pipeline's INFO summary, :mod:`state.log_summary`) is the
user's record of the barrier's decisions; a bundle with rows its consumer's target refused
says how many and which dead-letter file holds them. With
``$GTBARRIER_METRICS`` set, every commit also appends one JSON line to that file (the
benchmarks read it).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field

from sink.options import SinkOptions
from state.log_format import fields
from state.log_summary import SUMMARIES

log = logging.getLogger("sink.barrier")

METRICS_ENV = "GTBARRIER_METRICS"


@dataclass
class CommitOutcome:
    """What a commit did (for logs, tests and the benchmark's metrics)."""

    batch_id: int
    epoch: int | None
    action: str  # delivered | dropped | empty | no-data
    rows: int = 0
    recovered: int | None = None
    driver_bytes: int = 0
    timings: dict[str, float] = field(default_factory=dict)
    dead_letters: int = 0
    """Rows of the bundle the consumer's target refused (in its dead-letter file)."""
    dead_letters_at: str | None = None
    """The bundle's dead-letter file (None: it has none)."""

    def refused(self) -> str:
        """``; 2 row(s) refused, in dead letters <file>`` (empty without dead letters)."""
        if not self.dead_letters_at:
            return ""
        return f"; {self.dead_letters} row(s) refused, in dead letters {self.dead_letters_at}"

    def log(self, pipeline: str, consumer: str, query: str | None = None) -> None:
        """One line per commit: what the barrier decided, and for a delivery to whom.

        A bundle delivered without refused rows is routine: DEBUG, counted into the
        pipeline's INFO summary (:mod:`state.log_summary`). A batch dropped as replayed
        and refused rows stay at INFO: an operator looks for those."""
        context = fields(
            pipeline=pipeline,
            query=query,
            batch=self.batch_id,
            epoch=self.epoch,
            bundle=self.epoch,
            event=f"bundle_{self.action.replace('-', '_')}",
            rows=self.rows,
            rows_refused=self.dead_letters,
            seconds=round(self.timings.get("total", 0.0), 6),
        )
        if self.action == "delivered":
            assert self.epoch is not None
            log.log(
                logging.INFO if self.dead_letters_at else logging.DEBUG,
                "barrier: pipeline %s: bundle %d (batch %d, %d rows) delivered to %s%s; GT_last=%d",
                pipeline,
                self.epoch,
                self.batch_id,
                self.rows,
                consumer,
                self.refused(),
                self.epoch,
                extra=context,
            )
            SUMMARIES.delivered(pipeline, self.epoch, self.rows, self.dead_letters)
        elif self.action == "dropped":
            log.info(
                "barrier: pipeline %s: batch %d dropped as replayed: bundle %d (%d rows) is "
                "at or below GT_last",
                pipeline,
                self.batch_id,
                self.epoch,
                self.rows,
                extra=context,
            )
            SUMMARIES.dropped(pipeline)
        elif self.dead_letters_at:
            log.info(
                "barrier: pipeline %s: batch %d: bundle %s had no rows to deliver%s",
                pipeline,
                self.batch_id,
                self.epoch,
                self.refused(),
                extra=context,
            )
        else:
            log.debug(
                "barrier: pipeline %s: batch %d (epoch %s) had no rows to deliver (%s)",
                pipeline,
                self.batch_id,
                self.epoch,
                self.action,
                extra=context,
            )

    def record_metrics(self, options: SinkOptions) -> None:
        """Append one JSON line to ``$GTBARRIER_METRICS`` if it is set (benchmarks)."""
        path = os.environ.get(METRICS_ENV)
        if not path:
            return
        rec = {
            "pipeline_id": options.pipeline_id,
            "delivery": options.delivery,
            "consumer": options.consumer,
            "batch_id": self.batch_id,
            "epoch": self.epoch,
            "action": self.action,
            "rows": self.rows,
            "recovered": self.recovered,
            "driver_bytes": self.driver_bytes,
            "dead_letters": self.dead_letters,
            "timings": self.timings,
        }
        with open(path, "a") as f:
            f.write(json.dumps(rec, sort_keys=True) + "\n")
