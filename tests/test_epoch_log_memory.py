"""What the driver's :class:`~state.protocol.epoch_log.EpochLog` remembers between batches.

A recorded epoch never changes, and the epoch after one this log created cannot exist
before that create: both spare a store request per micro-batch (and per idle poll)
without changing any answer.
"""

from __future__ import annotations

import uuid
from collections import Counter

import pytest

from state.errors import EpochLogConflict, KeyExists, StoreUnavailable
from state.layout import PipelineLayout
from state.protocol.epoch_log import EpochLog
from state.records.epoch import EpochRecord
from state.records.source_offset import SourceOffset
from state.stores import StoreConfig, Versioned
from state.stores.memory_store import MemoryStore


class CountingStore(MemoryStore):
    """A memory store that counts its requests and can fail the next create."""

    def __init__(self, uri: str) -> None:
        super().__init__(StoreConfig(uri))
        self.calls: Counter[str] = Counter()
        self.fail_next_create = False

    def get(self, key: str) -> Versioned:
        self.calls["get"] += 1
        return super().get(key)

    def create(self, key: str, data: bytes) -> str:
        self.calls["create"] += 1
        if self.fail_next_create:
            self.fail_next_create = False
            super().create(key, data)  # written, but the answer is lost
            raise StoreUnavailable(self.uri, key, "connection reset")
        return super().create(key, data)


def offset(epoch: int, at: int) -> SourceOffset:
    return SourceOffset(epoch, {("t", 0): at})


@pytest.fixture
def store() -> CountingStore:
    return CountingStore(f"memory://epochs-{uuid.uuid4().hex}")


@pytest.fixture
def log(store: CountingStore) -> EpochLog:
    return EpochLog(store, PipelineLayout("p"))


def test_steady_state_costs_one_create_and_one_floor_read_per_batch(
    log: EpochLog, store: CountingStore
) -> None:
    assert log.recorded_end(offset(0, 0)) is None  # a new pipeline: one read
    assert log.record(offset(0, 0), offset(1, 10)) == offset(1, 10)
    store.calls.clear()
    for k in range(1, 6):
        start, end = offset(k, 10 * k), offset(k + 1, 10 * (k + 1))
        assert log.recorded_end(start) is None  # we created epoch k-1: k cannot exist yet
        assert log.record(start, end) == end
    # The floor is read after each create that succeeds: a compaction may have moved the
    # epoch into a segment since this driver last looked (it paused, or fell behind),
    # and then the segment's record is the epoch's. Nothing else is read.
    assert store.calls == Counter(create=5, get=5)


def test_idle_polls_read_nothing(log: EpochLog, store: CountingStore) -> None:
    start = offset(0, 0)
    for _ in range(100):
        assert log.recorded_end(start) is None
    # once: the epoch, then the floor (an absent epoch may have been pruned)
    assert store.calls == Counter(get=2)


def test_recorded_epochs_are_answered_from_memory(log: EpochLog, store: CountingStore) -> None:
    other = EpochLog(store, PipelineLayout("p"))  # a second driver recorded them
    for k in range(3):
        other.record(offset(k, 10 * k), offset(k + 1, 10 * (k + 1)))
    store.calls.clear()
    for _ in range(3):
        for k in range(3):
            assert log.recorded_end(offset(k, 10 * k)) == offset(k + 1, 10 * (k + 1))
    # each epoch once, and the floor after it (a segment may hold the epoch, or it may
    # have been pruned)
    assert store.calls == Counter(get=6)
    # epoch 3 was never created by this log: it is read, not assumed absent
    assert log.recorded_end(offset(3, 30)) is None
    assert store.calls == Counter(get=8)


def test_a_lost_race_adopts_the_winner_and_reads_the_next_epoch(
    log: EpochLog, store: CountingStore
) -> None:
    start = offset(0, 0)
    assert log.recorded_end(start) is None
    winner = EpochRecord(0, start, offset(1, 3))
    store.put_json(PipelineLayout("p").epoch(0), winner.to_json())  # another driver, meanwhile
    assert log.record(start, offset(1, 10)) == offset(1, 3)
    store.calls.clear()
    assert log.recorded_end(start) == offset(1, 3)
    assert store.calls == Counter()
    assert log.recorded_end(offset(1, 3)) is None  # not ours: epoch 1 is looked up
    assert store.calls == Counter(get=2)  # and the floor after it


