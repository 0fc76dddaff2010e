"""gtkafka and topic ids, against the real broker.

Tansu answers Metadata v10+ with topic ids, and a topic deleted and created again gets a
new one. So:

* a topic recreated while the query is down and refilled beyond the frontier is data
  loss for the restarted query (failOnDataLoss=true), or read from its new log start
  (false), not read on from the old frontier;
* a consumer a Python worker pooled while it read the old topic is not lent to read the
  new one (what it fetched ahead belongs to the old topic);
* an end below the frontier that a restarted driver sees for a moment (a new leader
  whose high watermark has not caught up after a failover, played here by a proxy) is
  neither a recreation nor a truncation: the topic id is the same, and a later answer
  is back above the frontier.
"""

from __future__ import annotations

import threading
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka.protocol.consumer import FetchResponse, ListOffsetsResponse

from datasource.consumer_pool import ConsumerPool
from datasource.options import KafkaSourceOptions
from datasource.topic_id_check import current_topic_ids
from harness.kafka_proxy import FETCH, LIST_OFFSETS, Action, KafkaProxy
from integration_tests.source_support import (
    Driver,
    gtkafka_options,
    query_error,
    recreate_after_reads,
    run_to_end,
    topic_id_of,
)
from state.errors import DataLossError
from state.records.source_offset import SourceOffset


def tagged(tag: str, partition: int, n: int, start: int = 0) -> list[bytes]:
    return [f"{tag}-{partition}-{i}".encode() for i in range(start, start + n)]


@pytest.mark.timeout(420)
def test_topic_recreated_while_the_query_is_down_is_data_loss_or_read_from_its_log_start(
    spark: Any, kafka: Any, tmp_path: Path, read_client: str
) -> None:
    """The restarted query's first Metadata answer is all it has: the new topic (300
    records) lies beyond the old frontier (50 per partition), so offsets alone do not
    show that anything happened. The topic id recorded in the epoch log does."""
    topic = kafka.create_topic(partitions=2)
    kafka.produce(topic, [(None, v, None, i % 2) for i, v in enumerate(_values("old", 100))])
    old_id = topic_id_of(kafka, topic)
    opts = gtkafka_options(
        kafka.bootstrap,
        topic,
        f"file://{tmp_path / 'state'}",
        **{"kafkaConsumer.client": read_client},
    )
    checkpoint = tmp_path / "checkpoint"
    rows: list[Any] = []
    run_to_end(spark, opts, checkpoint, lambda df, _: rows.extend(df.select("value").collect()))
    assert len(rows) == 100

    recreate_after_reads(kafka, topic, partitions=2)
    new_id = topic_id_of(kafka, topic)
    assert new_id != old_id
    kafka.produce(topic, [(None, v, None, i % 2) for i, v in enumerate(_values("new", 300))])

    text = query_error(spark, opts, checkpoint)
    assert "DataLossError" in text and f"topic '{topic}'" in text, text[-3000:]
    assert old_id in text and new_id in text, text[-3000:]
    assert f"{topic}-0=50, {topic}-1=50" in text, text[-3000:]  # the frontier
    assert "failOnDataLoss=false" in text

    rows.clear()
    run_to_end(
        spark,
        {**opts, "failOnDataLoss": "false"},
        checkpoint,
        lambda df, _: rows.extend(df.select("value").collect()),
    )
    got = sorted(r.value for r in rows)
    assert got == sorted(_values("new", 300)), (
        f"{len(got)} record(s) read after the recreation, "
        f"{sum(v.startswith(b'new') for v in got)} of the new topic's 300"
    )


def _values(tag: str, n: int) -> list[bytes]:
    return [f"{tag}{i}".encode() for i in range(n)]


