"""``consumer=kafka``: the kind the registry names, and the check when the query starts.

The sink input is shaped like the input of Spark's Kafka sink (:func:`check_spark_schema`),
and when its rows choose their partition the topic's partition count is recorded in the
settings (:func:`topic_partitions`) for :mod:`~sink.consumers.kafka.kafka_rows` to check
the rows against. kafka-python, and the consumer that sends with it
(:mod:`~sink.consumers.kafka.kafka_consumer`), are imported only where they are used.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sink.consumers.consumer_kind import ConsumerKind, RowRejection, SinkView
from sink.consumers.kafka.kafka_options import (
    KAFKA_BOOTSTRAP,
    KAFKA_SETTINGS,
    TOPIC,
    KafkaTopicSettings,
    client_arguments,
    connection_arguments,
    parse_settings,
)
from sink.consumers.kafka.kafka_rows import validate_rows
from sink.faults import FaultInjector
from sink.staging import Staging
from state.errors import ConfigError, DeliveryFailed
from state.kafka_errors import translate_kafka_error
from state.options import Options

if TYPE_CHECKING:
    from sink.consumers.kafka.kafka_consumer import KafkaTopicConsumer


def topic_partitions(settings: KafkaTopicSettings, timeout: float) -> int:
    """How many partitions ``settings.topic`` has now (fresh metadata from the cluster).

    :class:`ConfigError` if the topic does not exist (rows that name partitions need a
    topic that has them); :class:`DeliveryFailed` if the cluster does not answer within
    ``timeout`` seconds.
    """
    from kafka import KafkaConsumer as KafkaReader

    what = f"kafka consumer {settings.topic}@{settings.bootstrap}: reading the topic's partitions"

    def count() -> int:
        reader = KafkaReader(
            bootstrap_servers=settings.bootstrap,
            enable_auto_commit=False,
            group_id=None,
            request_timeout_ms=max(int(timeout * 1000), 10_000) + 1000,
            bootstrap_timeout_ms=int(timeout * 1000),
            **connection_arguments(client_arguments(settings)),
        )
        try:
            return len(reader.partitions_for_topic(settings.topic) or ())
        finally:
            reader.close()

    try:
        n = count()
    except Exception as err:
        translated = translate_kafka_error(
            err, servers=settings.bootstrap, what=what, retriable=DeliveryFailed
        )
        if translated is err:
            raise
        raise translated from err
    if n == 0:
        raise ConfigError(
            TOPIC.name,
            settings.topic,
            f"a topic that exists on {settings.bootstrap} (the sink input has a partition "
            "column, so the topic's partitions are checked before any data moves)",
            where="barrier",
        )
    return n


_TEXT_OR_BINARY = ("BinaryType", "StringType")


def check_spark_schema(schema: Any) -> None:
    """The sink input must be shaped like the input of Spark's Kafka sink.

    Checked when the query plans its first micro-batch, before anything is staged: a
    bundle recorded in flight without a usable ``value`` could never be delivered, and
    the fixed query would find it still in flight.
    """
    types = {f.name: f.dataType for f in schema.fields}
    shape = (
        "value (binary or string), optional key (binary or string), headers "
        "(array<struct<key: string, value: binary>>) and partition (int)"
    )

    def refuse(column: str, actual: str) -> ConfigError:
        return ConfigError(
            column,
            actual,
            f"a sink input for consumer=kafka with columns {shape}",
            where="barrier",
        )

    if "value" not in types:
        raise refuse("value", f"<missing> (columns: {', '.join(types)})")
    for column in ("value", "key"):
        if column in types and type(types[column]).__name__ not in _TEXT_OR_BINARY:
            raise refuse(column, types[column].simpleString())
    if "partition" in types and type(types["partition"]).__name__ != "IntegerType":
        raise refuse("partition", types["partition"].simpleString())
    if "headers" in types:
        element = getattr(types["headers"], "elementType", None)
        fields = {f.name: type(f.dataType).__name__ for f in getattr(element, "fields", [])}
        if fields.get("key") != "StringType" or fields.get("value") not in _TEXT_OR_BINARY:
            raise refuse("headers", types["headers"].simpleString())


class KafkaTopicKind(ConsumerKind[KafkaTopicSettings]):
    """``consumer=kafka``: parts staged in the state store, items sent as messages."""

    settings_type = KafkaTopicSettings
    specs = (KAFKA_BOOTSTRAP, TOPIC, KAFKA_SETTINGS)

    def parse(self, opts: Options) -> KafkaTopicSettings:
        return parse_settings(opts)

    def check_at_start(self, options: SinkView, spark_schema: Any) -> KafkaTopicSettings:
        """The input's shape; when rows choose their partition, the topic's partition count
        (asked now: Spark plans every micro-batch this way, so partitions added to the topic
        are accepted from the next micro-batch planned after they appear). Without a
        ``partition`` column the producer's partitioner chooses and nothing is asked."""
        check_spark_schema(spark_schema)
        settings = self.settings(options)
        if "partition" in spark_schema.fieldNames():
            settings = replace(settings, partitions=topic_partitions(settings, options.ack_timeout))
        return settings

    def validate(self, settings: KafkaTopicSettings, table: pa.Table) -> list[RowRejection]:
        """Rows the kafka consumer cannot send (:mod:`sink.consumers.kafka_rows`): header
        entries, keys or values it cannot encode, a partition outside the recorded count, a
        message larger than the producer's ``max.request.size`` with the sink's headers."""
        return validate_rows(table, settings.limits())

    def open_consumer(
        self, options: SinkView, staging: Staging, faults: FaultInjector
    ) -> KafkaTopicConsumer:
        from sink.consumers.kafka.kafka_consumer import KafkaTopicConsumer

        return KafkaTopicConsumer(
            self.settings(options),
            staging,
            faults,
            ack_timeout=options.ack_timeout,
            pipeline_id=options.pipeline_id,
        )


KAFKA_TOPIC = KafkaTopicKind()
