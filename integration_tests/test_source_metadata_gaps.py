"""gtkafka's end frontier when Kafka's answers have gaps, against the real broker.

No Spark: the driver-side stream reader runs in-process
(:class:`integration_tests.source_support.Driver`) and its ``read`` is called directly,
as an executor would, so every record each epoch reads is counted. A partition hidden
from one Metadata answer (through the Kafka-aware proxy of harness/kafka_proxy.py) must
keep its offset; a topic deleted and created again is data loss as docs/source.md says;
and no record is ever read twice.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from typing import Any

import pytest

from harness.kafka_proxy import METADATA, Action, KafkaProxy, hide_partition
from integration_tests.source_support import Driver, recreate_after_reads
from state.errors import DataLossError

pytestmark = pytest.mark.timeout(180)


class HidePartition:
    """A proxy hook: remove ``topic``'s ``partition`` from the next ``count`` Metadata
    answers that list it (once armed)."""

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.remaining = 0
        self.hidden = 0
        self._lock = threading.Lock()

    def arm(self, count: int = 1) -> None:
        with self._lock:
            self.remaining = count

    def __call__(self, api_key: int, api_version: int, payload: bytes) -> Action | None:
        if api_key != METADATA:
            return None
        with self._lock:
            if self.remaining <= 0:
                return None
            rewritten = hide_partition(payload, api_version, self.topic, self.partition)
            if rewritten is None:
                return None
            self.remaining -= 1
            self.hidden += 1
        return Action(payload=rewritten)


def produce(kafka: Any, topic: str, partition: int, n: int, tag: str) -> None:
    values = (f"{tag}-{partition}-{i}".encode() for i in range(n))
    kafka.produce_values(topic, values, partition=partition)


def twice(read: Counter[tuple[int, int]]) -> dict[tuple[int, int], int]:
    return {k: n for k, n in read.items() if n > 1}


@pytest.mark.parametrize("fail_on_data_loss", ["false", "true"])
def test_partition_hidden_from_one_metadata_answer_keeps_its_offset(
    kafka: Any, fail_on_data_loss: str, caplog: pytest.LogCaptureFixture, read_client: str
) -> None:
    topic = kafka.create_topic(partitions=2)
    hide = HidePartition(topic, 1)
    for p in (0, 1):
        produce(kafka, topic, p, 100, "a")
    with KafkaProxy(kafka.bootstrap, hide) as proxy:
        driver = Driver(
            proxy.bootstrap,
            topic,
            failOnDataLoss=fail_on_data_loss,
            **{"kafkaConsumer.client": read_client},
        )
        try:
            driver.step()
            assert driver.frontier() == {(topic, 0): 100, (topic, 1): 100}
            for p in (0, 1):
                produce(kafka, topic, p, 50, "b")
            hide.arm(1)  # the next Metadata answer lacks partition 1, later ones have it
            with caplog.at_level(logging.WARNING, logger="datasource"):
                driver.step()
            assert hide.hidden == 1
            kept = driver.frontier().get((topic, 1))
            for p in (0, 1):
                produce(kafka, topic, p, 50, "c")
            driver.step()
            driver.step()
        finally:
            driver.close()
    assert driver.frontier() == {(topic, 0): 200, (topic, 1): 200}
    assert not twice(driver.read), (
        f"{sum(n - 1 for n in driver.read.values())} record(s) read twice, "
        f"e.g. {sorted(twice(driver.read))[:3]}; epochs {driver.epochs}"
    )
    assert sorted(driver.read) == [(p, o) for p in (0, 1) for o in range(200)]
    assert kept is not None and kept >= 100  # the partition kept its offset, never dropped
    assert driver.reader.lost_events == 0
    assert not [r for r in caplog.records if "failOnDataLoss" in r.getMessage()]


@pytest.mark.parametrize("new_records", [30, 150])
def test_recreated_topic_fails_the_query_by_default(
    kafka: Any, new_records: int, read_client: str
) -> None:
    """Deleted and created again with fewer, or more, records than were read: data loss."""
    topic = kafka.create_topic(partitions=1)
    produce(kafka, topic, 0, 100, "old")
    driver = Driver(kafka.bootstrap, topic, **{"kafkaConsumer.client": read_client})
    try:
        driver.step()
        assert driver.frontier() == {(topic, 0): 100}
        recreate_after_reads(kafka, topic)
        produce(kafka, topic, 0, new_records, "new")
        with pytest.raises(DataLossError) as info:
            driver.step()
    finally:
        driver.close()
    assert f"{topic}-0" in str(info.value) and "failOnDataLoss=false" in str(info.value)


@pytest.mark.parametrize("new_records", [30, 150])
def test_recreated_topic_restarts_from_its_new_log_start(
    kafka: Any, new_records: int, caplog: pytest.LogCaptureFixture, read_client: str
) -> None:
    """With failOnDataLoss=false: a warning, then every record of the new topic is read
    once, from its log start, and no record of the old one again."""
    topic = kafka.create_topic(partitions=1)
    produce(kafka, topic, 0, 100, "old")
    driver = Driver(
        kafka.bootstrap, topic, failOnDataLoss="false", **{"kafkaConsumer.client": read_client}
    )
    try:
        driver.step()
        recreate_after_reads(kafka, topic)
        produce(kafka, topic, 0, new_records, "new")
        with caplog.at_level(logging.WARNING, logger="datasource"):
            for _ in range(3):
                driver.step()
    finally:
        driver.close()
    assert driver.frontier() == {(topic, 0): new_records}
    old = [v for v in driver.values if v.startswith(b"old")]
    new = [v for v in driver.values if v.startswith(b"new")]
    assert sorted(old) == sorted(f"old-0-{i}".encode() for i in range(100))
    assert sorted(new) == sorted(f"new-0-{i}".encode() for i in range(new_records)), (
        f"{len(new)} of the new topic's {new_records} records read; epochs {driver.epochs}"
    )
    assert driver.reader.lost_events >= 1
    assert any("deleted and created again" in r.getMessage() for r in caplog.records)