@pytest.mark.timeout(240)
def test_a_pooled_consumer_of_the_old_topic_is_not_lent_to_read_the_new_one(
    kafka: Any, read_client: str
) -> None:
    """Two Python workers, each with its pool. Worker A reads the first half of the old
    topic's only record batch and keeps its consumer, which fetched the whole batch.
    After the recreation worker B reads the new topic's first half; the second half goes
    to worker A, whose pooled consumer stands exactly at its start."""
    topic = kafka.create_topic(partitions=1)
    kafka.produce_values(topic, tagged("old", 0, 200), partition=0, batch_size=500)
    # pools of Python workers: their evictor threads park idle consumers
    worker_a, worker_b = ConsumerPool(evictor=True), ConsumerPool(evictor=True)
    driver = Driver(
        kafka.bootstrap,
        topic,
        failOnDataLoss="false",
        maxOffsetsPerTrigger="100",
        **{"kafkaConsumer.client": read_client},
    )
    try:
        driver.step(worker_a)
        assert driver.values == tagged("old", 0, 100)
        assert worker_a.stats().idle == 1

        recreate_after_reads(kafka, topic)
        kafka.produce_values(topic, tagged("new", 0, 200), partition=0, batch_size=500)
        driver.step(worker_b)  # the recreation: the next epoch starts at the new log start
        assert driver.frontier() == {(topic, 0): 0}
        driver.values.clear()
        driver.step(worker_b)
        assert driver.values == tagged("new", 0, 100)
        driver.values.clear()
        driver.step(worker_a)
    finally:
        driver.close()
        worker_a.close()
        worker_b.close()
    assert driver.values == tagged("new", 0, 100, start=100), (
        f"worker A read {driver.values[:1]} ... {driver.values[-1:]} "
        f"({sum(v.startswith(b'old') for v in driver.values)} record(s) of the old topic)"
    )
    assert worker_a.stats().invalidated == 1  # the old topic's consumer was closed


class LaggingLeader:
    """A proxy hook: what a new leader answers right after a failover, before its high
    watermark has caught up. Once armed, the next ``answers`` ListOffsets answers put
    ``topic``-``partition``'s end at ``end``, and every fetch until the next honest
    ListOffsets answer sees that high watermark and no records."""

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.end = 0
        self.remaining = 0
        self.lying = False
        self.lies = 0
        self._lock = threading.Lock()

    def arm(self, end: int, answers: int) -> None:
        with self._lock:
            self.end, self.remaining = end, answers

    def __call__(self, api_key: int, api_version: int, payload: bytes) -> Action | None:
        with self._lock:
            if api_key == LIST_OFFSETS:
                return self._list_offsets(api_version, payload)
            if api_key == FETCH and self.lying:
                return self._fetch(api_version, payload)
        return None

    def _list_offsets(self, version: int, payload: bytes) -> Action | None:
        response = ListOffsetsResponse.decode(payload, version=version, header=True)
        changed = False
        for t in response.topics:
            for p in t.partitions:
                if (t.name, p.partition_index) != (self.topic, self.partition):
                    continue
                if p.offset <= self.end:
                    continue  # "earliest", or an end below the lie anyway
                if self.remaining > 0:
                    self.remaining -= 1
                    self.lies += 1
                    self.lying = changed = True
                    p.offset = self.end
                else:
                    self.lying = False
        return Action(payload=bytes(response.encode(header=True))) if changed else None

    def _fetch(self, version: int, payload: bytes) -> Action | None:
        response = FetchResponse.decode(payload, version=version, header=True)
        changed = False
        for t in response.responses:
            for p in t.partitions:
                if (t.topic, p.partition_index) != (self.topic, self.partition):
                    continue
                p.high_watermark = min(p.high_watermark, self.end)
                p.last_stable_offset = min(p.last_stable_offset, self.end)
                p.records = b""
                changed = True
        return Action(payload=bytes(response.encode(header=True))) if changed else None


@pytest.mark.timeout(240)
def test_an_end_below_the_frontier_for_a_moment_after_a_restart_is_not_data_loss(
    kafka: Any, read_client: str
) -> None:
    """A restarted driver (a fresh reader on the same epoch log) gets two answers in a
    row that put the partition's end at 40, below its frontier of 100, each confirmed by
    a fetch, under the topic id the epoch log recorded; the next answer is right again.
    Nothing is lost and nothing is read twice."""
    topic = kafka.create_topic(partitions=1)
    kafka.produce_values(topic, tagged("a", 0, 100), partition=0)
    lagging = LaggingLeader(topic, 0)
    shared = {
        "pipeline.id": "p-" + uuid.uuid4().hex[:8],
        "state.uri": f"memory://{uuid.uuid4().hex}",
        "kafkaConsumer.pollTimeoutMs": "8000",  # a probe that gets no records waits 2 s
        "kafkaConsumer.client": read_client,
    }
    with KafkaProxy(kafka.bootstrap, lagging) as proxy:
        first = Driver(proxy.bootstrap, topic, **shared)
        try:
            first.step()
        finally:
            first.close()
        assert first.frontier() == {(topic, 0): 100}

        kafka.produce_values(topic, tagged("b", 0, 50), partition=0)
        lagging.arm(end=40, answers=2)
        restarted = Driver(proxy.bootstrap, topic, **shared)
        restarted.offset = first.offset  # where Spark's checkpoint resumes
        try:
            restarted.step()
            restarted.step()
        finally:
            restarted.close()
    assert lagging.lies == 2
    assert restarted.frontier() == {(topic, 0): 150}
    assert restarted.values == tagged("b", 0, 50), (
        f"read {len(restarted.values)} record(s): {restarted.values[:1]} ..."
    )
    assert restarted.reader.lost_events == 0


