"""Kafka's end offsets for ``gtbarrier status --bootstrap``: one short-lived consumer."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from datasource.kafka_settings import consumer_settings
from state.kafka_errors import kafka_call
from state.options import Options
from state.records.source_offset import Frontier

# Fail in seconds when the brokers do not answer (an operator is waiting).
CLI_KAFKA_DEFAULTS = {"request_timeout_ms": 15_000, "api_version_auto_timeout_ms": 5_000}


def kafka_settings(options: Mapping[str, str]) -> dict[str, Any]:
    """The ``kafka.*`` options as kafka-python arguments (checked as the source checks them)."""
    kafka_only = {k: v for k, v in options.items() if k.lower().startswith("kafka.")}
    return {**CLI_KAFKA_DEFAULTS, **consumer_settings(Options(kafka_only, where="--option"))}


def end_offsets(bootstrap: str, topics: Iterable[str], settings: Mapping[str, Any]) -> Frontier:
    """Every partition of ``topics`` with its end offset (the next offset to be written)."""
    from kafka import KafkaConsumer, TopicPartition

    wanted = sorted(set(topics))

    def fetch() -> Frontier:
        consumer = KafkaConsumer(bootstrap_servers=bootstrap.split(","), **settings)
        try:
            tps = [
                TopicPartition(topic, p)
                for topic in wanted
                for p in sorted(consumer.partitions_for_topic(topic) or ())
            ]
            ends = consumer.end_offsets(tps) if tps else {}
        finally:
            consumer.close()
        return {(tp.topic, tp.partition): int(off) for tp, off in ends.items()}

    return kafka_call(bootstrap, "reading the end offsets", fetch)
