"""Bad input that needs no server (the matrix is docs/bad-input.md).

Each test shows (1) the error names the option or server, the value and what was
expected, (2) it comes before anything is persisted, staged or delivered, and, where
data is involved, (3) that fixing the input and running again loses nothing.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from datasource.offset_reader import OffsetReader
from datasource.options import KafkaSourceOptions
from datasource.schema import source_schema
from datasource.source import GlobalTimeKafkaSource
from datasource.stream_reader import GlobalTimeKafkaStreamReader
from gtbarrier import SnapshotCoordinator
from sink import BarrierSink
from sink.consumers.kafka import kafka_kind
from state.errors import (
    ConfigError,
    DataLossError,
    FatalError,
    MalformedOffset,
    StoreConfigError,
)
from state.layout import PipelineLayout
from state.protocol.epoch_log import EpochLog
from state.stores import StateStore, open_store
from tests.sink_helpers import Pipeline, gt_batch, sink_options
from tests.source_fakes import FakeBroker, factory

BOOTSTRAP = "fake:9092"


def source_options(uri: str, **extra: str) -> KafkaSourceOptions:
    raw = {
        "kafka.bootstrap.servers": BOOTSTRAP,
        "subscribe": "t",
        "pipeline.id": "p",
        "state.uri": uri,
        "startingOffsets": "earliest",
        "fetchOffset.retryIntervalMs": "0",
        **extra,
    }
    return KafkaSourceOptions.parse({k: v for k, v in raw.items() if v})


def stream_reader(
    broker: FakeBroker, store: StateStore, **extra: str
) -> GlobalTimeKafkaStreamReader:
    options = source_options(store.uri, **extra)
    return GlobalTimeKafkaStreamReader(
        options,
        source_schema(False),
        offset_reader=OffsetReader(options, consumer_factory=factory(broker)),
        epoch_log=EpochLog(store, PipelineLayout("p")),
    )


@pytest.fixture
def broker() -> FakeBroker:
    """Topic ``t``: partition 0 holds offsets [20, 50) (retention removed 0-19), 1 is empty."""
    b = FakeBroker(tansu=True)
    b.create("t", 2)
    b.produce("t", 0, 50, batch=10)  # Tansu's ListOffsets says 41: the source must not trust it
    b.delete_before("t", 0, 20)
    return b


def memory_store() -> StateStore:
    return open_store(f"memory://bad-{uuid.uuid4().hex}")


# --- the source: a bad start leaves no trace --------------------------------------------


@pytest.mark.parametrize(
    ("extra", "error", "option", "says"),
    [
        pytest.param(
            {"subscribe": "t,nope"},
            ConfigError,
            "subscribe",
            "'nope' does not exist on Kafka at fake:9092",
            id="S09-nonexistent-topic",
        ),
        pytest.param(
            {"startingOffsets": '{"t": {"0": 25}}'},
            ConfigError,
            "startingOffsets",
            "a value for every partition of the subscription",
            id="S10-json-misses-partition",
        ),
        pytest.param(
            {"startingOffsets": '{"t": {"0": 51, "1": 0}}'},
            ConfigError,
            "startingOffsets",
            "t-0 = 51 > end 50",
            id="S11-json-past-the-end",
        ),
        pytest.param(
            {"startingOffsets": '{"t": {"0": 5, "1": 0}}'},
            DataLossError,
            "startingOffsets",
            "t-0 = 5 < log start 20",
            id="S12-json-below-log-start",
        ),
        pytest.param(
            {"startingOffsets": "", "startingTimestamp": "999999999999"},
            ConfigError,
            "startingTimestamp",
            "no record of t-0, t-1 is that late",
            id="S13-timestamp-too-late",
        ),
    ],
)
def test_bad_start_fails_before_the_start_is_persisted(
    broker: FakeBroker, extra: dict[str, str], error: type[Exception], option: str, says: str
) -> None:
    store = memory_store()
    with pytest.raises(error) as info:
        stream_reader(broker, store, **extra).initialOffset()
    text = str(info.value)
    assert option in text and says in text
    if isinstance(info.value, ConfigError):
        assert info.value.option == option
    assert store.list() == []  # no start, no epoch: fixing the option and restarting works


def test_starting_offsets_fixed_after_the_error_start_where_asked(broker: FakeBroker) -> None:
    store = memory_store()
    with pytest.raises(ConfigError):
        stream_reader(broker, store, startingOffsets='{"t": {"0": 500, "1": 0}}').initialOffset()
    start = stream_reader(broker, store, startingOffsets='{"t": {"0": 30, "1": 0}}').initialOffset()
    assert start == {"epoch": 0, "offsets": {"t": {"0": 30, "1": 0}}}
    # the end itself is a valid start (nothing to read yet), as -1 would be
    store = memory_store()
    start = stream_reader(broker, store, startingOffsets='{"t": {"0": 50, "1": 0}}').initialOffset()
    assert start["offsets"] == {"t": {"0": 50, "1": 0}}


def test_start_below_the_log_start_with_fail_on_data_loss_false_warns_and_reads_on(
    broker: FakeBroker, caplog: pytest.LogCaptureFixture
) -> None:
    store = memory_store()
    reader = stream_reader(
        broker, store, startingOffsets='{"t": {"0": 5, "1": 0}}', failOnDataLoss="false"
    )
    start = reader.initialOffset()
    assert "t-0 = 5 < log start 20" in caplog.text and "failOnDataLoss=false" in caplog.text
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end["offsets"] == {"t": {"0": 50, "1": 0}}  # the lost 5..19 are skipped by read()
    assert reader.lost_events == 1


@pytest.mark.parametrize(
    "offset",
    [1, {"t": {"0": 5}}, {"0": 5}, {"epoch": "x", "offsets": {}}],
    ids=["rate-source", "kafka-source", "kafka-source-v2", "bad-epoch"],
)
def test_checkpoint_of_another_source_names_the_checkpoint(broker: FakeBroker, offset: Any) -> None:
    store = memory_store()
    reader = stream_reader(broker, store)
    with pytest.raises(MalformedOffset) as info:
        reader.latestOffset(offset, ReadAllAvailable())
    assert "checkpointLocation" in str(info.value) and repr(offset) in str(info.value)
    assert "new checkpointLocation" in str(info.value)
    with pytest.raises(MalformedOffset):
        reader.partitions(offset, {"epoch": 1, "offsets": {"t": {"0": 50}}})
    assert store.list() == []


def test_user_specified_schema_that_is_not_some_of_the_columns_is_refused_naming_them() -> None:
    src = GlobalTimeKafkaSource({"kafka.bootstrap.servers": BOOTSTRAP, "subscribe": "t"})

    def refused(*fields: tuple[str, Any]) -> str:
        schema = StructType([StructField(name, dtype) for name, dtype in fields])
        texts = set()
        for make in (src.streamReader, src.reader):
            with pytest.raises(ConfigError) as info:
                make(schema)
            assert info.value.option == "schema"
            texts.add(str(info.value))
        (text,) = texts
        assert "value binary" in text and "gt struct<epoch:bigint" in text
        return text

    assert "'value' as value binary" in refused(("value", StringType()))
    assert "'vlaue' is not a column" in refused(("offset", LongType()), ("vlaue", BinaryType()))
    assert "'offset' named twice" in refused(("offset", LongType()), ("offset", LongType()))
    assert "at least one column" in refused()
    assert "includeHeaders=true" in refused(("headers", ArrayType(IntegerType())))


# --- every component names a state.uri it cannot use -------------------------------------


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("s3a:///state", "s3a://bucket[/prefix] with a bucket name"),
        ("s3n://bucket/state", "s3://bucket[/prefix] (or s3a://)"),
        ("hdfs:///state", "file:///absolute/path"),
        ("abfss://c@acct.dfs.core.windows.net/state", "az://container[/prefix]"),
        ("/var/lib/state", "file:///absolute/path"),
        ("file://relative/state", "file:///absolute/path (three slashes)"),
    ],
)
def test_unsupported_state_uri_is_named_by_source_sink_and_coordinator(
    uri: str, expected: str, tmp_path: Path
) -> None:
    attempts: list[tuple[str, Any]] = [
        (
            "state.uri",
            lambda: GlobalTimeKafkaSource(
                {
                    "kafka.bootstrap.servers": BOOTSTRAP,
                    "subscribe": "t",
                    "pipeline.id": "p",
                    "state.uri": uri,
                }
            ),
        ),
        (
            "state.uri",
            lambda: BarrierSink(
                {"pipeline.id": "p", "state.uri": uri, "consumer.path": str(tmp_path / "out")}
            ),
        ),
        ("state_uri", lambda: SnapshotCoordinator(None, "p", uri, tmp_path / "cp")),
    ]
    for option, make in attempts:
        with pytest.raises(StoreConfigError) as info:
            make()
        assert info.value.option == option
        assert repr(uri) in str(info.value) and expected in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_file_state_root_that_cannot_be_a_directory_is_named(
    broker: FakeBroker, tmp_path: Path
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    uri = f"file://{blocker}/state"
    with pytest.raises(StoreConfigError) as info:
        stream_reader(broker, open_store(uri)).initialOffset()
    assert info.value.option == "state.uri" and repr(uri) in str(info.value)
    assert f"{blocker} is a file" in str(info.value)
    coord = SnapshotCoordinator(None, "p", uri, tmp_path / "cp")
    with pytest.raises(StoreConfigError, match=f"{blocker} is a file"):
        coord.recover()
    coord.close()
    assert blocker.read_text() == "not a directory"


# --- the sink -------------------------------------------------------------------------------


KAFKA_SINK = {
    "pipeline.id": "p",
    "state.uri": "memory://kafka-sink",
    "consumer": "kafka",
    "consumer.kafka.bootstrap.servers": BOOTSTRAP,
    "consumer.topic": "out",
}


def _schema(**columns: Any) -> StructType:
    return StructType([StructField(name, dtype) for name, dtype in columns.items()])


@pytest.mark.parametrize(
    ("schema", "column", "shown"),
    [
        (
            _schema(key=BinaryType(), payload=LongType()),
            "value",
            "<missing> (columns: key, payload)",
        ),
        (_schema(value=LongType()), "value", "bigint"),
        (_schema(value=BinaryType(), key=IntegerType()), "key", "int"),
        (_schema(value=BinaryType(), partition=LongType()), "partition", "bigint"),
        (_schema(value=BinaryType(), headers=ArrayType(StringType())), "headers", "array<string>"),
    ],
)
def test_kafka_consumer_input_shape_is_checked_at_planning(
    schema: StructType, column: str, shown: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before the fix a bundle without ``value`` was recorded in flight and then failed in
    ``deliver()``; the fixed query found it still in flight and failed again, forever."""
    # With a partition column the start check asks the cluster how many partitions the
    # topic has (for row validation): answered here without a server.
    monkeypatch.setattr(kafka_kind, "topic_partitions", lambda settings, timeout: 3)
    with pytest.raises(ConfigError) as info:
        BarrierSink(dict(KAFKA_SINK)).streamWriter(schema, False)
    assert info.value.option == column and shown in str(info.value)
    assert "consumer=kafka" in str(info.value)
    good = _schema(
        key=StringType(),
        value=BinaryType(),
        partition=IntegerType(),
        headers=ArrayType(_schema(key=StringType(), value=BinaryType())),
    )
    BarrierSink(dict(KAFKA_SINK)).streamWriter(good, False)


