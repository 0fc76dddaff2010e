"""The barrier protocol (sink.barrier) against memory:// and a fake consumer: pure logic."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable
from dataclasses import replace
from pathlib import Path

import pyarrow as pa
import pytest

from gtbarrier import resolve_lost_inflight
from sink.barrier import Barrier
from sink.consumers.base import LastBundle
from sink.consumers.file import FileConsumer
from sink.faults import FaultInjector, InjectedFault
from sink.options import SinkOptions
from sink.staging import FileStaging, StoreStaging
from state.errors import (
    CommitFailed,
    CommitStateUnknown,
    DeliveryFailed,
    FatalError,
    PipelineFenced,
    StateError,
    StoreUnavailable,
    StoreWriteUnknown,
)
from state.protocol.barrier_state import BarrierStateStore, load_barrier_state
from state.protocol.fencing import take_token
from state.records.barrier import BarrierState, Owner
from state.records.gt import GlobalTime
from state.records.inflight_bundle import InflightBundle
from state.spark_task import run_id_from_description
from tests.sink_helpers import Pipeline, gt_batch, plain_batch, sink_options


def values(table: pa.Table | None) -> list[bytes]:
    assert table is not None
    return [v.as_py() for v in table.column("value")]


def test_delivers_a_bundle_in_gt_order_and_advances_gt_last() -> None:
    p = Pipeline()
    p.record_batch(0, epoch=1)
    m1 = p.write(0, [gt_batch(1, 1, [5, 6])], partition=0)
    m0 = p.write(0, [gt_batch(1, 0, [9]), gt_batch(1, 0, [7, 8])], partition=1)
    outcome = p.barrier().commit([m1, m0], 0)

    assert outcome.action == "delivered" and outcome.rows == 5 and outcome.epoch == 1
    [(bundle_id, table, redelivery)] = p.consumer.delivered
    assert bundle_id == 1 and not redelivery
    # partition 0 of the topic sorts before partition 1; offsets ascend within each part
    assert values(table) == [b"0:7", b"0:8", b"0:9", b"1:5", b"1:6"]
    state = p.state()
    assert state.gt_last == 1 and state.inflight is None
    assert p.owner().run_id == "run-a" and p.owner().generation == 1
    assert p.staged() == []


def test_overlapping_parts_are_merged_in_gt_order() -> None:
    p = Pipeline()
    p.record_batch(0, epoch=2)
    a = p.write(0, [gt_batch(2, 0, [1, 3, 5])], partition=0)
    b = p.write(0, [gt_batch(2, 0, [2, 4])], partition=1)  # e.g. after a repartition()
    p.barrier().commit([a, b], 0)
    assert values(p.consumer.delivered[0][1]) == [b"0:1", b"0:2", b"0:3", b"0:4", b"0:5"]


def test_bundle_at_or_below_gt_last_is_dropped_and_its_parts_deleted() -> None:
    p = Pipeline()
    p.record_batch(0, epoch=1)
    p.barrier().commit([p.write(0, [gt_batch(1, 0, [0, 1])])], 0)
    # the same epoch replayed under another batch id (a new checkpoint), rows not filtered
    p.record_batch(7, epoch=1)
    m = p.write(7, [gt_batch(1, 0, [0, 1])], has_gt=False)  # has_gt=False: nothing dropped early
    assert m.part is not None and p.staged() == [m.part.location]
    outcome = p.barrier().commit([m], 7)
    assert outcome.action == "dropped"
    assert len(p.consumer.delivered) == 1
    assert p.staged() == []
    assert p.state().gt_last == 1


def test_write_keeps_rows_whose_gt_is_at_or_below_gt_last() -> None:
    """Stateful output carries older records' gt: only the batch's epoch decides a replay."""
    p = Pipeline()
    p.record_batch(0, epoch=3)
    p.barrier().commit([p.write(0, [gt_batch(3, 0, [0])])], 0)
    p.record_batch(1, epoch=4)
    mixed = pa.concat_batches([gt_batch(2, 0, [1]), gt_batch(3, 0, [2]), gt_batch(4, 0, [3])])
    m = p.write(1, [mixed])
    assert m.rows == 3
    assert m.part is not None and m.part.min_gt == GlobalTime(2, "t", 0, 1)
    outcome = p.barrier().commit([m], 1)
    assert outcome.action == "delivered" and outcome.rows == 3
    assert [d[0] for d in p.consumer.delivered] == [3, 4]
    assert p.state().gt_last == 4


def test_in_flight_bundle_acknowledged_by_consumer_is_not_delivered_again() -> None:
    p = Pipeline()
    p.record_batch(0, epoch=1)
    with pytest.raises(InjectedFault):
        _crash_after_inflight(p, 0, [gt_batch(1, 0, [0, 1])])
    assert p.inflight().bundle_id == 1 and p.inflight().rows == 2
    # the consumer did get it (the crash was between its store and the ack)
    p.consumer.last = LastBundle(1, 1)
    p.record_batch(1, epoch=2)
    outcome = p.barrier().commit([p.write(1, [gt_batch(2, 0, [2])])], 1)
    assert outcome.recovered == 1
    assert [d[0] for d in p.consumer.delivered] == [2]  # 1 not sent again
    state = p.state()
    assert state.gt_last == 2 and state.inflight is None
    assert p.staged() == []


def test_in_flight_bundle_unknown_to_consumer_is_delivered_again() -> None:
    p = Pipeline()
    p.record_batch(0, epoch=1)
    with pytest.raises(InjectedFault):
        _crash_after_inflight(p, 0, [gt_batch(1, 0, [0, 1])])
    # restart on the same checkpoint: Spark replays batch 0 (same epoch) with a new run
    p.run_id = "run-b"
    outcome = p.barrier().commit([p.write(0, [gt_batch(1, 0, [0, 1])])], 0)
    assert outcome.recovered == 1 and outcome.action == "dropped"
    [(bundle_id, table, redelivery)] = p.consumer.delivered
    assert bundle_id == 1 and redelivery and values(table) == [b"0:0", b"0:1"]
    state = p.state()
    assert state.gt_last == 1 and state.inflight is None
    assert p.owner().run_id == "run-b" and p.owner().generation == 2
    assert p.staged() == []


def test_consumer_ahead_of_barrier_is_an_error() -> None:
    p = Pipeline()
    p.record_batch(0, epoch=1)
    with pytest.raises(InjectedFault):
        _crash_after_inflight(p, 0, [gt_batch(1, 0, [0])])
    p.consumer.last = LastBundle(5, 5)
    p.record_batch(1, epoch=2)
    with pytest.raises(StateError, match="reports bundle 5 but the barrier state"):
        p.barrier().commit([p.write(1, [gt_batch(2, 0, [1])])], 1)


def test_at_least_once_redelivers_without_asking_the_consumer() -> None:
    p = Pipeline()
    p.record_batch(0, epoch=1)
    with pytest.raises(InjectedFault):
        _crash_after_inflight(p, 0, [gt_batch(1, 0, [0])])
    p.consumer.last = LastBundle(1, 1)
    alo = Pipeline(sink_options(**{"delivery": "at-least-once"}))
    alo.store, alo.staging, alo.consumer, alo.query_id = p.store, p.staging, p.consumer, p.query_id
    alo.layout = p.layout
    alo.options = sink_options(**{"delivery": "at-least-once", "state.uri": p.options.store.uri})
    alo.record_batch(1, epoch=2)
    alo.barrier().commit([alo.write(1, [gt_batch(2, 0, [1])])], 1)
    assert [(d[0], d[2]) for d in p.consumer.delivered] == [(1, True), (2, False)]


def test_at_least_once_records_no_in_flight_bundle() -> None:
    p = Pipeline(sink_options(delivery="at-least-once"))
    seen: list[object] = []
    p.consumer.on_deliver = lambda b: seen.append(p.state().inflight if _has_state(p) else None)
    p.record_batch(0, epoch=1)
    p.barrier().commit([p.write(0, [gt_batch(1, 0, [0])])], 0)
    assert seen == [None]
    assert p.state().gt_last == 1


def test_exactly_once_records_the_bundle_before_delivering_it() -> None:
    p = Pipeline()
    seen: list[InflightBundle] = []
    p.consumer.on_deliver = lambda b: seen.append(p.inflight())
    p.record_batch(0, epoch=4)
    m = p.write(0, [gt_batch(4, 0, [0, 1, 2])])
    p.barrier().commit([m], 0)
    assert m.part is not None
    assert seen[0].bundle_id == 4 and seen[0].locations == (m.part.location,)


def test_no_data_batch_with_rows_is_refused() -> None:
    p = Pipeline()
    m = p.write(3, [plain_batch(["a"], [1])], has_gt=False)
    with pytest.raises(FatalError, match=r"noDataMicroBatches\.enabled=false.*same pipeline\.id"):
        p.barrier().commit([m], 3)
    assert p.consumer.calls == 0


def test_no_data_batch_without_rows_and_empty_data_batch_deliver_nothing() -> None:
    p = Pipeline()
    assert p.barrier().commit([p.write(0, [], has_gt=False)], 0).action == "no-data"
    p.record_batch(1, epoch=1)
    outcome = p.barrier().commit([p.write(1, [gt_batch(1, 0, [])])], 1)
    assert outcome.action == "empty" and p.consumer.calls == 0
    assert p.state().gt_last == -1  # an empty bundle does not advance GT_last


def test_aggregated_output_without_gt_gets_the_batch_epoch() -> None:
    p = Pipeline()
    p.record_batch(0, epoch=9)
    m = p.write(0, [plain_batch(["a", "b"], [2, 1])], has_gt=False)
    outcome = p.barrier().commit([m], 0)
    assert outcome.epoch == 9 and p.consumer.delivered[0][0] == 9
    assert p.state().gt_last == 9


def test_delivery_retries_the_same_bundle() -> None:
    p = Pipeline(sink_options(**{"delivery.maxRetries": "3", "delivery.retryBackoffMs": "100"}))
    p.consumer.fail_times = 2
    p.record_batch(0, epoch=1)
    p.barrier().commit([p.write(0, [gt_batch(1, 0, [0])])], 0)
    assert p.consumer.calls == 3 and len(p.consumer.delivered) == 1
    assert len(p.sleeps) == 2 and all(0.08 <= s <= 0.2 for s in p.sleeps[:1])
    assert p.state().gt_last == 1


def test_delivery_failure_raises_and_keeps_the_bundle_in_flight() -> None:
    p = Pipeline(sink_options(**{"delivery.maxRetries": "2"}))
    p.consumer.fail_times = 10
    p.record_batch(0, epoch=1)
    m = p.write(0, [gt_batch(1, 0, [0])])
    with pytest.raises(DeliveryFailed) as info:
        p.barrier().commit([m], 0)
    assert "consumer down" in str(info.value)
    assert any("stays recorded in flight" in n for n in info.value.__notes__)
    assert p.consumer.calls == 3
    assert p.inflight().bundle_id == 1
    # abort keeps the parts the in-flight record references
    p.barrier().abort([m], 0)
    assert m.part is not None and p.staged() == [m.part.location]


def test_abort_deletes_what_the_failed_batch_staged() -> None:
    p = Pipeline()
    p.record_batch(0, epoch=1)
    ok = p.write(0, [gt_batch(1, 0, [0])], partition=0)
    failed_attempt = p.write(0, [gt_batch(1, 1, [0])], partition=1)
    assert len(p.staged()) == 2
    p.barrier().abort([ok, None], 0)
    assert p.staged() == []
    assert failed_attempt.part is not None


def test_parts_of_failed_task_attempts_are_never_delivered() -> None:
    p = Pipeline()
    p.record_batch(0, epoch=1)
    p.write(0, [gt_batch(1, 0, [0, 1])], partition=0, attempt_number=0)  # attempt that failed
    retried = p.write(0, [gt_batch(1, 0, [0, 1])], partition=0, attempt_number=1)
    p.barrier().commit([retried], 0)
    assert values(p.consumer.delivered[0][1]) == [b"0:0", b"0:1"]
    assert p.staged() == []  # the failed attempt's orphan was cleaned up


def test_a_new_run_takes_over_and_the_old_one_is_fenced() -> None:
    p = Pipeline()
    p.record_batch(0, epoch=1)
    p.barrier().commit([p.write(0, [gt_batch(1, 0, [0])])], 0)
    p.record_batch(1, epoch=2)
    p.barrier().commit([p.write(1, [gt_batch(2, 0, [1])], run_id="run-b")], 1)
    assert p.owner().run_id == "run-b" and p.owner().generation == 2
    p.record_batch(2, epoch=3)
    zombie = p.write(2, [gt_batch(3, 0, [2])], run_id="run-a")
    zombie_text = r"owned by run run-b .* this driver \(run run-a\) is a zombie"
    with pytest.raises(PipelineFenced, match=zombie_text):
        p.barrier().commit([zombie], 2)
    assert p.state().gt_last == 2 and [d[0] for d in p.consumer.delivered] == [1, 2]


def test_a_claim_that_loses_to_the_old_runs_commit_claims_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without a fencing token, a new run's claim can race the old run's ordinary commit:
    the old run (still the owner) advances GT_last between the claim's read and its swap.
    The claim lost to an older run, not to a newer one, so it claims again from the fresh
    state; fencing the new run would leave the old one running alone."""
    p = Pipeline()
    p.record_batch(0, epoch=1)
    p.barrier().commit([p.write(0, [gt_batch(1, 0, [0])])], 0)
    p.record_batch(1, epoch=2)
    old_runs_commit = p.write(1, [gt_batch(2, 0, [1])])  # run-a's batch 1, not yet committed
    new_runs_replay = p.write(1, [gt_batch(2, 0, [1])], run_id="run-b")
    real_cas = p.store.compare_and_swap
    raced: list[str] = []

    def old_run_commits_first(key: str, data: bytes, expected_version: str) -> str:
        if key == p.layout.barrier_state and not raced and b'"run-b"' in data:
            raced.append(key)
            monkeypatch.setattr(p.store, "compare_and_swap", real_cas)
            p.barrier().commit([old_runs_commit], 1)  # run-a: GT_last 1 -> 2
        return real_cas(key, data, expected_version)

    monkeypatch.setattr(p.store, "compare_and_swap", old_run_commits_first)
    outcome = p.barrier().commit([new_runs_replay], 1)
    assert raced, "the race was not staged"
    assert outcome.action == "dropped"  # bundle 2 came from the old run's commit
    assert p.owner().run_id == "run-b" and p.owner().generation == 2
    assert [d[0] for d in p.consumer.delivered] == [1, 2]
    p.record_batch(2, epoch=3)
    with pytest.raises(PipelineFenced, match="owned by run run-b"):
        p.barrier().commit([p.write(2, [gt_batch(3, 0, [2])])], 2)  # run-a, now a zombie


