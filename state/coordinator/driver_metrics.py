"""The driver's metrics endpoint: the coordinator's ``metrics_port``.

At each scrape it reads the barrier state, the epoch log and the batch records from the
state store (a store of its own, so a scrape never waits behind a snapshot's uploads)
and the resume point through the coordinator (its ZooKeeper session, or the store), and
adds what this driver process observed: the duration of each completed micro-batch as
Spark's progress reports it (:class:`DriverObservations`), and the snapshots it accepted
and abandoned. The source's lag is read at each scrape when the coordinator was given
the source's Kafka settings (``source_ends``, :class:`~state.metrics.source_lag.SourceEnds`:
Kafka's end against the newest planned epoch, as ``gtbarrier exporter --bootstrap`` reads
it), so it grows while a query is stuck; without them it is the one each completed batch
reported (which stands still while no batch completes). ``/ready`` is the coordinator's readiness
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
from state.metrics.source_lag import SourceEnds
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

    @property
    def source_ends(self) -> SourceEnds | None: ...

    def readiness(self) -> Readiness: ...


class DriverMetrics:
    """The endpoint of one coordinator: its server, its store, its observations and its
    reader of Kafka's ends (closed with it)."""

    def __init__(self, coordinator: Coordinated, store: StateStore, server_port: int) -> None:
        self.coordinator = coordinator
        self.store = store
        self.source_ends = coordinator.source_ends
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
        """What one scrape shows (raises the store's or ZooKeeper's errors; Kafka's are
        the reading's :attr:`~PipelineReading.errors`)."""
        facts = self._reader.read()
        if self.source_ends is not None:
            lag = self.source_ends.read(facts.planned)
            behind, ends, errors = lag.behind, lag.ends, lag.errors
        else:
            behind, ends, errors = self.observations.behind(), None, ()
        return PipelineReading(
            pipeline=self.coordinator.config.pipeline_id,
            facts=facts,
            resume=self.coordinator.ownership.read_resume_point(),
            behind=behind,
            ends=ends,
            microbatches=self.observations.histogram(),
            snapshots=SnapshotCounts(self.coordinator.accepted, self.coordinator.abandoned),
            errors=errors,
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
        """Stop serving, then close the Kafka reader and the store."""
        try:
            self.server.stop()
        finally:
            try:
                if self.source_ends is not None:
                    self.source_ends.close()
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
