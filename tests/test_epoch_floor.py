"""The floor of the epoch log and pruning below it (state/protocol/epoch_floor.py), against
the memory and file stores; the readers that must respect it: the epoch log, the source's
``initialOffset``, the metrics and the driver's background pruner."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from pathlib import Path

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from datasource.log_pruner import EpochLogPruner
from state.errors import ConcurrentModification, EpochsPruned, StoreUnavailable
from state.layout import PipelineLayout
from state.metrics.families import bundles_delivered, replays_dropped
from state.metrics.reading import StateReader
from state.protocol.batch_records import batch_record_keys, write_batch_record
from state.protocol.epoch_floor import (
    compact,
    fence_generation,
    floor_target,
    prune_below,
    pruning_step,
    read_floor,
    read_floor_versioned,
    snapshot_floor_target,
)
from state.protocol.epoch_log import EpochLog
from state.records.barrier import BarrierState
from state.records.source_offset import SourceOffset
from state.stores import StateStore, StoreConfig
from state.stores.file_store import FileStore
from state.stores.memory_store import MemoryStore
from tests.source_fakes import FakeBroker
from tests.test_source_stream_reader import Harness

pytestmark = pytest.mark.unit

LAYOUT = PipelineLayout("p")


def offset(epoch: int) -> SourceOffset:
    """Epoch ``epoch`` starts at offset 10 * epoch of ``t``-0: every epoch reads 10 records,
    except epoch 3, which reads none (its end is its start)."""
    at = 10 * epoch if epoch <= 3 else 10 * (epoch - 1)
    return SourceOffset(epoch, {("t", 0): at})


def end_of(epoch: int) -> SourceOffset:
    return SourceOffset(epoch + 1, dict(offset(epoch + 1).offsets))


@pytest.fixture(params=["memory", "file"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateStore]:
    if request.param == "memory":
        yield MemoryStore(StoreConfig(f"memory://floor-{id(request)}"))
    else:
        yield FileStore(StoreConfig(f"file://{tmp_path / 'state'}"))


def record_epochs(store: StateStore, epochs: Iterable[int]) -> None:
    log = EpochLog(store, LAYOUT)
    for k in epochs:
        log.record(offset(k), end_of(k))


def epoch_numbers(store: StateStore) -> list[int]:
    return EpochLog(store, LAYOUT).epoch_numbers()


def batch_epochs(store: StateStore) -> list[tuple[str, int]]:
    return sorted(
        (key.split("/")[-2], int(key.rsplit("/", 1)[-1][:-5]))
        for key in batch_record_keys(store, LAYOUT)
    )


def test_the_target_keeps_the_window_below_what_the_barrier_may_still_need() -> None:
    assert floor_target(progress=99, inflight_epoch=None, retained=10) == 90
    assert floor_target(progress=99, inflight_epoch=100, retained=10) == 90
    # a bundle in flight below GT_last + 1 cannot be: the smaller one counts anyway
    assert floor_target(progress=99, inflight_epoch=95, retained=10) == 85
    assert floor_target(progress=-1, inflight_epoch=None, retained=10) == 0
    assert floor_target(progress=5, inflight_epoch=None, retained=10) == 0
    with pytest.raises(ValueError, match="retained"):
        floor_target(progress=5, inflight_epoch=None, retained=0)
    assert [pruning_step(r) for r in (1, 3, 4, 1000)] == [1, 1, 1, 250]


def test_with_the_coordinator_the_oldest_retained_snapshot_keeps_its_epochs() -> None:
    assert snapshot_floor_target(99, None, 10, oldest_snapshot_epoch=95) == 90
    assert snapshot_floor_target(99, None, 10, oldest_snapshot_epoch=60) == 60
    assert snapshot_floor_target(99, 100, 1, oldest_snapshot_epoch=0) == 0


def test_pruning_raises_the_floor_then_deletes_epochs_and_batch_records_below_it(
    store: StateStore,
) -> None:
    record_epochs(store, range(10))
    for b in range(10):  # query q1 read each epoch once
        write_batch_record(store, LAYOUT, "q1", b, b)
    for b in range(3):  # q2, on a new checkpoint, replayed epochs 0-2 (dropped)
        write_batch_record(store, LAYOUT, "q2", b, b)

    result = prune_below(store, LAYOUT, 6)

    assert (result.floor, result.raised) == (6, True)
    assert (result.epochs_deleted, result.batches_deleted) == (6, 9)
    assert epoch_numbers(store) == [6, 7, 8, 9]
    assert batch_epochs(store) == [("q1", b) for b in range(6, 10)]
    floor = read_floor(store, LAYOUT)
    assert floor is not None and floor.start == offset(6)
    # epochs 0-5 made bundles except epoch 3 (no records); q2 replayed 3 epochs
    assert (floor.epochs_with_records, floor.replays_dropped) == (5, 3)

    again = prune_below(store, LAYOUT, 8)
    floor = read_floor(store, LAYOUT)
    assert again.raised and floor is not None
    assert (floor.epoch, floor.epochs_with_records, floor.replays_dropped) == (8, 7, 3)
    assert epoch_numbers(store) == [8, 9]
    # the floor never goes down
    assert prune_below(store, LAYOUT, 4) == type(again)(8, raised=False)
    assert epoch_numbers(store) == [8, 9]


def test_an_interrupted_pruning_is_finished_by_the_next_without_counting_twice(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_epochs(store, range(10))
    for b in range(10):
        write_batch_record(store, LAYOUT, "q1", b, b)

    def unavailable(keys: Iterable[str]) -> None:
        raise StoreUnavailable(store.uri, None, "injected: no answer")

    with monkeypatch.context() as m:
        m.setattr(store, "delete_many", unavailable)
        with pytest.raises(StoreUnavailable):
            prune_below(store, LAYOUT, 6)
    floor = read_floor(store, LAYOUT)
    assert floor is not None and floor.epoch == 6  # written before anything was deleted
    assert epoch_numbers(store) == list(range(10))  # the deletes did not happen

    prune_below(store, LAYOUT, 8)
    floor = read_floor(store, LAYOUT)
    assert floor is not None and (floor.epoch, floor.epochs_with_records) == (8, 7)
    assert epoch_numbers(store) == [8, 9]
    assert batch_epochs(store) == [("q1", 8), ("q1", 9)]


def test_a_pruner_that_loses_the_floor_to_another_deletes_nothing(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    record_epochs(store, range(10))
    prune_below(store, LAYOUT, 2)

    def lost(key: str, value: object, expected_version: str) -> str:
        raise ConcurrentModification(store.uri, key, expected_version)

    monkeypatch.setattr(store, "compare_and_swap_json", lost)
    result = prune_below(store, LAYOUT, 6)
    assert (result.floor, result.raised) == (2, False)
    assert epoch_numbers(store) == list(range(2, 10))


def test_a_new_generation_fences_a_raise_decided_from_an_earlier_read(
    store: StateStore,
) -> None:
    """``recover(mode="replay")`` fences the floor before it writes the new generation: a
    raise decided from a floor read before the fence loses its swap and deletes nothing."""
    EpochLog(store, LAYOUT).create_start(offset(0))
    record_epochs(store, range(10))
    before = read_floor_versioned(store, LAYOUT)
    assert (before.floor, before.epoch, before.generation) == (None, 0, 0)

    assert fence_generation(store, LAYOUT, 1, lambda: EpochLog(store, LAYOUT).start())
    fenced = read_floor(store, LAYOUT)
    assert fenced is not None and (fenced.epoch, fenced.generation) == (0, 1)
    assert not fenced.pruned and fenced.start == offset(0)

    stale = prune_below(store, LAYOUT, 6, read=before)
    assert (stale.floor, stale.raised) == (0, False)
    assert epoch_numbers(store) == list(range(10))
    assert read_floor(store, LAYOUT) == fenced

    # Read after the fence, a raise takes effect and carries the generation over.
    now = read_floor_versioned(store, LAYOUT)
    assert now.generation == 1 and prune_below(store, LAYOUT, 6, read=now).raised
    raised = read_floor(store, LAYOUT)
    assert raised is not None and (raised.epoch, raised.generation) == (6, 1)
    # A later generation fences the pruned floor too; the same one again writes nothing.
    assert fence_generation(store, LAYOUT, 2, lambda: None)
    assert not fence_generation(store, LAYOUT, 2, lambda: None)
    again = read_floor(store, LAYOUT)
    assert again is not None and (again.epoch, again.generation) == (6, 2)


def test_without_a_persisted_start_there_is_nothing_to_fence(store: StateStore) -> None:
    assert not fence_generation(store, LAYOUT, 1, lambda: None)
    assert read_floor(store, LAYOUT) is None


def test_compaction_keeps_the_floors_generation(store: StateStore) -> None:
    EpochLog(store, LAYOUT).create_start(offset(0))
    record_epochs(store, range(40))
    fence_generation(store, LAYOUT, 3, lambda: EpochLog(store, LAYOUT).start())
    assert compact(store, LAYOUT, 32).compacted
    floor = read_floor(store, LAYOUT)
    assert floor is not None and floor.segments and (floor.epoch, floor.generation) == (0, 3)
    assert EpochLog(store, LAYOUT).read_epoch(5) is not None


def test_the_floor_is_not_raised_to_an_epoch_that_is_not_recorded(store: StateStore) -> None:
    record_epochs(store, range(4))
    assert prune_below(store, LAYOUT, 6) == type(prune_below(store, LAYOUT, 0))(0, False)
    assert read_floor(store, LAYOUT) is None
    assert epoch_numbers(store) == [0, 1, 2, 3]


def test_an_epoch_below_the_floor_is_never_planned_again(store: StateStore) -> None:
    record_epochs(store, range(10))
    prune_below(store, LAYOUT, 6)
    log = EpochLog(store, LAYOUT)  # a driver on a checkpoint older than the floor
    with pytest.raises(EpochsPruned, match=r"epoch 4 was pruned.*begins at epoch 6"):
        log.recorded_end(offset(4))
    with pytest.raises(EpochsPruned, match=r"epoch 0 was pruned"):
        log.recorded_end(offset(0))
    assert log.recorded_end(offset(6)) == end_of(6)
    assert log.recorded_end(offset(10)) is None  # the next epoch, not planned yet


def test_the_metrics_count_what_the_pruned_records_told_them(store: StateStore) -> None:
    record_epochs(store, range(10))
    for b in range(10):
        write_batch_record(store, LAYOUT, "q1", b, b)
    for b in range(3):
        write_batch_record(store, LAYOUT, "q2", b, b)
    barrier = BarrierState(9, None, None)
    store.put_json(LAYOUT.barrier_state, barrier.to_json())
    reader = StateReader(store, LAYOUT)

    def counts() -> tuple[int, int]:
        facts = reader.read()
        return (
            bundles_delivered(barrier, facts.epochs, facts.floor),
            replays_dropped(barrier.progress, facts.batches_per_epoch, facts.floor),
        )

    before = counts()
    assert before == (9, 3)
    prune_below(store, LAYOUT, 6)
    assert counts() == before
    prune_below(store, LAYOUT, 9)
    assert counts() == before


def test_a_new_checkpoint_after_pruning_is_refused_unless_told_to_start_at_the_floor(
    broker: FakeBroker,
) -> None:
    broker.produce("t", 0, 50)
    h = Harness(broker, maxOffsetsPerTrigger="10")
    start = h.reader.initialOffset()
    for _ in range(5):
        start = h.reader.latestOffset(start, ReadMaxRows(10))
    assert prune_below(h.store, h.layout, 3).raised

    fresh = h.new_reader()  # a query on a new checkpoint: Spark asks for the initial offset
    with pytest.raises(EpochsPruned) as info:
        fresh.initialOffset()
    message = str(info.value)
    assert "epochs below epoch 3 were pruned" in message
    assert "state.startAtFloor=true" in message and "state.epochsRetained=1000" in message

    told = Harness(broker, uri=h.uri, maxOffsetsPerTrigger="10", **{"state.startAtFloor": "true"})
    begin = told.reader.initialOffset()
    assert SourceOffset.from_json(begin) == SourceOffset(3, {("t", 0): 30})
    # from there the recorded epochs replay as they were
    assert SourceOffset.from_json(told.reader.latestOffset(begin, ReadAllAvailable())).epoch == 4


def test_the_driver_prunes_in_the_background_only_when_due_and_never_a_coordinated_pipeline(
    store: StateStore,
) -> None:
    record_epochs(store, range(30))
    store.put_json(LAYOUT.barrier_state, BarrierState(24, None, None).to_json())
    pruner = EpochLogPruner(store, LAYOUT, retained=8)  # step 2

    pruner.after_commit(25)
    pruner.close()
    floor = read_floor(store, LAYOUT)
    assert floor is not None and floor.epoch == 25 - 8
    assert epoch_numbers(store)[0] == 17

    pruner.after_commit(26)  # 26 - 17 < 8 + 2: not due, nothing read or started
    assert pruner._thread is not None and not pruner._thread.is_alive()
    pruner.close()

    coordinated = MemoryStore(StoreConfig("memory://floor-coordinated"))
    record_epochs(coordinated, range(30))
    coordinated.put_json(LAYOUT.barrier_state, BarrierState(24, None, None).to_json())
    coordinated.put_json(LAYOUT.driver, {"token": 1})
    other = EpochLogPruner(coordinated, LAYOUT, retained=8)
    other.after_commit(25)
    other.close()
    assert read_floor(coordinated, LAYOUT) is None and epoch_numbers(coordinated)[0] == 0


@pytest.fixture
def broker() -> FakeBroker:
    b = FakeBroker()
    b.create("t", 1)
    return b
