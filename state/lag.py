"""How far a frontier is behind Kafka's end: the lag the source logs once per planned
epoch, ``gtbarrier status`` shows and the metrics export
(``gtbarrier_source_offsets_behind``).

PySpark 4.3's Python streaming sources cannot add custom metrics to
``StreamingQueryProgress`` (``DataSourceStreamReader`` has ``reportLatestOffset`` only,
which gtkafka implements: the progress's ``latestOffset``), so the figures Spark's Kafka
source reports as metrics (``minOffsetsBehindLatest``, ``maxOffsetsBehindLatest``,
``avgOffsetsBehindLatest``) are logged by the driver instead, under the same names.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from state.records.source_offset import TopicPartitionKey


@dataclass(frozen=True)
class Lag:
    """Offsets behind Kafka's end, per partition (partitions the frontier has)."""

    behind: Mapping[TopicPartitionKey, int]

    @classmethod
    def between(
        cls, position: Mapping[TopicPartitionKey, int], latest: Mapping[TopicPartitionKey, int]
    ) -> Lag:
        """``latest - position`` for every partition in both (never below 0: a partition
        whose end Kafka reports lower, after a reset or data loss, is not behind)."""
        return cls(
            {tp: max(0, latest[tp] - off) for tp, off in sorted(position.items()) if tp in latest}
        )

    @property
    def minimum(self) -> int | None:
        return min(self.behind.values()) if self.behind else None

    @property
    def maximum(self) -> int | None:
        return max(self.behind.values()) if self.behind else None

    @property
    def average(self) -> float | None:
        return sum(self.behind.values()) / len(self.behind) if self.behind else None

    @property
    def total(self) -> int:
        return sum(self.behind.values())

    def metrics(self) -> dict[str, Any]:
        """The three figures under the names of Spark's Kafka source metrics."""
        return {
            "minOffsetsBehindLatest": self.minimum,
            "maxOffsetsBehindLatest": self.maximum,
            "avgOffsetsBehindLatest": self.average,
        }

    def describe(self) -> str:
        """One line: ``min 0, max 120, avg 40.0 offsets behind latest over 3 partitions``."""
        if not self.behind:
            return "no partitions"
        return (
            f"minOffsetsBehindLatest={self.minimum} maxOffsetsBehindLatest={self.maximum} "
            f"avgOffsetsBehindLatest={self.average:.1f} over {len(self.behind)} partition(s)"
        )
