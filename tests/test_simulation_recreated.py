"""The simulator's recreated topic: the topic deleted and created again between an epoch's
planning and its re-run (a driver killed after planning, its restart re-running the batch),
at ``failOnDataLoss=false`` and ``true``, as docs/source.md ("Data loss", "Recreated topics
and epochs read again") promises: nothing of the new topic is read under the old epoch, no
offset is delivered twice; with false the lost ranges are skipped and the pipeline goes on,
with true the query stops with ``DataLossError``. The invariants that hold it
(:mod:`simulation.invariants`) must be able to fail: the last tests break the product's
check and see them fail."""

from __future__ import annotations

import pytest

from datasource import partition_reader
from simulation.choosers import ReplayChooser, alternatives
from simulation.explore import RECREATED, RECREATED_FATAL, run_schedule
from simulation.query import Row, SimConfig, incarnation_of
from simulation.scheduler import Event
from simulation.spark import Checkpoint
from simulation.world import Schedule, World


def _kill_after_planning(config: SimConfig, batch: int) -> Schedule:
    """p1 dies after ``batch``'s offset-log entry and read task (its check passed under
    the old id), before its first write task, keeping its checkpoint; the topic is
    recreated as p2 starts, before p2 re-runs the batch."""
    outcome, _ = run_schedule(config, Schedule(), trace=True)
    entry = next(
        r.index
        for r in outcome.trace
        if r.actor == "p1" and r.op.kind == "ckpt-offsets" and r.op.key == str(batch)
    )
    return Schedule(
        (Event("p1", entry + 2, "crash", "keep"), Event("p2", 0, "recreate")), heal="keep"
    )


def _run(config: SimConfig, schedule: Schedule) -> World:
    world = World(config, ReplayChooser(schedule.events), heal=schedule.heal)
    outcome = world.run()
    assert [(e.actor, e.kind) for e in outcome.fired] == [
        (e.actor, e.kind) for e in schedule.events
    ]
    return world


def _records(rows: list[Row], incarnation: int) -> list[int]:
    """The offsets of the records of topic ``incarnation`` that ``rows`` deliver."""
    gts = [r[4] for r in rows if r[0] == "rec" and incarnation_of(r) == incarnation]
    return sorted(gt[3] for gt in gts if gt is not None)


def test_the_recreate_event_is_offered_once_and_only_where_the_topic_may_be_recreated() -> None:
    world = World(RECREATED, ReplayChooser(()))
    world.start_driver(Checkpoint())
    actor = world.actors[0]
    assert [e.kind for e in alternatives(world, actor, {"recreate"})] == ["recreate"]
    world.recreate()
    assert alternatives(world, actor, {"recreate"}) == []
    plain = World(SimConfig(), ReplayChooser(()))
    plain.start_driver(Checkpoint())
    assert alternatives(plain, plain.actors[0], {"recreate"}) == []


def test_at_fail_on_data_loss_false_a_rerun_skips_the_lost_epoch_and_goes_on() -> None:
    world = _run(RECREATED, _kill_after_planning(RECREATED, batch=1))
    assert world.violation is None, world.violation
    # epoch 0 delivered from the old topic; epoch 1, planned under the old id and re-run
    # after the recreation, is lost (its read task's check skipped its range) ...
    assert world.checker.lost == {1}
    bundles = world.consumer.bundles
    assert 1 not in bundles
    assert _records(bundles[0], 0) == [0]
    # ... and the epochs after it read the new topic from its log start, each record once
    new = [r for k in sorted(bundles) if k > 1 for r in bundles[k]]
    assert _records(new, 1) == [0, 1, 2]
    assert not _records(new, 0)
    assert world.official is not None and world.official.status == "finished"