def test_fencing_token_lower_than_recorded_is_fenced() -> None:
    p = Pipeline(sink_options(**{"fencing.token": "5"}))
    p.record_batch(0, epoch=1)
    p.barrier().commit([p.write(0, [gt_batch(1, 0, [0])])], 0)
    assert p.owner().token == 5
    old = sink_options(**{"fencing.token": "4", "state.uri": p.options.store.uri})
    p.options = old
    p.record_batch(1, epoch=2)
    with pytest.raises(PipelineFenced, match=r"fencing\.token 4 < 5"):
        p.barrier().commit([p.write(1, [gt_batch(2, 0, [1])], run_id="run-new")], 1)


def test_lost_compare_and_swap_is_not_retried() -> None:
    p = Pipeline()
    p.record_batch(0, epoch=1)
    p.barrier().commit([p.write(0, [gt_batch(1, 0, [0])])], 0)

    def another_driver_takes_over(_bundle: object) -> None:
        held = load_barrier_state(p.store, p.layout)
        s, v = held.state, held.version
        assert s.owner is not None and v is not None
        zombie = replace(s, owner=replace(s.owner, run_id="run-z", generation=9))
        p.store.compare_and_swap_json(p.layout.barrier_state, zombie.to_json(), v)

    p.consumer.on_deliver = another_driver_takes_over
    p.record_batch(1, epoch=2)
    with pytest.raises(PipelineFenced, match="owned by run run-z"):
        p.barrier().commit([p.write(1, [gt_batch(2, 0, [1])])], 1)
    assert p.state().gt_last == 1  # not advanced by the zombie