@pytest.mark.timeout(300)
def test_a_planned_epoch_re_run_after_its_topic_was_recreated_reads_nothing_of_the_new_topic(
    kafka: Any, read_client: str
) -> None:
    """A driver plans epoch 1 = [50, 100) of the old topic and dies before its tasks run.
    The topic is recreated and filled past 100. The restarted driver re-runs epoch 1 (the
    same start and end, the topic ids recorded with it): with failOnDataLoss=true the read
    fails with a data-loss error naming the topic and both ids; with false, epoch 1's
    records are reported lost and skipped (nothing of the new topic is read as epoch 1),
    and the next epochs read the new topic from its log start, each offset once."""
    topic = kafka.create_topic(partitions=1)
    kafka.produce_values(topic, tagged("old", 0, 100), partition=0)
    old_id = topic_id_of(kafka, topic)
    shared = {
        "pipeline.id": "p-" + uuid.uuid4().hex[:8],
        "state.uri": f"memory://{uuid.uuid4().hex}",
        "maxOffsetsPerTrigger": "50",
        "kafkaConsumer.client": read_client,
    }
    first = Driver(kafka.bootstrap, topic, **shared)
    try:
        first.step()  # epoch 0 = [0, 50), read
        assert first.values == tagged("old", 0, 50)
        start = first.offset
        end = first.reader.latestOffset(start, first.reader.getDefaultReadLimit())
        assert SourceOffset.from_json(end).offsets == {(topic, 0): 100}  # planned, never read
    finally:
        first.close()

    recreate_after_reads(kafka, topic)
    new_id = topic_id_of(kafka, topic)
    assert new_id != old_id
    kafka.produce_values(topic, tagged("new", 0, 300), partition=0)

    failing = Driver(kafka.bootstrap, topic, **shared)
    try:
        with pytest.raises(DataLossError) as info:
            for part in failing.reader.partitions(start, end):
                list(failing.reader.read(part))
    finally:
        failing.close()
    text = str(info.value)
    assert f"topic '{topic}'" in text and old_id in text and new_id in text, text

    restarted = Driver(kafka.bootstrap, topic, **{**shared, "failOnDataLoss": "false"})
    restarted.offset = start  # Spark's checkpoint: batch 1 planned, not committed
    try:
        bundle_1: list[bytes] = []
        for part in restarted.reader.partitions(start, end):
            for batch in restarted.reader.read(part):
                bundle_1.extend(batch.to_pydict()["value"])
        assert bundle_1 == [], f"epoch 1 re-run read {len(bundle_1)} record(s): {bundle_1[:3]}"
        restarted.offset = end
        for _ in range(10):
            if restarted.frontier().get((topic, 0)) == 300:
                break
            restarted.step()
    finally:
        restarted.close()
    twice = {k: n for k, n in restarted.read.items() if n > 1}
    assert twice == {}, f"offsets read twice: {sorted(twice)[:5]}"
    assert restarted.values == tagged("new", 0, 300), (
        f"{len(restarted.values)} record(s) read after the restart"
    )


def test_a_topic_recreated_before_the_first_epoch_is_data_loss_for_the_next_driver(
    kafka: Any,
) -> None:
    """A driver resolves the start (``latest``: 50) and dies before planning epoch 0. The
    topic is recreated and filled past 50, so the next driver's first answer looks like
    growth from the persisted start. The topic id recorded with the start tells:
    failOnDataLoss=true fails naming both ids; false reads the new topic from its log
    start, each offset once."""
    topic = kafka.create_topic(partitions=1)
    kafka.produce_values(topic, tagged("old", 0, 50), partition=0)
    old_id = topic_id_of(kafka, topic)
    shared = {
        "pipeline.id": "p-" + uuid.uuid4().hex[:8],
        "state.uri": f"memory://{uuid.uuid4().hex}",
        "startingOffsets": "latest",
    }
    first = Driver(kafka.bootstrap, topic, **shared)
    start = first.offset
    first.close()
    assert SourceOffset.from_json(start).offsets == {(topic, 0): 50}

    recreate_after_reads(kafka, topic)
    new_id = topic_id_of(kafka, topic)
    assert new_id != old_id
    kafka.produce_values(topic, tagged("new", 0, 80), partition=0)

    failing = Driver(kafka.bootstrap, topic, **shared)
    try:
        assert failing.offset == start  # the persisted start
        with pytest.raises(DataLossError) as info:
            failing.step()
    finally:
        failing.close()
    text = str(info.value)
    assert f"topic '{topic}'" in text and old_id in text and new_id in text, text

    lenient = Driver(kafka.bootstrap, topic, **{**shared, "failOnDataLoss": "false"})
    try:
        for _ in range(10):
            if lenient.frontier().get((topic, 0)) == 80:
                break
            lenient.step()
    finally:
        lenient.close()
    assert {k: n for k, n in lenient.read.items() if n > 1} == {}
    assert lenient.values == tagged("new", 0, 80)


