"""Epoch segments (state/protocol/epoch_floor.py, ``compact``): delivered epochs and their
batch records compacted into a few objects, read back exactly as they were stored one each,
against the memory and file stores.

What could go wrong, and is checked here: an epoch or a batch record read differently (or
not at all) once compacted; a zombie driver's object shadowing the compacted record; a
reader whose floor was read before a merge; counts the metrics derive changing; a
compaction that loses its swap deleting anything; the bound on objects not holding.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import pytest

from datasource.log_pruner import EpochLogPruner
from state.errors import ConcurrentModification, SegmentGone, UnsupportedFormat
from state.layout import PipelineLayout
from state.metrics.families import bundles_delivered, replays_dropped
from state.metrics.reading import StateReader
from state.protocol import epoch_segments
from state.protocol.batch_records import batch_record_keys, write_batch_record
from state.protocol.epoch_floor import (
    MAX_SEGMENT_EPOCHS,
    MERGE_FANIN,
    SEGMENT_EPOCHS,
    compact,
    compaction_limit,
    floor_target,
    merge_plan,
    new_checkpoint_start,
    prune_below,
    read_floor,
)
from state.protocol.epoch_log import EpochLog, epoch_of_batch, segment_holding
from state.protocol.epoch_segments import stored_segments
from state.records import floor as floor_module
from state.records.barrier import BarrierState
from state.records.batch import BatchRecord
from state.records.codec import decode
from state.records.epoch import EpochRecord
from state.records.floor import FloorRecord
from state.records.source_offset import SourceOffset
from state.stores import StateStore, StoreConfig
from state.stores.file_store import FileStore
from state.stores.memory_store import MemoryStore

pytestmark = pytest.mark.unit

LAYOUT = PipelineLayout("p")


def offset(epoch: int) -> SourceOffset:
    """Epoch ``epoch`` starts at offset 10 * epoch of ``t``-0, except that every seventh
    epoch reads nothing (its end is its start)."""
    return SourceOffset(epoch, {("t", 0): 10 * (epoch - epoch // 7)})


def end_of(epoch: int) -> SourceOffset:
    return SourceOffset(epoch + 1, dict(offset(epoch + 1).offsets))


@pytest.fixture(params=["memory", "file"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[StateStore]:
    if request.param == "memory":
        yield MemoryStore(StoreConfig(f"memory://segments-{id(request)}"))
    else:
        yield FileStore(StoreConfig(f"file://{tmp_path / 'state'}"))


def run_pipeline(store: StateStore, epochs: range, *, replays: int = 0) -> None:
    """Epochs recorded as a driver records them, batch ``b`` of query ``q1`` reading epoch
    ``b``; a second query ``q2`` (a new checkpoint) replayed the first ``replays`` epochs."""
    log = EpochLog(store, LAYOUT)
    for k in epochs:
        log.record(offset(k), end_of(k))
        write_batch_record(store, LAYOUT, "q1", k, k)
    for b in range(replays):
        write_batch_record(store, LAYOUT, "q2", b, b)
    store.put_json(LAYOUT.barrier_state, BarrierState(epochs[-1], None, None).to_json())


def objects(store: StateStore, prefix: str) -> int:
    return len(store.list(f"{LAYOUT.root}/{prefix}"))


def test_merging_keeps_a_few_segments_of_each_size_however_many_are_appended() -> None:
    ranges: tuple[tuple[int, int], ...] = ()
    for n in range(500):
        ranges = merge_plan([*ranges, (n * SEGMENT_EPOCHS, (n + 1) * SEGMENT_EPOCHS)])
        assert ranges[0][0] == 0 and ranges[-1][1] == (n + 1) * SEGMENT_EPOCHS
        assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
        sizes = [end - first for first, end in ranges]
        assert max(sizes) <= MAX_SEGMENT_EPOCHS
        below_max = [s for s in sizes if s < MAX_SEGMENT_EPOCHS]
        assert all(below_max.count(s) < MERGE_FANIN for s in set(below_max))
    assert len(ranges) <= 500 * SEGMENT_EPOCHS // MAX_SEGMENT_EPOCHS + 2 * (MERGE_FANIN - 1)


def test_compacted_epochs_and_batch_records_read_as_they_were_stored(store: StateStore) -> None:
    run_pipeline(store, range(100), replays=5)
    log = EpochLog(store, LAYOUT)
    before = {k: log.read_epoch(k) for k in range(100)}
    limit = compaction_limit(progress=99, inflight_epoch=None)
    assert limit == 100 - SEGMENT_EPOCHS

    result = compact(store, LAYOUT, limit)

    assert result.compacted
    assert [(s.first, s.end) for s in result.segments] == [(0, 64), (64, 80)]
    assert result.epochs_deleted == 80
    assert result.batches_deleted == 85  # q1's 80, and q2's 5 replays
    floor = read_floor(store, LAYOUT)
    assert floor is not None and not floor.pruned and floor.segments == result.segments
    fresh = EpochLog(store, LAYOUT)
    assert {k: fresh.read_epoch(k) for k in range(100)} == before
    assert fresh.epoch_numbers() == list(range(100))
    assert [epoch_of_batch(store, LAYOUT, "q1", b) for b in range(100)] == list(range(100))
    assert [epoch_of_batch(store, LAYOUT, "q2", b) for b in range(5)] == list(range(5))
    assert epoch_of_batch(store, LAYOUT, "q2", 5) is None  # never recorded: a no-data batch
    # a new checkpoint still replays from the start: nothing was pruned
    start = SourceOffset(0, dict(offset(0).offsets))
    assert (
        new_checkpoint_start(floor, start, pipeline_id="p", retained=9, start_at_floor=False)
        == start
    )
    # what is left one object each: the 20 newest epochs and their batch records
    assert objects(store, "epochs/") == 20 + 2
    assert len(batch_record_keys(store, LAYOUT)) == 20


def test_a_replayed_epoch_is_planned_as_recorded_once_compacted(store: StateStore) -> None:
    run_pipeline(store, range(40))
    compact(store, LAYOUT, compaction_limit(39, None))
    log = EpochLog(store, LAYOUT)  # a driver restored from a snapshot at epoch 5
    assert log.recorded_end(offset(5)) == end_of(5)
    assert log.recorded_end(offset(30)) == end_of(30)
    assert log.recorded_end(offset(40)) is None  # the next epoch: not planned yet
    assert log.topic_ids_at(offset(6)) is None  # recorded without ids, as before


def test_an_object_written_after_its_epoch_was_compacted_does_not_shadow_the_segment(
    store: StateStore,
) -> None:
    run_pipeline(store, range(40))
    compact(store, LAYOUT, compaction_limit(39, None))
    # a driver that had fallen behind believes epoch 10 absent and records other bounds
    zombie = EpochRecord(10, offset(10), SourceOffset(11, {("t", 0): 999}))
    store.create_json(LAYOUT.epoch(10), zombie.to_json())
    store.create_json(LAYOUT.batch("q1", 10), BatchRecord("q1", 10, 10).to_json())

    log = EpochLog(store, LAYOUT)
    assert log.read_epoch(10) == EpochRecord(10, offset(10), end_of(10))
    assert log.recorded_end(offset(10)) == end_of(10)
    assert epoch_of_batch(store, LAYOUT, "q1", 10) == 10


def test_a_planner_whose_create_lands_after_a_compaction_adopts_the_compacted_epoch(
    store: StateStore,
) -> None:
    """A driver that had fallen behind looked for epoch 10 before a compaction moved it into
    a segment and deleted its object, and records it afterwards with other bounds: its
    create succeeds, but the epoch is the segment's, and so is the end it must plan."""
    run_pipeline(store, range(40))
    behind = EpochLog(store, LAYOUT)
    compact(store, LAYOUT, compaction_limit(39, None))
    assert not store.get_or_none(LAYOUT.epoch(10))

    other = SourceOffset(11, {("t", 0): 999})
    assert behind.record(offset(10), other) == end_of(10)
    # and what it remembers is the segment's record too
    assert behind.recorded_end(offset(10)) == end_of(10)

    # Its own object is a leftover: no reader takes it, and pruning past it deletes it.
    assert store.get_or_none(LAYOUT.epoch(10)) is not None
    assert EpochLog(store, LAYOUT).read_epoch(10) == EpochRecord(10, offset(10), end_of(10))
    assert prune_below(store, LAYOUT, 12).raised
    assert store.get_or_none(LAYOUT.epoch(10)) is None