def test_cas_whose_answer_was_lost_is_commit_state_unknown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The store resolves a lost answer itself (S3: by the write's token, see
    test_s3_store); when it cannot, the barrier does not guess: restarting resolves it."""
    p = Pipeline()
    p.record_batch(0, epoch=1)
    real_cas = p.store.compare_and_swap
    calls = {"n": 0}

    def flaky_cas(key: str, data: bytes, expected_version: str) -> str:
        calls["n"] += 1
        version = real_cas(key, data, expected_version)
        if calls["n"] == 2:  # the gt_last CAS lands but the answer is lost
            raise StoreWriteUnknown(p.store.uri, key, "timeout")
        return version

    monkeypatch.setattr(p.store, "compare_and_swap", flaky_cas)
    with pytest.raises(CommitStateUnknown, match="could not advance GT_last to 1"):
        p.barrier().commit([p.write(0, [gt_batch(1, 0, [0])])], 0)
    assert calls["n"] == 2  # not retried blindly
    assert p.state().gt_last == 1 and len(p.consumer.delivered) == 1


def test_store_outage_during_cas_is_commit_state_unknown(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    p = Pipeline()
    p.record_batch(0, epoch=1)
    p.barrier().commit([p.write(0, [gt_batch(1, 0, [0])])], 0)

    def down(key: str, data: bytes, expected_version: str) -> str:
        raise StoreUnavailable(p.store.uri, key, "connection refused")

    monkeypatch.setattr(p.store, "compare_and_swap", down)
    p.record_batch(1, epoch=2)
    with pytest.raises(CommitStateUnknown, match="could not record bundle 2 in flight"):
        p.barrier().commit([p.write(1, [gt_batch(2, 0, [1])])], 1)
    assert p.consumer.calls == 1  # nothing delivered before the in-flight record


def test_tasks_that_disagree_on_the_run_fail_the_commit() -> None:
    p = Pipeline()
    p.record_batch(0, epoch=1)
    a = p.write(0, [gt_batch(1, 0, [0])], partition=0, run_id="r1")
    b = p.write(0, [gt_batch(1, 1, [0])], partition=1, run_id="r2")
    with pytest.raises(CommitFailed, match="disagree"):
        p.barrier().commit([a, b], 0)


def test_run_id_from_job_description() -> None:
    desc = "\nid = 3f1a\nrunId = e758ef5c-fb49-48f7-9ffa-047b319037c4\nbatch = 2"
    assert run_id_from_description(desc) == "e758ef5c-fb49-48f7-9ffa-047b319037c4"
    assert run_id_from_description(None) is None
    assert run_id_from_description("my job") is None


# --- helpers --------------------------------------------------------------------------


def _has_state(p: Pipeline) -> bool:
    return p.store.get_or_none(p.layout.barrier_state) is not None


def _crash_after_inflight(p: Pipeline, batch_id: int, batches: list[pa.RecordBatch]) -> None:
    """Run a commit that 'dies' right after recording its bundle in flight."""

    class Crash(FaultInjector):
        def at(self, step: str, n: int | None) -> None:
            if step == "after_inflight":
                raise InjectedFault("crash")

    barrier: Barrier = p.barrier(faults=Crash())
    barrier.commit([p.write(batch_id, batches)], batch_id)


def test_a_superseded_run_resolving_from_a_state_read_before_the_claim_is_fenced() -> None:
    """A run reads the barrier state (its bundle 2 in flight), then a newer run claims,
    resolves bundle 2 and delivers bundle 3 before the old run goes on. The old run finds
    the consumer ahead of what it read in flight: it was superseded, and says so (a
    fence), not that the consumer is shared or the state was reset."""
    p = Pipeline()
    p.record_batch(0, epoch=1)
    p.barrier().commit([p.write(0, [gt_batch(1, 0, [0])])], 0)
    p.record_batch(1, epoch=2)
    with pytest.raises(InjectedFault):
        _crash_after_inflight(p, 1, [gt_batch(2, 0, [1])])
    read_by_the_old_run = load_barrier_state(p.store, p.layout)
    p.record_batch(2, epoch=3)
    old_runs_batch = p.write(2, [gt_batch(3, 0, [2])])
    p.run_id = "run-b"
    assert p.barrier().commit([p.write(1, [gt_batch(2, 0, [1])])], 1).recovered == 2
    assert p.barrier().commit([p.write(2, [gt_batch(3, 0, [2])])], 2).action == "delivered"
    old = p.barrier()
    reads = [read_by_the_old_run]  # its first read is the one it made before the claim
    real_load = old.states.load
    old.states.load = lambda: reads.pop() if reads else real_load()  # type: ignore[method-assign]
    with pytest.raises(PipelineFenced, match=r"owned by run run-b .* \(run run-a\) is a zombie"):
        old.commit([old_runs_batch], 2)
    assert p.state().gt_last == 3 and [d[0] for d in p.consumer.delivered] == [1, 2, 3]


def test_a_new_run_sweeps_the_parts_superseded_runs_left_behind() -> None:
    p = Pipeline()
    p.record_batch(0, epoch=1)
    p.barrier().commit([p.write(0, [gt_batch(1, 0, [0])])], 0)
    # run-a stages batch 1 and dies; another driver that never committed staged parts too
    left = p.write(1, [gt_batch(2, 0, [1])])
    starting = p.write(1, [gt_batch(2, 0, [1])], run_id="run-starting")
    # a new run on a new checkpoint (another query id) claims the pipeline
    p.query_id, p.run_id = "q-new", "run-b"
    p.record_batch(0, epoch=1)
    p.barrier().commit([p.write(0, [gt_batch(1, 0, [0])])], 0)
    assert left.part is not None and starting.part is not None
    assert p.staged() == [starting.part.location]  # only the unclaimed run's part is kept


def test_the_owner_deletes_parts_a_superseded_run_staged_after_its_claim_every_n_bundles() -> None:
    """A zombie that stages after the new run's claim (its sweep) and dies before its abort
    left its parts to ``gtbarrier sweep``: the owner now deletes them itself, every
    ``staging.sweepEvery`` bundles, after the bundle's commit."""
    p = Pipeline(sink_options(**{"staging.sweepEvery": "2"}))
    p.record_batch(0, epoch=1)
    p.barrier().commit([p.write(0, [gt_batch(1, 0, [0])])], 0)  # run-a
    p.run_id = "run-b"
    p.record_batch(1, epoch=2)
    p.barrier().commit([p.write(1, [gt_batch(2, 0, [1])])], 1)  # run-b claims and sweeps
    # after that sweep, zombie run-a stages batch 2 and dies; a driver starting up stages
    # too (both on checkpoints of their own: no batch of run-b's query cleans them)
    query_b, p.query_id = p.query_id, "q-old"
    zombie = p.write(2, [gt_batch(3, 0, [2])], run_id="run-a")
    starting = p.write(2, [gt_batch(3, 0, [2])], run_id="run-starting")
    p.query_id = query_b
    assert zombie.part is not None and starting.part is not None
    p.record_batch(2, epoch=3)
    p.barrier().commit([p.write(2, [gt_batch(3, 0, [2])])], 2)  # bundle 3: not due
    assert sorted(p.staged()) == sorted([zombie.part.location, starting.part.location])
    p.record_batch(3, epoch=4)
    p.barrier().commit([p.write(3, [gt_batch(4, 0, [3])])], 3)  # bundle 4: due
    assert p.staged() == [starting.part.location]  # never a run that has not claimed
    assert [d[0] for d in p.consumer.delivered] == [1, 2, 3, 4]