def test_after_a_create_of_unknown_outcome_the_store_is_asked_again(
    log: EpochLog, store: CountingStore
) -> None:
    start = offset(0, 0)
    assert log.recorded_end(start) is None
    store.fail_next_create = True
    with pytest.raises(StoreUnavailable):
        log.record(start, offset(1, 10))
    store.calls.clear()
    assert log.recorded_end(start) == offset(1, 10)  # it did land
    assert store.calls == Counter(get=2)  # the epoch, and the floor after it


def test_a_remembered_epoch_still_checks_the_start(log: EpochLog) -> None:
    log.record(offset(0, 0), offset(1, 10))
    with pytest.raises(EpochLogConflict):
        log.recorded_end(offset(0, 4))


def test_memory_is_bounded(log: EpochLog) -> None:
    for k in range(EpochLog.REMEMBERED + 10):
        log.record(offset(k, k), offset(k + 1, k + 1))
    assert len(log._recorded) == EpochLog.REMEMBERED
    assert min(log._recorded) == 10


def test_the_start_is_read_once(log: EpochLog, store: CountingStore) -> None:
    assert log.start() is None
    assert log.start() is None
    assert store.calls == Counter(get=2)  # absent is not remembered: nothing to replay yet
    assert log.create_start(offset(0, 5)) == offset(0, 5)
    store.calls.clear()
    assert log.start() == offset(0, 5)
    fresh = EpochLog(store, PipelineLayout("p"))
    assert fresh.start() == offset(0, 5) and fresh.start() == offset(0, 5)
    assert store.calls == Counter(get=1)


def test_a_lost_start_race_returns_the_winner(log: EpochLog, store: CountingStore) -> None:
    store.put_json(PipelineLayout("p").source_start, offset(0, 7).to_json())
    assert log.create_start(offset(0, 5)) == offset(0, 7)
    with pytest.raises(KeyExists):
        store.create_json(PipelineLayout("p").source_start, {})


def test_operators_list_and_read_the_recorded_epochs(log: EpochLog, store: CountingStore) -> None:
    for k in (0, 1, 2):
        log.record(offset(k, 10 * k), offset(k + 1, 10 * (k + 1)))
    store.create(log.layout.epochs_prefix + "notes.txt", b"not an epoch")
    assert log.epoch_numbers() == [0, 1, 2]
    recorded = log.read_epoch(1)
    assert recorded is not None and recorded.end.same_as(offset(2, 20))
    assert log.read_epoch(7) is None


def test_topic_ids_are_recorded_with_the_end_they_were_computed_under(
    log: EpochLog, store: CountingStore
) -> None:
    ids = {"t": "0e7b5a1c-0000-4000-8000-000000000001"}
    log.record(offset(0, 0), offset(1, 10), ids)
    log.record(offset(1, 10), offset(2, 20))  # a broker without ids
    store.calls.clear()
    assert log.topic_ids_at(offset(1, 10)) == ids
    assert log.topic_ids_at(offset(2, 20)) is None
    assert log.topic_ids_at(offset(1, 11)) is None  # epoch 0 ends elsewhere
    assert store.calls == Counter()  # remembered
    assert log.topic_ids_at(offset(0, 0)) is None  # the start: none persisted
    log.create_start(offset(0, 0), ids)
    assert log.topic_ids_at(offset(0, 0)) == ids  # the start's own
    assert log.topic_ids_at(offset(0, 1)) is None  # not the start
    assert EpochLog(store, PipelineLayout("p")).topic_ids_at(offset(0, 0)) == ids
    store.calls.clear()
    fresh = EpochLog(store, PipelineLayout("p"))  # a driver that starts again
    assert fresh.topic_ids_at(offset(1, 10)) == ids
    assert fresh.topic_ids_at(offset(1, 10)) == ids
    assert fresh.topic_ids_at(offset(7, 70)) is None  # not recorded
    assert store.calls == Counter(get=4)  # each epoch, and the floor after it
    raw, _ = store.get_json(PipelineLayout("p").epoch(0))
    assert raw["topic_ids"] == ids
    raw, _ = store.get_json(PipelineLayout("p").epoch(1))
    assert "topic_ids" not in raw
