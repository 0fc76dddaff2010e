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

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal
from urllib.parse import urlparse

from sink.consumers.consumer_kind import ConsumerKind, ConsumerSettings
from sink.consumers.registry import CONSUMER, CONSUMER_OPTIONS, kind_of
from sink.dead_letters.dead_letter_format import ADDED_COLUMNS
from sink.dead_letters.dead_letter_settings import (
    KAFKA_PREFIX,
    TOLERANCES,
    DeadLetterSettings,
    Tolerance,
)
from state.errors import ConfigError
from state.layout import validate_pipeline_id
from state.option_table import (
    ChoiceOption,
    DurationOption,
    IntegerOption,
    OnlyWith,
    OptionTable,
    PrefixOption,
    Shared,
    StringOption,
    misplaced,
)
from state.options import Options
from state.stores import canonical_uri, is_s3_uri
from state.stores.state_store import AZURE_OPTIONS, GCS_OPTIONS, S3_OPTIONS, StoreConfig

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
    "`s3://bucket/prefix` (or `s3a://`).",
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
SWEEP_EVERY = IntegerOption(
    name="staging.sweepEvery",
    default=100,
    minimum=0,
    doc="Every this many bundles (by id), the pipeline's owner deletes, after the bundle's "
    "commit, the staged parts that runs it superseded left behind (what `gtbarrier sweep` "
    "deletes of them, under the same ownership checks); `0`: only when a run claims the "
    "pipeline. Parts of a run that never claimed are left to `gtbarrier sweep`.",
)

