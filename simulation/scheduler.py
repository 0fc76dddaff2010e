"""The simulator's vocabulary: scheduling points, actors, schedule events, and the typed
shim over greenlet.

Every actor (a driver's query, its snapshot worker, an upgrade, the operator) runs in a
greenlet. Whenever it is about to touch the outside world (a store request, a staging
request, a consumer call, a checkpoint write, a back-off sleep) it stops at a *scheduling
point* (:class:`Op`) and hands control back to the scheduler (:mod:`simulation.world`),
which decides who runs next and whether a fault happens. No threads, no real time.

A schedule is a list of :class:`Event`\\ s, each anchored to an actor and the index of
that actor's scheduling point (``p2`` at its 14th point), not to a global step: removing
one event from a schedule (minimisation) leaves the others meaning what they meant as
long as the actor's own course does not change. Without events the scheduler keeps
running the current actor until it blocks or ends, then takes the oldest runnable one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import greenlet as _greenlet  # type: ignore[import-untyped]

#: Store and staging requests whose answer can be lost (the write may or may not be done).
WRITES = frozenset({"put", "create", "cas", "delete", "stage", "delete-parts"})
#: Store and staging reads (random walks may make them fail: StoreUnavailable).
READS = frozenset({"get", "list", "read-part", "list-parts"})


@dataclass(frozen=True)
class Op:
    """A scheduling point: what the actor is about to do (``kind``) and to what."""

    kind: str
    key: str = ""

    def __str__(self) -> str:
        return f"{self.kind} {self.key}" if self.key else self.kind


@dataclass(frozen=True, order=True)
class Event:
    """One decision of a schedule, taken when actor ``actor`` stands at its scheduling
    point number ``index`` (0: its start).

    ``kind``/``arg``:

    * ``switch``/actor name: let that actor run instead (a preemption);
    * ``crash``/``keep``|``lose``|``older``: the actor's driver process dies (nothing of
      its memory survives); the environment starts a new driver that keeps its checkpoint,
      or loses it (``older``: and the newest snapshot is unusable too);
    * ``lost``/``applied``|``not``: the store request's answer is lost, after or before
      the write took effect;
    * ``unavailable``: a read fails (the store stayed unreachable);
    * ``consumer``/``before``|``after``|``down``: the consumer fails a delivery before
      storing it, after storing it (stored, not acknowledged), or a ``last_bundle()``;
    * ``zombie``/``shared``|``lost``: a second driver starts (with a copy of the
      checkpoint on shared storage, or on a host without it); the first becomes a zombie;
    * ``upgrade``: the operator stops the query and starts a new version of it on a fresh
      checkpoint (``recover(mode="replay")``: a new resume point generation);
    * ``lose-part``/location: a staged part is deleted (by hand, a lifecycle rule);
    * ``operator``: the operator skips the in-flight bundle, acknowledging its loss;
    * ``tolerate``: the operator restarts the driver on its checkpoint with
      ``errors.tolerance=all`` (a pipeline with poison rows that started at ``none``);
    * ``sweep``: the operator's ``gtbarrier sweep --delete`` takes the pipeline (a pruning
      pipeline without the coordinator), at once;
    * ``heal``/``keep``|``lose``: faults end; every actor stops and one healthy driver
      runs alone to the end (liveness), with the last driver's checkpoint or without.
    """

    actor: str
    index: int
    kind: str
    arg: str = ""

    def __str__(self) -> str:
        arg = f" {self.arg}" if self.arg else ""
        return f"{self.actor}@{self.index} {self.kind}{arg}"

    def to_json(self) -> list[Any]:
        return [self.actor, self.index, self.kind, self.arg]

    @classmethod
    def from_json(cls, raw: Any) -> Event:
        actor, index, kind, arg = raw
        return cls(str(actor), int(index), str(kind), str(arg))


class Abandoned(BaseException):
    """Raised in an abandoned actor's greenlet when the world is torn down: it unwinds the
    stack without any store request (a crashed process runs no handler in reality; only
    the teardown of the simulation runs them, and every request then fails at once)."""


class Process(Protocol):
    """What the scheduler knows of a driver process (:class:`simulation.spark.DriverProc`)."""

    name: str
    run_id: str | None


class Greenlet:
    """A typed handle on one greenlet (greenlet ships no type information)."""

    def __init__(self, run: Callable[[], None], parent: Greenlet | None) -> None:
        self._g: Any = _greenlet.greenlet(run=run, parent=None if parent is None else parent._g)

    @classmethod
    def current(cls) -> Greenlet:
        handle = cls.__new__(cls)
        handle._g = _greenlet.getcurrent()
        return handle

    def switch(self, value: str | None = None, *, first: bool = False) -> str | None:
        """Run this greenlet until it switches back; the value it switches back with."""
        result: Any = self._g.switch() if first else self._g.switch(value)
        return None if result is None else str(result)

    def throw(self) -> None:
        """Raise :class:`Abandoned` in it (teardown)."""
        self._g.throw(Abandoned)

    @property
    def dead(self) -> bool:
        return bool(self._g.dead)


@dataclass(eq=False)
class Actor:
    """One greenlet of the simulation: ``name`` (``p2`` a driver's query, ``p2s`` its
    snapshot worker, ``p2u`` its upgrade, ``op`` the operator), ``index`` the number of
    scheduling points it passed, ``pending`` the one it stands at."""

    name: str
    order: int
    body: Callable[[], None]
    proc: Process | None = None
    glet: Greenlet | None = None
    index: int = 0
    pending: Op = Op("start")
    alive: bool = True
    wait: Callable[[], bool] | None = None

    def runnable(self) -> bool:
        return self.alive and (self.wait is None or self.wait())
