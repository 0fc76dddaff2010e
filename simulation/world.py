"""One simulated schedule: the pipeline, its processes, the scheduler loop and the faults.

:meth:`World.run` starts the first driver, then repeats one *step*: pick the actor that
runs (the current one unless an event of the schedule says otherwise), apply the events
anchored where it stands (a preemption, a crash, a lost answer, a second driver...), let
it run up to its next scheduling point, and check every invariant
(:mod:`simulation.invariants`). When the schedule's events are spent and every actor has
ended (or at a ``heal`` event), every actor stops and one healthy driver runs alone, with
no faults, until the input is consumed: the liveness check, after which the final
exactly-once checks run.

Everything is deterministic: the same :class:`Schedule` (or the same random seed)
produces the same run, step for step.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, Protocol

import pyarrow as pa

from datasource import log_pruner
from simulation.consumer import AFTER, BEFORE, DOWN, ConsumerLog, SimConsumer
from simulation.dead_letters import DeadLetterStoreHost
from simulation.invariants import Checker, Violation
from simulation.query import InputLog, Row, SimConfig
from simulation.scheduler import READS, WRITES, Abandoned, Actor, Event, Greenlet, Op
from simulation.source import SimBroker
from simulation.spark import PIPELINE, Checkpoint, DriverProc, skip_lost_bundle, sweep_take
from simulation.staging import SimStaging
from simulation.store import LOST_APPLIED, LOST_NOT_APPLIED, UNAVAILABLE, SimStore
from sink.dead_letters.dead_letter_settings import Tolerance
from sink.known_state import KNOWN
from state.layout import PipelineLayout
from state.protocol import barrier_state, epoch_floor, resume_point
from state.protocol.epoch_floor import read_floor
from state.records.barrier import BarrierState
from state.records.resume_point import ResumePoint
from state.records.source_offset import SourceOffset
from state.retry import Retry, cas_loop
from state.stores import StateStore, new_store

_WORLDS = itertools.count(1)


@dataclass(frozen=True)
class Schedule:
    """The events of one run and how its liveness check starts (``heal``)."""

    events: tuple[Event, ...] = ()
    heal: str = "keep"

    def __str__(self) -> str:
        if not self.events:
            return f"(no events; heal {self.heal})"
        return "; ".join(str(e) for e in self.events) + f"; heal {self.heal}"


class Chooser(Protocol):
    """Where a run's events come from: a fixed schedule, or a random walk."""

    def take(self, world: World, actor: Actor, first: bool) -> Event | None:
        """The next event anchored at ``actor``'s pending point, if any (``first``: the
        step's first question)."""

    def observe(self, world: World, actor: Actor) -> None:
        """A step in which no event fired runs ``actor``'s pending point."""


@dataclass
class StepRecord:
    """One step of a run, for traces and the exhaustive search's branching."""

    step: int
    actor: str
    index: int
    op: Op
    fault: str | None
    events: tuple[Event, ...]


@dataclass
class Outcome:
    """What a run did: its steps, the events that fired, and the first violation."""

    steps: int
    fired: list[Event]
    violation: Violation | None
    healed: bool
    trace: list[StepRecord] = field(default_factory=list)
    fired_at: list[tuple[int, Event, Op]] = field(default_factory=list)
    #: The bundle ids the consumer stored, in the order it stored them.
    delivered: list[int] = field(default_factory=list)
    #: Delivery attempts that reached the consumer (stored or not).
    attempts: int = 0
    #: The dead-letter files written: bundle id -> rows.
    dead_letters: dict[int, int] = field(default_factory=dict)
    #: Write task attempts that refused rows at errors.tolerance=none.
    refused: int = 0
    #: The step at which the faults ended and the healthy driver started (None: never).
    heal_step: int | None = None
    #: The abstract state the faults left (:meth:`World.abstract_state`), at the heal.
    state: str | None = None


@contextlib.contextmanager
def compaction_unit(epochs: int) -> Iterator[None]:
    """The product's compaction unit set to ``epochs`` for the block (0: left as it is):
    ``SEGMENT_EPOCHS`` where the epoch log's compaction and the driver's pruner read it,
    and the barrier's ``COMMITTED_STEP``, which the product keeps equal to it (the
    recorded progress trails the committed epochs by less than a segment)."""
    if not epochs:
        yield
        return
    places = [
        (epoch_floor, "SEGMENT_EPOCHS"),
        (log_pruner, "SEGMENT_EPOCHS"),
        (barrier_state, "COMMITTED_STEP"),
    ]
    saved = [getattr(module, name) for module, name in places]
    for module, name in places:
        setattr(module, name, epochs)
    try:
        yield
    finally:
        for (module, name), value in zip(places, saved, strict=True):
            setattr(module, name, value)