def test_the_owners_sweep_keeps_a_newer_runs_in_flight_parts() -> None:
    """A run that claims while the owner's periodic sweep deletes: its parts, those of the
    bundle it records in flight included, stay (the generation rule of sink.cleanup)."""
    p = Pipeline(sink_options(**{"staging.sweepEvery": "2"}))
    p.record_batch(0, epoch=1)
    p.barrier().commit([p.write(0, [gt_batch(1, 0, [0])])], 0)  # run-a
    p.run_id = "run-b"
    p.record_batch(1, epoch=2)
    p.barrier().commit([p.write(1, [gt_batch(2, 0, [1])])], 1)  # run-b claims
    query_b, p.query_id = p.query_id, "q-old"
    zombie = p.write(2, [gt_batch(3, 0, [2])], run_id="run-a")
    p.query_id = query_b
    p.record_batch(2, epoch=3)
    p.barrier().commit([p.write(2, [gt_batch(3, 0, [2])])], 2)
    p.record_batch(3, epoch=4)
    p.record_batch(4, epoch=5)
    own = p.write(3, [gt_batch(4, 0, [3])])
    newer = p.write(4, [gt_batch(5, 0, [4])], run_id="run-c")  # run-c restored a checkpoint

    def run_c_claims_and_dies_after_inflight() -> None:
        with pytest.raises(InjectedFault):
            p.barrier(faults=_CrashAt()).commit([newer], 4)

    # run-b's commit of bundle 4 deletes its own parts first: run-c claims right then
    outcome = _zombie(p, run_c_claims_and_dies_after_inflight).commit([own], 3)
    assert outcome.action == "delivered"
    assert zombie.part is not None and newer.part is not None
    assert p.owner().run_id == "run-c" and p.inflight().locations == (newer.part.location,)
    assert p.staged() == [newer.part.location]  # run-a's part went, run-c's stayed


