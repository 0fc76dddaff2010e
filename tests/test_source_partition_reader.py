"""Executor reads of gtkafka against a fake consumer: exact ranges, Arrow, gaps, batch records."""

from __future__ import annotations

import json
import logging
import pickle
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from datasource import partition_reader
from datasource.consumer_pool import ConsumerPool
from datasource.offsets import OffsetRange
from datasource.options import KafkaSourceOptions
from datasource.partition_reader import KafkaInputPartition, input_partitions, read_partition
from datasource.range_reader import ARROW_BATCH_ROWS, RangeReader
from datasource.schema import arrow_schema, source_schema
from state import profiling
from state.errors import DataLossError, EpochLogConflict, SourceUnavailable
from state.layout import PipelineLayout
from state.protocol.batch_records import write_batch_record
from state.protocol.epoch_log import epoch_of_batch
from state.spark_task import StreamingTask
from state.stores import StateStore, StoreConfig, open_store
from state.stores.memory_store import MemoryStore
from tests.source_fakes import FakeBroker, factory


def options(**extra: str) -> KafkaSourceOptions:
    return KafkaSourceOptions.parse(
        {"kafka.bootstrap.servers": "fake:9092", "subscribe": "t", **extra}
    )


def read(
    broker: FakeBroker, r: OffsetRange, *, headers: bool = False, epoch: int = 4, **extra: str
) -> tuple[pa.Table, RangeReader]:
    opts = options(includeHeaders=str(headers).lower(), **extra)
    reader = RangeReader(opts, r, consumer_factory=factory(broker))
    batches = list(reader.batches(epoch, arrow_schema(source_schema(headers))))
    assert all(isinstance(b, pa.RecordBatch) for b in batches)
    assert all(c.closed for c in broker.consumers)
    table = pa.Table.from_batches(batches, schema=arrow_schema(source_schema(headers)))
    return table, reader


@pytest.fixture
def broker() -> FakeBroker:
    b = FakeBroker(tansu=True)
    b.create("t", 1)
    return b


def test_reads_exactly_the_range_in_arrow(broker: FakeBroker) -> None:
    broker.produce("t", 0, 100, batch=7, headers=[("h", b"x")])
    table, _ = read(broker, OffsetRange("t", 0, 10, 60), headers=True)
    assert table.column("offset").to_pylist() == list(range(10, 60))
    assert table.column("key").to_pylist()[0] == b"k10"
    assert table.column("headers").to_pylist()[0] == [{"key": "h", "value": b"x"}]
    gt = table.column("gt").to_pylist()
    assert gt[0] == {"epoch": 4, "topic": "t", "partition": 0, "offset": 10}
    assert set(table.column("topic").to_pylist()) == {"t"}
    assert table.schema.equals(arrow_schema(source_schema(True)))
    ts = table.column("timestamp").to_pylist()[0]
    assert ts.timestamp() == pytest.approx(1.010)  # 1010 ms


def test_batches_are_bounded(broker: FakeBroker) -> None:
    n = ARROW_BATCH_ROWS * 2 + 5
    broker.produce("t", 0, n)
    opts = options(**{"kafka.max.poll.records": "3000"})
    reader = RangeReader(opts, OffsetRange("t", 0, 0, n), consumer_factory=factory(broker))
    sizes = [b.num_rows for b in reader.batches(0, arrow_schema(source_schema(False)))]
    assert sizes == [ARROW_BATCH_ROWS, ARROW_BATCH_ROWS, 5]


def test_compaction_gaps_are_not_loss(broker: FakeBroker) -> None:
    broker.produce("t", 0, 5)
    broker.skip("t", 0, 3)  # offsets 5..7 hold no records (compacted, markers)
    broker.produce("t", 0, 5)
    table, reader = read(broker, OffsetRange("t", 0, 0, 13))
    assert table.column("offset").to_pylist() == [0, 1, 2, 3, 4, 8, 9, 10, 11, 12]
    assert reader.skipped == 0
    # a range ending inside a gap terminates too
    table, _ = read(broker, OffsetRange("t", 0, 3, 7))
    assert table.column("offset").to_pylist() == [3, 4]


