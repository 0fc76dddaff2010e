"""consumer=delta without servers: options, the start check, validation, and the consumer
under the real barrier protocol on a ``file://`` Delta table (the real ``deltalake``)."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("deltalake")

from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake
from pyspark.sql.types import (
    BinaryType,
    DayTimeIntervalType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from sink.bundle import Bundle
from sink.consumers import open_consumer
from sink.consumers.delta.delta_consumer import DeltaConsumer
from sink.consumers.delta.delta_kind import DELTA
from sink.consumers.delta.delta_options import DeltaSettings
from sink.faults import FaultInjector, InjectedFault
from sink.options import SinkOptions
from state.errors import CommitFailed, CommitStateUnknown, ConfigError
from tests.sink_helpers import Pipeline, gt_batch

GT = StructType(
    [
        StructField("epoch", LongType(), False),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("offset", LongType(), False),
    ]
)
SCHEMA = StructType([StructField("value", BinaryType()), StructField("gt", GT, False)])


def raw_options(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "pipeline.id": "p1",
        "state.uri": f"memory://{tmp_path.name}",
        "consumer": "delta",
        "consumer.delta.uri": f"file://{tmp_path}/table",
        **extra,
    }


def settings(tmp_path: Path, **extra: str) -> DeltaSettings:
    return DELTA.settings(SinkOptions.parse(raw_options(tmp_path, **extra)))


# --- options ---------------------------------------------------------------------------


def test_options_parse_uri_mode_keys_and_storage(tmp_path: Path) -> None:
    opts = SinkOptions.parse(
        raw_options(
            tmp_path,
            **{
                "consumer.delta.uri": "s3://bucket/tables/events",
                "consumer.delta.mode": "merge",
                "consumer.delta.keyColumns": "key, region",
                "consumer.delta.storage.AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
                "consumer.delta.storage.aws_secret_access_key": "${env:DELTA_SECRET}",
                "consumer.delta.createTable": "false",
            },
        )
    )
    s = DELTA.settings(opts)
    assert s.uri == "s3://bucket/tables/events"
    assert (s.mode, s.key_columns, s.create_table) == ("merge", ("key", "region"), False)
    assert dict(s.storage) == {
        "AWS_ENDPOINT_URL": "http://127.0.0.1:9000",
        "AWS_SECRET_ACCESS_KEY": "${env:DELTA_SECRET}",
    }
    assert "DELTA_SECRET" not in repr(s)  # storage options stay out of the repr
    assert hash(s) == hash(s)
    assert pickle.loads(pickle.dumps(opts)) == opts


def test_an_absolute_path_is_read_as_a_file_uri(tmp_path: Path) -> None:
    s = settings(tmp_path, **{"consumer.delta.uri": f"{tmp_path}/t/../table"})
    assert s.uri == f"file://{tmp_path}/table"


@pytest.mark.parametrize(
    ("extra", "option", "expected"),
    [
        ({"consumer.delta.uri": "relative/dir"}, "consumer.delta.uri", "file:///absolute"),
        ({"consumer.delta.uri": "gs://b/t"}, "consumer.delta.uri", "s3://bucket/prefix"),
        ({"consumer.delta.uri": "s3://"}, "consumer.delta.uri", "s3://bucket/prefix"),
        ({"consumer.delta.mode": "merge"}, "consumer.delta.keyColumns", "key columns"),
        ({"consumer.delta.keyColumns": "k"}, "consumer.delta.keyColumns", "mode=append"),
        (
            {"consumer.delta.mode": "merge", "consumer.delta.keyColumns": "k,,j"},
            "consumer.delta.keyColumns",
            "distinct column names",
        ),
        ({"consumer.delta.mode": "upsert"}, "consumer.delta.mode", "append"),
        ({"consumer.delta.createTable": "maybe"}, "consumer.delta.createTable", "true"),
    ],
)
def test_bad_options_are_named(
    tmp_path: Path, extra: dict[str, str], option: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as err:
        SinkOptions.parse(raw_options(tmp_path, **extra))
    assert option in str(err.value) and expected in str(err.value)


def test_the_uri_is_required(tmp_path: Path) -> None:
    raw = raw_options(tmp_path)
    del raw["consumer.delta.uri"]
    with pytest.raises(ConfigError, match=r"consumer\.delta\.uri"):
        SinkOptions.parse(raw)


def test_delta_options_only_with_consumer_delta(tmp_path: Path) -> None:
    raw = raw_options(tmp_path, consumer="file", **{"consumer.path": str(tmp_path / "out")})
    with pytest.raises(ConfigError, match=r"consumer\.delta\.uri.*applies to consumer=delta"):
        SinkOptions.parse(raw)


# --- the start check ---------------------------------------------------------------------


def started(tmp_path: Path, schema: StructType = SCHEMA, **extra: str) -> SinkOptions:
    return SinkOptions.parse(raw_options(tmp_path, **extra)).check_at_start(schema)


def started_with(tmp_path: Path, extra: dict[str, str]) -> SinkOptions:
    return started(tmp_path, SCHEMA, **extra)


def test_the_start_check_creates_the_table_from_the_input(tmp_path: Path) -> None:
    started(tmp_path)
    table = DeltaTable(f"file://{tmp_path}/table")
    assert [f.name for f in table.schema().fields] == ["value", "gt"]
    assert table.transaction_version("p1") is None


def test_a_missing_table_without_create_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="an existing Delta table"):
        started_with(tmp_path, {"consumer.delta.createTable": "false"})


def test_a_column_delta_cannot_store_is_named(tmp_path: Path) -> None:
    schema = StructType([*SCHEMA.fields, StructField("wait", DayTimeIntervalType())])
    with pytest.raises(ConfigError) as err:
        started(tmp_path, schema)
    assert "consumer.delta.uri" in str(err.value) and "'wait'" in str(err.value)


def user_table(tmp_path: Path, schema: pa.Schema) -> str:
    uri = f"file://{tmp_path}/table"
    (tmp_path / "table").mkdir(exist_ok=True)
    DeltaTable.create(uri, schema)
    return uri


GT_ARROW = pa.struct(
    [
        pa.field("epoch", pa.int64()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
    ]
)


@pytest.mark.parametrize(
    ("columns", "named", "expected"),
    [
        ([pa.field("value", pa.string()), pa.field("gt", GT_ARROW)], "'value'", "binary"),
        ([pa.field("gt", GT_ARROW)], "'value'", "not in the table"),
        (
            [
                pa.field("value", pa.binary()),
                pa.field("gt", GT_ARROW),
                pa.field("owner", pa.string(), nullable=False),
            ],
            "'owner'",
            "NOT NULL",
        ),
    ],
)
def test_an_existing_table_that_cannot_take_the_input_is_refused_naming_the_column(
    tmp_path: Path, columns: list[pa.Field], named: str, expected: str
) -> None:
    user_table(tmp_path, pa.schema(columns))
    with pytest.raises(ConfigError) as err:
        started(tmp_path)
    message = str(err.value)
    assert "consumer.delta.uri" in message and named in message and expected in message


def test_merge_keys_must_be_input_columns(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as err:
        started_with(tmp_path, {"consumer.delta.mode": "merge", "consumer.delta.keyColumns": "id"})
    assert "consumer.delta.keyColumns" in str(err.value) and "'id'" in str(err.value)


def test_the_start_check_records_the_not_null_columns(tmp_path: Path) -> None:
    user_table(
        tmp_path, pa.schema([pa.field("value", pa.binary(), nullable=False), ("gt", GT_ARROW)])
    )
    s = DELTA.settings(started(tmp_path))
    assert s.not_null == ("value",)


def test_validate_refuses_nulls_in_not_null_columns_and_strings_that_are_not_utf8(
    tmp_path: Path,
) -> None:
    s = DeltaSettings(uri="file:///t", storage=(), not_null=("value",))
    table = pa.table(
        {
            "value": pa.array([b"a", None, b"c"], pa.binary()),
            "note": pa.array([b"ok", b"ok", b"caf\xe9"], pa.binary()).cast(pa.string(), safe=False),
        }
    )
    found = DELTA.validate(s, table)
    assert [(r.row, r.column) for r in found] == [(1, "value"), (2, "note")]
    assert "NOT NULL" in found[0].reason and "file:///t" in found[0].reason
    assert "UTF-8" in found[1].reason


# --- delivery under the barrier ----------------------------------------------------------


class Lake:
    """One pipeline into a Delta table, write tasks run in-process."""

    def __init__(self, tmp_path: Path, run_id: str = "run-a", **extra: str) -> None:
        self.options = started_with(tmp_path, extra)
        self.uri = f"file://{tmp_path}/table"
        self.p = Pipeline(self.options, run_id=run_id)
        consumer = open_consumer(self.options, self.p.store, FaultInjector())
        assert isinstance(consumer, DeltaConsumer)
        self.consumer = consumer
        self.p.consumer = consumer  # type: ignore[assignment]
        self.p.staging = consumer.staging

    def commit(self, batch_id: int, epoch: int, parts: list[list[pa.RecordBatch]]) -> Any:
        self.p.record_batch(batch_id, epoch)
        msgs = [self.p.write(batch_id, b, partition=i) for i, b in enumerate(parts)]
        return self.p.barrier().commit(msgs, batch_id)

    def bundle(self, batch_id: int, epoch: int, parts: list[list[pa.RecordBatch]]) -> Bundle:
        self.p.record_batch(batch_id, epoch)
        msgs = [self.p.write(batch_id, b, partition=i) for i, b in enumerate(parts)]
        return Bundle.from_messages("p1", epoch, batch_id, msgs)

    def table(self) -> DeltaTable:
        return DeltaTable(self.uri)

    def values(self) -> list[bytes]:
        return sorted(self.table().to_pyarrow_table().column("value").to_pylist())


def test_each_bundle_is_one_commit_with_its_transaction_id(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    assert lake.consumer.last_bundle() is None
    first = lake.commit(0, 1, [[gt_batch(1, 0, [0, 1])], [gt_batch(1, 1, [0])]])
    assert first.action == "delivered"
    lake.commit(1, 2, [[gt_batch(2, 0, [2])]])
    table = lake.table()
    assert table.version() == 2  # the table's creation, then one commit per bundle
    assert table.transaction_version("p1") == 2
    assert lake.values() == [b"0:0", b"0:1", b"0:2", b"1:0"]
    last = lake.consumer.last_bundle()
    assert last is not None and (last.bundle_id, last.gt) == (2, 2)
    assert lake.consumer.staging.list(lake.consumer.staging.root_prefix) == []


def test_a_replayed_bundle_is_never_committed_twice(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    bundle = lake.bundle(0, 1, [[gt_batch(1, 0, [0, 1])]])
    lake.consumer.deliver(bundle)
    version = lake.table().version()
    ack = lake.consumer.deliver(bundle, redelivery=True)
    assert ack.bundle_id == 1
    assert lake.table().version() == version
    assert lake.values() == [b"0:0", b"0:1"]


def test_a_bundle_older_than_the_last_one_is_not_committed(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    old = lake.bundle(0, 1, [[gt_batch(1, 0, [0])]])
    lake.consumer.deliver(lake.bundle(1, 2, [[gt_batch(2, 0, [1])]]))
    version = lake.table().version()
    lake.consumer.deliver(old, redelivery=True)
    assert lake.table().version() == version


def test_other_writers_commits_do_not_hide_the_last_bundle(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    lake.commit(0, 3, [[gt_batch(3, 0, [0])]])
    other = lake.table().to_pyarrow_table().slice(0, 1)
    write_deltalake(lake.uri, other, mode="append")  # another writer, no transaction id
    write_deltalake(
        lake.uri,
        other,
        mode="append",
        commit_properties=CommitProperties(app_transactions=[Transaction("another", 9)]),
    )
    last = lake.consumer.last_bundle()
    assert last is not None and last.bundle_id == 3


class Crash(FaultInjector):
    """Raise at ``step`` once."""

    def __init__(self, step: str) -> None:
        super().__init__()
        self.step = step

    def armed(self, step: str, n: int | None) -> bool:
        return step == self.step

    def at(self, step: str, n: int | None) -> None:
        if step == self.step:
            self.step = "done"
            raise InjectedFault("crash")


def test_a_crash_before_the_commit_is_redelivered_once(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    lake.consumer.faults = Crash("after_deliver")
    with pytest.raises(InjectedFault):
        lake.commit(0, 1, [[gt_batch(1, 0, [0, 1])]])
    assert lake.consumer.last_bundle() is None
    lake.p.run_id = "run-b"  # a restart resolves the bundle in flight
    outcome = lake.commit(0, 1, [[gt_batch(1, 0, [0, 1])]])
    assert outcome.recovered == 1
    assert lake.values() == [b"0:0", b"0:1"]
    assert lake.table().transaction_version("p1") == 1


def test_a_crash_after_the_commit_is_not_committed_again(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    lake.consumer.faults = Crash("after_consumer_commit")
    with pytest.raises(InjectedFault):
        lake.commit(0, 1, [[gt_batch(1, 0, [0, 1])]])
    version = lake.table().version()
    lake.p.run_id = "run-b"
    outcome = lake.commit(0, 1, [[gt_batch(1, 0, [0, 1])]])
    assert outcome.recovered == 1
    assert lake.table().version() == version
    assert lake.values() == [b"0:0", b"0:1"]


def test_a_lost_answer_after_the_commit_landed_is_resolved_by_reading_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sink.consumers.delta.delta_consumer as module

    real = module.write_append

    def landed_then_lost(*args: Any, **kwargs: Any) -> None:
        real(*args, **kwargs)
        raise OSError("connection reset after the commit was sent")

    monkeypatch.setattr(module, "write_append", landed_then_lost)
    lake = Lake(tmp_path)
    outcome = lake.commit(0, 1, [[gt_batch(1, 0, [0])]])
    assert outcome.action == "delivered"
    assert lake.values() == [b"0:0"]
    assert lake.table().transaction_version("p1") == 1


def test_a_lost_answer_that_did_not_land_is_commit_state_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sink.consumers.delta.delta_consumer as module

    lake = Lake(tmp_path)
    bundle = lake.bundle(0, 1, [[gt_batch(1, 0, [0])]])

    def lost(*args: Any, **kwargs: Any) -> None:
        raise OSError("connection reset before the commit arrived")

    with monkeypatch.context() as m:
        m.setattr(module, "write_append", lost)
        with pytest.raises(CommitStateUnknown, match="not in the table now"):
            lake.consumer.deliver(bundle)
    lake.consumer.deliver(bundle, redelivery=True)
    lake.consumer.deliver(bundle, redelivery=True)
    assert lake.values() == [b"0:0"]


def test_a_commit_race_with_another_attempt_of_the_same_bundle_is_delivered_once(
    tmp_path: Path,
) -> None:
    lake = Lake(tmp_path)
    twin = Lake(tmp_path)
    bundle = lake.bundle(0, 1, [[gt_batch(1, 0, [0, 1])]])

    class Race(FaultInjector):
        def at(self, step: str, n: int | None) -> None:
            if step == "after_deliver":
                self.at = FaultInjector().at  # type: ignore[method-assign]
                twin.consumer.deliver(bundle)

    lake.consumer.faults = Race()
    lake.consumer.deliver(bundle)
    assert lake.values() == [b"0:0", b"0:1"]
    assert lake.table().version() == 1


# --- merge -------------------------------------------------------------------------------

KEYED = StructType([StructField("key", StringType()), StructField("count", LongType())])


def keyed(keys: list[str], counts: list[int]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array(keys, pa.string()), pa.array(counts, pa.int64())], names=["key", "count"]
    )


def test_merge_upserts_by_key_in_one_commit_the_last_row_of_a_key_winning(
    tmp_path: Path,
) -> None:
    options = started(
        tmp_path, KEYED, **{"consumer.delta.mode": "merge", "consumer.delta.keyColumns": "key"}
    )
    p = Pipeline(options)
    consumer = open_consumer(options, p.store, FaultInjector())
    p.consumer = consumer  # type: ignore[assignment]
    p.staging = consumer.staging
    p.record_batch(0, 1)
    p.barrier().commit([p.write(0, [keyed(["a", "b", "a"], [1, 2, 3])], has_gt=False)], 0)
    p.record_batch(1, 2)
    p.barrier().commit([p.write(1, [keyed(["b", "c"], [20, 30])], has_gt=False)], 1)
    table = DeltaTable(f"file://{tmp_path}/table")
    rows = sorted(table.to_pyarrow_table().to_pylist(), key=lambda r: r["key"])
    assert rows == [
        {"key": "a", "count": 3},
        {"key": "b", "count": 20},
        {"key": "c", "count": 30},
    ]
    assert table.version() == 2 and table.transaction_version("p1") == 2
    assert [h["operation"] for h in table.history()][:2] == ["MERGE", "MERGE"]


# --- secrets -----------------------------------------------------------------------------


def test_storage_secrets_given_by_reference_are_resolved_only_where_the_table_is_opened(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from sink.consumers.delta.delta_table import storage_options

    monkeypatch.setenv("DELTA_TEST_SECRET", "s3cr3t-value")
    s = settings(
        tmp_path, **{"consumer.delta.storage.aws_secret_access_key": "${env:DELTA_TEST_SECRET}"}
    )
    assert "s3cr3t-value" not in pickle.dumps(s).decode("latin-1")
    assert storage_options(s) == {"AWS_SECRET_ACCESS_KEY": "s3cr3t-value"}
    import logging

    logging.getLogger("test").warning("the key is s3cr3t-value")
    assert "s3cr3t-value" not in caplog.text


def test_a_bundle_without_rows_commits_its_transaction_id(tmp_path: Path) -> None:
    """Every row of a bundle may have gone to dead letters: the bundle still moves the
    table's transaction version, so a replay finds it."""
    lake = Lake(tmp_path)
    empty = Bundle("p1", 4, "q", 0, (), has_gt=True, ordered=True)
    lake.consumer.deliver(empty)
    assert lake.table().transaction_version("p1") == 4
    assert lake.values() == []


