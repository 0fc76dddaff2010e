"""The options of the ``gtkafka`` source, parsed once into :class:`KafkaSourceOptions`.

Names follow Spark's own Kafka source (case-insensitive). Everything that can be checked
without a broker is checked here, in the ``DataSource`` constructor, so a bad option fails
at ``load()``. Checks that depend on the mode (streaming or batch) run in
:meth:`KafkaSourceOptions.require_streaming` / :meth:`KafkaSourceOptions.require_batch`,
called from ``streamReader()`` / ``reader()``.

``kafka.*`` options go to kafka-python: the Kafka name with dots turned into underscores
(``kafka.security.protocol`` -> ``security_protocol``) must be one of
``KafkaConsumer.DEFAULT_CONFIG``; values are converted to the type of its default.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from state.errors import ConfigError, UnknownOptionError
from state.layout import validate_pipeline_id
from state.options import Options
from state.store import StoreConfig

WHERE = "gtkafka"

# -1 and -2 in offset JSON, as in Spark's Kafka source.
LATEST = -1
EARLIEST = -2

SubscriptionKind = Literal["subscribe", "subscribePattern", "assign"]
OffsetSpecKind = Literal["earliest", "latest", "offsets", "timestamp", "timestamps"]

OPTIONS = (
    "kafka.bootstrap.servers",
    "subscribe",
    "subscribePattern",
    "assign",
    "startingOffsets",
    "startingTimestamp",
    "startingOffsetsByTimestamp",
    "startingOffsetsByTimestampStrategy",
    "endingOffsets",
    "endingTimestamp",
    "endingOffsetsByTimestamp",
    "maxOffsetsPerTrigger",
    "minOffsetsPerTrigger",
    "maxTriggerDelay",
    "minPartitions",
    "maxRecordsPerPartition",
    "failOnDataLoss",
    "includeHeaders",
    "kafkaConsumer.pollTimeoutMs",
    "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs",
    "fetchOffset.refreshIntervalMs",
    "commitOffsetsToGroup",
    "pipeline.id",
    "state.uri",
    *StoreConfig.OPTIONS,
)

# kafka-python settings that would break replayable reads, with the reason.
REFUSED_KAFKA = {
    "auto_offset_reset": "gtkafka seeks to exact offsets; a reset would silently skip or repeat "
    "records (use startingOffsets, and failOnDataLoss for out-of-range offsets)",
    "enable_auto_commit": "gtkafka never commits consumer offsets for recovery "
    "(use commitOffsetsToGroup to publish progress)",
    "key_deserializer": "keys are returned as binary; deserialize in Spark",
    "value_deserializer": "values are returned as binary; deserialize in Spark",
    "group_id": "gtkafka reads assigned partitions without a consumer group "
    "(use commitOffsetsToGroup to publish progress to a group)",
    "group_instance_id": "gtkafka reads without a consumer group",
    "allow_auto_create_topics": "gtkafka never creates topics",
    "bootstrap_servers": "use the option 'kafka.bootstrap.servers'",
}

# kafka-python settings whose values are Python objects, not strings.
_NOT_SETTABLE = {
    "default_offset_commit_callback",
    "partition_assignment_strategy",
    "selector",
    "kafka_client",
    "ssl_context",
    "metric_reporters",
    "sasl_oauth_token_provider",
    "socket_options",
}

# librdkafka-style names with a different kafka-python spelling.
_KAFKA_ALIASES = {
    "ssl.ca.location": "ssl_cafile",
    "ssl.certificate.location": "ssl_certfile",
    "ssl.key.location": "ssl_keyfile",
    "ssl.key.password": "ssl_password",
    "sasl.username": "sasl_plain_username",
    "sasl.password": "sasl_plain_password",
}

# Settings whose kafka-python default is None but whose values are not strings.
_NONE_DEFAULT_TYPES: dict[str, type] = {
    "api_version": tuple,
    "receive_buffer_bytes": int,
    "send_buffer_bytes": int,
}

_BOOTSTRAP = re.compile(r"^\s*[^\s,:]+:\d{1,5}\s*(,\s*[^\s,:]+:\d{1,5}\s*)*$")
_OFFSETS_FORM = '{"topic": {"0": 42, "1": -2}} with -2 for earliest and -1 for latest'
_TIMESTAMPS_FORM = '{"topic": {"0": 1700000000000}} (milliseconds since the epoch)'


@dataclass(frozen=True)
class Subscription:
    """What to read: listed topics, a topic regex, or fixed topic-partitions."""

    kind: SubscriptionKind
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assignment: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def matches(self, topic: str) -> bool:
        if self.kind == "subscribePattern":
            assert self.pattern is not None
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.named_topics()

    def named_topics(self) -> tuple[str, ...]:
        """The topics named by ``subscribe`` or ``assign`` (empty for a pattern)."""
        if self.kind == "assign":
            return tuple(t for t, _ in self.assignment)
        return self.topics

    def describe(self) -> str:
        if self.kind == "subscribePattern":
            return f"subscribePattern={self.pattern!r}"
        if self.kind == "assign":
            return "assign=" + json.dumps({t: list(ps) for t, ps in self.assignment})
        return "subscribe=" + ",".join(self.topics)


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start or end: earliest, latest, per-partition offsets, or timestamps.

    ``offsets`` maps ``(topic, partition)`` to an offset (-2 earliest, -1 latest) for kind
    ``offsets`` and to a timestamp in ms for kind ``timestamps``; ``timestamp`` is the one
    timestamp of kind ``timestamp``. ``option`` names the option the spec came from.
    """

    kind: OffsetSpecKind
    option: str
    offsets: Mapping[tuple[str, int], int] = field(default_factory=dict)
    timestamp: int | None = None

    def describe(self) -> str:
        if self.kind in ("earliest", "latest"):
            return self.kind
        if self.kind == "timestamp":
            return f"timestamp {self.timestamp}"
        return json.dumps(offsets_json(self.offsets))