def test_retention_loss_fails_or_is_skipped_and_counted(
    broker: FakeBroker, caplog: pytest.LogCaptureFixture
) -> None:
    broker.produce("t", 0, 50)
    broker.delete_before("t", 0, 20)
    with pytest.raises(DataLossError) as info:
        read(broker, OffsetRange("t", 0, 10, 30))
    assert "records [10, 20) of t-0" in str(info.value) and "fake:9092" in str(info.value)
    with caplog.at_level(logging.WARNING, logger="datasource"):
        table, reader = read(broker, OffsetRange("t", 0, 10, 30), failOnDataLoss="false")
    assert table.column("offset").to_pylist() == list(range(20, 30))
    assert reader.skipped == 10
    assert "skipped 10 lost record(s)" in caplog.text


def test_truncated_partition_is_loss_and_terminates(broker: FakeBroker) -> None:
    broker.produce("t", 0, 20)
    with pytest.raises(DataLossError) as info:
        read(broker, OffsetRange("t", 0, 10, 40))  # Tansu: empty fetch, high watermark 20
    assert "records [20, 40)" in str(info.value) and "now ends at 20" in str(info.value)
    table, reader = read(broker, OffsetRange("t", 0, 10, 40), failOnDataLoss="false")
    assert table.num_rows == 10 and reader.skipped == 20
    kafka_like = FakeBroker(tansu=False)
    kafka_like.create("t", 1)
    kafka_like.produce("t", 0, 5)
    with pytest.raises(DataLossError):
        read(kafka_like, OffsetRange("t", 0, 30, 40))  # OffsetOutOfRange past the end


def test_unreachable_broker(broker: FakeBroker) -> None:
    broker.produce("t", 0, 5)
    broker.down = True
    with pytest.raises(SourceUnavailable) as info:
        read(broker, OffsetRange("t", 0, 0, 5))
    assert "fake:9092" in str(info.value)


def test_no_progress_within_poll_timeout(broker: FakeBroker) -> None:
    broker.produce("t", 0, 5)
    opts = options(**{"kafkaConsumer.pollTimeoutMs": "1000"})
    now = [0.0]

    def clock() -> float:
        now[0] += 0.3
        return now[0]

    class Stuck:
        def __init__(self, **config: Any) -> None:
            self.closed = False

        def assign(self, tps: Any) -> None: ...
        def seek(self, tp: Any, off: int) -> None: ...
        def poll(self, timeout_ms: int = 0, max_records: int | None = None) -> dict[Any, Any]:
            return {}

        def position(self, tp: Any) -> int:
            return 0

        def highwater(self, tp: Any) -> None:
            return None

        def topics(self) -> set[str]:
            return {"t"}

        def partitions_for_topic(self, topic: str) -> set[int]:
            return {0}

        def close(self) -> None:
            self.closed = True

    reader = RangeReader(opts, OffsetRange("t", 0, 0, 5), consumer_factory=Stuck, clock=clock)
    with pytest.raises(SourceUnavailable) as info:
        list(reader.batches(0, arrow_schema(source_schema(False))))
    assert "pollTimeoutMs=1000" in str(info.value)


def test_deleted_partition_is_loss_after_the_poll_timeout(broker: FakeBroker) -> None:
    broker.produce("t", 0, 5)
    now = [0.0]

    def clock() -> float:
        now[0] += 0.5
        return now[0]

    opts = options(**{"kafkaConsumer.pollTimeoutMs": "2000"})
    del broker.topics["t"]
    reader = RangeReader(
        opts, OffsetRange("t", 0, 0, 5), consumer_factory=factory(broker), clock=clock
    )
    with pytest.raises(DataLossError) as info:
        list(reader.batches(0, arrow_schema(source_schema(False))))
    assert "the partition was deleted" in str(info.value)


def test_read_partition_writes_the_batch_record_first(broker: FakeBroker) -> None:
    broker.produce("t", 0, 3)
    uri = f"memory://br-{uuid.uuid4().hex}"
    opts = options(**{"pipeline.id": "p", "state.uri": uri})
    store = MemoryStore(StoreConfig(uri))
    layout = PipelineLayout("p")
    ctx = StreamingTask("q-1", 7)
    schema = arrow_schema(source_schema(False))
    pool = ConsumerPool()
    it = read_partition(
        opts,
        KafkaInputPartition(5, (OffsetRange("t", 0, 0, 3),), records_batch=True),
        schema,
        task=ctx,
        consumer_factory=factory(broker),
        source=pool,
    )
    first = next(it)
    assert epoch_of_batch(store, layout, "q-1", 7) == 5
    assert first.num_rows == 3
    # a marker partition writes the record and yields nothing; identical records are fine
    marker = KafkaInputPartition(5, (), records_batch=True)
    assert list(read_partition(opts, marker, schema, task=ctx)) == []
    assert store.get_json(layout.batch("q-1", 7))[0] == {
        "batch_id": 7,
        "epoch": 5,
        "query_id": "q-1",
    }
    with pytest.raises(EpochLogConflict):
        list(read_partition(opts, KafkaInputPartition(6, (), True), schema, task=ctx))
    # no streaming context (a batch read): nothing written
    list(read_partition(opts, marker, schema, task=None))
    assert store.list(layout.batches_prefix()) == [layout.batch("q-1", 7)]


