"""What a chaos round does: :class:`RoundPlan`, drawn before it starts by
:func:`integration_tests.chaos.faults.draw_plan`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from integration_tests.chaos.poison import Poison
    from integration_tests.chaos.variants import SettingChange, Sparse


@dataclass(frozen=True)
class FaultSpec:
    """One fault of a round: its kind (a name in :data:`FAULTS`) and drawn parameters
    (a kind armed at start adds the bundle it chose when the driver starts)."""

    kind: str
    params: dict[str, Any]


@dataclass(frozen=True)
class Sizing:
    """How big rounds are: records per round, per micro-batch, in how many chunks."""

    max_offsets: int = 400
    min_batches: int = 3  # records per round: min_batches..max_batches x max_offsets
    max_batches: int = 5
    chunks: int = 3
    fault_counts: tuple[int, ...] = (1, 2, 3)
    fault_count_weights: tuple[float, ...] = (1.0, 2.0, 4.0)


@dataclass(frozen=True)
class RoundPlan:
    index: int
    seed: int
    query: str
    consumer: str
    partitions: int
    records: int
    chunks: int
    max_offsets: int
    cluster: bool
    faults: tuple[FaultSpec, ...] = field(default_factory=tuple)
    #: Input records whose rows the consumer refuses, and the tolerance the round starts
    #: at (None: no poison; :mod:`integration_tests.chaos.poison`).
    poison: Poison | None = None
    #: A consumer setting the round changes between driver starts, so that the refused
    #: set changes (None: none; :mod:`integration_tests.chaos.variants`).
    setting: SettingChange | None = None
    #: Sparse output: a filter that keeps few rows, many small epochs, a small
    #: ``state.epochsRetained`` (None: the query's full output).
    sparse: Sparse | None = None
    #: gtkafka's ``readMode``: ``executors``, or ``driver`` (no read task for a new batch).
    read_mode: str = "executors"

    @property
    def round_id(self) -> str:
        return f"r{self.index:03d}"

    def describe(self) -> str:
        where = "cluster" if self.cluster else "local"
        extra = "".join(
            f", {v.describe()}" for v in (self.poison, self.setting, self.sparse) if v is not None
        )
        if self.read_mode == "driver":
            extra += ", read on the driver"
        return (
            f"{self.query} -> {self.consumer}, {self.records} records in {self.partitions} "
            f"partition(s), {self.max_offsets}/batch, {where}{extra}"
        )