@dataclass(frozen=True)
class KafkaSourceOptions:
    """Every option of ``gtkafka``, typed. Small and picklable (travels to executors)."""

    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetSpec | None
    ending: OffsetSpec | None
    starting_by_timestamp_strategy: Literal["error", "latest"] = "error"
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_s: float = 15 * 60.0
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = 120_000
    fetch_offset_num_retries: int = 3
    fetch_offset_retry_interval_ms: int = 1_000
    fetch_offset_refresh_interval_ms: int = 1_000
    commit_offsets_to_group: str | None = None
    pipeline_id: str | None = None
    store: StoreConfig | None = None
    kafka: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> KafkaSourceOptions:
        """Parse and check every option; :class:`ConfigError` names the first bad one."""
        opts = Options(dict(raw), where=WHERE)
        opts.check_known(OPTIONS, prefixes=("kafka.",))

        bootstrap = opts.required("kafka.bootstrap.servers")
        if not _BOOTSTRAP.match(bootstrap):
            raise opts.error("kafka.bootstrap.servers", "a comma-separated list of host:port")

        min_rows = opts.integer("minOffsetsPerTrigger", minimum=1)
        max_rows = opts.integer("maxOffsetsPerTrigger", minimum=1)
        if min_rows is not None and max_rows is not None and min_rows > max_rows:
            raise opts.error(
                "minOffsetsPerTrigger",
                f"an integer <= maxOffsetsPerTrigger ({max_rows})",
            )
        if "maxTriggerDelay" in opts and min_rows is None:
            raise opts.error("maxTriggerDelay", "to be set only together with minOffsetsPerTrigger")

        pipeline_id = opts.string("pipeline.id")
        if pipeline_id is not None:
            validate_pipeline_id(pipeline_id, where=WHERE)
        store = None
        if opts.string("state.uri") is not None:
            store = StoreConfig.from_options(opts)
        elif any(o in opts for o in StoreConfig.OPTIONS):
            present = [o for o in StoreConfig.OPTIONS if o in opts]
            raise opts.error("state.uri", f"a store URI, because {', '.join(present)} is set")

        group = opts.string("commitOffsetsToGroup")

        strategy = opts.choice("startingOffsetsByTimestampStrategy", ("error", "latest"), "error")
        parsed = cls(
            bootstrap_servers=",".join(s.strip() for s in bootstrap.split(",")),
            subscription=_parse_subscription(opts),
            starting=_parse_spec(
                opts, "startingOffsetsByTimestamp", "startingTimestamp", "startingOffsets"
            ),
            ending=_parse_spec(
                opts, "endingOffsetsByTimestamp", "endingTimestamp", "endingOffsets"
            ),
            starting_by_timestamp_strategy="latest" if strategy == "latest" else "error",
            max_offsets_per_trigger=max_rows,
            min_offsets_per_trigger=min_rows,
            max_trigger_delay_s=_duration(opts, "maxTriggerDelay", 15 * 60.0),
            min_partitions=opts.integer("minPartitions", minimum=1),
            max_records_per_partition=opts.integer("maxRecordsPerPartition", minimum=1),
            fail_on_data_loss=opts.boolean("failOnDataLoss", True),
            include_headers=opts.boolean("includeHeaders", False),
            poll_timeout_ms=_int(opts, "kafkaConsumer.pollTimeoutMs", 120_000, 1),
            fetch_offset_num_retries=_int(opts, "fetchOffset.numRetries", 3, 0),
            fetch_offset_retry_interval_ms=_int(opts, "fetchOffset.retryIntervalMs", 1_000, 0),
            fetch_offset_refresh_interval_ms=_int(opts, "fetchOffset.refreshIntervalMs", 1_000, 0),
            commit_offsets_to_group=group,
            pipeline_id=pipeline_id,
            store=store,
            kafka=_parse_kafka(opts),
        )
        parsed._check_spec_topics()
        return parsed

    # --- mode checks ---------------------------------------------------------------

    def require_streaming(self) -> None:
        """Streaming needs a pipeline identity and a state store, and no ending offsets."""
        if self.ending is not None:
            raise ConfigError(
                self.ending.option,
                self.ending.describe(),
                "no ending offsets in a streaming query (endingOffsets, endingTimestamp and "
                "endingOffsetsByTimestamp are for batch reads only)",
                where=WHERE,
            )
        if self.pipeline_id is None:
            raise ConfigError(
                "pipeline.id", None, "a pipeline id (required for streaming reads)", where=WHERE
            )
        if self.store is None:
            raise ConfigError(
                "state.uri",
                None,
                "a store URI such as s3://bucket/prefix or file:///abs/path "
                "(required for streaming reads)",
                where=WHERE,
            )

    def require_batch(self) -> None:
        """Batch reads cannot start at latest nor end at earliest (as in Spark)."""
        start, end = self.batch_starting, self.batch_ending
        if start.kind == "latest" or (start.kind == "offsets" and LATEST in start.offsets.values()):
            raise ConfigError(
                start.option,
                start.describe(),
                "not 'latest' (nor -1) for a batch read: use earliest, offsets or a timestamp",
                where=WHERE,
            )
        if end.kind == "earliest" or (end.kind == "offsets" and EARLIEST in end.offsets.values()):
            raise ConfigError(
                end.option,
                end.describe(),
                "not 'earliest' (nor -2) for a batch read: use latest, offsets or a timestamp",
                where=WHERE,
            )
        if self.commit_offsets_to_group is not None:
            raise ConfigError(
                "commitOffsetsToGroup",
                self.commit_offsets_to_group,
                "to be set only for streaming queries",
                where=WHERE,
            )

    @property
    def streaming_starting(self) -> OffsetSpec:
        return self.starting or OffsetSpec("latest", "startingOffsets")

    @property
    def batch_starting(self) -> OffsetSpec:
        return self.starting or OffsetSpec("earliest", "startingOffsets")

    @property
    def batch_ending(self) -> OffsetSpec:
        return self.ending or OffsetSpec("latest", "endingOffsets")

    # --- kafka-python ----------------------------------------------------------------

    def consumer_config(self, **overrides: Any) -> dict[str, Any]:
        """Arguments for ``KafkaConsumer``: the user's ``kafka.*`` plus gtkafka's fixed ones.

        Timeouts default to the poll timeout so that an unreachable broker fails within it.
        """
        timeout = max(1_000, self.poll_timeout_ms)
        config: dict[str, Any] = {
            "client_id": f"gtkafka-{self.pipeline_id}" if self.pipeline_id else "gtkafka",
            "request_timeout_ms": timeout,
            "bootstrap_timeout_ms": timeout,
            "fetch_max_wait_ms": min(500, timeout // 2),
            "max_poll_records": 10_000,
        }
        config.update(self.kafka)
        config.update(
            bootstrap_servers=self.bootstrap_servers.split(","),
            group_id=None,
            enable_auto_commit=False,
            auto_offset_reset="none",
            allow_auto_create_topics=False,
        )
        config.update(overrides)
        return config

    def _check_spec_topics(self) -> None:
        """Topics named in offset JSON must be part of a subscribe/assign subscription."""
        for spec in (self.starting, self.ending):
            if spec is None or spec.kind not in ("offsets", "timestamps"):
                continue
            for topic, partition in spec.offsets:
                if not self.subscription.matches(topic):
                    raise ConfigError(
                        spec.option,
                        spec.describe(),
                        f"only topics of {self.subscription.describe()} "
                        f"(topic {topic!r} is not subscribed)",
                        where=WHERE,
                    )
                if self.subscription.kind == "assign":
                    assigned = dict(self.subscription.assignment)[topic]
                    if partition not in assigned:
                        raise ConfigError(
                            spec.option,
                            spec.describe(),
                            f"only assigned partitions ({topic}-{partition} is not assigned)",
                            where=WHERE,
                        )


# --- helpers -----------------------------------------------------------------------


def offsets_json(offsets: Mapping[tuple[str, int], int]) -> dict[str, dict[str, int]]:
    """``{topic: {str(partition): offset}}`` with keys inserted in sorted order."""
    nested: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in offsets.items():
        nested.setdefault(topic, {})[str(partition)] = offset
    return {t: dict(sorted(nested[t].items())) for t in sorted(nested)}


def parse_partition_json(
    value: str, *, option: str, form: str, minimum: int
) -> dict[tuple[str, int], int]:
    """``{"topic": {"0": n}}`` -> ``{(topic, 0): n}``; errors name the option and the form."""
    try:
        doc = json.loads(value)
    except json.JSONDecodeError as err:
        raise ConfigError(
            option, value, f"JSON like {form} ({err.msg} at {err.pos})", where=WHERE
        ) from None
    if not isinstance(doc, dict) or not doc:
        raise ConfigError(option, value, f"a non-empty JSON object like {form}", where=WHERE)
    result: dict[tuple[str, int], int] = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict) or not parts:
            raise ConfigError(
                option, value, f"a JSON object per topic like {form} (topic {topic!r})", where=WHERE
            )
        for p, n in parts.items():
            if not (isinstance(p, str) and p.isdigit()):
                raise ConfigError(
                    option, value, f"partition numbers as keys like {form} (got {p!r})", where=WHERE
                )
            if isinstance(n, bool) or not isinstance(n, int) or n < minimum:
                raise ConfigError(
                    option,
                    value,
                    f"integer values >= {minimum} like {form} (got {n!r} for {topic}-{p})",
                    where=WHERE,
                )
            result[(topic, int(p))] = n
    return result