ERRORS_TOLERANCE = ChoiceOption[Tolerance](
    name="errors.tolerance",
    choices=TOLERANCES,
    default="none",
    doc="Rows the consumer's target refuses (a NUL in PostgreSQL text, a record over "
    "`max.request.size`...), found before anything of their bundle is delivered: `none` "
    "fails the bundle, naming the row's `gt`, the column and the reason; `all` writes them "
    'to `errors.deadLetter.path` and delivers the rest (docs/sink.md, "Bad rows and dead '
    'letters").',
)
_WITH_ALL = OnlyWith(ERRORS_TOLERANCE.name, ("all",))
DEAD_LETTER_PATH = StringOption(
    name="errors.deadLetter.path",
    required=True,
    only_with=_WITH_ALL,
    default_doc="required with `errors.tolerance=all`",
    doc="Where refused rows go, exactly once: `file:///abs/dir` or `s3://bucket/prefix` "
    "(or `s3a://`; with the `s3.*` settings), one Parquet file per bundle, "
    "`bundle-<id>.parquet`: the input's columns plus `_gtb_bundle`, `_gtb_reason`, `_gtb_column`.",
)
DEAD_LETTER_RETENTION = DurationOption[None](
    name="errors.deadLetter.retention",
    default=None,
    positive=True,
    only_with=_WITH_ALL,
    doc="Delete a dead-letter file once it is older than this (a week: `168h`) "
    "and its bundle is at or below `GT_last`, in the owner's sweep after a commit "
    "(`staging.sweepEvery`); unset: files are kept until an operator deletes them. A file "
    "written by a release that did not record its time is kept. A dead-letter topic's "
    "retention is the topic's own (`retention.ms`).",
)
DEAD_LETTER_TOPIC = StringOption(
    name="errors.deadLetter.topic",
    only_with=_WITH_ALL,
    requires="errors.deadLetter.kafka.bootstrap.servers",
    doc="Also send each refused row to this Kafka topic, with the bundle, `gt`, reason and "
    "column in `gtb.errors.*` headers (as Kafka Connect's dead letter queue); "
    "exactly once like the file.",
)
DEAD_LETTER_KAFKA = PrefixOption(
    name=KAFKA_PREFIX,
    only_with=_WITH_ALL,
    doc="kafka-python producer settings for `errors.deadLetter.topic` "
    "(`...kafka.bootstrap.servers` is required with it), taken as `consumer.kafka.*` are "
    "(TLS and SASL, a password as a secret reference).",
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
        Shared(
            GCS_OPTIONS, default_doc="see docs/state-stores.md", doc="GCS settings for `state.uri`."
        ),
        Shared(
            AZURE_OPTIONS,
            default_doc="see docs/state-stores.md",
            doc="Azure settings for `state.uri`.",
        ),
        DELIVERY,
        ACK_TIMEOUT_MS,
        MAX_RETRIES,
        RETRY_BACKOFF_MS,
        FENCING_TOKEN,
        SWEEP_EVERY,
        ERRORS_TOLERANCE,
        DEAD_LETTER_PATH,
        DEAD_LETTER_RETENTION,
        DEAD_LETTER_TOPIC,
        DEAD_LETTER_KAFKA,
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
    sweep_every: int = 100
    """``staging.sweepEvery``: the owner's sweep of superseded runs' parts, every this many
    bundles (0: only at a claim)."""
    errors: DeadLetterSettings = field(default_factory=DeadLetterSettings)
    """``errors.*``: what happens to rows the consumer's target refuses."""
    checkpoint_location: str | None = None
    """The query's ``checkpointLocation`` as Spark passes it to the sink (None if the query
    named it through ``spark.sql.streaming.checkpointLocation`` instead): where the barrier
    reads Spark's offset log for a batch that has no batch record (``readMode=driver``)."""

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
        with the settings it completed: what the write tasks and commits receive. With
        ``errors.tolerance=all`` the dead-letter destination must be writable and the input
        must not have the columns a dead-letter file adds."""
        if self.errors.tolerant:
            _check_dead_letters_at_start(self, spark_schema)
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
        sweep_every = SWEEP_EVERY.read(opts)
        settings = kind_of(consumer).parse(opts)
        errors = _parse_errors(opts)

        options = cls(
            pipeline_id=pipeline_id,
            store=store,
            consumer=consumer,
            settings=settings,
            delivery=delivery,
            ack_timeout=ack_ms / 1000.0,
            max_retries=retries,
            retry_backoff=backoff_ms / 1000.0,
            fencing_token=token,
            sweep_every=sweep_every,
            errors=errors,
            checkpoint_location=opts.raw("checkpointLocation"),
        )
        _check_dead_letters_outside_the_output(options)
        return options


def _parse_errors(opts: Options) -> DeadLetterSettings:
    """``errors.*``: the tolerance, and with ``all`` the dead-letter destination."""
    tolerance = ERRORS_TOLERANCE.read(opts)
    SINK_OPTIONS.check_only_with(opts, ERRORS_TOLERANCE.name, tolerance)
    if tolerance == "none":
        return DeadLetterSettings()
    path = DEAD_LETTER_PATH.read(opts)
    if path is None:
        raise opts.error(
            DEAD_LETTER_PATH.name,
            "a dead-letter destination, file:///absolute/dir or s3://bucket/prefix, with "
            "errors.tolerance=all",
        )
    parsed = urlparse(path)
    local = parsed.scheme == "file" and parsed.netloc in ("", "localhost")
    if not (local and parsed.path.startswith("/")) and not is_s3_uri(path):
        raise opts.error(
            DEAD_LETTER_PATH.name, "file:///absolute/dir or s3://bucket/prefix (or s3a://)"
        )
    path = "file://" + os.path.normpath(parsed.path) if local else canonical_uri(path)
    SINK_OPTIONS.check_requires(opts)
    topic = DEAD_LETTER_TOPIC.read(opts)
    given = DEAD_LETTER_KAFKA.given(opts)
    if given and topic is None:
        raise misplaced(opts, given[0][0], "to be set only together with errors.deadLetter.topic")
    bootstrap = opts.string(DEAD_LETTER_KAFKA.name + "bootstrap.servers")
    return DeadLetterSettings(
        tolerance=tolerance,
        path=path.rstrip("/"),
        retention=DEAD_LETTER_RETENTION.read(opts),
        topic=topic,
        bootstrap=bootstrap,
        kafka=_dead_letter_producer_settings(opts),
    )


def _dead_letter_producer_settings(opts: Options) -> tuple[tuple[str, str], ...]:
    """``errors.deadLetter.kafka.*`` but the bootstrap servers, checked and kept as the kafka
    consumer's producer settings are (it sends the dead letters): kafka-python producer
    settings, none of those it owns, TLS and SASL together, secret references unresolved."""
    from sink.consumers.kafka.kafka_options import producer_settings

    return producer_settings(opts, DEAD_LETTER_KAFKA.name)


def _check_dead_letters_outside_the_output(options: SinkOptions) -> None:
    """Dead letters inside ``consumer.path`` would be read as the consumer's output."""
    path, output = options.errors.path, options.kind.consumer_path(options)
    if path is None or output is None:
        return
    where = urlparse(path).path if path.startswith("file://") else path
    output = output.rstrip("/")
    if where == output or where.startswith(output + "/"):
        raise ConfigError(
            DEAD_LETTER_PATH.name,
            path,
            f"a destination outside consumer.path {output!r} (readers of the consumer's "
            "output would read the dead letters as output)",
            where=WHERE,
        )


def _check_dead_letters_at_start(options: SinkOptions, spark_schema: Any) -> None:
    """Before any data moves: no input column a dead-letter file adds, and a destination
    that can be written (a directory made if missing; an S3 prefix that can be listed)."""
    from sink.dead_letters.dead_letter_files import open_dead_letters

    names = [f.name for f in getattr(spark_schema, "fields", [])]
    clash = [n for n in names if n in ADDED_COLUMNS]
    if clash:
        raise ConfigError(
            ERRORS_TOLERANCE.name,
            "all",
            f"a sink input without the columns dead-letter files add ({', '.join(ADDED_COLUMNS)}); "
            f"rename {', '.join(repr(n) for n in clash)}",
            where=WHERE,
        )
    assert options.errors.path is not None
    destination = open_dead_letters(options.errors.path, options.store.s3)
    try:
        destination.check()
    except Exception as err:
        raise ConfigError(
            DEAD_LETTER_PATH.name,
            options.errors.path,
            f"a dead-letter destination this driver can write ({type(err).__name__}: {err})",
            where=WHERE,
        ) from err
    finally:
        destination.close()
