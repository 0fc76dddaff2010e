"""What one barrier commit did: :class:`CommitOutcome`, its log line and its metrics line.

The log line (INFO for a delivered or dropped bundle and for rows refused, DEBUG
otherwise) is the user's record of the barrier's decisions; a bundle with rows its
consumer's target refused says how many and which dead-letter file holds them. With
``$GTBARRIER_METRICS`` set, every commit also appends one JSON line to that file (the
benchmarks read it).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass, field

from sink.options import SinkOptions

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

    def log(self, pipeline: str, consumer: str) -> None:
        """One line per commit: what the barrier decided, and for a delivery to whom."""
        if self.action == "delivered":
            log.info(
                "barrier: pipeline %s: bundle %d (batch %d, %d rows) delivered to %s%s; GT_last=%d",
                pipeline,
                self.epoch,
                self.batch_id,
                self.rows,
                consumer,
                self.refused(),
                self.epoch,
            )
        elif self.action == "dropped":
            log.info(
                "barrier: pipeline %s: batch %d dropped as replayed: bundle %d (%d rows) is "
                "at or below GT_last",
                pipeline,
                self.batch_id,
                self.epoch,
                self.rows,
            )
        elif self.dead_letters_at:
            log.info(
                "barrier: pipeline %s: batch %d: bundle %s had no rows to deliver%s",
                pipeline,
                self.batch_id,
                self.epoch,
                self.refused(),
            )
        else:
            log.debug(
                "barrier: pipeline %s: batch %d (epoch %s) had no rows to deliver (%s)",
                pipeline,
                self.batch_id,
                self.epoch,
                self.action,
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
