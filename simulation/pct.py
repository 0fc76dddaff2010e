"""PCT: randomized-priority scheduling (Burckhardt, Kothari, Musuvathi, Nagarakatte, "A
randomized scheduler with probabilistic guarantees of finding bugs", ASPLOS 2010).

The random walks (:class:`~simulation.choosers.RandomChooser`) preempt the running actor
at any step with a fixed small probability, so a bug that needs the actors interleaved in
one particular order at two or three places is reached only when several rare draws line
up. PCT draws the *schedule's shape* instead: every actor (a driver's query ``pN``, its
snapshot worker ``pNs``, an upgrade ``pNu``, the operator ``opN``, a sweep ``swN``) gets a
random priority when it first appears, the highest-priority runnable actor always runs, and
at ``depth - 1`` change points, steps drawn uniformly over the run's expected length, the
actor about to run drops below every other one. A bug of depth ``d`` (``d`` ordering
constraints between actors) is then found with probability at least ``1 / (n k^(d-1))``
per run, for ``n`` actors and ``k`` steps, whatever the bug.

How it composes with the events: PCT decides only *who runs*; its decisions are ordinary
``switch`` events anchored where the preempted actor stands, so a PCT run's schedule
replays and minimises as any other. Faults and the environment's events (a crash, a lost
answer, a consumer failure, a second driver, an upgrade, a lost part, the operator) keep
the rates and the kinds of the seed's walk profile (:func:`~simulation.choosers.walk_for`),
drawn at the actor PCT chose, after it chose; the profile's own preemption rate is not
used. Every event but a second driver's start counts toward the profile's ``max_events``:
a zombie is the setting of most protocol bugs, and PCT's priorities are what make one
interleave, so its start is free (``SimConfig.max_procs`` still bounds the drivers).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Protocol

from simulation.choosers import ENV_KINDS, FAULT_KINDS, RandomWalk, alternatives, walk_for
from simulation.scheduler import Actor, Event
from simulation.world import World

#: The depths PCT runs take in turn (by seed, :func:`pct_for`).
DEPTHS = (2, 3, 4)


class Stage(Protocol):
    """What PCT's decision of who runs reads of the world (:class:`World` has it)."""

    @property
    def step(self) -> int: ...

    @property
    def actors(self) -> list[Actor]: ...

    def runnable(self) -> list[Actor]: ...


@dataclass(frozen=True)
class Pct:
    """A PCT run's parameters: ``depth`` (``d``: ``d - 1`` priority change points) and the
    walk profile whose fault and environment rates it keeps."""

    depth: int
    walk: RandomWalk

    def __post_init__(self) -> None:
        if self.depth < 1:
            raise ValueError(f"PCT depth: {self.depth!r}; expected an integer of at least 1")


def pct_for(seed: int, depth: int | None = None) -> Pct:
    """The PCT parameters of ``seed``: the seed's walk profile (``seed % 3``, as for the
    random walks), its pipeline by the next base-3 digit (``walk_config``), and the depth
    by the one after (2, 3, 4), so that every depth meets every profile and pipeline.
    ``depth`` overrides the seed's."""
    return Pct(DEPTHS[(seed // 9) % len(DEPTHS)] if depth is None else depth, walk_for(seed))


class PctChooser:
    """A seeded PCT run (module docstring). Its choices depend only on the seed and the
    run, so a seed replays the same run; the events that fired form its schedule.

    Each step asks it up to three questions, in this order: the heal (as the random walk
    draws it), who runs (a ``switch`` to the highest-priority runnable actor if that is
    not the one the scheduler would run), and one fault or environment event at the actor
    that runs."""

    def __init__(self, seed: int, pct: Pct, expected_steps: int) -> None:
        self.rng = random.Random(seed)
        self.pct = pct
        walk = pct.walk
        scale = 0.25 + 1.5 * self.rng.random()
        self.rates = (walk.fault * scale, walk.environment * scale)
        self.heal = "lose" if self.rng.random() < 0.5 else "keep"
        self.heal_at = (
            self.rng.randrange(1, expected_steps) if self.rng.random() < walk.early_heal else None
        )
        #: The change points, in step order (the same step may be drawn twice: then the
        #: two changes demote two actors in turn).
        self.changes = sorted(self.rng.randrange(1, expected_steps) for _ in range(pct.depth - 1))
        self.changed = 0
        #: Actor name -> priority: above ``depth`` when it appears, ``depth - i`` once the
        #: ``i``-th change point demoted it (below every actor that was not demoted later).
        self.priority: dict[str, float] = {}
        self.events = 0
        self._scheduled = False
        self._drawn = False

    def take(self, world: World, actor: Actor, first: bool) -> Event | None:
        if first:
            self._scheduled = self._drawn = False
            if self.heal_at is not None and world.step >= self.heal_at:
                self.heal_at = None
                return Event(actor.name, actor.index, "heal", self.heal)
        if not self._scheduled:
            self._scheduled = True
            chosen = self.schedule(world)
            if chosen is not None and chosen is not actor:
                return Event(actor.name, actor.index, "switch", chosen.name)
        if not self._drawn:
            self._drawn = True
            return self._draw(world, actor)
        return None

    def observe(self, world: World, actor: Actor) -> None:
        pass

    def schedule(self, world: Stage) -> Actor | None:
        """The runnable actor of the highest priority, after giving actors seen for the
        first time their priority and applying the change points this step reached."""
        for a in world.actors:
            if a.name not in self.priority:
                self.priority[a.name] = self.pct.depth + self.rng.random()
        runnable = world.runnable()
        if not runnable:
            return None
        while self.changes and world.step >= self.changes[0]:
            self.changes.pop(0)
            self.changed += 1
            self.priority[self._highest(runnable).name] = self.pct.depth - self.changed
        return self._highest(runnable)

    def _highest(self, runnable: list[Actor]) -> Actor:
        return max(runnable, key=lambda a: self.priority[a.name])

    def _draw(self, world: World, actor: Actor) -> Event | None:
        """Perhaps one fault or environment event at ``actor``, at the profile's rates."""
        walk = self.pct.walk
        fault, env = self.rates
        r = self.rng.random()
        if r < fault:
            kinds = FAULT_KINDS
        elif r < fault + env:
            kinds = ENV_KINDS
        else:
            return None
        kinds &= walk.kinds
        if self.events >= walk.max_events:
            kinds &= {"zombie"}  # the budget is spent; a zombie's start is free
        options = alternatives(world, actor, kinds)
        if not options:
            return None
        # A kind first, then one of its events (as the random walk draws them).
        kind = self.rng.choice(sorted({e.kind for e in options}))
        if kind != "zombie":
            self.events += 1
        return self.rng.choice([e for e in options if e.kind == kind])