# --- staged parts are deleted only under verified ownership --------------------------------


class _CrashAt(FaultInjector):
    def __init__(self, step: str = "after_inflight") -> None:
        super().__init__()
        self.step = step

    def at(self, step: str, n: int | None) -> None:
        if step == self.step:
            raise InjectedFault("crash")


class _HookedStaging(StoreStaging):
    """Store staging that runs ``hook`` once, right before its first deletion."""

    def __init__(self, p: Pipeline, hook: Callable[[], None]) -> None:
        super().__init__(p.store, p.layout)
        self.hook: Callable[[], None] | None = hook

    def delete(self, location: str) -> None:
        self.delete_many([location])

    def delete_many(self, locations: Iterable[str]) -> None:
        wanted = list(locations)
        if wanted and self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        super().delete_many(wanted)


def _zombie(p: Pipeline, hook: Callable[[], None]) -> Barrier:
    """A barrier whose cleanup is interrupted by ``hook`` (another driver, in between)."""
    staging = _HookedStaging(p, hook)
    return Barrier(p.options, p.store, p.consumer, staging, FaultInjector(), sleep=p.sleeps.append)


def test_a_zombies_abort_never_deletes_a_newer_runs_in_flight_parts() -> None:
    """A run cleaning up with a barrier state read before a newer run claimed the pipeline
    used to delete the newer run's staged parts, in-flight bundle included: every restart
    then failed (the bundle could not be delivered again)."""
    p = Pipeline()
    p.record_batch(0, epoch=1)
    p.barrier().commit([p.write(0, [gt_batch(1, 0, [0])])], 0)
    p.record_batch(1, epoch=2)
    failed = p.write(1, [gt_batch(2, 0, [1])])  # run-a's batch 1, whose commit failed
    # run-b restored run-a's checkpoint (same query, same batch ids) and staged batch 1
    newer = p.write(1, [gt_batch(2, 0, [1])], run_id="run-b")

    def run_b_claims_and_dies_after_inflight() -> None:
        with pytest.raises(InjectedFault):
            p.barrier(faults=_CrashAt()).commit([newer], 1)

    _zombie(p, run_b_claims_and_dies_after_inflight).abort([failed], 1)
    assert newer.part is not None and failed.part is not None
    assert p.inflight().locations == (newer.part.location,)
    assert p.staged() == [newer.part.location]
    # a restart (run-c) delivers bundle 2 from run-b's parts
    p.run_id = "run-c"
    outcome = p.barrier().commit([p.write(1, [gt_batch(2, 0, [1])])], 1)
    assert outcome.recovered == 2 and [d[0] for d in p.consumer.delivered] == [1, 2]
    assert p.state().gt_last == 2 and p.staged() == []