def test_pipeline_id_mismatch_fails_the_commit_and_delivers_nothing() -> None:
    """The sink reads the batch's epoch under its own pipeline.id; the source wrote it under
    another one. (The real query: integration_tests/test_bad_input_matrix.py.)"""
    p = Pipeline(sink_options(**{"pipeline.id": "sink-side"}))
    msgs = [p.write(0, [gt_batch(1, 0, [0, 1, 2])])]  # no batch record under 'sink-side'
    with pytest.raises(FatalError) as info:
        p.barrier().commit(msgs, 0)
    text = str(info.value)
    assert "pipeline.id='sink-side'" in text and f"state.uri='{p.store.uri}'" in text
    assert p.consumer.delivered == []
    assert p.store.get_or_none(p.layout.barrier_state) is None  # nothing claimed or in flight
    p.barrier().abort(msgs, 0)  # Spark aborts the failed batch
    assert p.staged() == []


# --- the coordinator -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kwargs", "argument", "says"),
    [
        ({"zookeeper_hosts": "127.0.0.1:2181/a/../b"}, "zookeeper_hosts", "without '.' or '..'"),
        ({"zookeeper_hosts": "127.0.0.1:2181/./b"}, "zookeeper_hosts", "without '.' or '..'"),
        ({"checkpoint_location": "FILE"}, "checkpoint_location", "is a file"),
        ({"checkpoint_location": "FILE/sub"}, "checkpoint_location", "is a file"),
        ({"checkpoint_location": "s3a://bucket/cp"}, "checkpoint_location", "a local directory"),
    ],
)
def test_coordinator_arguments_beyond_the_existing_table(
    kwargs: dict[str, Any], argument: str, says: str, tmp_path: Path
) -> None:
    """Complements tests/test_coordinator_snapshots.py::test_arguments_are_validated."""
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    args: dict[str, Any] = {"state_uri": "memory://coord-args", "checkpoint_location": tmp_path}
    args.update({k: v.replace("FILE", str(blocker)) for k, v in kwargs.items()})
    with pytest.raises(ConfigError) as info:
        SnapshotCoordinator(None, "p1", **args)
    assert info.value.option == argument and says in str(info.value)
    assert repr(info.value.value) in str(info.value)


def test_recover_mode_is_checked(tmp_path: Path) -> None:
    coord = SnapshotCoordinator(None, "p1", "memory://coord-mode", tmp_path / "cp")
    with pytest.raises(ConfigError) as info:
        coord.recover(mode="rewind")
    assert info.value.option == "mode" and "'restore' or 'replay'" in str(info.value)
    assert coord.store.list() == []  # no fencing token taken
    coord.close()
