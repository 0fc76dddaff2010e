"""gtbarrier: exactly-once from Kafka through Spark Structured Streaming to any consumer.

What users import::

    from gtbarrier import register_all, SnapshotCoordinator, kafka_ends, resolve_lost_inflight
    from gtbarrier.errors import PipelineFenced       # or: from gtbarrier import errors
from gtbarrier._version import __version__

    register_all(spark)          # the gtkafka source, the barrier sink, the session setting
    coord = SnapshotCoordinator(spark, pipeline_id=..., state_uri=..., checkpoint_location=...)
    # with metrics_port, source_ends=kafka_ends(source_options) reads the lag at each scrape

This package is the composition root and the public face: it depends on ``datasource``
(the ``gtkafka`` source), ``sink`` (the ``barrier`` sink) and ``state`` (the protocol and
the snapshot coordinator); none of them depends on it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import datasource
import sink
from gtbarrier import errors
from gtbarrier._version import __version__
from gtbarrier.errors import (
    CommitFailed,
    CommitStateUnknown,
    ConfigError,
    DeliveryFailed,
    FatalError,
    GtBarrierError,
    PipelineFenced,
    RetriableError,
)
from sink.lost_bundle import LostBundle, resolve_lost_inflight
from state.worker_logging import ensure_worker_logging

if TYPE_CHECKING:
    from gtbarrier.source_ends import kafka_ends
    from state.coordinator import SnapshotCoordinator

__all__ = [
    "CommitFailed",
    "CommitStateUnknown",
    "ConfigError",
    "DeliveryFailed",
    "FatalError",
    "GtBarrierError",
    "LostBundle",
    "PipelineFenced",
    "RetriableError",
    "SnapshotCoordinator",
    "__version__",
    "configure_logging",
    "errors",
    "kafka_ends",
    "register_all",
    "resolve_lost_inflight",
]


def register_all(spark: Any) -> None:
    """Register ``gtkafka`` and ``barrier`` with ``spark`` and set
    ``spark.sql.streaming.noDataMicroBatches.enabled=false``: a no-data batch has no
    epoch, so its output is not replay-stable and the barrier refuses it
    (docs/PROTOCOL.md, "Batch records")."""
    datasource.register(spark)
    sink.register(spark)


def configure_logging() -> None:
    """In the driver program, what Spark's Python workers get on their own: gtbarrier's
    loggers (the coordinator's among them) write to stderr at ``$GTBARRIER_LOG_LEVEL``
    in the format ``$GTBARRIER_LOG_FORMAT`` names (``text`` or ``json``), unless the
    program configured logging already (the root logger has a handler), which is then
    left as it is. Raises :class:`ConfigError` for a value those variables do not take."""
    ensure_worker_logging()


def __getattr__(name: str) -> Any:
    # Lazy: the coordinator is the driver's alone; a process that only registers the data
    # sources (or an executor unpickling them) never loads it.
    if name == "SnapshotCoordinator":
        from state.coordinator import SnapshotCoordinator

        return SnapshotCoordinator
    if name == "kafka_ends":
        from gtbarrier.source_ends import kafka_ends

        return kafka_ends
    raise AttributeError(f"module 'gtbarrier' has no attribute {name!r}")