def test_a_sweep_never_deletes_the_parts_of_a_run_that_claimed_after_it() -> None:
    p = Pipeline()
    p.query_id = "q-a"
    p.record_batch(0, epoch=1)
    p.barrier().commit([p.write(0, [gt_batch(1, 0, [0])])], 0)
    left = p.write(1, [gt_batch(2, 0, [1])])  # run-a dies with batch 1 staged
    # run-c, on a checkpoint of its own, has staged its batch 1 (epoch 2)
    p.query_id = "q-c"
    p.record_batch(1, epoch=2)
    newer = p.write(1, [gt_batch(2, 0, [1])], run_id="run-c")

    def run_c_claims_and_dies_after_inflight() -> None:
        with pytest.raises(InjectedFault):
            p.barrier(faults=_CrashAt()).commit([newer], 1)

    # run-b claims; while its sweep deletes run-a's parts, run-c claims too
    p.query_id, p.run_id = "q-b", "run-b"
    p.record_batch(0, epoch=1)
    zombie = _zombie(p, run_c_claims_and_dies_after_inflight)
    assert zombie.commit([p.write(0, [gt_batch(1, 0, [0])])], 0).action == "dropped"
    assert left.part is not None and newer.part is not None
    assert p.owner().run_id == "run-c" and p.inflight().locations == (newer.part.location,)
    assert p.staged() == [newer.part.location]
    # run-c's restart (run-d) delivers bundle 2
    p.query_id, p.run_id = "q-c", "run-d"
    outcome = p.barrier().commit([p.write(1, [gt_batch(2, 0, [1])])], 1)
    assert outcome.recovered == 2 and [d[0] for d in p.consumer.delivered] == [1, 2]
    assert p.staged() == []


def test_a_run_that_dies_after_its_claim_leaves_its_parts_to_the_next_runs_sweep() -> None:
    """A run that claims and dies before deleting its own parts (a replayed batch its claim
    found dropped) leaves them staged. A driver's claim deletes nothing, and its query,
    with no batch to commit, never claims: they stay until the next run's claim sweeps
    them. No part of a claimed run is left that no cleanup will delete (the simulator's
    ``no claimed run's part outlives the next sweep``)."""
    p = Pipeline(sink_options(**{"fencing.token": "1"}))
    uri = p.options.store.uri
    p.record_batch(0, epoch=1)
    p.barrier().commit([p.write(0, [gt_batch(1, 0, [0])])], 0)  # run-a delivers bundle 1
    # run-b, restored from an older snapshot (a query of its own), replays epoch 1
    p.query_id, p.run_id = "q-b", "run-b"
    p.record_batch(0, epoch=1)
    replayed = p.write(0, [gt_batch(1, 0, [0])])
    assert replayed.part is not None

    def the_driver_dies() -> None:
        raise InjectedFault("run-b's driver dies before deleting its parts")

    with pytest.raises(InjectedFault):
        _zombie(p, the_driver_dies).commit([replayed], 0)
    assert p.owner().run_id == "run-b" and p.staged() == [replayed.part.location]
    # the next driver claims the pipeline; its query has nothing to commit yet
    BarrierStateStore(p.store, p.layout).claim_driver(2, driver="host:42:c")
    assert p.staged() == [replayed.part.location]
    # new input: its query's first commit claims the pipeline and sweeps run-b's parts
    p.options = sink_options(**{"fencing.token": "2", "state.uri": uri})
    p.query_id, p.run_id = "q-c", "run-c"
    p.record_batch(0, epoch=2)
    outcome = p.barrier().commit([p.write(0, [gt_batch(2, 0, [1])])], 0)
    assert outcome.action == "delivered" and p.owner().run_id == "run-c"
    assert [d[0] for d in p.consumer.delivered] == [1, 2] and p.staged() == []


# --- a new driver fences older runs before its query commits -----------------------------


def test_a_driver_claim_fences_older_runs_before_the_new_query_commits() -> None:
    p = Pipeline(sink_options(**{"fencing.token": "1"}))
    uri = p.options.store.uri
    p.record_batch(0, epoch=1)
    p.barrier().commit([p.write(0, [gt_batch(1, 0, [0])])], 0)  # run-a, token 1
    owner = BarrierStateStore(p.store, p.layout).claim_driver(2, driver="host:42:b")
    assert owner.is_driver_claim and owner.generation == 2 and p.owner() == owner
    p.record_batch(1, epoch=2)
    zombie = p.write(1, [gt_batch(2, 0, [1])])
    zombie_text = (
        r"taken by driver host:42:b with fencing token 2 \(generation 2\) at .*, before its "
        r"query's first commit; this driver \(run run-a\) is a zombie and stops "
        r"\(its fencing\.token 1 < 2\)"
    )
    with pytest.raises(PipelineFenced, match=zombie_text):
        p.barrier().commit([zombie], 1)
    # without a token, the zombie is fenced as a superseded run
    p.options = sink_options(**{"state.uri": uri})
    with pytest.raises(PipelineFenced, match="a newer run took the pipeline over"):
        p.barrier().commit([zombie], 1)
    p.barrier().abort([zombie], 1)
    assert [d[0] for d in p.consumer.delivered] == [1] and p.state().gt_last == 1
    # the new driver's query claims the pipeline at its first commit
    p.options, p.run_id = sink_options(**{"fencing.token": "2", "state.uri": uri}), "run-b"
    p.barrier().commit([p.write(1, [gt_batch(2, 0, [1])])], 1)
    assert p.owner().run_id == "run-b" and not p.owner().is_driver_claim
    assert (p.owner().generation, p.owner().token) == (3, 2)
    assert [d[0] for d in p.consumer.delivered] == [1, 2] and p.staged() == []


