"""Read tasks: the topics an epoch was planned under, checked against the broker's.

An epoch records the topic ids under which its end was computed (``topic_ids`` in the
epoch record, :mod:`state.records.epoch`), and every task of the epoch carries those of
the topics it reads (:class:`~datasource.partition_reader.KafkaInputPartition`). A task
may run long after the epoch was planned: a restarted driver re-running a batch that was
planned but not committed, a retried Spark task, a snapshot restore or a
``state.startAtFloor`` replay reading recorded epochs. If the topic was deleted and
created again meanwhile, its offsets name other records: the epoch's records are gone,
and reading the range would deliver the new topic's records under the old epoch (and
again in the epochs that read the new topic from its log start).

The Fetch versions kafka-python sends carry no topic id, and librdkafka's metadata gives
none, so the check is one Metadata request for the task's topics (a describe, on a
kafka-python admin client the process keeps per cluster and configuration), made once per
task before its first fetch, and only for a task whose plan names ids. A topic the broker
does not describe now (deleted, not created again) is left to the read, which reports a
partition that no longer exists.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Mapping
from typing import Any

from datasource.options import KafkaSourceOptions
from state.kafka_errors import kafka_call
from state.process_cache import ProcessCache

log = logging.getLogger(__name__)

CurrentIds = Callable[[KafkaSourceOptions, Collection[str]], Mapping[str, str]]
"""What gives the broker's current id of each of the topics (absent: unknown)."""

_ZERO = "00000000-0000-0000-0000-000000000000"

_ADMINS: ProcessCache[tuple[str, tuple[tuple[str, str], ...]], Any] = ProcessCache(
    "gtkafka topic id admins",
    capacity=8,
    max_idle=300.0,
    close=lambda admin: admin.close(),
    close_at_exit=True,
)


def recreated(recorded: Mapping[str, str], current: Mapping[str, str]) -> dict[str, str]:
    """The topics of ``recorded`` (the ids a plan names) whose ``current`` id differs, with
    that id: each was deleted and created again since the plan. A topic without a current
    id decides nothing."""
    return {
        topic: current[topic]
        for topic, planned in recorded.items()
        if topic in current and current[topic] != planned
    }


def current_topic_ids(options: KafkaSourceOptions, topics: Collection[str]) -> dict[str, str]:
    """The broker's topic id of each of ``topics`` (one Metadata request, fresh); a topic
    the broker does not describe, or describes without an id, is absent."""
    if not topics:
        return {}
    admin = _admin(options)
    described = kafka_call(
        options.bootstrap_servers,
        f"describing topics {sorted(topics)} to check their ids",
        lambda: admin.describe_topics(sorted(topics)),
    )
    found: dict[str, str] = {}
    for topic in described:
        tid = topic.get("topic_id")
        if topic.get("error_code", 0) == 0 and tid is not None and str(tid) != _ZERO:
            found[str(topic["name"])] = str(tid)
    return found


def _admin(options: KafkaSourceOptions) -> Any:
    from kafka.admin import KafkaAdminClient

    # The consumer's settings that an admin client takes: the cluster, its security, the
    # timeouts (the rest are the consumer's own and would be refused).
    config = {
        k: v for k, v in options.consumer_config().items() if k in KafkaAdminClient.DEFAULT_CONFIG
    }
    key = (options.bootstrap_servers, tuple(sorted((k, repr(v)) for k, v in config.items())))

    def create() -> Any:
        return kafka_call(
            options.bootstrap_servers,
            "connecting to check topic ids",
            lambda: KafkaAdminClient(**config),
        )

    return _ADMINS.get_or_create(key, create)


__all__ = ["CurrentIds", "current_topic_ids", "recreated"]
