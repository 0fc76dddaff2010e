"""The simulated consumer: stores a bundle's items and its id atomically.

:class:`SimConsumer` implements :class:`~sink.consumers.base.Consumer` as the file, s3
and http consumers behave: a bundle is stored whole or not at all, together with its id,
and storing an id it already has stores nothing again (they are idempotent on the bundle
id; ``last_bundle()`` is the newest id). It reads the bundle's parts from the staging
area as the product's consumers do (each read a scheduling point), and it can fail:

* before storing (:class:`~state.errors.DeliveryFailed`: certainly not stored);
* after storing, before its acknowledgement reaches the driver
  (:class:`~state.errors.CommitStateUnknown`: stored, not acknowledged);
* on ``last_bundle()`` (unreachable).

For the invariants it records every delivery attempt: which process and run made it, for
which bundle, whether it stored it, and the rows it stored (:class:`ConsumerLog`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from simulation.query import Row, table_rows
from simulation.scheduler import Op
from sink.bundle import Bundle
from sink.consumers.base import Ack, Consumer, LastBundle
from sink.faults import FaultInjector
from state.errors import CommitStateUnknown, DeliveryFailed

if TYPE_CHECKING:
    from simulation.staging import SimStaging

BEFORE = "consumer-before"
AFTER = "consumer-after"
DOWN = "consumer-down"


@dataclass(frozen=True)
class Delivery:
    """One delivery attempt that reached the consumer."""

    step: int
    actor: str
    run: str | None
    bundle_id: int
    redelivery: bool
    stored: bool


@dataclass
class ConsumerLog:
    """What the consumer holds (bundle id -> rows, in the order stored) and every attempt."""

    bundles: dict[int, list[Row]] = field(default_factory=dict)
    order: list[int] = field(default_factory=list)
    attempts: list[Delivery] = field(default_factory=list)

    @property
    def last(self) -> int | None:
        return self.order[-1] if self.order else None


class ConsumerHost(Protocol):
    """What the consumer needs of the simulation (:class:`simulation.world.World`)."""

    consumer: ConsumerLog

    def point(self, op: Op) -> str | None:
        """A scheduling point; the fault to apply to ``op``, if any."""

    def consumer_store(self, bundle_id: int, rows: list[Row], redelivery: bool) -> None:
        """Store the bundle (unless the consumer has it) and check what is stored."""


class SimConsumer(Consumer):
    """The consumer of the simulated pipeline (module docstring)."""

    name = "sim-consumer"

    def __init__(self, world: ConsumerHost, staging: SimStaging) -> None:
        super().__init__(staging, FaultInjector())
        self.world = world

    def deliver(self, bundle: Bundle, *, redelivery: bool = False) -> Ack:
        fault = self.world.point(Op("deliver", str(bundle.bundle_id)))
        if fault == BEFORE:
            raise DeliveryFailed(f"{self.name}: simulated failure before storing")
        rows: list[Row] = []
        for table in bundle.tables(self.staging):
            rows.extend(table_rows(table))
        self.world.consumer_store(bundle.bundle_id, rows, redelivery)
        if fault == AFTER:
            raise CommitStateUnknown(
                f"{self.name}: simulated failure after storing bundle {bundle.bundle_id}"
            )
        return Ack(bundle.bundle_id, len(rows))

    def last_bundle(self) -> LastBundle | None:
        if self.world.point(Op("last-bundle")) is not None:
            raise DeliveryFailed(f"{self.name}: simulated: unreachable")
        last = self.world.consumer.last
        return None if last is None else LastBundle(last, last)

    def describe(self) -> str:
        return self.name