def test_a_driver_claim_is_idempotent_and_never_lowers_the_token() -> None:
    p = Pipeline()
    first = BarrierStateStore(p.store, p.layout, clock=lambda: 5.0).claim_driver(3, driver="d3")
    assert p.state() == BarrierState(owner=Owner("", "", 1, 5.0, 3, "d3"))
    assert BarrierStateStore(p.store, p.layout).claim_driver(3, driver="d3") == first
    with pytest.raises(PipelineFenced, match=r"fencing token 3 > ours 2"):
        BarrierStateStore(p.store, p.layout).claim_driver(2, driver="d2")
    assert p.owner() == first


def test_the_coordinator_claims_the_barrier_when_it_takes_its_token(tmp_path: Path) -> None:
    from gtbarrier import SnapshotCoordinator

    p = Pipeline(sink_options(**{"fencing.token": "1"}))
    p.record_batch(0, epoch=1)
    p.barrier().commit([p.write(0, [gt_batch(1, 0, [0])])], 0)
    take_token(p.store, p.layout)  # driver A's token 1
    with SnapshotCoordinator(None, "p1", p.options.store.uri, tmp_path / "cp", store=p.store) as b:
        b.recover()
        assert b.fencing_token == 2
        assert p.owner().is_driver_claim and p.owner().token == 2
        p.record_batch(1, epoch=2)
        with pytest.raises(PipelineFenced, match=r"fencing\.token 1 < 2"):
            p.barrier().commit([p.write(1, [gt_batch(2, 0, [1])])], 1)
    assert [d[0] for d in p.consumer.delivered] == [1]


# --- a lost in-flight bundle, and the operator's way past it ------------------------------


def _file_pipeline(out: Path) -> tuple[Pipeline, dict[str, str]]:
    raw = {
        "pipeline.id": "p1",
        "state.uri": f"memory://{uuid.uuid4().hex}",
        "consumer": "file",
        "consumer.path": str(out),
    }
    p = Pipeline(SinkOptions.parse(raw))
    staging = FileStaging(str(out))
    p.staging, p.consumer = staging, FileConsumer(str(out), staging, FaultInjector())  # type: ignore[assignment]
    return p, raw


