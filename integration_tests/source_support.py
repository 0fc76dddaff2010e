"""Shared helpers of the gtkafka integration tests (integration_tests/test_source_*.py)."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from datasource.consumer_pool import PARK_AFTER_S, PARK_INTERVAL_S, ConsumerSource
from datasource.options import KafkaSourceOptions
from datasource.partition_reader import KafkaInputPartition, read_partition
from datasource.schema import arrow_schema, source_schema
from datasource.stream_reader import GlobalTimeKafkaStreamReader
from state.records.source_offset import SourceOffset

QUERY_TIMEOUT = 240.0


def recreate_after_reads(kafka: Any, topic: str, partitions: int = 1) -> None:
    """Delete ``topic`` and create it again once the pools have parked the consumers that
    read it (idle for ``PARK_AFTER_S``, looked for every ``PARK_INTERVAL_S``) and the Fetch
    each had in flight is answered (``fetch.max.wait.ms``, at most 500 ms).

    The documented limit of ``kafkaConsumer.client=confluent``: librdkafka cannot survive
    a topic deleted under a consumer that still fetches it (``LibrdkafkaConsumer.park``);
    kafka-python can. Both clients' tests recreate topics this way, so that they test the
    same thing.
    """
    # 0.5 s for the Fetch in flight, and as much again for a loaded machine's scheduling
    time.sleep(2 * (PARK_AFTER_S + PARK_INTERVAL_S + 0.5))
    kafka.recreate_topic(topic, partitions=partitions)


def gtkafka_options(bootstrap: str, topic: str, state_uri: str, **extra: str) -> dict[str, str]:
    """Options of a streaming gtkafka read of ``topic`` from earliest."""
    return {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "pipeline.id": "p-" + topic.replace("_", "-")[-60:],
        "state.uri": state_uri,
        "startingOffsets": "earliest",
        "kafkaConsumer.pollTimeoutMs": "30000",
        **extra,
    }


def run_to_end(
    spark: Any,
    options: dict[str, str],
    checkpoint: Path,
    on_batch: Callable[[Any, int], None],
    *,
    trigger: dict[str, Any] | None = None,
    timeout: float = QUERY_TIMEOUT,
    schema: str | None = None,
) -> Any:
    """Run a gtkafka query with ``foreachBatch(on_batch)`` until it ends (AvailableNow by
    default), with the user-specified ``schema`` if one is given; re-raise the query's
    failure; return the finished query."""
    reader = spark.readStream.format("gtkafka")
    if schema is not None:
        reader = reader.schema(schema)
    df = reader.options(**options).load()
    query = (
        df.writeStream.foreachBatch(on_batch)
        .option("checkpointLocation", str(checkpoint))
        .trigger(**(trigger or {"availableNow": True}))
        .start()
    )
    try:
        finished = query.awaitTermination(timeout)
    finally:
        if query.isActive:
            query.stop()
    if query.exception() is not None:
        raise query.exception()
    assert finished, f"query did not finish within {timeout}s"
    return query


def query_error(spark: Any, options: dict[str, str], checkpoint: Path, timeout: float = 120) -> str:
    """Run a query expected to fail; the text of its failure."""
    df = spark.readStream.format("gtkafka").options(**options).load()
    query = (
        df.writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(timeout)
    except Exception as err:  # StreamingQueryException carries the Python traceback
        return str(err)
    finally:
        if query.isActive:
            query.stop()
    raise AssertionError(f"the query did not fail within {timeout}s")


class Driver:
    """The stream reader's driver side plus reads of every planned partition, in-process.

    ``initialOffset``, ``latestOffset`` and ``partitions`` as Spark's driver calls them, and
    ``read`` as an executor would, so every record each epoch reads is counted. Two drivers
    given the same ``pipeline.id`` and ``state.uri`` share the epoch log (a restarted
    driver: set the new one's ``offset`` to where the old one stopped, as Spark's
    checkpoint would).
    """

    def __init__(self, bootstrap: str, topic: str, **extra: str) -> None:
        self.options = KafkaSourceOptions.parse(
            {
                "kafka.bootstrap.servers": bootstrap,
                "subscribe": topic,
                "pipeline.id": "p-" + uuid.uuid4().hex[:8],
                "state.uri": f"memory://{uuid.uuid4().hex}",
                "startingOffsets": "earliest",
                "fetchOffset.refreshIntervalMs": "0",
                "kafkaConsumer.pollTimeoutMs": "30000",
                **extra,
            }
        )
        self.schema = source_schema(False)
        self.reader = GlobalTimeKafkaStreamReader(self.options, self.schema)
        self.offset = self.reader.initialOffset()
        self.epochs: list[tuple[dict[str, Any], dict[str, Any]]] = []
        self.read: Counter[tuple[int, int]] = Counter()  # (partition, offset) -> times read
        self.values: list[bytes] = []

    def step(self, source: ConsumerSource | None = None) -> dict[str, Any]:
        """One trigger: the next epoch's end, and the records it reads (with consumers
        from ``source``, a Python worker's pool, if given; else as ``read`` does)."""
        end = self.reader.latestOffset(self.offset, self.reader.getDefaultReadLimit())
        if end != self.offset:
            self.epochs.append((self.offset, end))
            for part in self.reader.partitions(self.offset, end):
                assert isinstance(part, KafkaInputPartition)
                if source is None:
                    batches = self.reader.read(part)
                else:
                    schema = arrow_schema(self.schema)
                    batches = read_partition(self.options, part, schema, task=None, source=source)
                for batch in batches:
                    rows = batch.to_pydict()
                    for p, o, v in zip(
                        rows["partition"], rows["offset"], rows["value"], strict=True
                    ):
                        self.read[(p, o)] += 1
                        self.values.append(v)
            self.offset = end
        return end

    def frontier(self) -> dict[tuple[str, int], int]:
        return dict(SourceOffset.from_json(self.offset).offsets)

    def close(self) -> None:
        self.reader.stop()


def topic_id_of(kafka: Any, topic: str) -> str:
    """The topic id the broker gives ``topic`` (Metadata v10+)."""
    admin = kafka.admin()
    try:
        described: list[dict[str, Any]] = admin.describe_topics([topic])
    finally:
        admin.close()
    found = [t["topic_id"] for t in described if t["name"] == topic]
    assert found and found[0], f"no topic id for {topic}: {described}"
    return str(found[0])
