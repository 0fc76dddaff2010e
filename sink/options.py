"""The barrier sink's options: one declarative table, parsed once into a frozen dataclass.

:data:`SINK_OPTIONS` lists every option with its type, default and doc: the options every
consumer shares, declared here, then each consumer kind's own, declared by the kind and
composed by :mod:`sink.consumers.registry`. The unknown-option check, the typed reading and
the option tables of README.md and docs/sink.md come from it. Spark 4.3 creates a Python
stream writer in the query's thread while it plans the first micro-batch, so a bad option
stops the query before any task runs: the :class:`~state.errors.ConfigError` names the
option, the value and what was expected.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

from sink.consumers.consumer_kind import ConsumerKind, ConsumerSettings
from sink.consumers.registry import CONSUMER, CONSUMER_OPTIONS, kind_of
from state.layout import validate_pipeline_id
from state.option_table import (
    ChoiceOption,
    IntegerOption,
    OptionTable,
    Shared,
    StringOption,
)
from state.options import Options
from state.stores.base import S3_OPTIONS, StoreConfig

WHERE = "barrier"

Delivery = Literal["exactly-once", "at-least-once"]
DELIVERIES: tuple[Delivery, ...] = ("exactly-once", "at-least-once")

# --- the option table ------------------------------------------------------------------

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
        DELIVERY,
        ACK_TIMEOUT_MS,
        MAX_RETRIES,
        RETRY_BACKOFF_MS,
        FENCING_TOKEN,
        CONSUMER,
        *CONSUMER_OPTIONS,
    ),
)


@dataclass(frozen=True)
class SinkOptions:
    """Every option of the ``barrier`` sink, typed. Small and picklable (it goes to every
    write task and commit): the options every consumer shares, the consumer's name and its
    kind's parsed settings (:class:`~sink.consumers.consumer_kind.ConsumerSettings`)."""

    pipeline_id: str
    store: StoreConfig
    consumer: str
    """The ``consumer`` option: a name in :data:`sink.consumers.registry.CONSUMER_KINDS`."""
    settings: ConsumerSettings
    """The kind's own frozen settings (``FileSettings``, ``KafkaTopicSettings``...)."""
    delivery: Delivery = "exactly-once"
    ack_timeout: float = 30.0
    max_retries: int = 3
    retry_backoff: float = 0.5
    fencing_token: int | None = None

    def __post_init__(self) -> None:
        self.kind.settings(self)  # the settings are the consumer's kind's, or a TypeError

    @property
    def exactly_once(self) -> bool:
        return self.delivery == "exactly-once"

    @property
    def kind(self) -> ConsumerKind[Any]:
        """The consumer's kind (:mod:`sink.consumers.registry`)."""
        return kind_of(self.consumer)

    def check_at_start(self, spark_schema: Any) -> SinkOptions:
        """The kind's check when the query starts (before any data moves), and these options
        with the settings it completed: what the write tasks and commits receive."""
        return replace(self, settings=self.kind.check_at_start(self, spark_schema))

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
        settings = kind_of(consumer).parse(opts)

        return cls(
            pipeline_id=pipeline_id,
            store=store,
            consumer=consumer,
            settings=settings,
            delivery=delivery,
            ack_timeout=ack_ms / 1000.0,
            max_retries=retries,
            retry_backoff=backoff_ms / 1000.0,
            fencing_token=token,
        )
