"""The marked read task writes its batch record while it fetches, and yields no row
before the record is written (datasource.partition_reader.read_partition, through the
stream reader's read(); docs/PROTOCOL.md)."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from datasource import partition_reader
from datasource.offsets import OffsetRange
from datasource.options import KafkaSourceOptions
from datasource.partition_reader import KafkaInputPartition
from datasource.schema import source_schema
from datasource.stream_reader import GlobalTimeKafkaStreamReader
from state.errors import StoreUnavailable
from state.layout import PipelineLayout
from state.protocol.epoch_log import epoch_of_batch
from state.spark_task import StreamingTask
from state.stores import StoreConfig
from state.stores.memory_store import MemoryStore

RANGE = OffsetRange("t", 0, 0, 3)
Wired = tuple["GlobalTimeKafkaStreamReader", "SlowStore", list[KafkaInputPartition]]


class SlowStore(MemoryStore):
    """Creates wait until released (a slow store), or fail."""

    def __init__(self, uri: str) -> None:
        super().__init__(StoreConfig(uri))
        self.go = threading.Event()
        self.fail = False

    def create(self, key: str, data: bytes) -> str:
        assert self.go.wait(5)
        if self.fail:
            raise StoreUnavailable(self.uri, key, "down")
        return super().create(key, data)


def reader(uri: str) -> GlobalTimeKafkaStreamReader:
    options = KafkaSourceOptions.parse(
        {
            "kafka.bootstrap.servers": "fake:9092",
            "subscribe": "t",
            "pipeline.id": "p",
            "state.uri": uri,
        }
    )
    return GlobalTimeKafkaStreamReader(options, source_schema(False))


@pytest.fixture
def wired(monkeypatch: pytest.MonkeyPatch) -> Wired:
    uri = f"memory://rr-{uuid.uuid4().hex}"
    store = SlowStore(uri)
    seen: list[KafkaInputPartition] = []

    def fake_ranges(
        options: Any, partition: KafkaInputPartition, schema: Any, **consumers: Any
    ) -> Iterator[str]:
        seen.append(partition)
        store.go.set()  # the fetch is under way: let the record's write finish
        yield "batch-1"
        yield "batch-2"

    monkeypatch.setattr(partition_reader, "_read_ranges", fake_ranges)
    monkeypatch.setattr(partition_reader, "open_store", lambda config: store)
    monkeypatch.setattr(StreamingTask, "current", classmethod(lambda cls: StreamingTask("q", 4)))
    return reader(uri), store, seen


def test_no_row_before_the_record(
    wired: Wired,
) -> None:
    r, store, seen = wired
    rows = r.read(KafkaInputPartition(9, (RANGE,), records_batch=True))
    assert next(iter(rows)) == "batch-1"
    assert epoch_of_batch(store, PipelineLayout("p"), "q", 4) == 9
    assert list(rows) == ["batch-2"]
    assert [p.epoch for p in seen] == [9]


def test_a_failed_record_fails_the_task_before_any_row(
    wired: Wired,
) -> None:
    r, store, _ = wired
    store.fail = True
    with pytest.raises(StoreUnavailable):
        next(iter(r.read(KafkaInputPartition(9, (RANGE,), records_batch=True))))


def test_an_unmarked_partition_writes_no_record_and_a_marker_does(
    wired: Wired,
) -> None:
    r, store, seen = wired
    assert list(r.read(KafkaInputPartition(9, (RANGE,)))) == ["batch-1", "batch-2"]
    assert epoch_of_batch(store, PipelineLayout("p"), "q", 4) is None
    marker = KafkaInputPartition(9, (), records_batch=True)
    assert list(r.read(marker)) == ["batch-1", "batch-2"]
    assert epoch_of_batch(store, PipelineLayout("p"), "q", 4) == 9
    assert [p.records_batch for p in seen] == [False, True]