def test_a_reader_whose_floor_was_read_before_a_merge_finds_the_merged_segment(
    store: StateStore,
) -> None:
    run_pipeline(store, range(200))
    compact(store, LAYOUT, 48)  # three segments of 16
    stale = read_floor(store, LAYOUT)
    assert stale is not None and len(stale.segments) == 3
    compact(store, LAYOUT, 64)  # the fourth: the four merge into one
    compact(store, LAYOUT, 80)  # and the parts of that merge are deleted now
    assert [(s.first, s.end) for s in stored_segments(store, LAYOUT)] == [(0, 64), (64, 80)]

    epoch_segments._READ.clear()  # another process: it has read none of them
    found = segment_holding(store, LAYOUT, stale, lambda s: s.epoch(20))
    assert found is not None and found.epoch(20) == EpochRecord(20, offset(20), end_of(20))
    assert (found.first, found.end) == (0, 64)
    assert SegmentGone.retriable  # gone again in the floor read again: try later


def test_a_compaction_that_loses_the_floor_deletes_nothing(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_pipeline(store, range(60))
    compact(store, LAYOUT, 16)

    def lost(key: str, value: object, expected_version: str) -> str:
        raise ConcurrentModification(store.uri, key, expected_version)

    with monkeypatch.context() as m:
        m.setattr(store, "compare_and_swap_json", lost)
        assert not compact(store, LAYOUT, 44).compacted
    assert EpochLog(store, LAYOUT).epoch_numbers() == list(range(60))
    assert objects(store, "epochs/") == 1 + 44 + 1  # a segment, the rest, the loser's segment
    floor = read_floor(store, LAYOUT)
    assert floor is not None and [(s.first, s.end) for s in floor.segments] == [(0, 16)]

    # the next compaction names a segment of the same range and bytes, and leaves no extra
    compact(store, LAYOUT, 44)
    assert [(s.first, s.end) for s in stored_segments(store, LAYOUT)] == [(0, 16), (16, 32)]


def test_pruning_a_compacted_log_counts_what_pruning_it_uncompacted_counts() -> None:
    plain = MemoryStore(StoreConfig("memory://segments-plain"))
    compacted = MemoryStore(StoreConfig("memory://segments-compacted"))
    for store in (plain, compacted):
        run_pipeline(store, range(120), replays=30)
    compact(compacted, LAYOUT, compaction_limit(119, None))
    # a replay wrote one again, by a worker that did not remember it
    compacted.create_json(LAYOUT.batch("q2", 3), BatchRecord("q2", 3, 3).to_json())

    def counts(store: StateStore) -> tuple[int, int]:
        facts = StateReader(store, LAYOUT).read()
        barrier = BarrierState(119, None, None)
        return (
            bundles_delivered(barrier, facts.epochs, facts.floor),
            replays_dropped(barrier.progress, facts.batches_per_epoch, facts.floor),
        )

    assert counts(compacted) == counts(plain)
    for target in (20, 70, 71, 100):  # inside a segment, at its end, past them
        for store in (plain, compacted):
            assert prune_below(store, LAYOUT, target).raised
        assert counts(compacted) == counts(plain)
        floor_plain, floor_compacted = read_floor(plain, LAYOUT), read_floor(compacted, LAYOUT)
        assert floor_plain is not None and floor_compacted is not None
        assert floor_compacted.epoch == floor_plain.epoch == target
        assert floor_compacted.start == floor_plain.start
        assert floor_compacted.epochs_with_records == floor_plain.epochs_with_records
        assert floor_compacted.replays_dropped == floor_plain.replays_dropped
        assert EpochLog(compacted, LAYOUT).epoch_numbers() == list(range(target, 120))
    assert all(s.end > 100 for s in stored_segments(compacted, LAYOUT))


def test_the_driver_keeps_a_few_dozen_objects_per_prefix_however_long_it_runs() -> None:
    store = MemoryStore(StoreConfig("memory://segments-long-run"))  # 3,000 epochs: in memory
    pruner = EpochLogPruner(store, LAYOUT, retained=1000)
    log = EpochLog(store, LAYOUT)
    most = {"epochs/": 0, "batches/": 0}
    for k in range(3000):
        log.record(offset(k), end_of(k))
        write_batch_record(store, LAYOUT, "q1", k, k)
        store.put_json(LAYOUT.barrier_state, BarrierState(k, None, None).to_json())
        pruner.after_commit(k + 1)
        pruner.close()
        most = {prefix: max(n, objects(store, prefix)) for prefix, n in most.items()}
    floor = read_floor(store, LAYOUT)
    assert floor is not None and floor.pruned
    assert 3000 - 1000 - 250 <= floor.epoch <= 3000 - 1000
    assert most["epochs/"] <= 48, most
    assert most["batches/"] <= 2 * SEGMENT_EPOCHS + 1, most
    # and every epoch kept reads as recorded
    fresh = EpochLog(store, LAYOUT)
    assert fresh.epoch_numbers() == list(range(floor.epoch, 3000))
    assert all(
        fresh.read_epoch(k) == EpochRecord(k, offset(k), end_of(k))
        for k in range(floor.epoch, 3000)
    )


def test_a_floor_naming_segments_is_refused_by_a_release_that_reads_format_1_only(
    store: StateStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_pipeline(store, range(40))
    compact(store, LAYOUT, 24)
    hit = store.get(LAYOUT.source_floor)
    assert hit.json()["format"] == 2
    # a release before segments reads formats up to 1: it refuses the floor, and so never
    # takes the compacted epochs for epochs not planned yet
    monkeypatch.setattr(floor_module, "FLOOR_RECORD_FORMAT", 1)
    with pytest.raises(UnsupportedFormat, match=r"floor record: format 2 is not supported"):
        decode(hit.data, FloorRecord.from_json, "floor")
    monkeypatch.undo()
    # pruned, with no segment left, the floor is written in format 1 again
    prune_below(store, LAYOUT, floor_target(39, None, 1))
    assert store.get(LAYOUT.source_floor).json()["format"] == 1