def _parse_subscription(opts: Options) -> Subscription:
    which = opts.exactly_one_of("subscribe", "subscribePattern", "assign")
    value = opts.required(which)
    if which == "subscribe":
        topics = tuple(t.strip() for t in value.split(","))
        if any(not t for t in topics) or len(set(topics)) != len(topics):
            raise opts.error("subscribe", "a comma-separated list of distinct topic names")
        return Subscription("subscribe", topics=tuple(sorted(topics)))
    if which == "subscribePattern":
        try:
            re.compile(value)
        except re.error as err:
            raise opts.error("subscribePattern", f"a regular expression ({err})") from None
        return Subscription("subscribePattern", pattern=value)
    form = '{"topic": [0, 1]}'
    try:
        doc = json.loads(value)
    except json.JSONDecodeError as err:
        raise opts.error("assign", f"JSON like {form} ({err.msg} at {err.pos})") from None
    if not isinstance(doc, dict) or not doc:
        raise opts.error("assign", f"a non-empty JSON object like {form}")
    assignment = []
    for topic, parts in sorted(doc.items()):
        if (
            not isinstance(parts, list)
            or not parts
            or not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts)
            or len(set(parts)) != len(parts)
        ):
            raise opts.error(
                "assign", f"a list of distinct partition numbers per topic, like {form}"
            )
        assignment.append((topic, tuple(sorted(parts))))
    return Subscription("assign", assignment=tuple(assignment))


