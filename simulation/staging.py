"""Where simulated write tasks stage their parts: in memory, as Arrow tables.

:class:`SimStaging` is a :class:`~sink.staging.Staging` under the pipeline's
``staging/`` prefix (the layout of the product's ``StoreStaging``), holding each part as
the in-memory table the write task produced: no Parquet bytes, which would only cost
time. Every request is a scheduling point, writes and deletions can lose their answer
(as the store's requests do), and every deletion is recorded with the actor that made it,
for the invariant that no part an in-flight record references disappears unless a fault
deleted it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import pyarrow as pa

from simulation.scheduler import Op
from simulation.store import LOST_APPLIED, LOST_NOT_APPLIED, UNAVAILABLE
from sink.staging import Staging
from state.errors import KeyNotFound, StoreUnavailable
from state.layout import PipelineLayout
from state.stores import StateStore


class StagingHost(Protocol):
    """What the staging area needs of the simulation (:class:`simulation.world.World`)."""

    parts: dict[str, pa.Table]
    staging_changed: bool

    def point(self, op: Op) -> str | None:
        """A scheduling point; the fault to apply to ``op``, if any."""

    def part_deleted(self, location: str) -> None:
        """A part was deleted by the running actor."""

    def current_store(self) -> StateStore:
        """The store view of the running actor's process."""


class SimStaging(Staging):
    """The pipeline's staging area, shared by every simulated process."""

    def __init__(self, world: StagingHost, layout: PipelineLayout) -> None:
        self.world = world
        self.layout = layout
        self.uri = "sim-staging"

    @property
    def root_prefix(self) -> str:
        return self.layout.staging_prefix

    def batch_prefix(self, query_id: str, batch_id: int) -> str:
        return self.layout.staging(query_id, batch_id)

    def write_part(self, location: str, table: pa.Table) -> int:
        fault = self._fault(Op("stage", location), location)
        self.world.parts[location] = table
        self.world.staging_changed = True
        if fault == LOST_APPLIED:
            raise self._lost(location)
        return int(table.nbytes)

    def read_part(self, location: str) -> pa.Table:
        if self.world.point(Op("read-part", location)) == UNAVAILABLE:
            raise StoreUnavailable(self.uri, location, "simulated: unreachable")
        table = self.world.parts.get(location)
        if table is None:
            raise KeyNotFound(self.uri, location)
        return table

    def list(self, prefix: str) -> list[str]:
        if self.world.point(Op("list-parts", prefix)) == UNAVAILABLE:
            raise StoreUnavailable(self.uri, prefix, "simulated: unreachable")
        return sorted(k for k in self.world.parts if k.startswith(prefix))

    def delete(self, location: str) -> None:
        self.delete_many([location])

    def delete_many(self, locations: Iterable[str]) -> None:
        # One request for all of them (the product's StoreStaging: one DeleteObjects).
        wanted = list(locations)
        if not wanted:
            return
        fault = self._fault(Op("delete-parts", wanted[0]), wanted[0])
        for location in wanted:
            if self.world.parts.pop(location, None) is not None:
                self.world.part_deleted(location)
        if fault == LOST_APPLIED:
            raise self._lost(wanted[0])

    def _fault(self, op: Op, location: str) -> str | None:
        fault = self.world.point(op)
        if fault in (LOST_NOT_APPLIED, UNAVAILABLE):
            raise self._lost(location)
        return fault

    def _lost(self, location: str) -> StoreUnavailable:
        return StoreUnavailable(self.uri, location, "simulated: the answer was lost")
