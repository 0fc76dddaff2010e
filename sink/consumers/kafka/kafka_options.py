"""``consumer=kafka``: its options, :class:`KafkaTopicSettings`, and the settings and
configuration of its producer (and of the dead-letter topic's, with its own prefix).

``consumer.kafka.*`` are converted as every Kafka client's settings are
(:mod:`state.kafka_settings`: names, types, TLS and SASL, secrets), checked when the
options are parsed and kept as given (:func:`producer_settings`: a secret reference stays
a reference in the options Spark plans, checkpoints and pickles to the tasks), then
converted again, their references resolved, where the consumer makes its clients
(:func:`client_arguments`). The dead-letter topic's producer
(:class:`sink.dead_letters.dead_letter_topic.DeadLetterTopic`,
``errors.deadLetter.kafka.*``) is this consumer too, with its own prefix.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sink.consumers.consumer_kind import ConsumerSettings
from sink.consumers.kafka.kafka_rows import MAX_REQUEST_SIZE, RowLimits, max_request_size
from state.kafka_redaction import Secret
from state.kafka_settings import is_secret, kafka_arguments, resolve_secrets
from state.option_table import PrefixOption, StringOption
from state.options import Options

KAFKA_BOOTSTRAP = StringOption(
    name="consumer.kafka.bootstrap.servers", required=True, doc="The output cluster."
)
TOPIC = StringOption(name="consumer.topic", required=True, doc="The output topic.")
KAFKA_SETTINGS = PrefixOption(
    name="consumer.kafka.",
    doc="kafka-python producer settings (`consumer.kafka.linger.ms`, `...compression.type`, "
    "`...security.protocol`...), TLS and SASL checked together; a password may be a secret "
    "reference (`${env:NAME}`, `${file:/path}`), resolved where the clients are made. `acks`, "
    "`max.in.flight.requests.per.connection`, `enable.idempotence` and the serializers are "
    "owned by the sink and refused.",
)
WHERE = "barrier"

# Producer settings the Kafka consumer owns: they are what makes delivery ordered.
KAFKA_MANAGED = {
    "key.serializer": "the sink sends the key column's bytes",
    "value.serializer": "the sink sends the value column's bytes",
    "acks": "the sink always uses acks=all",
    "max.in.flight.requests.per.connection": "the sink uses 1 to keep order on retries",
    "enable.idempotence": "the sink's producer is transactional, hence idempotent",
    "bootstrap.servers": "use consumer.kafka.bootstrap.servers",
}
_MANAGED_ARGS = {name.replace(".", "_"): why for name, why in KAFKA_MANAGED.items()}
# What a reader of the producer's cluster needs of its settings: TLS and SASL.
_CONNECTION_ARGS = ("security_", "ssl_", "sasl_")


@dataclass(frozen=True)
class KafkaTopicSettings(ConsumerSettings):
    """``consumer=kafka``: the output cluster, topic and producer settings."""

    bootstrap: str
    topic: str
    config: tuple[tuple[str, str], ...] = ()
    """``consumer.kafka.*`` producer settings (prefix removed, names lower-cased), sorted,
    as given (:func:`producer_settings`): a secret reference unresolved, a secret a
    :class:`~state.kafka_redaction.Secret` (its ``repr`` a fingerprint)."""
    partitions: int | None = None
    """The topic's partition count when the micro-batch was planned, recorded by the start
    check when the sink input has a ``partition`` column (None: not recorded)."""
    option_prefix: str = KAFKA_SETTINGS.name
    """The options ``config`` came from, as errors name them (the dead-letter topic's
    producer: ``errors.deadLetter.kafka.``)."""

    def limits(self) -> RowLimits:
        """What row validation needs of the target (:mod:`sink.consumers.kafka_rows`)."""
        return RowLimits(self.topic, self.partitions, max_request_size(self.config))


def parse_settings(opts: Options) -> KafkaTopicSettings:
    """The ``consumer.kafka.*`` and ``consumer.topic`` options, checked."""
    bootstrap = KAFKA_BOOTSTRAP.read_required(opts)
    topic = TOPIC.read_required(opts)
    return KafkaTopicSettings(
        bootstrap=bootstrap, topic=topic, config=producer_settings(opts, KAFKA_SETTINGS.name)
    )


def producer_settings(opts: Options, prefix: str) -> tuple[tuple[str, str], ...]:
    """``<prefix>*`` but ``<prefix>bootstrap.servers``: the settings of a producer of this
    sink (the kafka consumer's, ``consumer.kafka.``; the dead-letter topic's,
    ``errors.deadLetter.kafka.``), names lower-cased without the prefix, sorted.

    Checked now, on the driver before any data moves, as every Kafka client's settings are
    (:func:`state.kafka_settings.kafka_arguments`: kafka-python producer settings, typed,
    TLS and SASL together), none of those the sink owns (:data:`KAFKA_MANAGED`), a positive
    ``max.request.size`` and ``retries``. Kept as given: a secret reference is not resolved
    here (the settings are planned, checkpointed and pickled to the tasks), and a secret is
    a :class:`~state.kafka_redaction.Secret`, whose ``repr`` is a fingerprint.
    :func:`client_arguments` converts them where a client is made.
    """
    from kafka import KafkaProducer

    config: dict[str, str] = {}
    for name, value in opts.with_prefix(prefix).items():
        if name == "bootstrap.servers":
            continue
        if name == MAX_REQUEST_SIZE and not (value.isdigit() and int(value) > 0):
            raise opts.error(prefix + name, "a number of bytes (an integer >= 1)")
        if name == "retries" and not (value.isdigit() and int(value) > 0):
            raise opts.error(
                prefix + name, "an integer >= 1 (the sink's producer is transactional)"
            )
        config[name] = Secret(value) if is_secret(name) else value
    kafka_arguments(
        config,
        prefix=prefix,
        defaults=KafkaProducer.DEFAULT_CONFIG,
        client="producer",
        where=opts.where,
        refused=_MANAGED_ARGS,
    )
    return tuple(sorted(config.items()))


def client_arguments(settings: KafkaTopicSettings) -> dict[str, Any]:
    """``settings.config`` as kafka-python producer arguments, typed, their secret
    references resolved (:func:`state.kafka_settings.resolve_secrets`): called only where
    a client is made. An unresolvable reference is a
    :class:`~state.errors.SecretReferenceError` naming the option and the reference."""
    from kafka import KafkaProducer

    arguments = kafka_arguments(
        dict(settings.config),
        prefix=settings.option_prefix,
        defaults=KafkaProducer.DEFAULT_CONFIG,
        client="producer",
        where=WHERE,
        refused=_MANAGED_ARGS,
    )
    return resolve_secrets(arguments, WHERE, settings.option_prefix)


def connection_arguments(arguments: dict[str, Any]) -> dict[str, Any]:
    """Of a producer's arguments, those a reader of the same cluster needs too: TLS and
    SASL (the tail scan, the start check's partition count)."""
    return {k: v for k, v in arguments.items() if k.startswith(_CONNECTION_ARGS)}


def producer_config(
    settings: KafkaTopicSettings, ack_timeout: float, pipeline_id: str | None = None
) -> dict[str, Any]:
    """kafka-python settings from ``consumer.kafka.*`` (:func:`client_arguments`: typed,
    secret references resolved, so called where the producer is made) plus the ones the
    sink owns; ``ack_timeout`` is ``ack.timeoutMs`` in seconds. The producer is
    transactional, its ``transactional.id`` the pipeline's for the topic
    (:func:`transactional_id`)."""
    config = client_arguments(settings)
    config.setdefault("linger_ms", 20)
    config.setdefault("batch_size", 256 * 1024)
    config.setdefault("retries", 5)
    config.setdefault("request_timeout_ms", int(ack_timeout * 1000))
    config.setdefault("max_block_ms", int(ack_timeout * 1000))
    config.setdefault("bootstrap_timeout_ms", int(ack_timeout * 1000))
    # Every message is resolved (acknowledged, rejected or expired) within this long after
    # send(); deliver() waits that long before it gives an attempt up (Kafka's 120 s at the
    # default ack.timeoutMs). kafka-python requires at least linger + request timeout.
    config.setdefault(
        "delivery_timeout_ms",
        max(
            4 * int(ack_timeout * 1000),
            int(config["linger_ms"]) + int(config["request_timeout_ms"]),
        ),
    )
    config.setdefault("transactional_id", transactional_id(pipeline_id, settings.topic))
    # A transaction spans one delivery attempt: the sends, the flush, the wait for late
    # answers and the commit. The broker aborts one open longer (and Kafka's default cap,
    # transaction.max.timeout.ms, is 15 minutes).
    config.setdefault(
        "transaction_timeout_ms",
        min(900_000, int(config["delivery_timeout_ms"]) + 2 * int(ack_timeout * 1000) + 60_000),
    )
    config.update(acks="all", max_in_flight_requests_per_connection=1)
    return config


def transactional_id(pipeline_id: str | None, topic: str) -> str:
    """The ``transactional.id`` of the producers that write ``topic`` for a pipeline (unless
    ``consumer.kafka.transactional.id`` names another): the same for every driver and run of
    the pipeline, so that a new producer fences every older one, and another for each topic
    (a pipeline's output and its dead letters), so that they never fence each other."""
    return f"gtbarrier.{pipeline_id}.{topic}" if pipeline_id else f"gtbarrier.{topic}"
