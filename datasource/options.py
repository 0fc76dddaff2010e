"""The options of the ``gtkafka`` source: one declarative table, parsed once into
:class:`KafkaSourceOptions`.

Names follow Spark's own Kafka source (case-insensitive). :data:`SOURCE_OPTIONS` lists
every option with its type, default and doc; the unknown-option check, the typed reading
and the option tables of README.md and docs/source.md come from it. Everything that can
be checked without a broker is checked here, in the ``DataSource`` constructor, so a bad
option fails at ``load()``. Checks that depend on the mode (streaming or batch) run in
:meth:`KafkaSourceOptions.require_streaming` / :meth:`KafkaSourceOptions.require_batch`,
called from ``streamReader()`` / ``reader()``. ``kafka.*`` options go to kafka-python
(:mod:`datasource.kafka_settings`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from datasource.kafka_settings import NO_GROUP, consumer_settings
from datasource.subscription import (
    EARLIEST,
    LATEST,
    WHERE,
    OffsetSpec,
    Subscription,
    parse_spec,
    parse_subscription,
)
from state.errors import ConfigError
from state.kafka_settings import resolve_secrets
from state.layout import validate_pipeline_id
from state.option_table import (
    BooleanOption,
    ChoiceOption,
    DurationOption,
    IntegerOption,
    JsonOption,
    OptionTable,
    PrefixOption,
    Shared,
    StringOption,
)
from state.options import Options
from state.stores.state_store import AZURE_OPTIONS, GCS_OPTIONS, S3_OPTIONS, StoreConfig

TimestampStrategy = Literal["error", "latest"]
ReadClient = Literal["kafka-python", "confluent"]
ReadMode = Literal["executors", "driver"]

# --- the option table ------------------------------------------------------------------

_ONE_SUBSCRIPTION = "exactly one of `subscribe`, `subscribePattern`, `assign`"
_STREAMING = "required for streaming"
_SEE_STORES = "see docs/state-stores.md"

BOOTSTRAP_SERVERS = StringOption(
    name="kafka.bootstrap.servers", required=True, doc="`host:port[,host:port]`"
)
SUBSCRIBE = StringOption(
    name="subscribe", default_doc=_ONE_SUBSCRIPTION, doc="a comma list of topics"
)
SUBSCRIBE_PATTERN = StringOption(
    name="subscribePattern",
    default_doc=_ONE_SUBSCRIPTION,
    doc="a regex matched against whole topic names",
)
ASSIGN = JsonOption(name="assign", default_doc=_ONE_SUBSCRIPTION, doc='JSON `{"topic": [0, 1]}`')
STARTING_OFFSETS = JsonOption(
    name="startingOffsets",
    default_doc="`latest` (streaming), `earliest` (batch)",
    doc='`earliest`, `latest`, or JSON `{"topic": {"0": 42, "1": -2}}` (-2 earliest, '
    "-1 latest) naming every partition; resolved once and persisted",
)
STARTING_TIMESTAMP = IntegerOption(
    name="startingTimestamp",
    default=None,
    minimum=0,
    doc="ms since the epoch, for every partition",
)
STARTING_BY_TIMESTAMP = JsonOption(
    name="startingOffsetsByTimestamp",
    doc='JSON `{"topic": {"0": 1700000000000}}` naming every partition',
)
STARTING_BY_TIMESTAMP_STRATEGY = ChoiceOption[TimestampStrategy](
    name="startingOffsetsByTimestampStrategy",
    choices=("error", "latest"),
    default="error",
    doc="`error` or `latest`: what a partition with no record at or after the timestamp does",
)
ENDING_OFFSETS = JsonOption(
    name="endingOffsets",
    default_doc="`latest`",
    doc="batch only: `latest` or JSON (-1 latest)",
)
ENDING_TIMESTAMP = IntegerOption(
    name="endingTimestamp",
    default=None,
    minimum=0,
    doc="batch only: ms since the epoch; a partition with no such record ends at latest",
)
ENDING_BY_TIMESTAMP = JsonOption(
    name="endingOffsetsByTimestamp",
    doc="batch only: JSON like `startingOffsetsByTimestamp`; a partition with no such record "
    "ends at latest",
)
MAX_OFFSETS_PER_TRIGGER = IntegerOption(
    name="maxOffsetsPerTrigger",
    default=None,
    minimum=1,
    doc="at most this many records per batch, split across partitions in proportion to "
    "their backlog",
)
MIN_OFFSETS_PER_TRIGGER = IntegerOption(
    name="minOffsetsPerTrigger",
    default=None,
    minimum=1,
    doc="wait for this many records before a batch ...",
)
MAX_TRIGGER_DELAY = DurationOption(
    name="maxTriggerDelay",
    default=15 * 60.0,
    requires="minOffsetsPerTrigger",
    doc="... but no longer than this (`30s`, `5m`; only with `minOffsetsPerTrigger`)",
)
MIN_PARTITIONS = IntegerOption(
    name="minPartitions",
    default=None,
    minimum=1,
    doc="split ranges so that a batch has at least this many Spark partitions",
)
MAX_RECORDS_PER_PARTITION = IntegerOption(
    name="maxRecordsPerPartition",
    default=None,
    minimum=1,
    doc="split ranges longer than this",
)
MIN_RECORDS_PER_TASK = IntegerOption(
    name="minRecordsPerTask",
    default=10_000,
    minimum=0,
    doc="pack consecutive smaller ranges into one task (one after another, one consumer at "
    "a time) until it has this many records; `0`: a task per range; `minPartitions` and "
    "`maxRecordsPerPartition` win",
)
FAIL_ON_DATA_LOSS = BooleanOption(
    name="failOnDataLoss",
    default=True,
    doc="fail on records lost to retention, vanished or recreated partitions, or a topic "
    "recreated since the epoch a task reads was planned; `false`: warn, skip and count",
)
INCLUDE_HEADERS = BooleanOption(
    name="includeHeaders", default=False, doc="add the `headers` column"
)
POLL_TIMEOUT_MS = IntegerOption(
    name="kafkaConsumer.pollTimeoutMs",
    default=120_000,
    minimum=1,
    doc="an executor read that makes no progress for this long fails; bounds every "
    "driver-side call to the broker too",
)
CLIENT = ChoiceOption[ReadClient](
    name="kafkaConsumer.client",
    choices=("kafka-python", "confluent"),
    default="kafka-python",
    doc="the executors' read client: `confluent` reads with librdkafka (the confluent-kafka "
    "package, `pip install 'gtbarrier[fast]'`), which creates a consumer in a twentieth of "
    "the time; `kafka.*` settings without a librdkafka equivalent, and `includeHeaders`, are "
    "refused with it; see docs/source.md for its limits. "
    "The driver reads offsets and commits to groups with kafka-python either way",
)
READ_MODE = ChoiceOption[ReadMode](
    name="readMode",
    choices=("executors", "driver"),
    default="executors",
    doc="where a streaming query reads Kafka: `executors` in Python read tasks; `driver` on "
    "the driver through Spark's simple stream reader, below Spark's Python-worker floor for "
    "small batches (every record passes through the driver; the read limits are the "
    "reader's own; the sink needs writeStream option `checkpointLocation` on a local path; "
    "see docs/source.md)",
)
POOL_ENABLED = BooleanOption(
    name="kafkaConsumer.pool.enabled",
    default=True,
    doc="keep executor consumers in a pool of each Python worker between tasks (keyed by "
    "cluster, configuration and partition); `false`: a consumer per task",
)
POOL_CAPACITY = IntegerOption(
    name="kafkaConsumer.pool.capacity",
    default=64,
    minimum=1,
    doc="at most this many pooled consumers per Python worker (least recently used closed first)",
)
POOL_IDLE_TIMEOUT = DurationOption(
    name="kafkaConsumer.pool.idleTimeout",
    default=300.0,
    positive=True,
    doc="a pooled consumer unused for this long is closed",
)
FETCH_OFFSET_NUM_RETRIES = IntegerOption(
    name="fetchOffset.numRetries",
    default=3,
    minimum=0,
    doc="retries of a driver-side broker call",
)
FETCH_OFFSET_RETRY_INTERVAL_MS = IntegerOption(
    name="fetchOffset.retryIntervalMs",
    default=1_000,
    minimum=0,
    doc="pause between those retries",
)
FETCH_OFFSET_REFRESH_INTERVAL_MS = IntegerOption(
    name="fetchOffset.refreshIntervalMs",
    default=1_000,
    minimum=0,
    doc="gtkafka: how long latest offsets are cached on the driver while a query is idle "
    "(Spark polls an idle source every ~10 ms): the longest a new record waits to be noticed "
    "then. The call after a planned epoch or a pause (a processing-time trigger) asks the "
    "broker again",
)
COMMIT_OFFSETS_TO_GROUP = StringOption(
    name="commitOffsetsToGroup",
    doc="gtkafka: after each batch, commit its end offsets to this consumer group (for lag "
    "tools; never read back)",
)
PIPELINE_ID = StringOption(
    name="pipeline.id",
    default_doc=_STREAMING,
    doc="the pipeline's identity, shared with the sink and the coordinator",
)
STATE_URI = StringOption(
    name="state.uri",
    default_doc=_STREAMING,
    doc="`s3://bucket/prefix` (or `s3a://`), `file:///abs/path` or `memory://name` (single process "
    "only)",
)
EPOCHS_RETAINED = IntegerOption(
    name="state.epochsRetained",
    default=1_000,
    minimum=1,
    doc="epochs kept below the barrier's progress (`GT_last`, or a later epoch whose bundle "
    "was empty), its in-flight bundle and the epoch the query reads next; older epochs "
    "and the batch records that read them are pruned by the driver after a batch's commit, "
    "a quarter of this at a time. A query on a new checkpoint then cannot replay from the "
    "start: see `state.startAtFloor`. Pipelines run by the snapshot coordinator are pruned "
    "by it instead. The epochs kept are compacted into a few dozen objects whatever this is",
)
START_AT_FLOOR = BooleanOption(
    name="state.startAtFloor",
    default=False,
    doc="a query on a new checkpoint of a pipeline whose first epochs were pruned starts at "
    "the oldest epoch kept (the barrier drops what the consumer already has; a stateful "
    "query builds its state from there); `false`: it is refused, naming that epoch",
)
KAFKA = PrefixOption(
    name="kafka.",
    doc="kafka-python consumer settings (dots become underscores); `kafka.auto.offset.reset`, "
    "`kafka.enable.auto.commit`, the deserializers and `kafka.group.id` are refused; Java-only "
    "settings (JKS stores) with what to use instead (docs/migrating.md); SASL OAUTHBEARER "
    "takes `kafka.sasl.oauth.token.provider=module:callable`, and "
    "`kafka.sasl.mechanism=AWS_MSK_IAM` (with `kafka.sasl.aws.region`) is OAUTHBEARER with "
    "Amazon MSK's IAM tokens (docs/security.md)",
)

SOURCE_OPTIONS = OptionTable(
    WHERE,
    (
        BOOTSTRAP_SERVERS,
        SUBSCRIBE,
        SUBSCRIBE_PATTERN,
        ASSIGN,
        STARTING_OFFSETS,
        STARTING_TIMESTAMP,
        STARTING_BY_TIMESTAMP,
        STARTING_BY_TIMESTAMP_STRATEGY,
        ENDING_OFFSETS,
        ENDING_TIMESTAMP,
        ENDING_BY_TIMESTAMP,
        MAX_OFFSETS_PER_TRIGGER,
        MIN_OFFSETS_PER_TRIGGER,
        MAX_TRIGGER_DELAY,
        MIN_PARTITIONS,
        MAX_RECORDS_PER_PARTITION,
        MIN_RECORDS_PER_TASK,
        FAIL_ON_DATA_LOSS,
        INCLUDE_HEADERS,
        POLL_TIMEOUT_MS,
        CLIENT,
        READ_MODE,
        POOL_ENABLED,
        POOL_CAPACITY,
        POOL_IDLE_TIMEOUT,
        FETCH_OFFSET_NUM_RETRIES,
        FETCH_OFFSET_RETRY_INTERVAL_MS,
        FETCH_OFFSET_REFRESH_INTERVAL_MS,
        COMMIT_OFFSETS_TO_GROUP,
        PIPELINE_ID,
        STATE_URI,
        EPOCHS_RETAINED,
        START_AT_FLOOR,
        Shared(S3_OPTIONS, default_doc=_SEE_STORES, doc="S3 settings of the state store"),
        Shared(GCS_OPTIONS, default_doc=_SEE_STORES, doc="GCS settings of the state store"),
        Shared(AZURE_OPTIONS, default_doc=_SEE_STORES, doc="Azure settings of the state store"),
        KAFKA,
    ),
)

SPARK_REFUSED = {"groupIdPrefix": NO_GROUP}
"""Options of Spark's Kafka source that gtkafka refuses, with why (docs/migrating.md)."""