def test_lost_in_flight_parts_are_recomputed_by_the_replay_of_their_epoch(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    p, _ = _file_pipeline(out)
    p.record_batch(0, epoch=1)
    with pytest.raises(InjectedFault):
        _crash_after_inflight(p, 0, [gt_batch(1, 0, [0, 1])])
    for location in p.inflight().locations:
        (out / location).unlink()
    # the restart replays batch 0 (epoch 1): the in-flight record is cleared, GT_last
    # stays, and the recomputed bundle 1 is delivered
    p.run_id = "run-b"
    outcome = p.barrier().commit([p.write(0, [gt_batch(1, 0, [0, 1])])], 0)
    assert (outcome.action, outcome.recovered) == ("delivered", 1)
    state = p.state()
    assert (state.gt_last, state.inflight, state.skipped) == (1, None, ())
    assert sorted(f.name for f in out.glob("bundle-*")) == ["bundle-000000000001.parquet"]
    assert p.staged() == []


def test_an_earlier_epoch_clears_a_lost_bundle_for_its_own_replay_to_deliver(
    tmp_path: Path,
) -> None:
    """A query on a new checkpoint replays from the start: its commit of an epoch below the
    lost bundle clears it, and the replay of the lost bundle's epoch delivers it."""
    out = tmp_path / "out"
    p, _ = _file_pipeline(out)
    p.record_batch(0, epoch=1)
    p.barrier().commit([p.write(0, [gt_batch(1, 0, [0])])], 0)
    p.record_batch(1, epoch=2)
    with pytest.raises(InjectedFault):
        _crash_after_inflight(p, 1, [gt_batch(2, 0, [1])])
    for location in p.inflight().locations:
        (out / location).unlink()
    p.run_id, p.query_id = "run-b", "q-new-checkpoint"
    p.record_batch(0, epoch=1)
    assert p.barrier().commit([p.write(0, [gt_batch(1, 0, [0])])], 0).action == "dropped"
    assert (p.state().gt_last, p.state().inflight) == (1, None)
    p.record_batch(1, epoch=2)
    assert p.barrier().commit([p.write(1, [gt_batch(2, 0, [1])])], 1).action == "delivered"
    assert p.state().gt_last == 2
    assert sorted(f.name for f in out.glob("bundle-*")) == [
        "bundle-000000000001.parquet",
        "bundle-000000000002.parquet",
    ]


def test_lost_in_flight_parts_stop_every_commit_until_the_loss_is_acknowledged(
    tmp_path: Path,
) -> None:
    """Nothing recomputes a lost bundle once a later epoch commits (Spark's checkpoint
    records its batch as committed)."""
    out = tmp_path / "out"
    p, raw = _file_pipeline(out)
    p.record_batch(0, epoch=1)
    with pytest.raises(InjectedFault):
        _crash_after_inflight(p, 0, [gt_batch(1, 0, [0, 1])])
    lost = p.inflight().locations
    for location in lost:
        (out / location).unlink()
    p.record_batch(1, epoch=2)
    # every restart stops here, saying what is lost and naming the way out
    for run in ("run-b", "run-c"):
        p.run_id = run
        later = p.write(1, [gt_batch(2, 0, [2])])
        with pytest.raises(StateError) as info:
            p.barrier().commit([later], 1)
        p.barrier().abort([later], 1)
        text = str(info.value)
        assert (
            f"pipeline 'p1': in-flight bundle 1 (epoch 1, batch 0 of query {p.query_id}, run "
            "run-a; 2 rows in 1 part(s)) cannot be delivered: file consumer "
        ) in text
        assert (
            "does not have it (it has no bundle) and 1 of its 1 staged part(s) are gone "
            f"(2 rows): {lost[0]}."
        ) in text
        assert (
            "gtbarrier.resolve_lost_inflight(<the sink's options>, bundle_id=1, "
            "acknowledge_loss=True)"
        ) in text
        assert p.inflight().locations == lost and p.staged() == []
    # the way out: a report first, then the skip
    report = resolve_lost_inflight(raw, bundle_id=1)
    assert not report.applied and p.inflight().locations == lost
    assert (report.bundle_id, report.rows, report.parts_missing, report.rows_missing) == (
        1,
        2,
        lost,
        2,
    )
    assert "A later epoch is committing, so no replay recomputes it" in text
    assert report.describe() in text.replace(
        " A later epoch is committing, so no replay recomputes it (Spark's checkpoint "
        "records its batch as committed): every restart stops here.",
        " Nothing can deliver it again, so every restart stops here.",
    )
    with pytest.raises(StateError, match="bundle 1 is in flight, not bundle 2"):
        resolve_lost_inflight(raw, bundle_id=2, acknowledge_loss=True)
    report = resolve_lost_inflight(raw, bundle_id=1, acknowledge_loss=True)
    assert report.applied
    assert "Skipped, the loss acknowledged: GT_last is now 1" in report.describe()
    state = p.state()
    assert state.gt_last == 1 and state.inflight is None
    [skipped] = state.skipped
    assert (skipped.bundle_id, skipped.batch_id, skipped.rows, skipped.parts_missing) == (
        1,
        0,
        2,
        lost,
    )
    with pytest.raises(StateError, match="no bundle is in flight"):
        resolve_lost_inflight(raw, bundle_id=1, acknowledge_loss=True)
    # the pipeline goes on: epoch 2 is delivered
    p.run_id = "run-d"
    assert p.barrier().commit([p.write(1, [gt_batch(2, 0, [2])])], 1).action == "delivered"
    assert sorted(f.name for f in out.glob("bundle-*")) == ["bundle-000000000002.parquet"]
    assert p.state().gt_last == 2 and p.state().skipped == (skipped,) and p.staged() == []


def test_a_single_part_bundle_renamed_into_place_is_not_reported_lost(tmp_path: Path) -> None:
    """The file consumer delivers a one-part bundle by renaming its staged part to the
    bundle file; a crash before the pointer leaves no staged part, but the bundle file is
    there: a restart finishes it, so the way out refuses to skip it."""

    class CrashAfterDeliver(FaultInjector):
        def at(self, step: str, n: int | None) -> None:
            if step == "after_deliver":
                raise InjectedFault("crash")

    out = tmp_path / "out"
    p, raw = _file_pipeline(out)
    p.consumer.faults = CrashAfterDeliver()
    p.record_batch(0, epoch=1)
    with pytest.raises(InjectedFault):
        p.barrier().commit([p.write(0, [gt_batch(1, 0, [0, 1])])], 0)
    inflight = p.inflight()
    assert p.staging.missing(inflight.locations) == inflight.locations
    assert (out / "bundle-000000000001.parquet").exists() and p.consumer.last_bundle() is None
    with pytest.raises(StateError, match="restarting the query delivers it; nothing changed"):
        resolve_lost_inflight(raw, bundle_id=1, acknowledge_loss=True)
    assert p.inflight() == inflight and p.state().skipped == ()


def test_resolving_a_bundle_that_is_not_lost_changes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    p, raw = _file_pipeline(out)
    p.record_batch(0, epoch=1)
    with pytest.raises(InjectedFault):
        _crash_after_inflight(p, 0, [gt_batch(1, 0, [0])])
    with pytest.raises(StateError, match="can still deliver in-flight bundle 1"):
        resolve_lost_inflight(raw, bundle_id=1, acknowledge_loss=True)
    # the consumer stored it (crash after the ack); its staged part is gone (promoted)
    p.record_batch(1, epoch=2)
    p.run_id = "run-b"
    with pytest.raises(InjectedFault):
        p.barrier(faults=_CrashAt("after_ack")).commit([p.write(1, [gt_batch(2, 0, [1])])], 1)
    assert p.inflight().bundle_id == 2 and p.staging.missing(p.inflight().locations)
    with pytest.raises(StateError, match="has bundle 2, so in-flight bundle 2 is not lost"):
        resolve_lost_inflight(raw, bundle_id=2, acknowledge_loss=True)
    assert p.inflight().bundle_id == 2 and p.state().skipped == ()


def test_a_lost_in_flight_bundle_found_in_at_least_once_mode_names_the_way_out(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    p, raw = _file_pipeline(out)
    p.record_batch(0, epoch=1)
    with pytest.raises(InjectedFault):
        _crash_after_inflight(p, 0, [gt_batch(1, 0, [0])])
    for location in p.inflight().locations:
        (out / location).unlink()
    p.options = SinkOptions.parse({**raw, "delivery": "at-least-once"})
    p.run_id = "run-b"
    p.record_batch(1, epoch=2)
    with pytest.raises(StateError, match=r"bundle_id=1, acknowledge_loss=True"):
        p.barrier().commit([p.write(1, [gt_batch(2, 0, [1])])], 1)
