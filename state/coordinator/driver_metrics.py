"""The driver's metrics endpoint: the coordinator's ``metrics_port``.

At each scrape it reads the barrier state, the epoch log and the batch records from the
state store (a store of its own, so a scrape never waits behind a snapshot's uploads)
and the resume point through the coordinator (its ZooKeeper session, or the store), and
adds what this driver process observed: the lag and duration of each completed
micro-batch as Spark's progress reports them (:class:`DriverObservations`), and the
snapshots it accepted and abandoned. ``/ready`` is the coordinator's readiness
(:mod:`state.coordinator.readiness`), ``/healthz`` answers while the process serves.
Dead-letter rows need the sink's dead-letter path,
which the coordinator does not know: ``gtbarrier exporter --dead-letters`` shows them.
"""

from __future__ import annotations

import logging
from typing import Protocol

from state.coordinator.batches import CompletedBatch
from state.coordinator.config import CoordinatorConfig
from state.errors import MalformedOffset
from state.metrics.probes import Readiness
from state.metrics.reading import (
    DriverObservations,
    PipelineReading,
    SnapshotCounts,
    StateReader,
)
from state.metrics.server import MetricsServer, PipelineCollector
from state.records.resume_point import ResumePoint
from state.records.source_offset import Frontier, parse_frontier_json
from state.stores import StateStore, new_store

log = logging.getLogger(__name__)


class ResumePointSource(Protocol):
    def read_resume_point(self) -> ResumePoint | None: ...


class Coordinated(Protocol):
    """What the endpoint reads of the coordinator."""

    @property
    def config(self) -> CoordinatorConfig: ...

    @property
    def ownership(self) -> ResumePointSource: ...

    @property
    def accepted(self) -> int: ...

    @property
    def abandoned(self) -> int: ...

    def readiness(self) -> Readiness: ...


class DriverMetrics:
    """The endpoint of one coordinator: its server, its store and its observations."""

    def __init__(self, coordinator: Coordinated, store: StateStore, server_port: int) -> None:
        self.coordinator = coordinator
        self.store = store
        self.observations = DriverObservations()
        self._reader = StateReader(store, coordinator.config.layout)
        self.server = MetricsServer(
            PipelineCollector(self.read, pipeline=coordinator.config.pipeline_id),
            server_port,
            coordinator.config.metrics_address,
            access=coordinator.config.metrics_access,
            ready=coordinator.readiness,
        )

    @classmethod
    def start(cls, coordinator: Coordinated, port: int) -> DriverMetrics:
        """Listen on ``port`` (0: a free one); :class:`ConfigError` if it cannot."""
        store = new_store(coordinator.config.store)
        try:
            return cls(coordinator, store, port)
        except BaseException:
            store.close()
            raise

    def read(self) -> PipelineReading:
        """What one scrape shows (raises the store's or ZooKeeper's errors)."""
        return PipelineReading(
            pipeline=self.coordinator.config.pipeline_id,
            facts=self._reader.read(),
            resume=self.coordinator.ownership.read_resume_point(),
            behind=self.observations.behind(),
            microbatches=self.observations.histogram(),
            snapshots=SnapshotCounts(self.coordinator.accepted, self.coordinator.abandoned),
        )

    def observe(self, batch: CompletedBatch) -> None:
        """A completed micro-batch: its duration, and the source's lag after it."""
        self.observations.observe_batch(
            rows=batch.num_input_rows,
            seconds=batch.duration_ms / 1000.0,
            end=_offsets(batch.frontier) if batch.gtkafka else None,
            latest=_offsets(batch.latest),
        )

    def stop(self) -> None:
        """Stop serving and close the store."""
        try:
            self.server.stop()
        finally:
            self.store.close()


def _offsets(value: object) -> Frontier | None:
    """The frontier of a gtkafka offset's JSON (``{"offsets": {...}}``), None if absent."""
    if not isinstance(value, dict) or "offsets" not in value:
        return None
    try:
        return parse_frontier_json(value["offsets"])
    except MalformedOffset as err:
        log.warning("gtbarrier metrics: a progress offset is not gtkafka's: %s", err)
        return None
