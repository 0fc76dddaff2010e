"""The simulator's invariants on hand-made states (pure checks over the simulated world's
store): each one flags what it forbids. A bug that reaches them in the product is the
mutation tests' business (test_simulation_mutations.py); these show the checks can fail."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest

from simulation.choosers import ReplayChooser
from simulation.query import SimConfig
from simulation.source import TOPIC_IDS
from simulation.world import World
from sink import cleanup
from state.protocol.barrier_state import BarrierStateStore
from state.records.barrier import BarrierState
from state.records.epoch import EpochRecord
from state.records.inflight_bundle import InflightBundle
from state.records.resume_point import ResumePoint, SnapshotRef
from state.records.source_offset import SourceOffset

TOPIC = "t"


_WORLDS: list[World] = []


@pytest.fixture(autouse=True)
def _empty_stores() -> Iterator[None]:
    """The worlds' memory stores are the process's (a run empties them at its end, and
    these worlds never run): empty them, so that no later run finds these records."""
    yield
    for world in _WORLDS:
        for store in (world.inner, world.dead_inner):
            store.delete_many(store.list())
    _WORLDS.clear()


def _world() -> World:
    world = World(SimConfig(partitions=1, per_partition=4), ReplayChooser(()))
    _WORLDS.append(world)
    return world


def _point(generation: int, epoch: int, batch_id: int, snapshot_id: int = 1) -> ResumePoint:
    ref = SnapshotRef(
        snapshot_id, f"sim/snapshots/{snapshot_id}/manifest.json", "x", epoch, batch_id
    )
    return ResumePoint(
        generation=generation,
        token=1,
        epoch=epoch,
        batch_id=batch_id,
        query_id="q1",
        frontier=None,
        created_at=0.0,
        retained=(ref,),
    )


def _violation(world: World) -> str | None:
    return None if world.violation is None else world.violation.invariant


def test_a_resume_point_that_moves_back_is_a_violation() -> None:
    world = _world()
    world.checker.resume_written(_point(0, 2, 2, snapshot_id=2))
    world.checker.resume_written(_point(1, -1, -1, snapshot_id=3))  # a new generation: forward
    assert _violation(world) is None
    world.checker.resume_written(_point(1, 3, 3, snapshot_id=4))
    world.checker.resume_written(_point(1, 1, 1, snapshot_id=5))
    assert _violation(world) == "resume point never moves back"


def test_a_snapshot_accepted_over_a_bundle_in_flight_is_a_violation() -> None:
    world = _world()
    inflight = InflightBundle(
        epoch=2, query_id="q1", batch_id=2, run_id="p1-r1", parts=(), has_gt=True, ordered=True
    )
    world.inner.put_json(
        world.layout.barrier_state, BarrierState(gt_last=1, inflight=inflight).to_json()
    )
    world.checker.resume_written(_point(0, 1, 1, snapshot_id=1))  # below it: fine
    assert _violation(world) is None
    world.checker.resume_written(_point(0, 2, 2, snapshot_id=2))  # at its epoch
    assert _violation(world) == "no snapshot over a bundle in flight"


def _epoch(world: World, k: int, start: int, end: int) -> None:
    key = next(iter(world.input.zero()))
    record = EpochRecord(k, SourceOffset(k, {key: start}), SourceOffset(k + 1, {key: end}))
    world.inner.put_json(world.layout.epoch(k), record.to_json())


def test_epochs_that_do_not_tile_the_input_are_a_violation() -> None:
    tiled = _world()
    key = next(iter(tiled.input.zero()))
    tiled.inner.put_json(tiled.layout.source_start, SourceOffset(0, {key: 0}).to_json())
    _epoch(tiled, 0, 0, 2)
    _epoch(tiled, 1, 2, 4)
    assert tiled.checker.tiled(1)
    assert _violation(tiled) is None

    gap = _world()
    gap.inner.put_json(gap.layout.source_start, SourceOffset(0, {key: 0}).to_json())
    _epoch(gap, 0, 0, 2)
    _epoch(gap, 1, 3, 4)  # offset 2 is in no epoch
    assert not gap.checker.tiled(1)
    assert _violation(gap) == "epochs tile the input"


def _claim(world: World, run_id: str, token: int) -> None:
    """``run_id`` claims the pipeline as its first commit does (the product's claim_run)."""
    states = BarrierStateStore(world.inner, world.layout)
    held = states.load()
    start = 0 if held.state.owner is None else held.state.owner.generation
    states.claim_run(held, run_id, "q1", token, start_generation=start)
    world.checker.claimed.add(run_id)


def test_a_claimed_runs_part_the_next_sweep_deletes_may_be_left_at_the_end() -> None:
    """A run that died between its claim and the deletion of its own parts, and a healthy
    driver with no batch left to commit (so no claim, no sweep): the part stays until the
    next run claims, whose sweep deletes it. Not a leak."""
    world = _world()
    parts = world.parts
    parts["sim/staging/q1/000000000000/p00000-t1-rp2-r1.parquet"] = pa.table({"x": [1]})
    world.checker.leftover_parts()  # p2-r1 never claimed: gtbarrier sweep's
    assert _violation(world) is None
    _claim(world, "p1-r1", token=1)
    BarrierStateStore(world.inner, world.layout).claim_driver(2, driver="p2")
    parts["sim/staging/q1/000000000001/p00001-t2-rp1-r1.parquet"] = pa.table({"x": [1]})
    world.checker.leftover_parts()
    assert _violation(world) is None


def test_a_part_of_a_run_whose_claim_was_pruned_is_gtbarrier_sweeps() -> None:
    """A run whose claim the owner pruned looks like one that never claimed (docs/sink.md,
    "Known limits"): its parts are ``gtbarrier sweep``'s, as a starting run's are."""
    world = _world()
    _claim(world, "p1-r1", token=1)
    world.inner.delete_many(world.inner.list(world.layout.barrier_claims_prefix))
    world.parts["sim/staging/q1/000000000001/p00001-t2-rp1-r1.parquet"] = pa.table({"x": [1]})
    world.checker.leftover_parts()
    assert _violation(world) is None


def test_a_claimed_runs_part_left_while_sweeps_delete_nothing_is_a_violation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The check runs the product's sweep: a sweep that keeps superseded runs' parts fails
    it."""
    world = _world()
    _claim(world, "p1-r1", token=1)
    world.parts["sim/staging/q1/000000000001/p00001-t2-rp1-r1.parquet"] = pa.table({"x": [1]})
    world.checker.leftover_parts()
    assert _violation(world) is None
    monkeypatch.setattr(cleanup.StagingCleanup, "_superseded", lambda self, rid, auth: False)
    world.checker.leftover_parts()
    assert _violation(world) == "no claimed run's part outlives the next sweep"


def test_an_epoch_planned_past_the_rate_limit_or_the_broker_is_a_violation() -> None:
    def planned(begin: int, end: int, max_rows: int) -> str | None:
        world = _world()  # one partition of 4 records
        world.checker.planned(
            SourceOffset(0, {(TOPIC, 0): begin}),
            SourceOffset(1, {(TOPIC, 0): end}),
            max_rows,
            {TOPIC: TOPIC_IDS[0]},
        )
        return _violation(world)

    assert planned(0, 2, 2) is None
    assert planned(2, 4, 5) is None  # the backlog, under a larger limit
    limits = "the source plans within its limits"
    assert planned(0, 3, 2) == limits  # one record too many
    assert planned(0, 1, 2) == limits  # one too few: the limit is exact
    assert planned(2, 5, 5) == limits  # past the broker's end
    assert planned(4, 4, 2) == limits  # an epoch without a record


def test_after_a_recreation_an_epoch_restarts_at_the_new_log_start_only_under_the_new_id() -> None:
    def planned(ids: tuple[str, str], end: int, *, recreated: bool = True) -> str | None:
        world = World(SimConfig(partitions=1, per_partition=4, recreate=True), ReplayChooser(()))
        _WORLDS.append(world)
        first, second = SourceOffset(1, {(TOPIC, 0): 2}), SourceOffset(2, {(TOPIC, 0): end})
        # epoch 0 recorded under the old id, as the reader records it
        record = EpochRecord(0, SourceOffset(0, {(TOPIC, 0): 0}), first, {TOPIC: ids[0]})
        world.inner.put_json(world.layout.epoch(0), record.to_json())
        if recreated:
            world.recreate()
        world.checker.planned(first, second, 2, {TOPIC: ids[1]})
        return _violation(world)

    old, new = TOPIC_IDS
    limits = "the source plans within its limits"
    # the epoch after the recreation ends at the new topic's log start (no record) ...
    assert planned((old, new), 0) is None
    # ... but not under the id it started under, nor without a recreation
    assert planned((old, old), 0) == limits
    assert planned((old, new), 0, recreated=False) == limits
    # under the new id past its start, the usual limits over the new topic (5 records)
    assert planned((new, new), 4) is None
    assert planned((new, new), 5) == limits


def test_a_floor_above_what_a_restore_needs_is_a_violation() -> None:
    # The coordinator's pipeline (the default config's): no snapshot retained yet, so a
    # restore reads from the persisted start; then one retained at epoch 2.
    world = _world()
    world.checker.floor_written(0)
    assert _violation(world) is None
    world.checker.resume_written(_point(0, 2, 2))
    world.checker.floor_written(2)  # the coordinator's own bound: the snapshot's epoch
    assert _violation(world) is None
    world.checker.floor_written(3)
    assert _violation(world) == "the floor spares restores"


def test_a_floor_before_any_snapshot_is_a_violation_with_the_coordinator_only() -> None:
    world = _world()
    world.checker.floor_written(1)
    assert _violation(world) == "the floor spares restores"
    # Without the coordinator the drivers own the pruning (and a new checkpoint's start
    # is the product's EpochsPruned stop): the check does not apply.
    drivers = World(
        SimConfig(partitions=1, per_partition=4, coordinator=False, epochs_retained=1),
        ReplayChooser(()),
    )
    _WORLDS.append(drivers)
    drivers.checker.floor_written(1)
    assert _violation(drivers) is None