@pytest.mark.timeout(600)
def test_a_query_restarted_on_a_batch_planned_before_its_topic_was_recreated(
    spark: Any, kafka: Any, tmp_path: Path, read_client: str
) -> None:
    """Through Spark: the query dies in batch 1 (planned [50, 100), in the offset log, not
    committed). The topic is recreated and filled with 300 records. Restarted on the same
    checkpoint, Spark re-runs batch 1 as planned: with failOnDataLoss=true the query fails
    naming the topic and both ids; with false batch 1 delivers nothing, and the batches
    after it deliver the new topic from its log start, each record once."""
    topic = kafka.create_topic(partitions=1)
    kafka.produce_values(topic, tagged("old", 0, 100), partition=0)
    old_id = topic_id_of(kafka, topic)
    opts = gtkafka_options(
        kafka.bootstrap,
        topic,
        f"file://{tmp_path / 'state'}",
        maxOffsetsPerTrigger="50",
        **{"kafkaConsumer.client": read_client},
    )
    checkpoint = tmp_path / "checkpoint"
    delivered: dict[int, list[bytes]] = {}

    def dies_in_batch_1(df: Any, batch_id: int) -> None:
        if batch_id == 1:
            raise RuntimeError("the driver dies in batch 1")
        delivered[batch_id] = [r.value for r in df.select("value").collect()]

    with pytest.raises(Exception, match="the driver dies in batch 1"):
        run_to_end(spark, opts, checkpoint, dies_in_batch_1)
    assert delivered == {0: tagged("old", 0, 50)}

    recreate_after_reads(kafka, topic)
    new_id = topic_id_of(kafka, topic)
    assert new_id != old_id
    kafka.produce_values(topic, tagged("new", 0, 300), partition=0)

    delivered.clear()

    def collect(df: Any, batch_id: int) -> None:
        delivered[batch_id] = [r.value for r in df.select("value").collect()]

    with pytest.raises(Exception) as info:  # Spark wraps it: StreamingQueryException
        run_to_end(spark, opts, checkpoint, collect)
    text = str(info.value)
    assert delivered == {}, f"delivered before the failure: {sorted(delivered)}"
    assert "DataLossError" in text and f"topic '{topic}'" in text, text[-3000:]
    assert old_id in text and new_id in text and "epoch 1" in text, text[-3000:]

    run_to_end(spark, {**opts, "failOnDataLoss": "false"}, checkpoint, collect)
    assert delivered.get(1) == [], f"batch 1 re-run delivered {delivered.get(1)}"
    after = [v for b in sorted(delivered) for v in delivered[b]]
    assert after == tagged("new", 0, 300), (
        f"{len(after)} record(s) after the restart, {len(set(after))} distinct"
    )


def test_a_read_task_s_lookup_gives_the_broker_s_ids_and_none_for_a_missing_topic(
    kafka: Any,
) -> None:
    """The read tasks' lookup (one describe) gives what the broker gives, the new id once
    the topic is recreated, and nothing for a topic that does not exist (left to the read,
    which reports a deleted partition)."""
    topic = kafka.create_topic(partitions=1)
    missing = f"{topic}-missing"
    options = KafkaSourceOptions.parse(
        {"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic}
    )
    assert current_topic_ids(options, {topic, missing}) == {topic: topic_id_of(kafka, topic)}
    old_id = topic_id_of(kafka, topic)
    kafka.recreate_topic(topic)
    assert (
        current_topic_ids(options, {topic}) == {topic: topic_id_of(kafka, topic)} != {topic: old_id}
    )