def _parse_spec(
    opts: Options, by_timestamp: str, timestamp: str, offsets: str
) -> OffsetSpec | None:
    """Spark's precedence: ``*ByTimestamp`` over ``*Timestamp`` over ``*Offsets``."""
    raw = opts.string(by_timestamp)
    if raw is not None:
        stamps = parse_partition_json(raw, option=by_timestamp, form=_TIMESTAMPS_FORM, minimum=0)
        return OffsetSpec("timestamps", by_timestamp, offsets=stamps)
    if opts.string(timestamp) is not None:
        ts = opts.integer(timestamp, minimum=0)
        assert ts is not None
        return OffsetSpec("timestamp", timestamp, timestamp=ts)
    raw = opts.string(offsets)
    if raw is None:
        return None
    low = raw.strip().lower()
    if low in ("earliest", "latest"):
        return OffsetSpec("earliest" if low == "earliest" else "latest", offsets)
    if not raw.lstrip().startswith("{"):
        raise opts.error(offsets, f"'earliest', 'latest' or JSON like {_OFFSETS_FORM}")
    parsed = parse_partition_json(raw, option=offsets, form=_OFFSETS_FORM, minimum=EARLIEST)
    return OffsetSpec("offsets", offsets, offsets=parsed)


def _int(opts: Options, name: str, default: int, minimum: int) -> int:
    value = opts.integer(name, default, minimum=minimum)
    assert value is not None
    return value