def test_only_the_marked_partition_opens_a_store(
    broker: FakeBroker, monkeypatch: pytest.MonkeyPatch
) -> None:
    broker.produce("t", 0, 4)
    uri = f"memory://br-{uuid.uuid4().hex}"
    opts = options(**{"pipeline.id": "p", "state.uri": uri})
    opened: list[object] = []

    def recording_open(cfg: StoreConfig | str) -> StateStore:
        opened.append(cfg)
        return open_store(cfg)

    monkeypatch.setattr(partition_reader, "open_store", recording_open)
    schema = arrow_schema(source_schema(False))
    ctx = StreamingTask("q-2", 0)
    tasks: list[tuple[OffsetRange, ...]] = [
        (OffsetRange("t", 0, 0, 2),),
        (OffsetRange("t", 0, 2, 4),),
    ]
    parts = input_partitions(3, tasks, records_batch=True)
    assert [p.records_batch for p in parts] == [True, False]
    pool = ConsumerPool()
    rows = [
        b.num_rows
        for p in reversed(parts)  # the unmarked one first: it must not need the record
        for b in read_partition(
            opts, p, schema, task=ctx, consumer_factory=factory(broker), source=pool
        )
    ]
    assert rows == [2, 2]
    assert len(opened) == 1
    store = MemoryStore(StoreConfig(uri))
    assert store.list(PipelineLayout("p").batches_prefix()) == [PipelineLayout("p").batch("q-2", 0)]


def test_a_task_reads_its_ranges_in_order_into_shared_batches() -> None:
    broker = FakeBroker()
    broker.create("t", 3)
    for p in range(3):
        broker.produce("t", p, 10)
    ranges = (OffsetRange("t", 2, 3, 7), OffsetRange("t", 0, 0, 10), OffsetRange("t", 1, 5, 6))
    schema = arrow_schema(source_schema(False))
    opts = options(**{"kafkaConsumer.pool.enabled": "false"})
    batches = list(
        read_partition(
            opts,
            KafkaInputPartition(9, ranges),
            schema,
            task=None,
            consumer_factory=factory(broker),
        )
    )
    assert [b.num_rows for b in batches] == [15]  # one RecordBatch for all three ranges
    table = pa.Table.from_batches(batches)
    assert list(
        zip(table.column("partition").to_pylist(), table.column("offset").to_pylist(), strict=True)
    ) == ([(2, o) for o in range(3, 7)] + [(0, o) for o in range(10)] + [(1, 5)])
    assert table.column("gt").to_pylist()[0] == {
        "epoch": 9,
        "topic": "t",
        "partition": 2,
        "offset": 3,
    }
    # without the pool, the task used one consumer for its three ranges and closed it
    assert broker.calls["connect"] == 1
    assert all(c.closed for c in broker.consumers)


def test_batch_record_conflict_message() -> None:
    store = MemoryStore(StoreConfig(f"memory://bc-{uuid.uuid4().hex}"))
    layout = PipelineLayout("p")
    write_batch_record(store, layout, "q", 1, 3)
    write_batch_record(store, layout, "q", 1, 3)
    with pytest.raises(EpochLogConflict) as info:
        write_batch_record(store, layout, "q", 1, 4)
    assert "batch 1 of query q" in str(info.value) and "epoch 4" in str(info.value)


def test_input_partition_pickles() -> None:
    part = KafkaInputPartition(2, (OffsetRange("t", 1, 5, 9), OffsetRange("t", 2, 0, 3)), True, 4)
    assert pickle.loads(pickle.dumps(part)) == part
    assert part.records == 7