def test_the_chaos_run_reads_each_bundle_from_the_commit_that_carries_its_id(
    tmp_path: Path,
) -> None:
    import random

    from integration_tests.chaos.consumers import CONSUMERS, ConsumerSetup

    setup = ConsumerSetup("r1", tmp_path / "round", "t", None, random.Random(1))  # type: ignore[arg-type]
    chaos = CONSUMERS["delta"](setup)
    options = SinkOptions.parse(
        {"pipeline.id": "p1", "state.uri": f"memory://{tmp_path.name}", **chaos.sink_options()}
    ).check_at_start(SCHEMA)
    p = Pipeline(options)
    consumer = open_consumer(options, p.store, FaultInjector())
    p.consumer = consumer  # type: ignore[assignment]
    p.staging = consumer.staging
    p.record_batch(0, 1)
    p.barrier().commit([p.write(0, [gt_batch(1, 0, [0, 1])])], 0)
    p.record_batch(1, 2)
    p.barrier().commit([p.write(1, [gt_batch(2, 1, [5])])], 1)
    found = chaos.read()
    assert [b.bundle_id for b in found] == [1, 2]
    assert [[r["value"] for r in b.rows] for b in found] == [[b"0:0", b"0:1"], [b"1:5"]]


def test_dead_letters_inside_the_table_directory_are_refused(tmp_path: Path) -> None:
    """Delta's VACUUM deletes every file under the table that no version references: dead
    letters there would be lost."""
    with pytest.raises(ConfigError) as err:
        SinkOptions.parse(
            raw_options(
                tmp_path,
                **{
                    "errors.tolerance": "all",
                    "errors.deadLetter.path": f"file://{tmp_path}/table/dead",
                },
            )
        )
    assert "errors.deadLetter.path" in str(err.value) and "outside" in str(err.value)