_BOOTSTRAP = re.compile(r"\s*[^\s,:]+:\d{1,5}\s*(,\s*[^\s,:]+:\d{1,5}\s*)*")


@dataclass(frozen=True)
class KafkaSourceOptions:
    """Every option of ``gtkafka``, typed. Small and picklable (travels to executors)."""

    bootstrap_servers: str
    subscription: Subscription
    starting: OffsetSpec | None
    ending: OffsetSpec | None
    starting_by_timestamp_strategy: TimestampStrategy = "error"
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_s: float = 15 * 60.0
    min_partitions: int | None = None
    max_records_per_partition: int | None = None
    min_records_per_task: int = 10_000
    fail_on_data_loss: bool = True
    include_headers: bool = False
    poll_timeout_ms: int = 120_000
    client: ReadClient = "kafka-python"
    read_mode: ReadMode = "executors"
    pool_enabled: bool = True
    pool_capacity: int = 64
    pool_idle_timeout_s: float = 300.0
    fetch_offset_num_retries: int = 3
    fetch_offset_retry_interval_ms: int = 1_000
    fetch_offset_refresh_interval_ms: int = 1_000
    commit_offsets_to_group: str | None = None
    pipeline_id: str | None = None
    store: StoreConfig | None = None
    epochs_retained: int = 1_000
    start_at_floor: bool = False
    kafka: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def parse(cls, raw: Mapping[str, str]) -> KafkaSourceOptions:
        """Parse and check every option; :class:`ConfigError` names the first bad one."""
        opts = Options(dict(raw), where=WHERE)
        for name, why in SPARK_REFUSED.items():
            if name in opts:
                raise opts.error(name, f"not to be set: {why}")
        SOURCE_OPTIONS.check_known(opts)

        bootstrap = BOOTSTRAP_SERVERS.read_required(opts)
        if not _BOOTSTRAP.fullmatch(bootstrap):
            raise opts.error(BOOTSTRAP_SERVERS.name, "a comma-separated list of host:port")

        min_rows = MIN_OFFSETS_PER_TRIGGER.read(opts)
        max_rows = MAX_OFFSETS_PER_TRIGGER.read(opts)
        if min_rows is not None and max_rows is not None and min_rows > max_rows:
            raise opts.error(
                MIN_OFFSETS_PER_TRIGGER.name,
                f"an integer <= maxOffsetsPerTrigger ({max_rows})",
            )
        SOURCE_OPTIONS.check_requires(opts)

        pipeline_id = PIPELINE_ID.read(opts)
        if pipeline_id is not None:
            validate_pipeline_id(pipeline_id, where=WHERE)
        store = None
        if STATE_URI.is_set(opts):
            store = StoreConfig.from_options(opts)
        elif any(o in opts for o in StoreConfig.OPTIONS):
            present = [o for o in StoreConfig.OPTIONS if o in opts]
            raise opts.error(STATE_URI.name, f"a store URI, because {', '.join(present)} is set")

        client = CLIENT.read(opts)
        kafka = consumer_settings(opts)
        if client == "confluent":
            from datasource.librdkafka_consumer import check_settings

            check_settings(
                kafka, headers=INCLUDE_HEADERS.read(opts), where=WHERE, option=CLIENT.name
            )
        group = COMMIT_OFFSETS_TO_GROUP.read(opts)
        strategy = STARTING_BY_TIMESTAMP_STRATEGY.read(opts)
        parsed = cls(
            bootstrap_servers=",".join(s.strip() for s in bootstrap.split(",")),
            subscription=parse_subscription(opts, SUBSCRIBE, SUBSCRIBE_PATTERN, ASSIGN),
            starting=parse_spec(opts, STARTING_BY_TIMESTAMP, STARTING_TIMESTAMP, STARTING_OFFSETS),
            ending=parse_spec(opts, ENDING_BY_TIMESTAMP, ENDING_TIMESTAMP, ENDING_OFFSETS),
            starting_by_timestamp_strategy=strategy,
            max_offsets_per_trigger=max_rows,
            min_offsets_per_trigger=min_rows,
            max_trigger_delay_s=MAX_TRIGGER_DELAY.read(opts),
            min_partitions=MIN_PARTITIONS.read(opts),
            max_records_per_partition=MAX_RECORDS_PER_PARTITION.read(opts),
            min_records_per_task=MIN_RECORDS_PER_TASK.read(opts),
            fail_on_data_loss=FAIL_ON_DATA_LOSS.read(opts),
            include_headers=INCLUDE_HEADERS.read(opts),
            poll_timeout_ms=POLL_TIMEOUT_MS.read(opts),
            client=client,
            read_mode=READ_MODE.read(opts),
            pool_enabled=POOL_ENABLED.read(opts),
            pool_capacity=POOL_CAPACITY.read(opts),
            pool_idle_timeout_s=POOL_IDLE_TIMEOUT.read(opts),
            fetch_offset_num_retries=FETCH_OFFSET_NUM_RETRIES.read(opts),
            fetch_offset_retry_interval_ms=FETCH_OFFSET_RETRY_INTERVAL_MS.read(opts),
            fetch_offset_refresh_interval_ms=FETCH_OFFSET_REFRESH_INTERVAL_MS.read(opts),
            commit_offsets_to_group=group,
            pipeline_id=pipeline_id,
            store=store,
            epochs_retained=EPOCHS_RETAINED.read(opts),
            start_at_floor=START_AT_FLOOR.read(opts),
            kafka=kafka,
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
        config.update(resolve_secrets(self.kafka, WHERE))  # the secrets, only here
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
