"""The invariants, checked after every step of a run and once at its end.

After every step (incrementally: only what the step may have changed):

* ``GT_last never moves back`` (every write of the barrier state);
* ``owner generation never moves back`` and ``fencing token never moves back``: a claim
  always supersedes, a lower token is always refused;
* ``bundle accepted once``: each bundle id is acknowledged into ``GT_last`` by exactly one
  swap, so under exactly one owner;
* ``in-flight parts kept``: every staged part the in-flight record references exists,
  unless a fault deleted it (no cleanup deletes what may still be delivered);
* when the consumer stores a bundle: ``order`` (its id is above every stored id: no
  duplicate, gt order between bundles), ``gt order within a bundle``, ``content`` (the rows
  equal a failure-free run of the query version that computed them, over the epochs as
  recorded: nothing lost, nothing added, stateful results right), ``held in flight``
  (the run that delivered it had recorded it in flight as the owner).

At the end, after the healthy driver ran alone: ``liveness`` (it finished; the input is
consumed; nothing is left in flight; ``GT_last`` is the last epoch) and ``exactly-once``
(every epoch's bundle is stored once, except a bundle an operator skipped because a fault
deleted its staged parts). A product error that no fault explains (an exception outside
the product's error hierarchy) is a violation too: ``unexpected exception``.
"""

from __future__ import annotations

import json
import traceback
from dataclasses import dataclass
from typing import Protocol

import pyarrow as pa

from simulation.consumer import ConsumerLog, Delivery
from simulation.query import InputLog, Reference, Row, same_rows
from simulation.scheduler import Actor
from simulation.spark import DriverProc
from state.layout import PipelineLayout
from state.records.barrier import NO_BUNDLE, BarrierState
from state.records.epoch import EpochRecord
from state.records.source_offset import SourceOffset
from state.stores import StateStore


@dataclass(frozen=True)
class Violation:
    """An invariant that failed: which, what was seen, at which step, in which actor."""

    invariant: str
    message: str
    step: int
    actor: str | None

    def __str__(self) -> str:
        who = f" ({self.actor})" if self.actor else ""
        return f"{self.invariant} at step {self.step}{who}: {self.message}"


class CheckedWorld(Protocol):
    """What the invariants look at (:class:`simulation.world.World`)."""

    inner: StateStore
    layout: PipelineLayout
    input: InputLog
    parts: dict[str, pa.Table]
    fault_deleted: set[str]
    deleted_by: dict[str, str]
    consumer: ConsumerLog
    current: Actor | None
    step: int
    violation: Violation | None
    barrier_changed: bool
    staging_changed: bool
    official: DriverProc | None

    def current_run(self) -> str | None:
        """The run id of the running actor's query (None outside a query)."""


