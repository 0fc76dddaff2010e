"""A commit starts from the barrier state this process last wrote (sink.known_state):
no read in the steady state, and the same outcome as with a read whenever it changed."""

from __future__ import annotations

from dataclasses import replace

import pytest

from sink.barrier import Barrier
from sink.faults import FaultInjector
from sink.known_state import KNOWN, KnownStates
from state.errors import DeliveryFailed, PipelineFenced
from state.protocol.barrier_state import BarrierStateStore, HeldState
from state.protocol.fencing import take_token
from state.records.barrier import BarrierState
from state.stores import Versioned
from state.stores.memory_store import MemoryStore
from tests.sink_helpers import Pipeline, gt_batch, sink_options


class CountingStore(MemoryStore):
    """The pipeline's memory store, counting reads of each key."""

    def __init__(self, p: Pipeline) -> None:
        super().__init__(p.store.config)
        self.reads: list[str] = []

    def get(self, key: str) -> Versioned:
        self.reads.append(key)
        return super().get(key)


def barrier(p: Pipeline, store: CountingStore) -> Barrier:
    return Barrier(p.options, store, p.consumer, p.staging, FaultInjector(), sleep=p.sleeps.append)


def commit(p: Pipeline, store: CountingStore, batch_id: int, epoch: int) -> str:
    p.record_batch(batch_id, epoch=epoch)
    message = p.write(batch_id, [gt_batch(epoch, 0, [batch_id])])
    return barrier(p, store).commit([message], batch_id).action


def test_the_second_commit_reads_no_barrier_state() -> None:
    p = Pipeline()
    store = CountingStore(p)
    assert commit(p, store, 0, 1) == "delivered"
    assert p.layout.barrier_state in store.reads
    store.reads.clear()
    assert commit(p, store, 1, 2) == "delivered"
    assert commit(p, store, 2, 3) == "delivered"
    assert p.layout.barrier_state not in store.reads
    assert [d[0] for d in p.consumer.delivered] == [1, 2, 3]
    assert p.state().gt_last == 3 and p.state().inflight is None and p.staged() == []


def test_at_least_once_always_reads_the_state() -> None:
    p = Pipeline(sink_options(delivery="at-least-once"))
    store = CountingStore(p)
    commit(p, store, 0, 1)
    store.reads.clear()
    commit(p, store, 1, 2)
    assert p.layout.barrier_state in store.reads
    assert p.state().gt_last == 2


def test_a_newer_run_that_claimed_in_between_fences_the_remembering_one() -> None:
    p = Pipeline()
    store = CountingStore(p)
    commit(p, store, 0, 1)
    other = Pipeline(p.options, run_id="run-b")
    other.query_id, other.consumer = p.query_id, p.consumer
    commit(other, CountingStore(other), 1, 2)  # run-b claims and delivers bundle 2
    with pytest.raises(PipelineFenced, match="zombie"):
        commit(p, store, 2, 3)
    assert [d[0] for d in p.consumer.delivered] == [1, 2]
    assert p.state().gt_last == 2


def test_a_driver_claim_in_between_fences_the_remembering_run() -> None:
    p = Pipeline()
    store = CountingStore(p)
    commit(p, store, 0, 1)
    token = take_token(p.store, p.layout, identifier="host:1:new")
    BarrierStateStore(p.store, p.layout).claim_driver(token, driver="host:1:new")
    with pytest.raises(PipelineFenced):
        commit(p, store, 1, 2)
    assert [d[0] for d in p.consumer.delivered] == [1]


def test_a_state_changed_by_someone_else_is_read_again() -> None:
    """Another writer left the state owned by this run but changed (here GT_last already
    at the bundle): the remembered swap loses, the commit reads and drops the replay."""
    p = Pipeline()
    store = CountingStore(p)
    commit(p, store, 0, 1)
    current = p.store.get(p.layout.barrier_state)
    state = p.state()
    p.store.compare_and_swap_json(
        p.layout.barrier_state, replace(state, gt_last=2).to_json(), current.version
    )
    store.reads.clear()
    assert commit(p, store, 1, 2) == "dropped"
    assert p.layout.barrier_state in store.reads
    assert [d[0] for d in p.consumer.delivered] == [1]
    assert p.staged() == []
    # and from there on it remembers again
    store.reads.clear()
    assert commit(p, store, 2, 3) == "delivered"
    assert p.layout.barrier_state not in store.reads


def test_an_identical_rewrite_of_the_state_is_swapped_over() -> None:
    """A swap from the remembered version fails on any newer write, even of the same
    content (memory and file stores version every write): the commit reads again."""
    p = Pipeline()
    store = CountingStore(p)
    commit(p, store, 0, 1)
    current = p.store.get(p.layout.barrier_state)
    p.store.compare_and_swap(p.layout.barrier_state, current.data, current.version)
    assert commit(p, store, 1, 2) == "delivered"
    assert p.state().gt_last == 2


def test_a_failed_commit_forgets_the_state() -> None:
    p = Pipeline()
    store = CountingStore(p)
    commit(p, store, 0, 1)
    assert KNOWN.get(store, p.layout) is not None
    p.consumer.fail_times = 99  # every delivery attempt fails
    p.record_batch(1, epoch=2)
    message = p.write(1, [gt_batch(2, 0, [1])])
    with pytest.raises(DeliveryFailed):
        barrier(p, store).commit([message], 1)
    assert KNOWN.get(store, p.layout) is None


def test_known_states_are_bounded_and_per_process() -> None:
    p = Pipeline()
    known = KnownStates()
    for i in range(100):
        layout = replace(p.layout, pipeline_id=f"p{i}")
        known.put(p.store, layout, HeldState(BarrierState(), f"v{i}"))
    assert known.get(p.store, replace(p.layout, pipeline_id="p0")) is None
    last = known.get(p.store, replace(p.layout, pipeline_id="p99"))
    assert last is not None and last.version == "v99"
    # Per process: state.process_cache's tests fork and find a child's cache empty.
