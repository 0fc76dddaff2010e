"""Dead letters in the simulation: the consumer kind that refuses rows, the dead-letter
destination, and reading a dead-letter file back.

* :data:`SIM_KIND` is the simulated pipeline's consumer kind as the write tasks see it
  (:class:`~sink.write_task.RowChecks`): its ``validate`` refuses the ``bad`` rows of
  poison records (:mod:`simulation.query`) and the fan-out row its setting names
  (:class:`SimSettings`); the check every consumer shares refuses the ``nogt`` rows (a
  null ``gt``). Both run in the product's ``stage_task``.
* The destination is the product's
  :class:`~sink.dead_letters.dead_letter_files.StoreDeadLetters` over a ``memory://``
  store of its own, seen by each process through a
  :class:`~simulation.store.SimStore` (each request a scheduling point, writes with lost
  answers, as the state store's): the barrier is handed it (``Barrier(dead_letters=)``),
  so the dead letters take the product's create-once path and nothing of the product is
  replaced. The sink's options still name a ``file://`` path (the options accept
  ``file://`` and ``s3://`` only); it is never opened.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa
import pyarrow.parquet as pq

from simulation.query import BAD, SETTINGS, Row, table_rows
from simulation.scheduler import Op
from sink.bundle import Bundle
from sink.consumers.base import Ack, Consumer, LastBundle
from sink.consumers.consumer_kind import ConsumerKind, ConsumerSettings, RowRejection, SinkView
from sink.dead_letters.dead_letter_format import (
    BUNDLE_COLUMN,
    COLUMN_COLUMN,
    CREATED_KEY,
    REASON_COLUMN,
)
from sink.dead_letters.dead_letter_settings import Tolerance
from sink.faults import FaultInjector
from sink.staging import Staging
from sink.write_task import RowChecks
from state.options import Options

#: Why the simulated target refuses a ``bad`` row (its ``_gtb_reason``).
BAD_REASON = "simulated: a value the target refuses"
#: The sink option errors.deadLetter.path (never opened: see the module docstring).
DEAD_LETTER_PATH = "file:///simulated/dead-letters"


@dataclass(frozen=True)
class SimSettings(ConsumerSettings):
    """The simulated kind's settings: which of a fan-out record's two rows the target
    refuses (:data:`simulation.query.SETTINGS`), as a column's type or constraint would."""

    refuse: str = SETTINGS[0]


class SimKind(ConsumerKind[SimSettings]):
    """The simulated consumer's kind, for the write tasks' row checks only."""

    settings_type = SimSettings
    specs = ()

    def parse(self, opts: Options) -> SimSettings:
        return SimSettings()

    def validate(self, settings: SimSettings, table: pa.Table) -> list[RowRejection]:
        """The ``bad`` rows and the fan-out rows of kind ``settings.refuse`` (a pure
        function of the rows and the settings, as the product requires)."""
        kinds = table.column("kind").to_pylist()
        return [
            RowRejection(i, "value", BAD_REASON)
            for i, k in enumerate(kinds)
            if k in (BAD, settings.refuse)
        ]

    def open_consumer(self, options: SinkView, staging: Staging, faults: FaultInjector) -> Consumer:
        """Never called: the barrier is handed the simulated consumer."""
        return _Unused(staging, faults)


class _Unused(Consumer):
    name = "unused"

    def deliver(self, bundle: Bundle, *, redelivery: bool = False) -> Ack:
        raise NotImplementedError

    def last_bundle(self) -> LastBundle | None:
        raise NotImplementedError


SIM_KIND = SimKind()


def row_checks(tolerance: Tolerance, setting: int = 0) -> RowChecks:
    """What a simulated write task checks, at ``tolerance`` and consumer ``setting``."""
    return RowChecks("sim", SIM_KIND, SimSettings(SETTINGS[setting]), tolerance)


class DeadLetterHost(Protocol):
    """What the dead-letter store needs of the simulation (:class:`simulation.world.World`)."""

    def point(self, op: Op) -> str | None:
        """A scheduling point; the fault to apply to ``op``, if any."""

    def dead_letter_written(self, key: str) -> None:
        """A write to the dead-letter store took effect."""


class DeadLetterStoreHost:
    """The :class:`~simulation.store.StoreHost` of the dead-letter store's views: the
    world's scheduling points, and its own notice of writes."""

    def __init__(self, world: DeadLetterHost) -> None:
        self.world = world

    def point(self, op: Op) -> str | None:
        return self.world.point(op)

    def wrote(self, key: str) -> None:
        self.world.dead_letter_written(key)


def file_rows(data: bytes) -> tuple[list[Row], list[tuple[int, str, str | None]]]:
    """A dead-letter file's rows (its input columns, as the query produced them) and, for
    each, its ``_gtb_bundle``, ``_gtb_reason`` and ``_gtb_column``."""
    # One thread: a pool's start-up is most of the cost of reading so small a file.
    table = pq.read_table(pa.BufferReader(data), use_threads=False)
    context = list(
        zip(
            table.column(BUNDLE_COLUMN).to_pylist(),
            table.column(REASON_COLUMN).to_pylist(),
            table.column(COLUMN_COLUMN).to_pylist(),
            strict=True,
        )
    )
    return table_rows(table), context


def written_at(data: bytes) -> float | None:
    """When a dead-letter file says it was written (its footer's ``gtbarrier.created``:
    the writer's clock, the simulation's here), the time ``errors.deadLetter.retention``
    counts from; None if it does not say (retention keeps such a file)."""
    metadata = pq.read_metadata(pa.BufferReader(data)).metadata or {}
    created = metadata.get(CREATED_KEY)
    return None if created is None else float(created.decode())
