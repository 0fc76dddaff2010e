"""``readMode=driver`` (datasource.driver_reader) against a fake cluster: the epochs are
executor mode's (the planning is its reader's), the read limit is the reader's own,
AvailableNow stops at its target, and the rows are executor mode's rows."""

from __future__ import annotations

import copy
import pickle
import uuid
from collections.abc import Collection
from typing import Any

import pyarrow as pa
import pytest
from pyspark.errors import PySparkNotImplementedError

from datasource.consumer_pool import ConsumerPool
from datasource.driver_reader import DriverKafkaStreamReader
from datasource.offset_reader import OffsetReader
from datasource.options import KafkaSourceOptions
from datasource.partition_reader import KafkaInputPartition, read_partition
from datasource.schema import arrow_schema, source_schema
from datasource.source import GlobalTimeKafkaSource
from datasource.stream_reader import GlobalTimeKafkaStreamReader
from state.errors import ConfigError
from state.layout import PipelineLayout
from state.protocol.epoch_log import EpochLog
from state.records.source_offset import SourceOffset
from state.stores.memory_store import MemoryStore
from tests.source_fakes import FakeBroker, factory


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Setup:
    """A driver reader and an executor-mode reader of the same kind, each with its own
    pipeline state, on one fake broker."""

    def __init__(self, broker: FakeBroker, **options: str) -> None:
        self.broker = broker
        self.clock = Clock()
        self.raw = {
            "kafka.bootstrap.servers": "fake:9092",
            "subscribe": "t",
            "pipeline.id": "p",
            "startingOffsets": "earliest",
            "fetchOffset.retryIntervalMs": "0",
            "readMode": "driver",
            **options,
        }

    def options(self) -> KafkaSourceOptions:
        return KafkaSourceOptions.parse(
            {**self.raw, "state.uri": f"memory://drv-{uuid.uuid4().hex}"}
        )

    def planner(self, options: KafkaSourceOptions) -> GlobalTimeKafkaStreamReader:
        assert options.store is not None
        return GlobalTimeKafkaStreamReader(
            options,
            source_schema(False),
            offset_reader=OffsetReader(
                options, consumer_factory=factory(self.broker), clock=self.clock
            ),
            epoch_log=EpochLog(MemoryStore(options.store), PipelineLayout("p")),
            clock=self.clock,
            sleep=lambda s: None,
        )

    def current_ids(self, _: KafkaSourceOptions, topics: Collection[str]) -> dict[str, str]:
        return {t: str(self.broker.ids[t]) for t in topics}

    def driver(self) -> DriverKafkaStreamReader:
        options = self.options()
        return DriverKafkaStreamReader(
            options,
            source_schema(False),
            planner=self.planner(options),
            consumer_factory=factory(self.broker),
            source=ConsumerPool(),
            current_ids=self.current_ids,
        )

    def read(self, reader: DriverKafkaStreamReader, start: dict[str, Any]) -> Any:
        self.clock.now += 10  # past the end-offset cache
        rows, end = reader.read(start)
        return list(rows), end


@pytest.fixture
def broker() -> FakeBroker:
    b = FakeBroker()
    b.create("t", 2)
    b.produce("t", 0, 150)
    b.produce("t", 1, 150)
    return b


def frontier(doc: dict[str, Any]) -> dict[tuple[str, int], int]:
    return dict(SourceOffset.from_json(doc).offsets)


def table(batches: list[Any]) -> pa.Table:
    return pa.Table.from_batches(batches)


def test_read_plans_one_epoch_under_max_offsets_per_trigger(broker: FakeBroker) -> None:
    s = Setup(broker, maxOffsetsPerTrigger="100")
    reader = s.driver()
    start = reader.initialOffset()
    batches, end = s.read(reader, start)
    assert SourceOffset.from_json(end).epoch == 1
    assert frontier(end) == {("t", 0): 50, ("t", 1): 50}
    assert table(batches).num_rows == 100
    # the replay of a recorded epoch returns its end unchanged, whatever the limit
    again = DriverKafkaStreamReader(
        reader.options,
        source_schema(False),
        planner=reader.planner,
        consumer_factory=factory(broker),
        source=ConsumerPool(),
        current_ids=s.current_ids,
    )
    replayed, end_again = s.read(again, start)
    assert end_again == end
    assert table(replayed).equals(table(batches))


def test_nothing_new_returns_the_start_and_no_rows(broker: FakeBroker) -> None:
    s = Setup(broker)
    reader = s.driver()
    start = reader.initialOffset()
    _, end = s.read(reader, start)
    rows, same = s.read(reader, end)
    assert rows == [] and same == end


def test_the_cached_rows_survive_spark_copying_their_iterator(broker: FakeBroker) -> None:
    s = Setup(broker)
    reader = s.driver()
    rows, _ = reader.read(reader.initialOffset())
    first = copy.copy(rows)  # Spark's wrapper copies the iterator it caches
    assert sum(b.num_rows for b in first) == 300
    assert sum(b.num_rows for b in copy.copy(rows)) == 300


def test_available_now_stops_at_its_target_one_epoch_per_read(broker: FakeBroker) -> None:
    s = Setup(broker, maxOffsetsPerTrigger="100")
    reader = s.driver()
    offset = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    broker.produce("t", 0, 100)  # after the target: not read in this run
    sizes = []
    while True:
        batches, end = s.read(reader, offset)
        if end == offset:
            break
        sizes.append(table(batches).num_rows)
        offset = end
    assert sizes == [100, 100, 100]
    assert frontier(offset) == {("t", 0): 150, ("t", 1): 150}


def test_the_rows_are_executor_modes_rows(broker: FakeBroker) -> None:
    s = Setup(broker, maxOffsetsPerTrigger="120")
    reader = s.driver()
    start = reader.initialOffset()
    batches, end = s.read(reader, start)

    executors = s.planner(s.options())
    e_start = executors.initialOffset()
    s.clock.now += 10
    e_end = executors.latestOffset(e_start, executors.getDefaultReadLimit())
    assert e_end == end
    executor_rows = [
        b
        for part in executors.partitions(e_start, e_end)
        if isinstance(part, KafkaInputPartition)
        for b in read_partition(
            executors.options,
            part,
            arrow_schema(source_schema(False)),
            task=None,
            consumer_factory=factory(broker),
            source=ConsumerPool(),
            current_ids=s.current_ids,
        )
    ]
    assert table(batches).equals(table(executor_rows))
    assert table(batches).num_rows == 120


def test_the_reader_pickles_without_its_clients(broker: FakeBroker) -> None:
    reader = Setup(broker).driver()
    back = pickle.loads(pickle.dumps(reader))
    assert back.options == reader.options
    assert back._consumer_factory is None and back._current_ids is None


def test_the_source_offers_the_simple_reader_only_in_driver_mode() -> None:
    raw = {
        "kafka.bootstrap.servers": "fake:9092",
        "subscribe": "t",
        "pipeline.id": "p",
        "state.uri": "memory://x",
    }
    driver = GlobalTimeKafkaSource({**raw, "readMode": "driver"})
    with pytest.raises(PySparkNotImplementedError):
        driver.streamReader(driver.schema())
    assert isinstance(driver.simpleStreamReader(driver.schema()), DriverKafkaStreamReader)
    executors = GlobalTimeKafkaSource(raw)
    assert isinstance(executors.streamReader(executors.schema()), GlobalTimeKafkaStreamReader)
    with pytest.raises(ConfigError) as info:
        GlobalTimeKafkaSource({**raw, "readMode": "workers"})
    text = str(info.value)
    assert "readMode" in text and "workers" in text and "driver" in text