class World:
    """One run of one schedule (module docstring)."""

    def __init__(
        self,
        config: SimConfig,
        chooser: Chooser,
        *,
        heal: str = "keep",
        trace: bool = False,
    ) -> None:
        self.config = config
        self.chooser = chooser
        self.heal_mode = heal
        self.keep_trace = trace
        #: The broker, and the topic as it is now (``recreate`` replaces it).
        self.broker = SimBroker(config.input_logs())
        self.input: InputLog = self.broker.log
        self.layout = PipelineLayout(PIPELINE)
        # One memory store per process, emptied after each run; the views of each run have
        # configurations of their own (the product keeps per-process memory by them).
        self.number = next(_WORLDS)
        self.inner: StateStore = new_store(f"memory://simulation-{os.getpid()}")
        #: The dead-letter destination (``errors.deadLetter.path``), a store of its own.
        self.dead_inner: StateStore = new_store(f"memory://simulation-dead-{os.getpid()}")
        self.dead_host = DeadLetterStoreHost(self)
        #: The sink's errors.tolerance deployed now (``tolerate`` switches it to all).
        self.tolerance: Tolerance = "all" if config.tolerance == "all" else "none"
        self.refusals = 0
        self.parts: dict[str, pa.Table] = {}
        self.staging = SimStaging(self, self.layout)
        self.consumer = ConsumerLog()
        self.consumer_api = SimConsumer(self, self.staging)
        self.actors: list[Actor] = []
        self.procs: list[DriverProc] = []
        self.official: DriverProc | None = None
        self.operator_runs = 0
        self.operator_errors: list[str] = []
        #: Snapshots the resume point retains (a crash may find the newest unusable).
        self.retained = 0
        self.upgrades = 0
        #: The query version deployed now, and the resume point generation each deployed
        #: version began (version 1: generation 0, the pipeline's start). A driver of a
        #: version without one begins it: ``recover(mode="replay")``.
        self.version = 1
        self.generations: dict[int, int] = {1: 0}
        self.snapshot_files: dict[str, dict[str, Any]] = {}
        self.current: Actor | None = None
        self.main: Greenlet | None = None
        self.step = 0
        self.healing = False
        self.closed = False
        self.fired: list[Event] = []
        self.fired_at: list[tuple[int, Event, Op]] = []
        self.trace: list[StepRecord] = []
        self.barrier_changed = False
        self.staging_changed = False
        self.fault_deleted: set[str] = set()
        self.deleted_by: dict[str, str] = {}
        self.query_ids = itertools.count(1)
        self.checker = Checker(self)
        self.violation: Violation | None = None
        self.heal_step: int | None = None
        self.heal_state: str | None = None
        #: The highest floor each query run's own pruner wrote, by run id.
        self.floor_by: dict[str, int] = {}
        #: The highest floor written so far (a compaction's write leaves it).
        self.floor_epoch = 0
        #: Drivers that asked for an epoch another query's pruning had removed (the
        #: product's documented stop, ``EpochsPruned``: restore a snapshot, or start at the
        #: floor).
        self.pruned_stops: set[str] = set()
        #: Runs of ``gtbarrier sweep --delete`` (the ``sweep`` event).
        self.sweeps = 0

    # --- what the simulated processes call ------------------------------------------------

    def point(self, op: Op) -> str | None:
        """A scheduling point of the running actor: wait for the scheduler's decision.
        Returns the fault to apply to ``op`` (None: none)."""
        actor = self.current
        if self.closed or actor is None or self.main is None:
            raise Abandoned
        actor.pending = op
        return self.main.switch()

    def wait_until(self, ready: Callable[[], bool]) -> None:
        """Block the running actor until ``ready()`` holds (a scheduling point then)."""
        if ready():
            return
        actor = self.current
        if actor is None:
            raise Abandoned
        actor.wait = ready
        try:
            self.point(Op("wait"))
        finally:
            actor.wait = None

    def sleep(self, seconds: float) -> None:
        """A back-off: a scheduling point, no time passes."""
        self.point(Op("sleep"))

    def clock(self) -> float:
        """The simulation's clock: a millisecond per step (a store request's order of
        magnitude), so that the product's retry deadlines (30 s of lost races) are
        bounded by their attempts, as they are in reality, not by the step count."""
        return self.step / 1000.0

    def retry(self) -> Retry:
        """The product's retry loop for lost races, on the simulation's sleep and clock."""
        return cas_loop(sleep=self.sleep, clock=self.clock)

    def checkpoint_point(self, what: str, batch_id: int) -> None:
        """Writing a checkpoint log entry (local files, not the store): a crash point."""
        self.point(Op(f"ckpt-{what}", str(batch_id)))

    def view(self, name: str) -> SimStore:
        return SimStore(self, self.inner, f"w{self.number}-{name}")

    def newest_snapshot(self) -> int | None:
        """The id of the newest snapshot the resume point retains now (the fault model's
        read: no scheduling point)."""
        point, _ = resume_point.read_resume_point(
            resume_point.StoreResumePoints(self.inner, self.layout)
        )
        if point is None or not point.retained:
            return None
        return point.retained[0].snapshot_id

    def dead_view(self, name: str) -> SimStore:
        return SimStore(self.dead_host, self.dead_inner, f"w{self.number}-{name}")

    def dead_letter_written(self, key: str) -> None:
        """A write to the dead-letter store took effect (checked at once)."""
        self.checker.dead_letter_written(key)

    def current_tolerance(self) -> str | None:
        """The errors.tolerance of the running actor's driver (None: not a driver's)."""
        proc = self._proc(self.current)
        return None if proc is None else proc.tolerance

    def skipper_next_epoch(self) -> int | bool | None:
        """See :meth:`simulation.invariants.CheckedWorld.skipper_next_epoch`."""
        proc = self._proc(self.current)
        if proc is None or not proc.healthy or proc.name in self.pruned_stops:
            # A driver that met a pruned epoch (the product's documented stop) replays
            # nothing: no verdict on its operator's skip.
            return False
        return proc.checkpoint.next_epoch()

    def new_query_id(self) -> str:
        return f"q{next(self.query_ids)}"

    def planned(
        self, start: SourceOffset, end: SourceOffset, max_rows: int, ids: Mapping[str, str]
    ) -> None:
        """See :meth:`simulation.spark.World.planned` (checked at once)."""
        self.checker.planned(start, end, max_rows, ids)

    def read_dropped(self, epoch: int) -> None:
        """See :meth:`simulation.spark.World.read_dropped` (checked at once)."""
        self.checker.read_dropped(epoch)

    def met_pruned(self, query_id: str, epoch: int) -> None:
        """See :meth:`simulation.spark.World.met_pruned`: a violation if the pruner of the
        asking query run removed the epoch (``the pruner spares its query``), else the
        product's documented stop (another run's pruning: a query far behind, or on a new
        checkpoint)."""
        proc = self._proc(self.current)
        if proc is None:
            return
        own = self.floor_by.get(proc.run_id or "")
        if own is not None and own > epoch:
            self.checker.fail(
                "the pruner spares its query",
                f"query {query_id} (run {proc.run_id}) asks for epoch {epoch}, but its own "
                f"pruning raised the epoch log's floor to {own}",
            )
        else:
            self.pruned_stops.add(proc.name)

    def wrote(self, key: str) -> None:
        """A store write took effect (the invariants look at what it changed)."""
        if key.startswith(self.layout.epochs_prefix):
            self.checker.epoch_written(key)
        elif key == self.layout.source_floor:
            floor = read_floor(self.inner, self.layout)
            proc = self._proc(self.current)
            run_id = None if proc is None else proc.run_id
            # Only a write that raised the floor is this run's pruning: a compaction
            # rewrites the floor record with the epoch another run's pruning set.
            if floor is not None:
                if run_id is not None and floor.epoch > self.floor_epoch:
                    self.floor_by[run_id] = max(self.floor_by.get(run_id, 0), floor.epoch)
                self.floor_epoch = max(self.floor_epoch, floor.epoch)
                self.checker.floor_written(floor.epoch)
        elif key == self.layout.barrier_state:
            self.barrier_changed = True
        elif key == self.layout.resume_point:
            hit = self.inner.get_or_none(key)
            point = None if hit is None else ResumePoint.from_json(json.loads(hit.data))
            self.retained = 0 if point is None else len(point.retained)
            self.checker.resume_written(point)

    def part_deleted(self, location: str) -> None:
        self.staging_changed = True
        self.deleted_by[location] = self.current.name if self.current else "?"

    def consumer_store(self, bundle_id: int, rows: list[Row], redelivery: bool) -> None:
        """The consumer stores ``bundle_id`` atomically (nothing if it has it already)."""
        self.checker.consumer_store(bundle_id, rows, redelivery)

    def current_store(self) -> SimStore:
        """The store view of the running actor's process (for code that runs "in" it)."""
        proc = self._proc(self.current)
        if proc is not None:
            return proc.exec_store
        return self.view("outside")

    def _proc(self, actor: Actor | None) -> DriverProc | None:
        """The driver process of ``actor`` (None: the operator, or no actor)."""
        if actor is None or actor.proc is None:
            return None
        return next(p for p in self.procs if p is actor.proc)

    def current_run(self) -> str | None:
        proc = self.current.proc if self.current else None
        return proc.run_id if proc is not None else None

    def spawn(self, name: str, body: Callable[[], None], proc: DriverProc | None) -> Actor:
        actor = Actor(name=name, order=len(self.actors), body=body, proc=proc)
        self.actors.append(actor)
        return actor

    # --- the environment ------------------------------------------------------------------

    def start_driver(
        self,
        checkpoint: Checkpoint,
        *,
        healthy: bool = False,
        newest_unusable: bool = False,
    ) -> DriverProc | None:
        if not healthy and len(self.procs) >= self.config.max_procs:
            return None
        # The process reads the resume point's generation as it starts, before it would
        # wait for the driver lock: part of the start event, not a scheduling point of its own.
        point, _ = resume_point.read_resume_point(
            resume_point.StoreResumePoints(self.inner, self.layout)
        )
        proc = DriverProc(
            self,
            len(self.procs) + 1,
            checkpoint=checkpoint,
            version=self.version,
            started=resume_point.generation_of(point),
            tolerance=self.tolerance,
            healthy=healthy,
            newest_unusable=newest_unusable,
        )
        self.procs.append(proc)
        self.official = proc
        self.spawn(proc.name, proc.main, proc)
        return proc

    def kill(self, proc: DriverProc) -> None:
        """The process dies: its actors never run again (their memory is lost)."""
        for actor in self.actors:
            if actor.proc is proc:
                actor.alive = False
        proc.status = "dead"
        proc.main_done = True

    def crash(self, proc: DriverProc, how: str) -> None:
        """A crash of ``proc``; the driver the environment runs is restarted."""
        self.kill(proc)
        if proc is not self.official:
            return
        if how == "keep":
            self.start_driver(proc.checkpoint)
        else:
            self.start_driver(Checkpoint(), newest_unusable=how == "older")

    def zombie(self, how: str) -> None:
        """A second driver starts; the running one becomes a zombie."""
        old = self.official
        if old is None:
            return
        self.start_driver(old.checkpoint if how == "shared" else Checkpoint())

    def upgrade(self) -> None:
        """The operator replaces the query of the running driver by a new version."""
        proc = self.official
        if proc is None or proc.status != "running" or self.upgrades >= self.config.max_upgrades:
            return
        self.upgrades += 1
        self.version += 1
        for actor in self.actors:
            if actor.proc is proc and actor.name in (proc.name, f"{proc.name}u"):
                actor.alive = False
        proc.main_done = False
        self.spawn(f"{proc.name}u", proc.upgrade, proc)

    def tolerate(self) -> None:
        """The operator's way past a poison bundle: the driver's query is stopped and
        started again on the same checkpoint with ``errors.tolerance=all`` (a new driver
        process; every driver started afterwards runs at all)."""
        self.tolerance = "all"
        old = self.official
        if old is None:
            return
        self.kill(old)
        self.start_driver(old.checkpoint)

    def recreate(self) -> None:
        """The topic is deleted and created again (once): a new id, and new records past
        every end planned under the old one."""
        self.broker.recreate()
        self.input = self.broker.log

    def lose_part(self, location: str) -> None:
        if self.parts.pop(location, None) is not None:
            self.fault_deleted.add(location)
            self.staging_changed = True

    def operator(self) -> None:
        """The operator skips the in-flight bundle, acknowledging its loss (concurrently
        with whatever runs: the product says to stop the query first)."""
        self.operator_runs += 1
        name = f"op{self.operator_runs}"
        store = self.view(name)
        dead = self.dead_view(name)
        self.spawn(name, lambda: skip_lost_bundle(self, store, self.operator_errors, dead), None)

    def sweep(self) -> Actor:
        """The operator runs ``gtbarrier sweep --delete`` on the pipeline without the
        coordinator (concurrently with whatever runs: its ZooKeeper check finds no lock).
        It runs at once (a preemption): a command of a few requests, which the running
        driver meets at its next commit."""
        self.sweeps += 1
        name = f"sw{self.sweeps}"
        store = self.view(name)
        return self.spawn(name, lambda: sweep_take(self, store, name, self.operator_errors), None)

    def heal(self, how: str) -> None:
        """Faults end: every actor stops, and one healthy driver runs alone."""
        self.healing = True
        self.heal_step = self.step
        self.heal_state = self.abstract_state()
        last = self.official
        for actor in self.actors:
            actor.alive = False
        checkpoint = last.checkpoint if last is not None and how == "keep" else Checkpoint()
        self.start_driver(checkpoint, healthy=True)

    def abstract_state(self) -> str:
        """What the faults left, without clocks or names: the barrier state's progress,
        owner generation and token and the epoch in flight, the resume point's position,
        the epochs recorded, what the consumer and the dead letters hold, how many parts
        are staged, each driver's status. Distinct values count the distinct states the
        exploration reached (raw steps count every interleaving)."""
        hit = self.inner.get_or_none(self.layout.barrier_state)
        barrier = None if hit is None else BarrierState.from_json(json.loads(hit.data))
        hit = self.inner.get_or_none(self.layout.resume_point)
        point = None if hit is None else ResumePoint.from_json(json.loads(hit.data))
        epochs = 0
        while self.inner.get_or_none(self.layout.epoch(epochs)) is not None:
            epochs += 1
        key = (
            None
            if barrier is None
            else (
                barrier.gt_last,
                None if barrier.inflight is None else barrier.inflight.epoch,
                None if barrier.owner is None else barrier.owner.generation,
                None if barrier.owner is None else barrier.owner.token,
                len(barrier.skipped),
            ),
            None if point is None else (point.generation, point.epoch, len(point.retained)),
            epochs,
            tuple(self.consumer.order),
            tuple(sorted(self.checker.dead)),
            len(self.parts),
            tuple(p.status for p in self.procs),
            self.version,
            self.tolerance,
            self.broker.incarnation,
        )
        return repr(key)

    # --- the scheduler loop ---------------------------------------------------------------

    def runnable(self) -> list[Actor]:
        return [a for a in self.actors if a.runnable()]

    def run(self) -> Outcome:
        """Run the schedule, then the liveness check; the first violation ends it."""
        KNOWN.clear()
        self.main = Greenlet.current()
        with compaction_unit(self.config.segment_epochs):
            try:
                self.start_driver(Checkpoint())
                self._loop(self.config.max_steps)
                if self.violation is None:
                    if not self.healing:
                        self.heal(self.heal_mode)
                    self._loop(self.step + self.config.heal_steps)
                    if self.violation is None:
                        self.checker.final()
            finally:
                self._teardown()
        return Outcome(
            self.step,
            self.fired,
            self.violation,
            self.healing,
            self.trace,
            self.fired_at,
            list(self.consumer.order),
            len(self.consumer.attempts),
            {k: len(rows) for k, rows in sorted(self.checker.dead.items())},
            self.refusals,
            heal_step=self.heal_step,
            state=self.heal_state,
        )

    def _loop(self, until: int) -> None:
        """Steps until ``until``, a violation, no runnable actor, or a heal (whose healthy
        driver gets a budget of its own)."""
        healing = self.healing
        while self.violation is None and self.healing == healing:
            if self.step >= until:
                if self.healing:
                    self.checker.fail(
                        "liveness", f"the healthy driver did not finish in {until} steps"
                    )
                return
            runnable = self.runnable()
            if not runnable:
                return
            actor, fault, events = self._choose(runnable)
            if actor is None:
                continue  # a heal or a crash of everything: choose again
            self._run_step(actor, fault, events)

    def _default(self, runnable: list[Actor]) -> Actor:
        current = self.current
        if current is not None and current in runnable:
            return current
        return runnable[0]

    def _choose(self, runnable: list[Actor]) -> tuple[Actor | None, str | None, tuple[Event, ...]]:
        """The actor that runs this step, the fault on its pending point (the value the
        store, staging or consumer sees), and the events that fired."""
        actor = self._default(runnable)
        fault: str | None = None
        fired: list[Event] = []
        first = True
        while not self.healing:
            event = self.chooser.take(self, actor, first)
            first = False
            if event is None:
                break
            applied = self._apply(event, actor)
            if applied is None:
                continue
            fired.append(event)
            self.fired.append(event)
            self.fired_at.append((self.step, event, actor.pending))
            if isinstance(applied, Actor):
                actor = applied  # a preemption: that actor runs (its own events next)
                continue
            if applied:
                fault = applied
                break
            # the world changed (a crash, a new actor, a heal): choose again from scratch
            runnable = self.runnable()
            if not runnable:
                return None, None, tuple(fired)
            actor = self._default(runnable)
        if not fired:
            self.chooser.observe(self, actor)
        return actor, fault, tuple(fired)

    def _apply(self, event: Event, actor: Actor) -> Actor | str | None:  # noqa: PLR0911 - one return per outcome
        """Apply ``event`` where ``actor`` stands. Returns the actor to run instead (a
        preemption), the fault for its pending point, ``""`` if the world changed, or None
        if the event does not apply there."""
        if event.kind == "switch":
            target = next((a for a in self.actors if a.name == event.arg and a.runnable()), None)
            return None if target is None or target is actor else target
        fault = _fault(event, actor.pending)
        if fault is not None:
            return fault
        proc = self._proc(actor)
        if event.kind == "crash":
            if proc is None:
                return None
            self.crash(proc, event.arg)
        elif event.kind == "lose-part":
            if event.arg not in self.parts:
                return None
            self.lose_part(event.arg)
        elif event.kind == "sweep":
            return self.sweep()
        elif event.kind in self._environment:
            self._environment[event.kind](self, event.arg)
        else:
            return None
        return ""

    _environment: ClassVar[dict[str, Callable[[World, str], None]]] = {
        "zombie": lambda w, arg: w.zombie(arg),
        "upgrade": lambda w, arg: w.upgrade(),
        "operator": lambda w, arg: w.operator(),
        "tolerate": lambda w, arg: w.tolerate(),
        "recreate": lambda w, arg: w.recreate(),
        "heal": lambda w, arg: w.heal(arg),
    }

    def _run_step(self, actor: Actor, fault: str | None, events: tuple[Event, ...]) -> None:
        if self.keep_trace:
            self.trace.append(
                StepRecord(self.step, actor.name, actor.index, actor.pending, fault, events)
            )
        self.current = actor
        actor.index += 1
        self.step += 1
        if actor.glet is None:
            actor.glet = Greenlet(self._body(actor), self.main)
            actor.glet.switch(first=True)
        else:
            actor.glet.switch(fault)
        if actor.glet.dead:
            actor.alive = False
        self.checker.after_step()

    def _body(self, actor: Actor) -> Callable[[], None]:
        def run() -> None:
            try:
                actor.body()
            except Abandoned:
                raise
            except Exception as err:  # a product or simulator error no fault explains
                self.checker.unexpected(actor.name, err)

        return run

    def _teardown(self) -> None:
        """Unwind every abandoned greenlet (their requests fail at once) and drop the
        store's contents."""
        self.closed = True
        for actor in self.actors:
            glet = actor.glet
            if glet is not None and not glet.dead:
                with contextlib.suppress(Abandoned):
                    glet.throw()
        self.actors.clear()
        self.inner.delete_many(self.inner.list())
        self.dead_inner.delete_many(self.dead_inner.list())


def _fault(event: Event, op: Op) -> str | None:
    """The fault ``event`` makes at ``op`` (what the store, staging or consumer sees), or
    None if it is not a fault that applies there."""
    if event.kind == "lost" and op.kind in WRITES:
        return LOST_APPLIED if event.arg == "applied" else LOST_NOT_APPLIED
    if event.kind == "unavailable" and op.kind in READS:
        return UNAVAILABLE
    if event.kind == "consumer":
        if op.kind == "deliver" and event.arg in ("before", "after"):
            return BEFORE if event.arg == "before" else AFTER
        if op.kind == "last-bundle" and event.arg == "down":
            return DOWN
    return None