def test_rows_with_a_null_in_a_not_null_column_go_to_dead_letters_and_the_rest_to_the_table(
    tmp_path: Path,
) -> None:
    import pyarrow.parquet as pq

    from sink.dead_letters.dead_letter_format import COLUMN_COLUMN, dead_letter_name

    user_table(
        tmp_path, pa.schema([pa.field("value", pa.binary(), nullable=False), ("gt", GT_ARROW)])
    )
    lake = Lake(
        tmp_path,
        **{"errors.tolerance": "all", "errors.deadLetter.path": f"file://{tmp_path}/dl"},
    )
    batch = gt_batch(2, 0, [0, 1, 2])
    values = pa.array([None, b"0:1", None], pa.binary())
    lake.p.record_batch(0, 2)
    m = lake.p.write(0, [batch.set_column(0, "value", values)])
    outcome = lake.p.barrier().commit([m], 0)
    assert outcome.action == "delivered" and (outcome.rows, outcome.dead_letters) == (1, 2)
    assert lake.values() == [b"0:1"]
    assert lake.table().transaction_version("p1") == 2
    dead = pq.read_table(tmp_path / "dl" / dead_letter_name(2))
    assert dead.column("value").to_pylist() == [None, None]
    assert dead.column(COLUMN_COLUMN).to_pylist() == ["value", "value"]


