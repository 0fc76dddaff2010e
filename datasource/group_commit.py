"""``commitOffsetsToGroup``: publish a processed frontier to a Kafka consumer group.

Called from the reader's ``commit(end)`` on the driver (Spark calls it once a batch is
done, one batch late). The committed offsets let standard lag tools (``kafka-consumer-
groups``, Burrow, ...) show the query's progress. They are never read back: recovery
uses Spark's checkpoint and the epoch log only.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from datasource.offset_reader import driver_retry, kafka_call
from datasource.offsets import TopicPartitionKey
from datasource.options import KafkaSourceOptions


def commit_to_group(
    options: KafkaSourceOptions,
    group: str,
    frontier: Mapping[TopicPartitionKey, int],
    *,
    consumer_factory: Callable[..., Any] | None = None,
) -> None:
    """Commit ``frontier`` (next offsets to read) to ``group`` with a short-lived consumer.

    The consumer never joins the group (no subscription, no rebalance); it only sends an
    OffsetCommit, as a "simple consumer" would.
    """
    if not frontier:
        return
    from kafka import TopicPartition
    from kafka.structs import OffsetAndMetadata

    factory = consumer_factory
    if factory is None:
        from kafka import KafkaConsumer

        factory = KafkaConsumer
    offsets = {
        TopicPartition(t, p): OffsetAndMetadata(off, "gtkafka", -1)
        for (t, p), off in sorted(frontier.items())
    }
    config = options.consumer_config(group_id=group)

    def commit() -> None:
        consumer = factory(**config)
        try:
            consumer.commit(offsets)
        finally:
            consumer.close(autocommit=False)

    kafka_call(
        options,
        f"committing offsets to consumer group {group!r}",
        commit,
        retry=driver_retry(options),
    )