def test_read_spans(broker: FakeBroker, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(profiling.ENV, str(tmp_path))
    broker.produce("t", 0, 5)
    uri = f"memory://br-{uuid.uuid4().hex}"
    opts = options(**{"pipeline.id": "p", "state.uri": uri})
    part = KafkaInputPartition(
        2, (OffsetRange("t", 0, 0, 3), OffsetRange("t", 0, 3, 5)), records_batch=True, index=0
    )
    batches = list(
        read_partition(
            opts,
            part,
            arrow_schema(source_schema(False)),
            task=StreamingTask("q", 0),
            consumer_factory=factory(broker),
            source=ConsumerPool(),
        )
    )
    assert [b.num_rows for b in batches] == [5]
    spans = [json.loads(line) for f in tmp_path.glob("*.jsonl") for line in f.open()]
    names = [s["span"] for s in spans]
    assert names.count("read.batch_record") == 1
    assert names.count("read.client") == names.count("read.fetch") == 2
    assert names.count("read.arrow") == 3  # per range, and the task's last batch
    fetch = [s for s in spans if s["span"] == "read.fetch"]
    assert [(s["partition"], s["ranges"], s["range"], s["records"]) for s in fetch] == [
        (0, 1, "t-0 [0, 3)", 3),
        (0, 1, "t-0 [3, 5)", 2),
    ]
    record = next(s for s in spans if s["span"] == "read.batch_record")
    assert (record["ranges"], record["records"]) == (2, 5)
    assert record["overlapped_s"] >= 0 and record["seconds"] >= 0
    clients = [s for s in spans if s["span"] == "read.client"]
    assert [(s["created"], s["sought"]) for s in clients] == [(True, True), (False, False)]
    assert all(s["error"] is None and "advanced" in s for s in clients)
    task = next(s for s in spans if s["span"] == "read.task")
    assert task["partition"] == 0 and task["error"] is None


def test_a_task_reads_nothing_of_a_topic_recreated_since_its_epoch_was_planned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The plan names topic ``t`` under id ``old``; the broker gives ``new`` now. One
    lookup per task; ``t``'s ranges are lost (fail, or skipped with a warning), ``u``'s,
    whose id is the planned one, are read."""
    broker = FakeBroker()
    for topic in ("t", "u"):
        broker.create(topic, 1)
        broker.produce(topic, 0, 10)
    lookups: list[set[str]] = []

    def current(opts: KafkaSourceOptions, topics: Any) -> dict[str, str]:
        lookups.append(set(topics))
        return {"t": "new", "u": "same"}

    part = KafkaInputPartition(
        7,
        (OffsetRange("t", 0, 0, 5), OffsetRange("u", 0, 2, 6), OffsetRange("t", 0, 5, 10)),
        topic_ids=(("t", "old"), ("u", "same")),
    )
    schema = arrow_schema(source_schema(False))

    def run(**extra: str) -> list[pa.RecordBatch]:
        return list(
            read_partition(
                options(subscribe="t,u", **extra),
                part,
                schema,
                task=None,
                consumer_factory=factory(broker),
                source=ConsumerPool(),
                current_ids=current,
            )
        )

    with pytest.raises(DataLossError) as info:
        run()
    text = str(info.value)
    assert "epoch 7" in text and "t-0 [0, 5), t-0 [5, 10)" in text, text
    assert "topic 't' was planned under topic id old, the broker now gives it topic id new" in text
    assert "failOnDataLoss=false" in text and broker.calls["connect"] == 0  # before any fetch
    assert lookups == [{"t", "u"}]

    with caplog.at_level(logging.WARNING, logger="datasource"):
        batches = run(failOnDataLoss="false")
    table = pa.Table.from_batches(batches)
    assert table.column("topic").to_pylist() == ["u"] * 4
    assert table.column("offset").to_pylist() == [2, 3, 4, 5]
    assert "skipping 10 lost record(s) (failOnDataLoss=false)" in caplog.text
    assert len(lookups) == 2  # once per task

    # the same ids: read as planned; a plan without ids asks nothing
    lookups.clear()
    same = KafkaInputPartition(7, part.ranges, topic_ids=(("t", "new"),))
    unnamed = KafkaInputPartition(7, part.ranges)
    for p in (same, unnamed):
        rows = sum(
            b.num_rows
            for b in read_partition(
                options(subscribe="t,u"),
                p,
                schema,
                task=None,
                consumer_factory=factory(broker),
                source=ConsumerPool(),
                current_ids=current,
            )
        )
        assert rows == 14
    assert lookups == [{"t"}]
