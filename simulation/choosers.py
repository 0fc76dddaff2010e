"""Where a run's events come from: a fixed schedule (replay, exhaustive search, minimisation)
or a seeded random walk, and the alternatives a step offers.

:func:`alternatives` lists every event that applies where an actor stands: a preemption
for each other runnable actor, a crash of its driver (keeping or losing the checkpoint),
a lost answer if the point is a write, a consumer failure if it is a delivery, and the
environment's events (a second driver, an upgrade, a lost staged part, the operator).
The exhaustive search branches on exactly these; the random walk draws from them.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from simulation.scheduler import READS, WRITES, Actor, Event
from simulation.world import World

#: Every kind of event a step can offer (``heal`` is decided per schedule, not per step).
ALL_KINDS = frozenset(
    {
        "switch",
        "crash",
        "lost",
        "unavailable",
        "consumer",
        "zombie",
        "upgrade",
        "lose-part",
        "operator",
        "tolerate",
        "sweep",
        "recreate",
    }
)
#: What the exhaustive search branches on (read failures only end a run early, as a lost
#: write does, and are left to the random walk).
EXHAUSTIVE_KINDS = ALL_KINDS - {"unavailable"}


def alternatives(world: World, actor: Actor, kinds: Iterable[str] = ALL_KINDS) -> list[Event]:
    """The events that apply at ``actor``'s pending point, in a fixed order."""
    wanted = frozenset(kinds)
    found = [
        *(("switch", other.name) for other in world.runnable() if other is not actor),
        *_faults(world, actor),
        *_environment(world),
    ]
    return [Event(actor.name, actor.index, k, a) for k, a in found if k in wanted]


def _faults(world: World, actor: Actor) -> list[tuple[str, str]]:
    """A crash of the actor's driver, and the faults its pending point can have."""
    out: list[tuple[str, str]] = []
    if actor.proc is not None:
        out += [("crash", "keep"), ("crash", "lose")]
        if world.retained >= 2:
            out.append(("crash", "older"))
    kind = actor.pending.kind
    if kind in WRITES:
        out += [("lost", "applied"), ("lost", "not")]
    if kind in READS:
        out.append(("unavailable", ""))
    if kind == "deliver":
        out += [("consumer", "before"), ("consumer", "after")]
    if kind == "last-bundle":
        out.append(("consumer", "down"))
    return out


def _environment(world: World) -> list[tuple[str, str]]:
    """A second driver, an upgrade, a lost staged part, the operator (skipping a lost
    bundle; switching a pipeline with poison rows to ``errors.tolerance=all``; once, on a
    pipeline without the coordinator whose drivers prune, ``gtbarrier sweep --delete``);
    once, on a pipeline whose topic may be recreated, its deletion and creation."""
    out: list[tuple[str, str]] = []
    official = world.official
    if official is not None and official.status == "running":
        if len(world.procs) < world.config.max_procs:
            out += [("zombie", "shared"), ("zombie", "lost")]
        if world.upgrades < world.config.max_upgrades:
            out.append(("upgrade", ""))
    out += [("lose-part", location) for location in sorted(world.parts)[:4]]
    if world.checker.state.inflight is not None and world.operator_runs == 0:
        out.append(("operator", ""))
    if world.tolerance == "none" and world.input.poisoned and official is not None:
        out.append(("tolerate", ""))
    config = world.config
    if not config.coordinator and config.epochs_retained and world.sweeps == 0:
        out.append(("sweep", ""))
    if config.recreate and world.broker.incarnation == 0:
        out.append(("recreate", ""))  # the topic deleted and created again, once
    return out


@dataclass
class Branch:
    """A step of a run where no event fired, and what could have happened there."""

    step: int
    events: list[Event]