class Checker:
    """The invariants of one run (module docstring)."""

    def __init__(self, world: CheckedWorld) -> None:
        self.world = world
        self.state = BarrierState()
        self.max_gt_last = NO_BUNDLE
        self.max_generation = 0
        self.max_token = 0
        self.accepted: dict[int, str] = {}
        self.inflight_owners: dict[int, set[str]] = {}
        self.reference = Reference(world.input, self.epoch_bounds)

    def fail(self, invariant: str, message: str) -> None:
        w = self.world
        if w.violation is None:
            actor = w.current.name if w.current is not None else None
            w.violation = Violation(invariant, message, w.step, actor)

    def unexpected(self, actor: str, err: Exception) -> None:
        where = traceback.format_exception(err)[-3:]
        self.fail(
            "unexpected exception",
            f"{actor}: {type(err).__name__}: {err} | {' '.join(s.strip() for s in where)}",
        )

    # --- after every step -------------------------------------------------------------------

    def after_step(self) -> None:
        w = self.world
        if w.barrier_changed:
            w.barrier_changed = False
            self._barrier_written()
            self._inflight_parts()
        elif w.staging_changed:
            self._inflight_parts()
        w.staging_changed = False

    def _barrier_written(self) -> None:
        w = self.world
        hit = w.inner.get_or_none(w.layout.barrier_state)
        if hit is None:
            return
        old, new = self.state, BarrierState.from_json(json.loads(hit.data))
        self.state = new
        owner = new.owner
        who = (
            "nobody"
            if owner is None
            else f"{owner.run_id or owner.driver} (gen {owner.generation})"
        )
        if new.gt_last < self.max_gt_last:
            self.fail(
                "GT_last never moves back",
                f"GT_last {self.max_gt_last} -> {new.gt_last}, written by {who}",
            )
        for k in range(old.gt_last + 1, new.gt_last + 1):
            if k in self.accepted:
                self.fail(
                    "bundle accepted once",
                    f"bundle {k} accepted by {self.accepted[k]} and again by {who}",
                )
            self.accepted[k] = who
        self.max_gt_last = max(self.max_gt_last, new.gt_last)
        if owner is not None:
            if owner.generation < self.max_generation:
                self.fail(
                    "owner generation never moves back",
                    f"generation {self.max_generation} -> {owner.generation} ({who})",
                )
            self.max_generation = max(self.max_generation, owner.generation)
            token = owner.token or 0
            if token < self.max_token:
                self.fail(
                    "fencing token never moves back", f"token {self.max_token} -> {token} ({who})"
                )
            self.max_token = max(self.max_token, token)
            if new.inflight is not None:
                self.inflight_owners.setdefault(new.inflight.bundle_id, set()).add(owner.run_id)

    def _inflight_parts(self) -> None:
        w = self.world
        inflight = self.state.inflight
        if inflight is None:
            return
        for part in inflight.parts:
            loc = part.location
            if loc not in w.parts and loc not in w.fault_deleted:
                self.fail(
                    "in-flight parts kept",
                    f"part {loc} of in-flight bundle {inflight.bundle_id} was deleted by "
                    f"{w.deleted_by.get(loc, '?')}",
                )

    # --- the consumer -----------------------------------------------------------------------

    def consumer_store(self, bundle_id: int, rows: list[Row], redelivery: bool) -> None:
        """Store ``bundle_id`` in the consumer (unless it has it) and check what is stored."""
        w = self.world
        log = w.consumer
        run = w.current_run()
        actor = w.current.name if w.current is not None else "?"
        stored = bundle_id not in log.bundles
        log.attempts.append(Delivery(w.step, actor, run, bundle_id, redelivery, stored))
        if not stored:
            return
        last = log.last
        log.bundles[bundle_id] = rows
        log.order.append(bundle_id)
        if last is not None and bundle_id < last:
            self.fail("order", f"bundle {bundle_id} stored after bundle {last}")
        gts = [r[4] for r in rows]
        if gts != sorted(gts):
            self.fail("gt order within a bundle", f"bundle {bundle_id}: {gts}")
        versions = {r[3] for r in rows}
        if len(versions) != 1:
            self.fail("content", f"bundle {bundle_id} mixes query versions {sorted(versions)}")
            return
        version = versions.pop()
        expected = self.reference.output(version, bundle_id)
        if not same_rows(rows, expected):
            missing = sorted(set(expected) - set(rows))
            extra = sorted(set(rows) - set(expected))
            self.fail(
                "content",
                f"bundle {bundle_id} (version {version}) differs from the failure-free run: "
                f"missing {missing}, unexpected {extra}",
            )
        if run is not None and run not in self.inflight_owners.get(bundle_id, set()):
            self.fail(
                "held in flight",
                f"bundle {bundle_id} delivered by run {run}, which never recorded it in flight "
                f"as the owner ({sorted(self.inflight_owners.get(bundle_id, set()))})",
            )

    # --- the end ------------------------------------------------------------------------------

    def epoch_bounds(self, k: int) -> tuple[SourceOffset, SourceOffset]:
        """Epoch ``k`` as the epoch log recorded it."""
        w = self.world
        hit = w.inner.get(w.layout.epoch(k))
        record = EpochRecord.from_json(json.loads(hit.data))
        return record.start, record.end

    def last_epoch(self) -> int | None:
        """The epoch that ends at the end of the input, if it is recorded."""
        w = self.world
        end = w.input.end()
        k = 0
        while w.inner.get_or_none(w.layout.epoch(k)) is not None:
            if dict(self.epoch_bounds(k)[1].offsets) == end:
                return k
            k += 1
        return None

    def final(self) -> None:
        """After the healthy driver's run: liveness, then exactly-once."""
        w = self.world
        healthy = w.official
        if healthy is None or healthy.status != "finished":
            status = "not started" if healthy is None else healthy.status
            errors = [] if healthy is None else healthy.errors[-2:]
            self.fail("liveness", f"the healthy driver alone did not finish: {status} {errors}")
            return
        last = self.last_epoch()
        if last is None:
            self.fail("liveness", "the healthy driver finished but the input is not consumed")
            return
        hit = w.inner.get_or_none(w.layout.barrier_state)
        state = BarrierState() if hit is None else BarrierState.from_json(json.loads(hit.data))
        if state.inflight is not None:
            self.fail("liveness", f"bundle {state.inflight.bundle_id} is left in flight")
            return
        if state.gt_last != last:
            self.fail("liveness", f"GT_last is {state.gt_last}, the last epoch is {last}")
            return
        skipped = {s.bundle_id: s for s in state.skipped}
        stored = w.consumer.bundles
        for k in range(last + 1):
            if k in stored:
                continue
            skip = skipped.get(k)
            if skip is None:
                self.fail("exactly-once", f"bundle {k} was never delivered")
                return
            if not set(skip.parts_missing) & w.fault_deleted:
                self.fail(
                    "exactly-once",
                    f"bundle {k} was skipped as lost, but no fault deleted its parts "
                    f"{list(skip.parts_missing)} (deleted by "
                    f"{[w.deleted_by.get(p, '?') for p in skip.parts_missing]})",
                )
                return
        extra = sorted(k for k in stored if k > last)
        if extra:
            self.fail("exactly-once", f"bundles {extra} beyond the last epoch {last}")