# --- append: the staged parts become the table's data files -------------------------------


def add_paths(table: DeltaTable) -> list[str]:
    """The data files the table's current version references (relative paths, sorted)."""
    actions = table.get_add_actions(flatten=True)
    return sorted(str(p) for p in actions.column("path").to_pylist())


def test_an_append_commits_the_staged_parts_as_data_files_reading_no_rows_on_the_driver(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sink.consumers.delta.delta_staging import DeltaStaging, data_file_location

    lake = Lake(tmp_path)
    assert isinstance(lake.consumer.staging, DeltaStaging)
    bundle = lake.bundle(0, 1, [[gt_batch(1, 0, [0, 1])], [gt_batch(1, 1, [0])]])
    staged = [part.location for part in bundle.parts]
    assert all((tmp_path / "table" / location).is_file() for location in staged)

    def no_rows(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a row was read on the driver")

    with monkeypatch.context() as m:
        m.setattr(Bundle, "read_all", no_rows)
        m.setattr(DeltaStaging, "read_part", no_rows)
        ack = lake.consumer.deliver(bundle)
    assert (ack.bundle_id, ack.rows, ack.driver_bytes) == (1, 3, 0)
    moved = sorted(data_file_location("p1", 1, location) for location in staged)
    assert add_paths(lake.table()) == moved
    assert not any((tmp_path / "table" / location).exists() for location in staged)
    actions = pa.table(lake.table().get_add_actions(flatten=True)).to_pylist()
    assert sorted(a["num_records"] for a in actions) == [1, 2]
    assert lake.values() == [b"0:0", b"0:1", b"1:0"]
    assert lake.table().transaction_version("p1") == 1


def test_the_barrier_cleanup_never_deletes_a_file_the_table_references(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    lake.commit(0, 1, [[gt_batch(1, 0, [0, 1])], [gt_batch(1, 1, [0])]])
    lake.commit(1, 2, [[gt_batch(2, 0, [2])]])
    lake.p.run_id = "run-b"  # a restart cleans up the staging of the earlier run
    lake.commit(2, 3, [[gt_batch(3, 1, [1])]])
    referenced = add_paths(lake.table())
    assert len(referenced) == 4
    assert all((tmp_path / "table" / path).is_file() for path in referenced)
    assert lake.consumer.staging.list(lake.consumer.staging.root_prefix) == []
    assert lake.values() == [b"0:0", b"0:1", b"0:2", b"1:0", b"1:1"]


def test_a_crash_between_the_move_and_the_commit_commits_the_moved_files_once(
    tmp_path: Path,
) -> None:
    """The redelivery finds the data files its failed attempt moved and commits those:
    nothing is left unreferenced, nothing is committed twice."""
    lake = Lake(tmp_path)
    lake.consumer.faults = Crash("after_deliver")  # after the move, before the commit
    batches = [[gt_batch(1, 0, [0, 1])], [gt_batch(1, 1, [0, 1, 2])]]
    with pytest.raises(InjectedFault):
        lake.commit(0, 1, batches)
    moved = sorted(
        str(p.relative_to(tmp_path / "table")) for p in tmp_path.glob("table/gtbarrier/p1/*")
    )
    assert len(moved) == 2
    assert lake.consumer.last_bundle() is None
    assert lake.consumer.staging.list(lake.consumer.staging.root_prefix) == []  # all moved
    lake.p.run_id = "run-b"  # a restart resolves the bundle in flight
    outcome = lake.commit(0, 1, batches)
    assert outcome.recovered == 1
    assert add_paths(lake.table()) == moved
    assert (
        sorted(
            str(p.relative_to(tmp_path / "table")) for p in tmp_path.glob("table/gtbarrier/p1/*")
        )
        == moved
    )
    assert lake.values() == [b"0:0", b"0:1", b"1:0", b"1:1", b"1:2"]
    assert lake.table().transaction_version("p1") == 1
    assert lake.table().version() == 1


def test_a_table_column_the_input_lacks_reads_as_null_in_the_committed_files(
    tmp_path: Path,
) -> None:
    user_table(
        tmp_path,
        pa.schema([("note", pa.string()), ("gt", GT_ARROW), ("value", pa.binary())]),
    )
    lake = Lake(tmp_path)
    lake.commit(0, 1, [[gt_batch(1, 0, [0, 1])]])
    rows = lake.table().to_pyarrow_table()
    assert rows.column_names == ["note", "gt", "value"]
    assert rows.column("note").to_pylist() == [None, None]
    assert sorted(rows.column("value").to_pylist()) == [b"0:0", b"0:1"]


def test_a_partitioned_table_takes_the_rows_through_the_driver(tmp_path: Path) -> None:
    """A partitioned table's rows are split by partition by the writer: its bundles are
    staged in the state store and read on the driver, as a merge's are."""
    from sink.consumers.delta.delta_staging import DeltaStaging

    (tmp_path / "table").mkdir()
    uri = f"file://{tmp_path}/table"
    DeltaTable.create(
        uri, pa.schema([("key", pa.string()), ("count", pa.int64())]), partition_by=["key"]
    )
    options = started(tmp_path, KEYED)
    p = Pipeline(options)
    consumer = open_consumer(options, p.store, FaultInjector())
    assert not isinstance(consumer.staging, DeltaStaging)
    p.staging = consumer.staging
    p.record_batch(0, 1)
    bundle = Bundle.from_messages(
        "p1", 1, 0, [p.write(0, [keyed(["a", "b"], [1, 2])], has_gt=False)]
    )
    ack = consumer.deliver(bundle)
    assert ack.driver_bytes == bundle.size > 0
    table = DeltaTable(uri)
    assert sorted(table.to_pyarrow_table().column("count").to_pylist()) == [1, 2]
    assert sorted(table.partitions(), key=str) == [{"key": "a"}, {"key": "b"}]


@pytest.mark.parametrize(
    ("mode", "partition_by"), [("merge", None), ("append", ["key"])], ids=["merge", "partitioned"]
)
def test_rows_through_the_driver_into_a_table_with_a_column_the_input_lacks(
    tmp_path: Path, mode: str, partition_by: list[str] | None
) -> None:
    """The driver's writes (a merge, a partitioned table's append) take the rows as the
    table's schema: a nullable column the input lacks is written as nulls, as the staged
    parts' commits leave it."""
    (tmp_path / "table").mkdir()
    uri = f"file://{tmp_path}/table"
    DeltaTable.create(
        uri,
        pa.schema([("key", pa.string()), ("note", pa.string()), ("count", pa.int64())]),
        partition_by=partition_by,
    )
    extra = {"consumer.delta.mode": mode}
    if mode == "merge":
        extra["consumer.delta.keyColumns"] = "key"
    options = started(tmp_path, KEYED, **extra)
    p = Pipeline(options)
    consumer = open_consumer(options, p.store, FaultInjector())
    p.consumer = consumer  # type: ignore[assignment]
    p.staging = consumer.staging
    p.record_batch(0, 1)
    p.barrier().commit([p.write(0, [keyed(["a", "b"], [1, 2])], has_gt=False)], 0)
    p.record_batch(1, 2)
    p.barrier().commit([p.write(1, [keyed(["c"], [3])], has_gt=False)], 1)
    rows = sorted(DeltaTable(uri).to_pyarrow_table().to_pylist(), key=lambda r: r["key"])
    assert rows == [
        {"key": "a", "note": None, "count": 1},
        {"key": "b", "note": None, "count": 2},
        {"key": "c", "note": None, "count": 3},
    ]
    assert DeltaTable(uri).transaction_version("p1") == 2


def test_vacuum_keeps_the_staged_parts_and_removes_a_moved_file_no_version_references(
    tmp_path: Path,
) -> None:
    """Staged parts sit in a ``_`` directory, which Delta's VACUUM leaves alone (a part in
    flight survives it); a data file no version references (a zombie's move, say) is a
    full VACUUM's to remove (delta-rs's default, lite, removes only files a version
    removed)."""
    from sink.consumers.delta.delta_staging import data_file_location

    lake = Lake(tmp_path)
    lake.commit(0, 1, [[gt_batch(1, 0, [0])]])
    in_flight = lake.bundle(1, 2, [[gt_batch(2, 0, [1])]])
    [part] = in_flight.parts
    stray = data_file_location("p1", 9, part.location)
    (tmp_path / "table" / stray).write_bytes((tmp_path / "table" / part.location).read_bytes())
    doomed = lake.table().vacuum(retention_hours=0, enforce_retention_duration=False, full=True)
    assert [d.removeprefix(lake.uri + "/") for d in doomed] == [stray]
    assert [h["operation"] for h in lake.table().history()] == ["WRITE", "CREATE TABLE"]


def test_a_nested_not_null_field_the_input_may_leave_null_keeps_the_rows_checked(
    tmp_path: Path,
) -> None:
    """delta-rs checks a nested NOT NULL field row by row, the write tasks only top-level
    columns: such a table takes the rows through the driver, where delta-rs refuses the
    null, never a data file that breaks the table's schema."""
    from sink.consumers.delta.delta_staging import DeltaStaging

    strict = pa.struct([pa.field("id", pa.int64(), nullable=False)])
    user_table(tmp_path, pa.schema([("rec", strict)]))
    loose = StructType([StructField("rec", StructType([StructField("id", LongType())]))])
    options = started(tmp_path, loose)
    assert DELTA.settings(options).stage_in_table is False
    p = Pipeline(options)
    consumer = open_consumer(options, p.store, FaultInjector())
    assert not isinstance(consumer.staging, DeltaStaging)
    p.staging = consumer.staging
    p.record_batch(0, 1)
    rec = pa.array([{"id": 1}, {"id": None}], pa.struct([pa.field("id", pa.int64())]))
    batch = pa.RecordBatch.from_arrays([rec], names=["rec"])
    bundle = Bundle.from_messages("p1", 1, 0, [p.write(0, [batch], has_gt=False)])
    # A refusal of the rows is "commit failed" (nothing committed, the same rows would be
    # refused again), never "commit state unknown", which sends the barrier asking again.
    with pytest.raises(CommitFailed, match="failed validation check"):
        consumer.deliver(bundle)
    assert DeltaTable(f"file://{tmp_path}/table").version() == 0


def test_the_sinks_own_table_with_gt_stages_its_parts_in_the_table(tmp_path: Path) -> None:
    """``gt``'s fields are NOT NULL in the input and in the table the sink creates: the
    nested check leaves the parts in the table."""
    assert DELTA.settings(started(tmp_path)).stage_in_table is True