class ReplayChooser:
    """The events of a fixed schedule, each applied where its actor reaches its point.

    With ``branch_kinds``, it also records the alternatives of every step after the last
    event (for the exhaustive search's children)."""

    def __init__(self, events: Sequence[Event], branch_kinds: frozenset[str] | None = None) -> None:
        self.pending: dict[tuple[str, int], deque[Event]] = {}
        for e in events:
            self.pending.setdefault((e.actor, e.index), deque()).append(e)
        self.branch_kinds = branch_kinds
        self.branches: list[Branch] = []
        self.last_fired_step = -1

    def take(self, world: World, actor: Actor, first: bool) -> Event | None:
        queue = self.pending.get((actor.name, actor.index))
        if not queue:
            return None
        self.last_fired_step = world.step
        return queue.popleft()

    def observe(self, world: World, actor: Actor) -> None:
        if self.branch_kinds is not None and not self.pending_left():
            self.branches.append(Branch(world.step, alternatives(world, actor, self.branch_kinds)))

    def pending_left(self) -> bool:
        return any(self.pending.values())


@dataclass(frozen=True)
class RandomWalk:
    """How a random walk draws its events (rates per step; scaled per seed)."""

    switch: float = 0.05
    fault: float = 0.02
    environment: float = 0.01
    max_events: int = 6
    #: The chance that a schedule's faults end at a random step (else when the run ends).
    early_heal: float = 0.4
    #: Events the walk draws from.
    kinds: frozenset[str] = field(default=ALL_KINDS)


#: Two drivers, interleaved: preemptions, second drivers and upgrades only, more often.
CONCURRENCY = RandomWalk(
    switch=0.08, environment=0.02, kinds=frozenset({"switch", "zombie", "upgrade"})
)
#: Long schedules: every kind of event, twice as often, up to 12 of them.
DEEP = RandomWalk(switch=0.08, fault=0.04, environment=0.02, max_events=12)
#: The random walks' profiles, taken in turn by seed: every kind of event; two drivers
#: interleaving (the races a preemption-heavy walk reaches sooner); long schedules.
PROFILES = (RandomWalk(), CONCURRENCY, DEEP)


def walk_for(seed: int) -> RandomWalk:
    """The profile of the random walk of ``seed``."""
    return PROFILES[seed % len(PROFILES)]


#: The kinds a walk draws as faults, and as the environment's events (besides preemptions).
FAULT_KINDS = frozenset({"crash", "lost", "unavailable", "consumer"})
ENV_KINDS = frozenset(
    {"zombie", "upgrade", "lose-part", "operator", "tolerate", "sweep", "recreate"}
)


class RandomChooser:
    """A seeded random walk: at each step, perhaps one event drawn from the alternatives.

    Its choices depend only on the seed and the run, so a seed replays the same run."""

    def __init__(self, seed: int, walk: RandomWalk, expected_steps: int) -> None:
        self.rng = random.Random(seed)
        self.walk = walk
        scale = 0.25 + 1.5 * self.rng.random()
        self.rates = (walk.switch * scale, walk.fault * scale, walk.environment * scale)
        self.heal = "lose" if self.rng.random() < 0.5 else "keep"
        self.heal_at = (
            self.rng.randrange(1, expected_steps) if self.rng.random() < walk.early_heal else None
        )
        self.events = 0

    def take(self, world: World, actor: Actor, first: bool) -> Event | None:
        if not first:
            return None
        if self.heal_at is not None and world.step >= self.heal_at:
            self.heal_at = None
            return Event(actor.name, actor.index, "heal", self.heal)
        if self.events >= self.walk.max_events:
            return None
        r = self.rng.random()
        switch, fault, env = self.rates
        if r < switch:
            kinds = frozenset({"switch"})
        elif r < switch + fault:
            kinds = FAULT_KINDS
        elif r < switch + fault + env:
            kinds = ENV_KINDS
        else:
            return None
        options = alternatives(world, actor, kinds & self.walk.kinds)
        if not options:
            return None
        # A kind first, then one of its events: a point with many preemption targets or
        # staged parts must not crowd out the rarer kinds (a consumer failure).
        kind = self.rng.choice(sorted({e.kind for e in options}))
        self.events += 1
        return self.rng.choice([e for e in options if e.kind == kind])

    def observe(self, world: World, actor: Actor) -> None:
        pass
