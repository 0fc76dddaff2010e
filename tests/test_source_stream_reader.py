"""The driver side of gtkafka against a fake cluster: start, epoch log, limits, data loss."""

from __future__ import annotations

import json
import logging
import pickle
import uuid
from collections.abc import Sequence
from typing import Any, cast

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

from datasource.consumer_pool import ConsumerPool
from datasource.group_commit import commit_to_group
from datasource.offset_reader import OffsetReader
from datasource.options import KafkaSourceOptions
from datasource.partition_reader import KafkaInputPartition, read_partition
from datasource.schema import arrow_schema, source_schema
from datasource.stream_reader import GlobalTimeKafkaStreamReader
from state.errors import ConfigError, DataLossError, EpochLogConflict, KeyExists, SourceUnavailable
from state.layout import PipelineLayout
from state.log_format import JsonFormatter
from state.protocol.epoch_log import EpochLog
from state.records.epoch import EpochRecord
from state.records.source_offset import SourceOffset
from state.stores import StoreConfig
from state.stores.memory_store import MemoryStore
from tests.source_fakes import FakeBroker, factory


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Harness:
    """A reader wired to a fake broker, a memory store and a fake clock."""

    def __init__(self, broker: FakeBroker, uri: str | None = None, **options: str) -> None:
        self.broker = broker
        self.uri = uri or f"memory://src-{uuid.uuid4().hex}"
        raw = {
            "kafka.bootstrap.servers": "fake:9092",
            "subscribe": "t",
            "pipeline.id": "p",
            "state.uri": self.uri,
            "startingOffsets": "earliest",
            "fetchOffset.retryIntervalMs": "0",
            **options,
        }
        self.options = KafkaSourceOptions.parse(raw)
        self.clock = Clock()
        self.slept: list[float] = []
        broker.tick = self.tick  # an unanswered fetch takes its time on the fake clock
        self.store = MemoryStore(StoreConfig(self.uri))
        self.layout = PipelineLayout("p")
        self.reader = self.new_reader()

    def new_reader(self) -> GlobalTimeKafkaStreamReader:
        offsets = OffsetReader(
            self.options, consumer_factory=factory(self.broker), clock=self.clock
        )
        return GlobalTimeKafkaStreamReader(
            self.options,
            source_schema(False),
            offset_reader=offsets,
            epoch_log=EpochLog(self.store, self.layout),
            clock=self.clock,
            sleep=self.sleep,
        )

    def tick(self, seconds: float) -> None:
        self.clock.now += seconds

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)
        self.tick(seconds)

    def tasks(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[KafkaInputPartition]:
        """``reader.partitions``: the stream reader plans only KafkaInputPartitions."""
        return cast("Sequence[KafkaInputPartition]", self.reader.partitions(start, end))

    def ranges(self, start: dict[str, Any], end: dict[str, Any]) -> list[str]:
        """The epoch's ranges, in order, over all of its tasks."""
        return [str(r) for p in self.tasks(start, end) for r in p.ranges]

    def latest(self, start: dict[str, Any], limit: Any = None) -> dict[str, Any]:
        self.clock.now += 10  # past the end-offset cache
        return self.reader.latestOffset(start, limit or ReadAllAvailable())


def offsets(doc: dict[str, Any]) -> dict[tuple[str, int], int]:
    return dict(SourceOffset.from_json(doc).offsets)


@pytest.fixture
def broker() -> FakeBroker:
    b = FakeBroker(tansu=True)
    b.create("t", 2)
    return b


def test_initial_offset_is_resolved_once_and_persisted(broker: FakeBroker) -> None:
    broker.produce("t", 0, 100, batch=40)
    h = Harness(broker, startingOffsets="latest")
    first = h.reader.initialOffset()
    # Tansu's ListOffsets says 81 (base of the last batch + 1); the real end is 100.
    assert first == {"epoch": 0, "offsets": {"t": {"0": 100, "1": 0}}}
    broker.produce("t", 0, 50)
    assert h.reader.initialOffset() == first
    assert h.new_reader().initialOffset() == first  # a restart, or a new checkpoint
    stored, _ = h.store.get_json(h.layout.source_start)
    assert stored == {**first, "topic_ids": {"t": str(broker.ids["t"])}}


def test_initial_offset_json_and_timestamps(broker: FakeBroker) -> None:
    broker.produce("t", 0, 10, timestamp=100)
    broker.produce("t", 1, 10, timestamp=500)
    h = Harness(broker, startingOffsets='{"t": {"0": 3, "1": -1}}')
    assert h.reader.initialOffset()["offsets"] == {"t": {"0": 3, "1": 10}}
    h = Harness(broker, startingTimestamp="105")
    assert h.reader.initialOffset()["offsets"] == {"t": {"0": 5, "1": 0}}
    h = Harness(broker, startingTimestamp="10000")
    with pytest.raises(ConfigError) as info:
        h.reader.initialOffset()
    assert info.value.option == "startingTimestamp" and "t-0, t-1" in str(info.value)
    h = Harness(broker, startingTimestamp="10000", startingOffsetsByTimestampStrategy="latest")
    assert h.reader.initialOffset()["offsets"] == {"t": {"0": 10, "1": 10}}


def test_json_offsets_must_cover_every_partition(broker: FakeBroker) -> None:
    h = Harness(broker, startingOffsets='{"t": {"0": 3}}')
    with pytest.raises(ConfigError) as info:
        h.reader.initialOffset()
    assert info.value.option == "startingOffsets" and "missing t-1" in str(info.value)


def test_unknown_topic_is_named(broker: FakeBroker) -> None:
    h = Harness(broker, subscribe="t,nope")
    with pytest.raises(ConfigError) as info:
        h.reader.initialOffset()
    assert info.value.option == "subscribe"
    assert "'nope' does not exist on Kafka at fake:9092" in str(info.value)
    h = Harness(broker, subscribe=None, assign='{"t": [0, 7]}')  # type: ignore[arg-type]
    with pytest.raises(ConfigError) as info:
        h.reader.initialOffset()
    assert "t-7 does not exist" in str(info.value)


def test_persisted_start_must_match_subscription(broker: FakeBroker) -> None:
    broker.create("u", 1)
    h = Harness(broker)
    h.reader.initialOffset()
    other = Harness(broker, h.uri, subscribe="t,u")
    with pytest.raises(ConfigError) as info:
        other.reader.initialOffset()
    assert info.value.option == "subscribe" and "use a new pipeline.id" in str(info.value)


def test_unreachable_broker_raises_source_unavailable() -> None:
    broker = FakeBroker(down=True)
    h = Harness(broker, **{"fetchOffset.numRetries": "2"})
    with pytest.raises(SourceUnavailable) as info:
        h.reader.initialOffset()
    assert "fake:9092" in str(info.value)
    assert broker.calls["connect"] == 3  # numRetries + 1 attempts


def test_epoch_log_records_and_replays(broker: FakeBroker) -> None:
    broker.produce("t", 0, 30)
    broker.produce("t", 1, 10)
    h = Harness(broker, maxOffsetsPerTrigger="20")
    start = h.reader.initialOffset()
    end = h.latest(start, ReadMaxRows(20))
    assert end["epoch"] == 1 and offsets(end) == {("t", 0): 15, ("t", 1): 5}
    record, _ = h.store.get_json(h.layout.epoch(0))
    ids = {"t": str(broker.ids["t"])}  # the topic ids under which the end was computed
    assert record == {"epoch": 0, "format": 1, "start": start, "end": end, "topic_ids": ids}
    # a replay gets the recorded end whatever the limit is now, and from another reader
    assert h.latest(start, ReadAllAvailable()) == end
    assert h.new_reader().latestOffset(start, ReadMaxRows(1)) == end
    end2 = h.latest(end, ReadAllAvailable())
    assert end2["epoch"] == 2 and offsets(end2) == {("t", 0): 30, ("t", 1): 10}
    # nothing new: the start comes back and nothing is recorded
    assert h.latest(end2) == end2
    assert h.store.get_or_none(h.layout.epoch(2)) is None
    parts = h.tasks(end, end2)
    # small ranges: one task reads both (minRecordsPerTask), and records the batch
    assert [(p.epoch, [str(r) for r in p.ranges], p.records_batch) for p in parts] == [
        (1, ["t-0 [15, 30)", "t-1 [5, 10)"], True)
    ]


def test_epoch_log_conflict_names_both_starts(broker: FakeBroker) -> None:
    broker.produce("t", 0, 10)
    h = Harness(broker)
    start = h.reader.initialOffset()
    h.latest(start)
    other = SourceOffset(0, {("t", 0): 4, ("t", 1): 0}).to_json()
    with pytest.raises(EpochLogConflict) as info:
        h.latest(other)
    assert "'0': 4" in str(info.value) and "'0': 0" in str(info.value)


def test_losing_the_create_race_adopts_the_winner(broker: FakeBroker) -> None:
    broker.produce("t", 0, 10)
    h = Harness(broker)
    start = h.reader.initialOffset()
    winner = SourceOffset(1, {("t", 0): 3, ("t", 1): 0})
    real_create = h.store.create

    def racing_create(key: str, data: bytes) -> str:
        if key == h.layout.epoch(0):  # another driver records epoch 0 first
            record = EpochRecord(0, SourceOffset.from_json(start), winner)
            h.store.put_json(key, record.to_json())
            raise KeyExists(h.uri, key)
        return real_create(key, data)

    h.store.create = racing_create  # type: ignore[method-assign]
    assert h.latest(start) == winner.to_json()


def test_idle_query_does_not_hammer_the_broker(broker: FakeBroker) -> None:
    broker.produce("t", 0, 10, batch=3)
    h = Harness(broker)
    start = h.reader.initialOffset()
    end = h.reader.latestOffset(start, ReadAllAvailable())
    broker.calls.clear()
    # Spark polls an idle source every ~10 ms: 6000 calls over 60 simulated seconds.
    for _ in range(6000):
        h.clock.now += 0.010
        assert h.reader.latestOffset(end, ReadAllAvailable()) == end
    calls = sum(broker.calls.values())
    # one Metadata and one ListOffsets per 1 s refresh; a fetch only every 30 s
    assert broker.calls["fetch"] <= 2
    assert calls <= 2 * 61 + 2, broker.calls
    assert calls / 60.0 <= 2.1  # requests per second while idle


def test_a_lasting_gap_does_not_hammer_the_broker(broker: FakeBroker) -> None:
    broker.create("u", 1)
    broker.produce("t", 0, 10)
    h = Harness(broker, subscribe="t,u", failOnDataLoss="false")
    end = h.latest(h.reader.initialOffset())
    del broker.topics["u"]
    broker.calls.clear()
    for _ in range(6000):  # 60 simulated seconds of Spark's idle polling
        h.clock.now += 0.010
        assert h.reader.latestOffset(end, ReadAllAvailable()) == end
    # a gap is checked by a second answer: two Metadata requests per 1 s refresh
    assert broker.calls["metadata"] <= 2 * 61, broker.calls
    assert h.reader.lost_events == 1


def test_new_data_after_idle_is_seen_within_the_refresh_interval(broker: FakeBroker) -> None:
    h = Harness(broker, **{"fetchOffset.refreshIntervalMs": "500"})
    start = h.reader.initialOffset()
    answered = h.clock.now
    assert h.reader.latestOffset(start, ReadAllAvailable()) == start
    broker.produce("t", 1, 5)
    for _ in range(20):  # Spark's idle polling, every 10 ms: the cached answer
        h.clock.now += 0.010
        assert h.reader.latestOffset(start, ReadAllAvailable()) == start
    for _ in range(32):  # 0.5 s after the answer (and one poll) at the latest, a new one
        h.clock.now += 0.010
        end = h.reader.latestOffset(start, ReadAllAvailable())
        if end != start:
            break
    assert offsets(end)[("t", 1)] == 5
    assert h.clock.now - answered <= 0.51 + 1e-9


def test_the_call_after_a_planned_epoch_asks_the_broker_again(broker: FakeBroker) -> None:
    """A busy query plans its next epoch from ends fetched after the last one was planned,
    not from an answer cached before it: a record does not wait out the refresh interval
    on top of the micro-batch it missed."""
    broker.produce("t", 0, 5)
    h = Harness(broker)  # fetchOffset.refreshIntervalMs: 1 s
    start = h.reader.initialOffset()
    end = h.reader.latestOffset(start, ReadAllAvailable())
    assert offsets(end)[("t", 0)] == 5
    broker.produce("t", 0, 3)  # while the micro-batch of epoch 0 runs
    h.clock.now += 0.010
    after = h.reader.latestOffset(end, ReadAllAvailable())
    assert offsets(after)[("t", 0)] == 8


def test_a_backlog_capped_by_the_read_limit_plans_from_the_cached_ends(
    broker: FakeBroker,
) -> None:
    """While the cached ends already hold more than the read limit takes, a fresher answer
    could not change the next epoch's size: a backlog costs no ListOffsets per epoch."""
    broker.produce("t", 0, 1000)
    h = Harness(broker)  # fetchOffset.refreshIntervalMs: 1 s
    start = h.reader.initialOffset()
    broker.calls.clear()
    for _ in range(5):  # micro-batches of 100 records, back to back
        h.clock.now += 0.150
        end = h.reader.latestOffset(start, ReadMaxRows(100))
        assert sum(offsets(end).values()) - sum(offsets(start).values()) == 100
        start = end
    # one answer (Metadata, then ListOffsets) for the five epochs; each epoch still asks
    # for the log starts, to check for retention
    assert broker.calls["metadata"] <= 1, broker.calls
    assert broker.calls["list_offsets"] <= 1 + 5, broker.calls


def test_a_call_after_a_pause_asks_the_broker_again(broker: FakeBroker) -> None:
    """Calls that do not follow each other at Spark's idle polling pace (a processing-time
    trigger's ticks) each see the broker's ends as they are then."""
    h = Harness(broker)  # fetchOffset.refreshIntervalMs: 1 s
    start = h.reader.initialOffset()
    assert h.reader.latestOffset(start, ReadAllAvailable()) == start  # a tick, nothing new
    broker.produce("t", 0, 4)
    h.clock.now += 0.5  # the next tick of a 500 ms trigger
    assert offsets(h.reader.latestOffset(start, ReadAllAvailable()))[("t", 0)] == 4


def test_trigger_available_now_stops_at_the_target(broker: FakeBroker) -> None:
    broker.produce("t", 0, 25)
    h = Harness(broker, maxOffsetsPerTrigger="10")
    off = h.reader.initialOffset()
    h.reader.prepareForTriggerAvailableNow()
    broker.produce("t", 0, 100)  # after the target: not read
    broker.create("t2", 1)
    ends = []
    for _ in range(10):
        nxt = h.latest(off, ReadMaxRows(10))
        if nxt == off:
            break
        ends.append(offsets(nxt)[("t", 0)])
        off = nxt
    assert ends == [10, 20, 25]


def test_min_rows_waits_up_to_max_trigger_delay(broker: FakeBroker) -> None:
    h = Harness(broker, minOffsetsPerTrigger="10", maxTriggerDelay="30s")
    start = h.reader.initialOffset()
    assert h.reader.getDefaultReadLimit() == ReadMinRows(10)
    assert h.latest(start, ReadMinRows(10)) == start  # starts the delay clock
    broker.produce("t", 0, 4)
    assert h.latest(start, ReadMinRows(10)) == start  # 4 < 10, 10 s waited
    h.clock.now += 25
    end = h.latest(start, ReadMinRows(10))  # 45 s > 30 s: take what there is
    assert offsets(end)[("t", 0)] == 4
    broker.produce("t", 0, 12)
    assert offsets(h.latest(end, ReadMinRows(10)))[("t", 0)] == 16  # enough rows at once


def test_min_rows_with_max_rows_caps_the_batch(broker: FakeBroker) -> None:
    broker.produce("t", 0, 100)
    h = Harness(broker, minOffsetsPerTrigger="5", maxOffsetsPerTrigger="30")
    start = h.reader.initialOffset()
    assert offsets(h.latest(start, ReadMinRows(5)))[("t", 0)] == 30


def test_new_partitions_start_at_zero(broker: FakeBroker) -> None:
    broker.produce("t", 0, 5)
    h = Harness(broker, subscribePattern="t.*", subscribe=None)  # type: ignore[arg-type]
    start = h.reader.initialOffset()
    end = h.latest(start)
    broker.create("t9", 2)
    broker.produce("t9", 1, 7)
    end2 = h.latest(end)
    assert offsets(end2) == {("t", 0): 5, ("t", 1): 0, ("t9", 0): 0, ("t9", 1): 7}
    parts = h.tasks(end, end2)
    assert [[str(r) for r in p.ranges] for p in parts] == [["t9-1 [0, 7)"]]


def test_deleted_partition_is_data_loss(broker: FakeBroker) -> None:
    broker.create("u", 1)
    broker.produce("t", 0, 5)
    h = Harness(broker, subscribe="t,u")
    start = h.reader.initialOffset()
    del broker.topics["u"]
    broker.produce("t", 0, 5)
    with pytest.raises(DataLossError) as info:
        h.latest(start)
    assert "u-0" in str(info.value) and "failOnDataLoss=false" in str(info.value)

    lenient = Harness(broker, h.uri, subscribe="t,u", failOnDataLoss="false")
    end = lenient.latest(start)
    # the vanished partition keeps its offset (reported once), it is not dropped
    assert offsets(end) == {("t", 0): 10, ("t", 1): 0, ("u", 0): 0}
    assert lenient.reader.lost_events == 1
    broker.produce("t", 0, 1)
    assert offsets(lenient.latest(end))[("u", 0)] == 0
    assert lenient.reader.lost_events == 1


def test_recreated_topic_is_data_loss(broker: FakeBroker) -> None:
    broker.produce("t", 0, 50)
    h = Harness(broker)
    end = h.latest(h.reader.initialOffset())
    broker.recreate("t", 2)
    broker.produce("t", 0, 20)
    h.clock.now += 30  # Tansu's ListOffsets answers 1 before and after: the probe is aged out
    with pytest.raises(DataLossError) as info:
        h.latest(end)
    assert "frontier t-0=50, t-1=0 (the start of epoch 1)" in str(info.value)
    assert "it now ends at t-0=20, t-1=0" in str(info.value)

    lenient = Harness(broker, h.uri, failOnDataLoss="false")
    restart = lenient.latest(end)
    # the lost range is not read; the next epoch starts at the new log's start
    assert offsets(restart)[("t", 0)] == 0
    marker = KafkaInputPartition(1, (), records_batch=True)
    assert lenient.reader.partitions(end, restart) == [marker]
    again = lenient.latest(restart)
    assert offsets(again)[("t", 0)] == 20


def test_recreated_topic_without_topic_ids_is_confirmed_by_a_fresh_answer() -> None:
    broker = FakeBroker(tansu=True, topic_ids=False)
    broker.create("t", 1)
    broker.produce("t", 0, 50)
    h = Harness(broker)
    end = h.latest(h.reader.initialOffset())
    broker.recreate("t", 1)
    broker.produce("t", 0, 20, batch=5)
    broker.calls.clear()
    with pytest.raises(DataLossError) as info:
        h.latest(end)
    assert "t-0 (from 50 to 20)" in str(info.value)
    assert broker.calls["metadata"] == 2  # the suspicious answer, then a fresh one


def test_recreated_topic_is_recognised_by_its_topic_id(broker: FakeBroker) -> None:
    """More records after the recreation than before: offsets alone cannot tell."""
    broker.produce("t", 0, 50)
    strict, lenient = Harness(broker), Harness(broker, failOnDataLoss="false")
    end = strict.latest(strict.reader.initialOffset())
    assert lenient.latest(lenient.reader.initialOffset()) == end
    old_id = str(broker.ids["t"])
    broker.recreate("t", 2)
    broker.produce("t", 0, 80)
    with pytest.raises(DataLossError) as info:
        strict.latest(end)
    assert str(info.value).startswith(
        f"gtkafka: topic 't' was deleted and created again on Kafka at fake:9092: its topic "
        f"id is {broker.ids['t']}, not {old_id} as when the frontier t-0=50, t-1=0 (the start "
        "of epoch 1) was computed; it now ends at t-0=80, t-1=0. Records of the old topic "
        "after the frontier may have been missed, and the new topic must be read from its "
        "log start, not from the frontier. Set failOnDataLoss=false"
    )

    restart = lenient.latest(end)
    assert offsets(restart) == {("t", 0): 0, ("t", 1): 0}  # the new log start
    # a marker: nothing of the old topic
    assert [(p.ranges, p.records_batch) for p in lenient.tasks(end, restart)] == [((), True)]
    again = lenient.latest(restart)
    assert lenient.ranges(restart, again) == ["t-0 [0, 80)"]
    assert lenient.reader.lost_events == 1
    assert lenient.latest(again) == again  # the new topic id is the one that counts now


def test_a_restarted_driver_knows_the_topic_ids_of_its_frontier_from_the_epoch_log(
    broker: FakeBroker,
) -> None:
    """The topic is recreated while the query is down and refilled beyond the frontier: a
    new driver process has only the epoch log to tell (its first answer looks like
    growth), and the epoch that ends at the frontier recorded the old topic id."""
    broker.produce("t", 0, 50)
    h = Harness(broker)
    end = h.latest(h.reader.initialOffset())
    old_id = str(broker.ids["t"])
    broker.recreate("t", 2)
    broker.produce("t", 0, 80)
    restarted = h.new_reader()
    with pytest.raises(DataLossError) as info:
        restarted.latestOffset(end, ReadAllAvailable())
    text = str(info.value)
    assert "topic 't' was deleted and created again on Kafka at fake:9092" in text
    assert f"its topic id is {broker.ids['t']}, not {old_id}" in text
    assert "frontier t-0=50, t-1=0 (the start of epoch 1)" in text
    assert h.store.get_or_none(h.layout.epoch(1)) is None  # the failing epoch: not recorded

    lenient = Harness(broker, h.uri, failOnDataLoss="false")  # restarted, lenient
    restart = lenient.latest(end)
    assert offsets(restart) == {("t", 0): 0, ("t", 1): 0}  # the new log start
    assert lenient.reader.lost_events == 1
    again = lenient.latest(restart)
    assert lenient.ranges(restart, again) == ["t-0 [0, 80)"]
    new_id = str(broker.ids["t"])
    record, _ = lenient.store.get_json(lenient.layout.epoch(1))
    assert record["topic_ids"] == {"t": new_id}
    # the plan names the topic id its ranges read (the pool checks its consumers by it)
    assert [p.topic_ids for p in lenient.tasks(restart, again)] == [(("t", new_id),)]


def test_a_restarted_driver_knows_the_topic_ids_of_the_persisted_start(
    broker: FakeBroker,
) -> None:
    """The driver that persisted the start dies before its first epoch; the topic is
    recreated and refilled beyond the start. The next driver finds the start persisted,
    and only the ids recorded with it tell that its offsets belong to the old topic."""
    broker.produce("t", 0, 50)
    h = Harness(broker, startingOffsets="latest")
    start = h.reader.initialOffset()
    old_id = str(broker.ids["t"])
    stored, _ = h.store.get_json(h.layout.source_start)
    assert stored["topic_ids"] == {"t": old_id}
    broker.recreate("t", 2)
    broker.produce("t", 0, 80)
    restarted = h.new_reader()
    assert restarted.initialOffset() == start
    with pytest.raises(DataLossError) as info:
        restarted.latestOffset(start, ReadAllAvailable())
    text = str(info.value)
    assert "topic 't' was deleted and created again on Kafka at fake:9092" in text
    assert f"its topic id is {broker.ids['t']}, not {old_id}" in text
    assert h.store.get_or_none(h.layout.epoch(0)) is None  # the failing epoch: not recorded


def test_a_replay_of_recorded_epochs_after_a_recreation_reads_nothing_of_the_new_topic(
    broker: FakeBroker,
) -> None:
    """A query on a new checkpoint (a snapshot restore, a ``startAtFloor`` or a replay from
    the persisted start) replays the recorded epochs as they were planned, with the topic
    ids recorded with them, and its driver does not ask the broker about them. The read
    tasks do: the topic was recreated since, so the replayed epoch's records are lost."""
    broker.produce("t", 0, 50)
    h = Harness(broker)
    start = h.reader.initialOffset()
    h.latest(start)  # epoch 0 = [0, 50), recorded under the old id
    old_id = str(broker.ids["t"])
    broker.recreate("t", 2)
    broker.produce("t", 0, 200)
    new_id = str(broker.ids["t"])

    replay = h.new_reader()
    end = replay.latestOffset(replay.initialOffset(), ReadAllAvailable())
    assert offsets(end) == {("t", 0): 50, ("t", 1): 0}  # the recorded end, replayed
    (task,) = cast("Sequence[KafkaInputPartition]", replay.partitions(start, end))
    assert task.topic_ids == (("t", old_id),)

    def read(opts: KafkaSourceOptions) -> int:
        return sum(
            b.num_rows
            for b in read_partition(
                opts,
                task,
                arrow_schema(source_schema(False)),
                task=None,
                consumer_factory=factory(broker),
                source=ConsumerPool(),
                current_ids=lambda _, topics: {t: str(broker.ids[t]) for t in topics},
            )
        )

    with pytest.raises(DataLossError) as info:
        read(h.options)
    assert (
        f"topic 't' was planned under topic id {old_id}, the broker now gives it topic id "
        f"{new_id} (deleted and created again)"
    ) in str(info.value)
    lenient = Harness(broker, h.uri, failOnDataLoss="false")
    assert read(lenient.options) == 0  # not the new topic's [0, 50)


def test_epochs_recorded_without_topic_ids_are_judged_by_their_offsets() -> None:
    """An epoch log written without topic ids (a broker that gives none, or a gtbarrier
    before they were recorded): a restarted driver has no id to compare, and goes by the
    offsets as before."""
    broker = FakeBroker(tansu=True, topic_ids=False)
    broker.create("t", 1)
    broker.produce("t", 0, 50)
    h = Harness(broker)
    end = h.latest(h.reader.initialOffset())
    record, _ = h.store.get_json(h.layout.epoch(0))
    assert "topic_ids" not in record
    broker.with_ids = True
    broker.recreate("t", 1)
    broker.produce("t", 0, 20)
    with pytest.raises(DataLossError) as info:
        h.new_reader().latestOffset(end, ReadAllAvailable())
    assert "offsets went backwards for t-0 (from 50 to 20)" in str(info.value)


@pytest.mark.parametrize("restarted", [False, True])
def test_an_end_below_the_frontier_for_a_moment_is_neither_a_recreation_nor_a_truncation(
    broker: FakeBroker, restarted: bool
) -> None:
    """Right after a leader failover the new leader's high watermark may lag behind: two
    answers, each confirmed by a fetch, put the end below the frontier under the same
    topic id. It is asked again, fetchOffset.retryIntervalMs apart, and is back above."""
    broker.produce("t", 0, 100)
    h = Harness(broker, **{"fetchOffset.retryIntervalMs": "500"})
    end = h.latest(h.reader.initialOffset())
    if restarted:
        h.reader = h.new_reader()
    broker.produce("t", 0, 20)
    broker.lag("t", 0, 40, answers=2)
    end2 = h.latest(end)
    assert h.ranges(end, end2) == ["t-0 [100, 120)"]
    assert h.slept == [0.5]  # one more answer was enough
    assert h.reader.lost_events == 0


@pytest.mark.parametrize("restarted", [False, True])
def test_a_truncation_under_the_same_topic_id_is_data_loss(
    broker: FakeBroker, restarted: bool
) -> None:
    """An unclean leader election cut the log at 30; five records came since. Every
    answer, fetchOffset.numRetries more of them, puts the end below the frontier under
    the topic id the frontier was computed under: not a stale answer, data loss."""
    broker.produce("t", 0, 50)
    strict = Harness(broker, **{"fetchOffset.retryIntervalMs": "500"})
    end = strict.latest(strict.reader.initialOffset())
    if restarted:
        strict.reader = strict.new_reader()
    broker.truncate("t", 0, 30)
    broker.produce("t", 0, 5, batch=1)
    with pytest.raises(DataLossError) as info:
        strict.latest(end)
    assert str(info.value).startswith(
        "gtkafka: the log of t-0 (from 50 to 35) was truncated on Kafka at fake:9092: the end "
        "stayed below the frontier (the start of epoch 1) in 4 answer(s) confirmed by a "
        "fetch, 500 ms apart, under the topic id the frontier was computed under"
    )
    assert strict.slept == [0.5, 0.5, 0.5]  # fetchOffset.numRetries = 3

    lenient = Harness(broker, strict.uri, failOnDataLoss="false")
    restart = lenient.latest(end)
    # the partition goes on from its new end: nothing it read before is read again
    assert offsets(restart) == {("t", 0): 35, ("t", 1): 0}
    assert lenient.reader.lost_events == 1
    broker.produce("t", 0, 10)
    again = lenient.latest(restart)
    assert lenient.ranges(restart, again) == ["t-0 [35, 45)"]
    assert lenient.reader.lost_events == 1


@pytest.mark.parametrize("fail_on_data_loss", ["true", "false"])
def test_partition_missing_from_one_answer_keeps_its_offset(
    broker: FakeBroker, fail_on_data_loss: str
) -> None:
    broker.produce("t", 0, 10)
    broker.produce("t", 1, 10)
    h = Harness(broker, failOnDataLoss=fail_on_data_loss)
    end = h.latest(h.reader.initialOffset())
    broker.produce("t", 1, 5)
    broker.hide("t", 1, answers=1)
    end2 = h.latest(end)  # the fresh second answer lists t-1 again: no gap, no loss
    assert offsets(end2) == {("t", 0): 10, ("t", 1): 15}
    assert h.ranges(end, end2) == ["t-1 [10, 15)"]
    assert h.reader.lost_events == 0


def test_partition_missing_from_two_answers_keeps_its_offset_until_it_returns(
    broker: FakeBroker,
) -> None:
    broker.produce("t", 0, 10)
    broker.produce("t", 1, 10)
    h = Harness(broker, failOnDataLoss="false")
    end = h.latest(h.reader.initialOffset())
    broker.produce("t", 0, 5)
    broker.produce("t", 1, 5)
    broker.hide("t", 1, answers=2)
    end2 = h.latest(end)  # missing twice: data loss, reported once; the offset stays
    assert offsets(end2) == {("t", 0): 15, ("t", 1): 10}
    assert h.ranges(end, end2) == ["t-0 [10, 15)"]
    assert h.reader.lost_events == 1
    end3 = h.latest(end2)  # back: it continues where it was, nothing is read twice
    assert h.ranges(end2, end3) == ["t-1 [10, 15)"]
    assert h.reader.lost_events == 1

    strict = Harness(broker)
    start = strict.reader.initialOffset()
    broker.hide("t", 1, answers=2)
    with pytest.raises(DataLossError) as info:
        strict.latest(start)
    assert "t-1 no longer exist" in str(info.value)


@pytest.mark.parametrize("topic_ids", [True, False])
@pytest.mark.parametrize("failed_probes", [1, 2])
def test_end_below_the_frontier_from_a_failed_probe_is_not_a_recreation(
    topic_ids: bool, failed_probes: int
) -> None:
    """Tansu's ListOffsets says 1 for a batch of 100 records; when the end probe gets no
    answer, the end looks like 1. That is a stale answer, not a recreated topic."""
    broker = FakeBroker(tansu=True, topic_ids=topic_ids)
    broker.create("t", 1)
    broker.produce("t", 0, 100)
    h = Harness(broker, failOnDataLoss="false")
    end = h.latest(h.reader.initialOffset())
    assert offsets(end) == {("t", 0): 100}
    h.clock.now += 30  # the remembered probe ages out
    broker.fail_probes(failed_probes)
    assert h.latest(end) == end  # nothing new, nothing recorded, no restart from 0
    assert h.reader.lost_events == 0
    assert h.store.get_or_none(h.layout.epoch(1)) is None
    broker.produce("t", 0, 5)
    end2 = h.latest(end)
    assert h.ranges(end, end2) == ["t-0 [100, 105)"]


def test_retention_below_the_start_is_data_loss(broker: FakeBroker) -> None:
    broker.produce("t", 0, 50)
    h = Harness(broker)
    start = h.reader.initialOffset()
    broker.delete_before("t", 0, 30)
    with pytest.raises(DataLossError) as info:
        h.latest(start)
    assert "t-0 starts at 30, the epoch at 0" in str(info.value)


def test_partitions_marker_and_splits(broker: FakeBroker) -> None:
    h = Harness(broker, maxRecordsPerPartition="4")
    a = SourceOffset(3, {("t", 0): 0, ("t", 1): 5}).to_json()
    b = SourceOffset(4, {("t", 0): 10, ("t", 1): 5}).to_json()
    parts = h.tasks(a, b)
    assert all(isinstance(p, KafkaInputPartition) and p.epoch == 3 for p in parts)
    # maxRecordsPerPartition wins over minRecordsPerTask: no packing beyond 4 records
    assert [[str(r) for r in p.ranges] for p in parts] == [
        ["t-0 [0, 4)"],
        ["t-0 [4, 7)"],
        ["t-0 [7, 10)"],
    ]
    # exactly one partition writes the batch record
    assert [(p.index, p.records_batch) for p in parts] == [(0, True), (1, False), (2, False)]
    assert h.reader.partitions(a, b) == parts  # pure
    assert h.reader.partitions(a, a) == []
    empty_epoch = SourceOffset(4, {("t", 0): 0, ("t", 1): 5}).to_json()
    assert h.reader.partitions(a, empty_epoch) == [KafkaInputPartition(3, (), records_batch=True)]


def test_reader_pickles_without_clients(broker: FakeBroker) -> None:
    broker.produce("t", 0, 5)
    h = Harness(broker)
    h.latest(h.reader.initialOffset())
    copy = pickle.loads(pickle.dumps(h.reader))
    assert copy._offsets is None and copy._log is None
    assert copy.options == h.options


def test_commit_offsets_to_group() -> None:
    broker = FakeBroker()
    opts = KafkaSourceOptions.parse({"kafka.bootstrap.servers": "fake:1", "subscribe": "t"})
    commit_to_group(opts, "lag-group", {("t", 1): 7, ("t", 0): 3}, consumer_factory=factory(broker))
    assert {(tp.topic, tp.partition): o for tp, o in broker.committed["lag-group"].items()} == {
        ("t", 0): 3,
        ("t", 1): 7,
    }
    assert all(c.closed for c in broker.consumers)


def test_a_planned_epoch_is_a_debug_line_with_its_fields(
    broker: FakeBroker, caplog: pytest.LogCaptureFixture
) -> None:
    """Per-epoch lines are DEBUG; the pipeline's summary (state.log_summary) is the INFO."""
    broker.produce("t", 0, 30)
    h = Harness(broker)
    caplog.set_level(logging.DEBUG, logger="datasource.stream_reader")
    h.latest(h.reader.initialOffset())
    [planned] = [r for r in caplog.records if r.name == "datasource.stream_reader"]
    assert planned.levelno == logging.DEBUG
    assert planned.getMessage().startswith("gtkafka: pipeline p: epoch 0 planned, 30 record(s);")
    line = json.loads(JsonFormatter().format(planned))
    assert (line["pipeline"], line["epoch"], line["event"]) == ("p", 0, "epoch_planned")
    assert line["figures"]["records"] == 30
