"""``kafka.*`` options of ``gtkafka`` as kafka-python ``KafkaConsumer`` arguments.

The conversion (names, aliases, types, TLS and SASL, secrets and their references) is the
one every Kafka client of gtbarrier shares, :func:`state.kafka_settings.kafka_arguments`;
this module adds what is the source's own: the settings that would break replayable reads
(:data:`REFUSED_KAFKA`), refused with the reason.
"""

from __future__ import annotations

from typing import Any

from state.kafka_settings import kafka_arguments
from state.options import Options

PREFIX = "kafka."

NO_GROUP = (
    "gtkafka assigns partitions itself and never joins, reads or commits to a consumer group, "
    "so it needs no group: the broker's group ACLs apply only to group requests, never to a "
    "fetch, and quotas key on the user and the client id (set kafka.client.id to name the "
    "client; commitOffsetsToGroup=<group> publishes progress to a group, which needs READ on "
    "that group)"
)
"""Why gtkafka takes no group id (``kafka.group.id``, Spark's ``groupIdPrefix``)."""

# kafka-python settings that would break replayable reads, with the reason.
REFUSED_KAFKA = {
    "auto_offset_reset": "gtkafka seeks to exact offsets; a reset would silently skip or repeat "
    "records (use startingOffsets, and failOnDataLoss for out-of-range offsets)",
    "enable_auto_commit": "gtkafka never commits consumer offsets for recovery "
    "(use commitOffsetsToGroup to publish progress)",
    "key_deserializer": "keys are returned as binary; deserialize in Spark",
    "value_deserializer": "values are returned as binary; deserialize in Spark",
    "group_id": NO_GROUP,
    "group_instance_id": "gtkafka reads without a consumer group",
    "allow_auto_create_topics": "gtkafka never creates topics",
    "bootstrap_servers": "use the option 'kafka.bootstrap.servers'",
}


def consumer_settings(opts: Options) -> dict[str, Any]:
    """``kafka.*`` options (but ``kafka.bootstrap.servers``) as ``KafkaConsumer`` arguments:
    typed, secrets as :class:`~state.kafka_redaction.Secret`, secret references kept (each
    client resolves them where it is made, :func:`~state.kafka_settings.resolve_secrets`)."""
    from kafka import KafkaConsumer

    given = {n: v for n, v in opts.with_prefix(PREFIX).items() if n != "bootstrap.servers"}
    return kafka_arguments(
        given,
        prefix=PREFIX,
        defaults=KafkaConsumer.DEFAULT_CONFIG,
        client="consumer",
        where=opts.where,
        refused=REFUSED_KAFKA,
    )
