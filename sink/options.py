"""The barrier sink's options, parsed once into a frozen dataclass.

Spark 4.3 creates a Python stream writer in the query's thread while it plans the first
micro-batch, so a bad option stops the query before any task runs: the
:class:`~state.errors.ConfigError` names the option, the value and what was expected.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlparse

from state.errors import ConfigError
from state.layout import validate_pipeline_id
from state.options import Options
from state.store import StoreConfig

WHERE = "barrier"

Consumer = Literal["file", "s3", "kafka", "http"]
Delivery = Literal["exactly-once", "at-least-once"]
CONSUMERS: tuple[Consumer, ...] = ("file", "s3", "kafka", "http")
DELIVERIES: tuple[Delivery, ...] = ("exactly-once", "at-least-once")

KNOWN = (
    "pipeline.id",
    "state.uri",
    *StoreConfig.OPTIONS,
    "consumer",
    "consumer.path",
    "delivery",
    "ack.timeoutMs",
    "delivery.maxRetries",
    "delivery.retryBackoffMs",
    "consumer.kafka.bootstrap.servers",
    "consumer.topic",
    "consumer.url",
    "consumer.format",
    "consumer.s3.layout",
    "fencing.token",
    "fault.inject",
)
KAFKA_PREFIX = "consumer.kafka."

# Options that only make sense with one consumer (named in conflict errors).
_ONLY_FOR: dict[str, tuple[Consumer, ...]] = {
    "consumer.path": ("file", "s3"),
    "consumer.topic": ("kafka",),
    "consumer.kafka.bootstrap.servers": ("kafka",),
    "consumer.url": ("http",),
    "consumer.format": ("http",),
    "consumer.s3.layout": ("s3",),
}

# Producer settings the Kafka consumer owns: they are what makes delivery ordered.
KAFKA_MANAGED = {
    "key.serializer": "the sink sends the key column's bytes",
    "value.serializer": "the sink sends the value column's bytes",
    "acks": "the sink always uses acks=all",
    "max.in.flight.requests.per.connection": "the sink uses 1 to keep order on retries",
    "enable.idempotence": "ordering is kept with one request in flight",
    "bootstrap.servers": "use consumer.kafka.bootstrap.servers",
}


@dataclass(frozen=True)
class SinkOptions:
    """Every option of the ``barrier`` sink, typed. Small and picklable."""

    pipeline_id: str
    store: StoreConfig
    consumer: Consumer = "file"
    consumer_path: str | None = None
    delivery: Delivery = "exactly-once"
    ack_timeout: float = 30.0
    max_retries: int = 3
    retry_backoff: float = 0.5
    kafka_bootstrap: str | None = None
    topic: str | None = None
    kafka_config: dict[str, str] = field(default_factory=dict)
    url: str | None = None
    format: Literal["arrow", "jsonl"] = "arrow"
    s3_layout: Literal["bundle", "parts"] = "bundle"
    fencing_token: int | None = None
    fault: str | None = None

    @property
    def exactly_once(self) -> bool:
        return self.delivery == "exactly-once"

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> SinkOptions:
        opts = Options(raw, where=WHERE)
        opts.check_known(KNOWN, prefixes=(KAFKA_PREFIX,))
        pipeline_id = validate_pipeline_id(opts.string("pipeline.id"), where=WHERE)
        store = StoreConfig.from_options(opts)
        consumer: Consumer = opts.choice("consumer", CONSUMERS, "file")  # type: ignore[assignment]
        _check_conflicts(opts, consumer)

        delivery: Delivery = opts.choice("delivery", DELIVERIES, "exactly-once")  # type: ignore[assignment]
        ack_ms = opts.integer("ack.timeoutMs", 30_000, minimum=1)
        retries = opts.integer("delivery.maxRetries", 3, minimum=0, maximum=1000)
        backoff_ms = opts.integer("delivery.retryBackoffMs", 500, minimum=0)
        token = opts.integer("fencing.token", None, minimum=0)
        assert ack_ms is not None and retries is not None and backoff_ms is not None

        path = opts.string("consumer.path")
        if consumer in ("file", "s3"):
            path = _consumer_path(opts, consumer)

        kafka_bootstrap = topic = url = None
        kafka_config: dict[str, str] = {}
        if consumer == "kafka":
            kafka_bootstrap = opts.required("consumer.kafka.bootstrap.servers")
            topic = opts.required("consumer.topic")
            kafka_config = _kafka_config(opts)
        fmt = opts.choice("consumer.format", ("arrow", "jsonl"), "arrow")
        s3_layout = opts.choice("consumer.s3.layout", ("bundle", "parts"), "bundle")
        if consumer == "http":
            url = opts.required("consumer.url").rstrip("/")
            parsed = urlparse(url)
            if parsed.scheme not in ("http", "https") or not parsed.netloc:
                raise opts.error("consumer.url", "an http:// or https:// URL")

        fault = opts.string("fault.inject")
        if fault is not None:
            from sink.faults import parse_faults

            parse_faults(fault, option="fault.inject", where=WHERE)

        return cls(
            pipeline_id=pipeline_id,
            store=store,
            consumer=consumer,
            consumer_path=path,
            delivery=delivery,
            ack_timeout=ack_ms / 1000.0,
            max_retries=retries,
            retry_backoff=backoff_ms / 1000.0,
            kafka_bootstrap=kafka_bootstrap,
            topic=topic,
            kafka_config=kafka_config,
            url=url,
            format=fmt,  # type: ignore[arg-type]
            s3_layout=s3_layout,  # type: ignore[arg-type]
            fencing_token=token,
            fault=fault,
        )


def _check_conflicts(opts: Options, consumer: Consumer) -> None:
    for name, consumers in _ONLY_FOR.items():
        if opts.string(name) is not None and consumer not in consumers:
            raise ConfigError(
                name,
                opts.raw(name),
                f"not to be set with consumer={consumer} "
                f"(it applies to consumer={'/'.join(consumers)})",
                where=WHERE,
            )
    kafka_extra = [n for n in opts.names() if n.lower().startswith(KAFKA_PREFIX)]
    if kafka_extra and consumer != "kafka":
        raise ConfigError(
            kafka_extra[0],
            opts.raw(kafka_extra[0]),
            f"not to be set with consumer={consumer} (consumer.kafka.* applies to consumer=kafka)",
            where=WHERE,
        )


def _consumer_path(opts: Options, consumer: Consumer) -> str:
    path = opts.required("consumer.path")
    if consumer == "s3":
        parsed = urlparse(path)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise opts.error("consumer.path", "s3://bucket/prefix for consumer=s3")
        return path.rstrip("/")
    if path.startswith("file://"):
        parsed = urlparse(path)
        if parsed.netloc not in ("", "localhost"):
            raise opts.error("consumer.path", "file:///absolute/path (three slashes)")
        path = parsed.path
    if "://" in path or not os.path.isabs(path):
        raise opts.error(
            "consumer.path", "an absolute directory path (or file:///...) for consumer=file"
        )
    return os.path.normpath(path)


def _kafka_config(opts: Options) -> dict[str, str]:
    from kafka import KafkaProducer

    known = {k.replace("_", ".") for k in KafkaProducer.DEFAULT_CONFIG}
    config: dict[str, str] = {}
    for name in opts.names():
        low = name.lower()
        if not low.startswith(KAFKA_PREFIX) or low == "consumer.kafka.bootstrap.servers":
            continue
        key = low[len(KAFKA_PREFIX) :]
        if key in KAFKA_MANAGED:
            raise opts.error(name, f"not to be set: {KAFKA_MANAGED[key]}")
        if key not in known:
            raise opts.error(name, "a kafka-python producer setting, e.g. consumer.kafka.linger.ms")
        value = opts.raw(name)
        assert value is not None
        config[key] = value
    return config
