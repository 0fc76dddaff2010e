"""Batch records (state.protocol.batch_records): written once, remembered per process."""

from __future__ import annotations

import uuid

import pytest

from state.errors import EpochLogConflict
from state.layout import PipelineLayout
from state.protocol.batch_records import write_batch_record
from state.protocol.epoch_log import epoch_of_batch
from state.stores import StoreConfig
from state.stores.memory_store import MemoryStore


class CountingStore(MemoryStore):
    def __init__(self, uri: str) -> None:
        super().__init__(StoreConfig(uri))
        self.creates = 0

    def create(self, key: str, data: bytes) -> str:
        self.creates += 1
        return super().create(key, data)


def test_a_second_write_of_the_same_record_costs_no_request() -> None:
    store = CountingStore(f"memory://br-{uuid.uuid4().hex}")
    layout = PipelineLayout("p")
    write_batch_record(store, layout, "q-1", 3, 7)
    write_batch_record(store, layout, "q-1", 3, 7)  # the query's second branch
    assert store.creates == 1
    assert epoch_of_batch(store, layout, "q-1", 3) == 7


def test_a_different_record_still_meets_the_store_and_conflicts() -> None:
    uri = f"memory://br-{uuid.uuid4().hex}"
    store = CountingStore(uri)
    layout = PipelineLayout("p")
    write_batch_record(store, layout, "q-1", 3, 7)
    with pytest.raises(EpochLogConflict):
        write_batch_record(store, layout, "q-1", 3, 8)
    assert store.creates == 2


def test_a_record_another_process_wrote_is_checked_once() -> None:
    uri = f"memory://br-{uuid.uuid4().hex}"
    layout = PipelineLayout("p")
    MemoryStore(StoreConfig(uri)).create_json(
        layout.batch("q-1", 4), {"batch_id": 4, "epoch": 9, "query_id": "q-1"}
    )
    store = CountingStore(uri)
    write_batch_record(store, layout, "q-1", 4, 9)
    write_batch_record(store, layout, "q-1", 4, 9)
    assert store.creates == 1