def _duration(opts: Options, name: str, default: float) -> float:
    value = opts.duration(name, default)
    assert value is not None
    return value


def _parse_kafka(opts: Options) -> dict[str, Any]:
    """``kafka.*`` options as kafka-python ``KafkaConsumer`` arguments."""
    from kafka import KafkaConsumer

    defaults: Mapping[str, Any] = KafkaConsumer.DEFAULT_CONFIG
    config: dict[str, Any] = {}
    unknown: list[str] = []
    for name, value in sorted(opts.with_prefix("kafka.").items()):
        if name == "bootstrap.servers":
            continue
        option = f"kafka.{name}"
        arg = _KAFKA_ALIASES.get(name, name.replace(".", "_").replace("-", "_"))
        if arg in REFUSED_KAFKA:
            raise ConfigError(option, value, f"not to be set: {REFUSED_KAFKA[arg]}", where=WHERE)
        if arg not in defaults:
            unknown.append(option)
            continue
        if arg in _NOT_SETTABLE:
            raise ConfigError(
                option,
                value,
                f"not to be set: kafka-python's {arg} takes a Python object",
                where=WHERE,
            )
        config[arg] = _kafka_value(option, arg, value, defaults[arg])
    if unknown:
        known = sorted(
            "kafka." + k.replace("_", ".")
            for k in defaults
            if k not in REFUSED_KAFKA and k not in _NOT_SETTABLE
        )
        raise UnknownOptionError(unknown, known, where=f"{WHERE} (kafka-python consumer settings)")
    return config


def _kafka_value(option: str, arg: str, value: str, default: Any) -> Any:
    kind = _NONE_DEFAULT_TYPES.get(arg) if default is None else type(default)
    text = value.strip()
    if kind is bool:
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise ConfigError(option, value, "true or false", where=WHERE)
    if kind is int:
        try:
            return int(text)
        except ValueError:
            raise ConfigError(option, value, "an integer", where=WHERE) from None
    if kind is float:
        try:
            return float(text)
        except ValueError:
            raise ConfigError(option, value, "a number", where=WHERE) from None
    if kind is tuple:
        try:
            return tuple(int(p) for p in text.split("."))
        except ValueError:
            raise ConfigError(
                option, value, "a broker version such as 2.8.0", where=WHERE
            ) from None
    return text
