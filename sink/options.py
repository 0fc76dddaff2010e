"""The barrier sink's options: one declarative table, parsed once into a frozen dataclass.

:data:`SINK_OPTIONS` lists every option with its type, default and doc; the
unknown-option check, the typed reading and the option tables of README.md and
docs/sink.md come from it. Spark 4.3 creates a Python stream writer in the query's
thread while it plans the first micro-batch, so a bad option stops the query before any
task runs: the :class:`~state.errors.ConfigError` names the option, the value and what
was expected.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlparse

from sink import postgres_options
from sink.postgres_options import PostgresTarget
from state.errors import ConfigError
from state.layout import validate_pipeline_id
from state.option_table import (
    BooleanOption,
    ChoiceOption,
    IntegerOption,
    OnlyWith,
    OptionTable,
    PrefixOption,
    Shared,
    StringOption,
)
from state.options import Options
from state.stores.base import S3_OPTIONS, StoreConfig

WHERE = "barrier"

Consumer = Literal["file", "s3", "kafka", "http", "postgres", "iceberg"]
Delivery = Literal["exactly-once", "at-least-once"]
BodyFormat = Literal["arrow", "jsonl"]
S3Layout = Literal["bundle", "parts"]
CONSUMERS: tuple[Consumer, ...] = ("file", "s3", "kafka", "http", "postgres", "iceberg")
DELIVERIES: tuple[Delivery, ...] = ("exactly-once", "at-least-once")

# --- the option table ------------------------------------------------------------------

_FILE_OR_S3 = OnlyWith("consumer", ("file", "s3"))
_S3 = OnlyWith("consumer", ("s3",))
_KAFKA = OnlyWith("consumer", ("kafka",))
_HTTP = OnlyWith("consumer", ("http",))
_ICEBERG = OnlyWith("consumer", ("iceberg",))

PIPELINE_ID = StringOption(
    name="pipeline.id",
    required=True,
    doc="The pipeline (same as the source's). Letters, digits, `.`, `_`, `-`.",
)
STATE_URI = StringOption(
    name="state.uri",
    required=True,
    doc="Where the barrier state lives: `memory://` (tests), `file:///abs/path`, "
    "`s3://bucket/prefix`.",
)
CONSUMER = ChoiceOption(
    name="consumer",
    choices=CONSUMERS,
    default="file",
    doc="`file`, `s3`, `kafka`, `http`, `postgres` or `iceberg`.",
)
CONSUMER_PATH = StringOption(
    name="consumer.path",
    required=True,
    only_with=_FILE_OR_S3,
    doc="An absolute directory (or `file:///...`) for `file`; `s3://bucket/prefix` for `s3`.",
)
DELIVERY = ChoiceOption(
    name="delivery",
    choices=DELIVERIES,
    default="exactly-once",
    doc="`exactly-once` or `at-least-once` (no last-bundle contract).",
)
ACK_TIMEOUT_MS = IntegerOption(
    name="ack.timeoutMs",
    default=30_000,
    minimum=1,
    doc=(
        "How long one delivery attempt waits for the consumer's acknowledgement (kafka: "
        "then up to the producer's delivery timeout for its late answers, see docs/sink.md)."
    ),
)
MAX_RETRIES = IntegerOption(
    name="delivery.maxRetries",
    default=3,
    minimum=0,
    maximum=1000,
    doc="Further attempts to deliver the *same* bundle before the batch fails.",
)
RETRY_BACKOFF_MS = IntegerOption(
    name="delivery.retryBackoffMs",
    default=500,
    minimum=0,
    doc="Backoff before the first retry (doubling, jittered, at most 30 s).",
)
KAFKA_BOOTSTRAP = StringOption(
    name="consumer.kafka.bootstrap.servers",
    required=True,
    only_with=_KAFKA,
    doc="The output cluster.",
)
TOPIC = StringOption(
    name="consumer.topic", required=True, only_with=_KAFKA, doc="The output topic."
)
KAFKA_SETTINGS = PrefixOption(
    name="consumer.kafka.",
    only_with=_KAFKA,
    doc="kafka-python producer settings (`consumer.kafka.linger.ms`, `...compression.type`, "
    "`...security.protocol`...). `acks`, `max.in.flight.requests.per.connection`, "
    "`enable.idempotence` and the serializers are owned by the sink and refused.",
)
URL = StringOption(
    name="consumer.url",
    required=True,
    only_with=_HTTP,
    doc="The endpoint bundles are POSTed to.",
)
FORMAT = ChoiceOption[BodyFormat](
    name="consumer.format",
    choices=("arrow", "jsonl"),
    default="arrow",
    only_with=_HTTP,
    doc="http body: `arrow` (Arrow IPC stream) or `jsonl`.",
)
S3_LAYOUT = ChoiceOption[S3Layout](
    name="consumer.s3.layout",
    choices=("bundle", "parts"),
    default="bundle",
    only_with=_S3,
    doc="s3: `bundle` (one object per bundle) or `parts` (one object per staged part: no "
    "item bytes through the driver, but readers may see part of a bundle being promoted).",
)
ICEBERG_TABLE = StringOption(
    name="consumer.iceberg.table",
    required=True,
    only_with=_ICEBERG,
    doc="The Iceberg table, `namespace.table` (the namespace may be nested: `a.b.table`).",
)
ICEBERG_CATALOG = PrefixOption(
    name="consumer.iceberg.catalog.",
    only_with=_ICEBERG,
    doc="pyiceberg catalog properties (`...catalog.type=sql`, `...catalog.uri=sqlite:///...`, "
    "`...catalog.warehouse=file:///...` or `s3://...`, `...catalog.s3.endpoint`...); "
    "`...catalog.name` names the catalog (default `default`).",
)
ICEBERG_CREATE_TABLE = BooleanOption(
    name="consumer.iceberg.createTable",
    default=True,
    only_with=_ICEBERG,
    doc="Create the namespace and the table from the sink's input schema if missing.",
)
FENCING_TOKEN = IntegerOption(
    name="fencing.token",
    default=None,
    minimum=0,
    doc="A monotonic integer from an external lock (the snapshot coordinator's ZooKeeper "
    "lock): a commit with a lower token than the recorded one is fenced.",
)

SINK_OPTIONS = OptionTable(
    WHERE,
    (
        PIPELINE_ID,
        STATE_URI,
        Shared(
            S3_OPTIONS,
            default_doc="see docs/state-stores.md",
            doc="S3 settings for `state.uri` and for `consumer=s3`.",
        ),
        CONSUMER,
        CONSUMER_PATH,
        DELIVERY,
        ACK_TIMEOUT_MS,
        MAX_RETRIES,
        RETRY_BACKOFF_MS,
        KAFKA_BOOTSTRAP,
        TOPIC,
        KAFKA_SETTINGS,
        URL,
        FORMAT,
        S3_LAYOUT,
        *postgres_options.SPECS,
        ICEBERG_TABLE,
        ICEBERG_CATALOG,
        ICEBERG_CREATE_TABLE,
        FENCING_TOKEN,
    ),
)

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
    format: BodyFormat = "arrow"
    s3_layout: S3Layout = "bundle"
    fencing_token: int | None = None
    postgres: PostgresTarget | None = None
    iceberg: IcebergSettings | None = None

    @property
    def exactly_once(self) -> bool:
        return self.delivery == "exactly-once"

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> SinkOptions:
        opts = Options(raw, where=WHERE)
        SINK_OPTIONS.check_known(opts)
        pipeline_id = validate_pipeline_id(PIPELINE_ID.read(opts), where=WHERE)
        store = StoreConfig.from_options(opts)
        consumer = CONSUMER.read(opts)
        SINK_OPTIONS.check_only_with(opts, CONSUMER.name, consumer)

        delivery = DELIVERY.read(opts)
        ack_ms = ACK_TIMEOUT_MS.read(opts)
        retries = MAX_RETRIES.read(opts)
        backoff_ms = RETRY_BACKOFF_MS.read(opts)
        token = FENCING_TOKEN.read(opts)

        path = CONSUMER_PATH.read(opts)
        if consumer in ("file", "s3"):
            path = _consumer_path(opts, consumer)

        kafka_bootstrap = topic = url = None
        kafka_config: dict[str, str] = {}
        if consumer == "kafka":
            kafka_bootstrap = KAFKA_BOOTSTRAP.read_required(opts)
            topic = TOPIC.read_required(opts)
            kafka_config = _kafka_config(opts)
        fmt = FORMAT.read(opts)
        s3_layout = S3_LAYOUT.read(opts)
        postgres = postgres_options.parse_target(opts) if consumer == "postgres" else None
        if consumer == "http":
            url = URL.read_required(opts).rstrip("/")
            parsed = urlparse(url)
            if parsed.scheme not in ("http", "https") or not parsed.netloc:
                raise opts.error(URL.name, "an http:// or https:// URL")

        iceberg = _iceberg_settings(opts) if consumer == "iceberg" else None

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
            format=fmt,
            s3_layout=s3_layout,
            fencing_token=token,
            postgres=postgres,
            iceberg=iceberg,
        )


@dataclass(frozen=True)
class IcebergSettings:
    """``consumer=iceberg``: the table and the pyiceberg catalog that holds it."""

    namespace: tuple[str, ...]
    table: str
    catalog: tuple[tuple[str, str], ...]
    """pyiceberg catalog properties, sorted (hashable: a per-process cache key)."""
    catalog_name: str = "default"
    create_table: bool = True
    location: str | None = None
    """The table's location and FileIO properties, filled in on the driver when the query
    starts (write tasks then never open the catalog)."""
    io_properties: tuple[tuple[str, str], ...] = ()

    @property
    def identifier(self) -> str:
        return ".".join((*self.namespace, self.table))

    @property
    def properties(self) -> dict[str, str]:
        return dict(self.catalog)


def _iceberg_settings(opts: Options) -> IcebergSettings:
    table = ICEBERG_TABLE.read_required(opts)
    parts = table.split(".")
    if len(parts) < 2 or any(not p.strip() or p != p.strip() for p in parts):
        raise opts.error(ICEBERG_TABLE.name, "namespace.table (non-empty names, dot-separated)")
    props = {k: v for k, v in ICEBERG_CATALOG.read(opts).items() if k != "name"}
    name = opts.string(ICEBERG_CATALOG.name + "name")
    if not props and name is None:
        raise ConfigError(
            ICEBERG_CATALOG.name + "*",
            None,
            "pyiceberg catalog properties, e.g. consumer.iceberg.catalog.uri=sqlite:///... and "
            "consumer.iceberg.catalog.warehouse=file:///...",
            where=WHERE,
        )
    warehouse = props.get("warehouse")
    if warehouse is not None and "://" not in warehouse:
        raise opts.error(
            ICEBERG_CATALOG.name + "warehouse", "a URI: file:///absolute/path or s3://bucket/prefix"
        )
    return IcebergSettings(
        namespace=tuple(parts[:-1]),
        table=parts[-1],
        catalog=tuple(sorted(props.items())),
        catalog_name=name or "default",
        create_table=ICEBERG_CREATE_TABLE.read(opts),
    )


def _consumer_path(opts: Options, consumer: Consumer) -> str:
    path = CONSUMER_PATH.read_required(opts)
    name = CONSUMER_PATH.name
    if consumer == "s3":
        parsed = urlparse(path)
        if parsed.scheme != "s3" or not parsed.netloc:
            raise opts.error(name, "s3://bucket/prefix for consumer=s3")
        return path.rstrip("/")
    if path.startswith("file://"):
        parsed = urlparse(path)
        if parsed.netloc not in ("", "localhost"):
            raise opts.error(name, "file:///absolute/path (three slashes)")
        path = parsed.path
    if "://" in path or not os.path.isabs(path):
        raise opts.error(name, "an absolute directory path (or file:///...) for consumer=file")
    return os.path.normpath(path)


def _kafka_config(opts: Options) -> dict[str, str]:
    from kafka import KafkaProducer

    known = {k.replace("_", ".") for k in KafkaProducer.DEFAULT_CONFIG}
    config: dict[str, str] = {}
    for name, value in KAFKA_SETTINGS.given(opts):
        key = name.lower()[len(KAFKA_SETTINGS.name) :]
        if name.lower() == KAFKA_BOOTSTRAP.name:
            continue
        if key in KAFKA_MANAGED:
            raise opts.error(name, f"not to be set: {KAFKA_MANAGED[key]}")
        if key not in known:
            raise opts.error(name, "a kafka-python producer setting, e.g. consumer.kafka.linger.ms")
        config[key] = value
    return config