def test_at_fail_on_data_loss_true_the_rerun_stops_the_query_with_data_loss() -> None:
    world = _run(RECREATED_FATAL, _kill_after_planning(RECREATED_FATAL, batch=1))
    # the documented stop is accepted (no liveness violation) ...
    assert world.violation is None, world.violation
    healthy = world.official
    assert healthy is not None and healthy.status == "gave-up"
    assert "DataLossError" in healthy.errors[-1]
    assert "deleted and created again" in " ".join(healthy.errors)
    # ... and nothing of the new topic was delivered
    bundles = world.consumer.bundles
    assert sorted(bundles) == [0]
    assert _records(bundles[0], 0) == [0]


@pytest.mark.parametrize("config", [RECREATED, RECREATED_FATAL], ids=["false", "true"])
def test_a_recreation_after_the_last_epoch_was_read_is_found_by_the_next_planning(
    config: SimConfig,
) -> None:
    # Recreated after the last epoch's read, before its commit: no re-run meets it, the
    # reader's next planning does (the frontier's recorded id against the broker's).
    outcome, _ = run_schedule(config, Schedule(), trace=True)
    entry = next(
        r.index
        for r in outcome.trace
        if r.actor == "p1" and r.op.kind == "ckpt-commits" and r.op.key == "1"
    )
    world = _run(config, Schedule((Event("p1", entry, "recreate"),), heal="keep"))
    assert world.violation is None, world.violation
    assert world.checker.lost == set()
    bundles = world.consumer.bundles
    assert _records([*bundles[0], *bundles[1]], 0) == [0, 1]
    later = [r for k in sorted(bundles) if k > 1 for r in bundles[k]]
    if config.fail_on_data_loss:
        assert world.official is not None and world.official.status == "gave-up"
        assert "DataLossError" in world.official.errors[-1]
        assert not later
    else:
        assert _records(later, 1) == [0, 1, 2]


def test_a_read_of_the_new_topic_under_the_old_id_is_a_violation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(partition_reader, "recreated", lambda recorded, current: {})
    outcome, _ = run_schedule(RECREATED, _kill_after_planning(RECREATED, batch=1))
    assert outcome.violation is not None
    assert outcome.violation.invariant == "read under the planned topic id"


def test_a_read_that_drops_a_topic_still_under_its_id_is_a_violation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(partition_reader, "recreated", lambda recorded, current: dict(recorded))
    outcome, _ = run_schedule(RECREATED, Schedule())
    assert outcome.violation is not None
    assert outcome.violation.invariant == "a read drops only a recreated topic"


def test_a_data_loss_stop_without_a_recreation_is_a_liveness_violation(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(partition_reader, "recreated", lambda recorded, current: dict(recorded))
    outcome, _ = run_schedule(RECREATED_FATAL, Schedule())
    assert outcome.violation is not None
    assert outcome.violation.invariant == "liveness"
    assert "DataLossError" in outcome.violation.message


#: Bundle 0's staged part lost (p2 replays epoch 0 after p1 died without its checkpoint),
#: then the topic recreated before the replay that would recompute the bundle.
LOST_PART_THEN_RECREATED = Schedule(
    (
        Event("p1", 13, "crash", "lose"),
        Event("p2", 15, "lose-part", "sim/staging/q2/000000000000/p00001-t2-rp2-r1.parquet"),
        Event("p2", 23, "recreate"),
    ),
    heal="keep",
)


def test_a_lost_bundle_whose_topic_was_recreated_is_not_recomputable() -> None:
    # The replay of epoch 0 cannot recompute bundle 0 any more (its records went with the
    # old topic: the read task stops with DataLossError), so the healthy driver's
    # operator, skipping the bundle acknowledging its loss, skips what no replay recomputes.
    world = _run(RECREATED_FATAL, LOST_PART_THEN_RECREATED)
    assert world.violation is None, world.violation
    assert 0 not in world.consumer.bundles
    assert 0 in {s.bundle_id for s in world.checker.state.skipped}
    healthy = world.official
    assert healthy is not None and healthy.status == "gave-up"
    assert "DataLossError" in healthy.errors[-1]
