"""consumer=iceberg without servers: options, schema mapping, and the consumer under the real
barrier protocol on pyiceberg's SQL catalog (SQLite) with a file:// warehouse."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

pytest.importorskip("pyiceberg")

from pyspark.sql.types import (
    BinaryType,
    DayTimeIntervalType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from gtbarrier.cli import main
from sink.consumers import open_consumer
from sink.consumers.iceberg.iceberg_consumer import (
    BUNDLE_ID,
    LAST_BUNDLE_PROPERTY,
    IcebergConsumer,
    last_bundle_of,
    marker_of,
)
from sink.consumers.iceberg.iceberg_kind import ICEBERG, ORPHAN, PENDING
from sink.consumers.iceberg.iceberg_options import IcebergSettings
from sink.consumers.iceberg.iceberg_staging import IcebergStaging, data_prefix
from sink.consumers.iceberg.iceberg_sweep import delete_orphans, find_orphans
from sink.consumers.iceberg.iceberg_table import (
    arrow_input_schema,
    load_table,
    open_catalog,
    prepare_table,
)
from sink.faults import FaultInjector, InjectedFault
from sink.options import SinkOptions
from state.errors import CommitStateUnknown, ConfigError, UnknownOptionError
from state.stores import open_store
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


def iceberg_settings(options: SinkOptions) -> IcebergSettings:
    return ICEBERG.settings(options)


def settings(tmp_path: Path, **extra: str) -> IcebergSettings:
    return iceberg_settings(SinkOptions.parse(raw_options(tmp_path, **extra)))


def raw_options(tmp_path: Path, **extra: str) -> dict[str, str]:
    return {
        "pipeline.id": "p1",
        "state.uri": f"memory://{tmp_path.name}",
        "consumer": "iceberg",
        "consumer.iceberg.table": "ns.events",
        "consumer.iceberg.catalog.uri": f"sqlite:///{tmp_path}/catalog.db",
        "consumer.iceberg.catalog.warehouse": f"file://{tmp_path}/warehouse",
        **extra,
    }


# --- options ---------------------------------------------------------------------------


def test_options_parse_table_catalog_and_create(tmp_path: Path) -> None:
    opts = SinkOptions.parse(
        raw_options(
            tmp_path,
            **{
                "consumer.iceberg.table": "a.b.events",
                "consumer.iceberg.catalog.name": "lake",
                "consumer.iceberg.catalog.S3.Endpoint": "http://127.0.0.1:9000",
                "consumer.iceberg.createTable": "false",
            },
        )
    )
    s = iceberg_settings(opts)
    assert (s.namespace, s.table, s.identifier) == (("a", "b"), "events", "a.b.events")
    assert s.catalog_name == "lake" and not s.create_table
    assert s.properties == {
        "uri": f"sqlite:///{tmp_path}/catalog.db",
        "warehouse": f"file://{tmp_path}/warehouse",
        "s3.endpoint": "http://127.0.0.1:9000",
    }
    assert hash(s) == hash(s)  # the per-process catalog cache's key
    assert pickle.loads(pickle.dumps(opts)) == opts


@pytest.mark.parametrize(
    ("extra", "option", "expected"),
    [
        ({"consumer.iceberg.table": "events"}, "consumer.iceberg.table", "namespace.table"),
        ({"consumer.iceberg.table": "ns..t"}, "consumer.iceberg.table", "namespace.table"),
        ({"consumer.iceberg.catalog.warehouse": "/tmp/wh"}, "warehouse", "file:///absolute"),
        ({"consumer.iceberg.createTable": "maybe"}, "consumer.iceberg.createTable", "true"),
    ],
)
def test_bad_options_are_named(
    tmp_path: Path, extra: dict[str, str], option: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as err:
        SinkOptions.parse(raw_options(tmp_path, **extra))
    assert option in str(err.value) and expected in str(err.value)


def test_catalog_properties_are_required(tmp_path: Path) -> None:
    raw = raw_options(tmp_path)
    del raw["consumer.iceberg.catalog.uri"], raw["consumer.iceberg.catalog.warehouse"]
    with pytest.raises(ConfigError, match=r"consumer\.iceberg\.catalog\.\*"):
        SinkOptions.parse(raw)


def test_iceberg_options_only_with_consumer_iceberg(tmp_path: Path) -> None:
    raw = raw_options(tmp_path, consumer="file", **{"consumer.path": str(tmp_path / "out")})
    with pytest.raises(ConfigError, match="applies to consumer=iceberg"):
        SinkOptions.parse(raw)
    with pytest.raises(UnknownOptionError):
        SinkOptions.parse(raw_options(tmp_path, **{"consumer.iceberg.tabel": "ns.t"}))


# --- schema and table -----------------------------------------------------------------


def test_input_schema_maps_to_optional_columns() -> None:
    arrow = arrow_input_schema(SCHEMA)
    assert arrow.names == ["value", "gt"]
    assert all(f.nullable for f in arrow)
    assert all(f.nullable for f in arrow.field("gt").type)
    assert arrow.field("value").type == pa.binary()


def test_prepare_creates_namespace_and_table(tmp_path: Path) -> None:
    opts = settings(tmp_path)
    table = prepare_table(opts, SCHEMA)
    assert [f.name for f in table.schema().fields] == ["value", "gt"]
    assert table.location().startswith(f"file://{tmp_path}/warehouse")
    again = prepare_table(opts, SCHEMA)  # an existing table is taken as it is
    assert again.metadata.table_uuid == table.metadata.table_uuid


def test_prepare_refuses_a_missing_table_without_create(tmp_path: Path) -> None:
    opts = settings(tmp_path, **{"consumer.iceberg.createTable": "false"})
    with pytest.raises(ConfigError, match=r"'ns\.events'.*createTable=false"):
        prepare_table(opts, SCHEMA)


def test_prepare_names_a_column_iceberg_cannot_store(tmp_path: Path) -> None:
    opts = settings(tmp_path)
    schema = StructType([*SCHEMA.fields, StructField("wait", DayTimeIntervalType())])
    with pytest.raises(ConfigError, match="column 'wait'"):
        prepare_table(opts, schema)


def test_prepare_refuses_an_incompatible_existing_table(tmp_path: Path) -> None:
    opts = settings(tmp_path)
    prepare_table(opts, StructType([StructField("value", LongType())]))
    with pytest.raises(ConfigError, match="takes the sink's input columns"):
        prepare_table(opts, SCHEMA)


def test_write_tasks_find_the_table_location_without_the_catalog(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sink.consumers import open_staging
    from sink.consumers.iceberg import iceberg_table

    opts = SinkOptions.parse(raw_options(tmp_path)).check_at_start(SCHEMA)  # streamWriter's
    location = iceberg_settings(opts).location
    assert location is not None and location.startswith(f"file://{tmp_path}/warehouse")

    def unreachable(settings: Any) -> Any:
        raise AssertionError("a write task opened the catalog")

    monkeypatch.setattr(iceberg_table, "load_table", unreachable)
    iceberg_table._LOCATIONS.clear()
    staging = open_staging(opts, open_store(opts.store))
    assert isinstance(staging, IcebergStaging) and staging.location == location


def test_the_catalog_is_opened_once_per_process_and_anew_in_a_forked_child(
    tmp_path: Path,
) -> None:
    """A forked worker never uses its parent's catalog (its connections are the parent's)."""
    opts = settings(tmp_path)
    catalog = open_catalog(opts)
    assert open_catalog(opts) is catalog
    pid = os.fork()
    if pid == 0:  # the child: leave without cleanup, the exit code says what it saw
        os._exit(0 if open_catalog(opts) is not catalog else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0, "the child reused its parent's catalog"
    assert open_catalog(opts) is catalog


def test_an_unloadable_catalog_is_a_config_error(tmp_path: Path) -> None:
    opts = settings(tmp_path, **{"consumer.iceberg.catalog.type": "nosuchtype"})
    with pytest.raises(ConfigError, match=r"consumer\.iceberg\.catalog\.\*"):
        prepare_table(opts, SCHEMA)


# --- the consumer under the barrier ---------------------------------------------------


class Lake:
    """One pipeline into an Iceberg table, write tasks run in-process."""

    def __init__(self, tmp_path: Path, pipeline_id: str = "p1", run_id: str = "run-a") -> None:
        raw = raw_options(tmp_path, **{"pipeline.id": pipeline_id})
        self.options = SinkOptions.parse(raw).check_at_start(SCHEMA)  # as streamWriter does
        self.settings = iceberg_settings(self.options)
        self.p = Pipeline(self.options, run_id=run_id)
        consumer = open_consumer(self.options, self.p.store, FaultInjector())
        assert isinstance(consumer, IcebergConsumer)
        self.consumer = consumer
        self.p.consumer = consumer  # type: ignore[assignment]
        self.p.staging = consumer.staging

    def commit(self, batch_id: int, epoch: int, parts: list[list[pa.RecordBatch]]) -> Any:
        self.p.record_batch(batch_id, epoch)
        msgs = [self.p.write(batch_id, b, partition=i) for i, b in enumerate(parts)]
        return self.p.barrier().commit(msgs, batch_id)

    def table(self) -> Any:
        return load_table(self.settings)

    def orphans(self) -> Any:
        return find_orphans(self.settings, self.options.pipeline_id)

    def values(self) -> list[bytes]:
        return sorted(self.table().scan().to_arrow().column("value").to_pylist())


def other_append(lake: Lake, value: bytes = b"other") -> None:
    """Another writer's append (no gtbarrier marker)."""
    table = lake.table()
    rows = pa.Table.from_pylist(
        [{"value": value, "gt": {"epoch": 0, "topic": "x", "partition": 0, "offset": 0}}],
        schema=table.schema().as_arrow(),
    )
    table.append(rows)


def test_each_bundle_is_one_snapshot_with_its_marker(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    first = lake.commit(0, 1, [[gt_batch(1, 0, [0, 1])], [gt_batch(1, 1, [0])]])
    assert first.action == "delivered" and first.driver_bytes == 0
    lake.commit(1, 2, [[gt_batch(2, 0, [2])]])
    table = lake.table()
    snapshots = table.snapshots()
    assert len(snapshots) == 2
    summary = snapshots[-1].summary
    assert summary is not None
    assert (summary["gtbarrier.pipeline"], summary[BUNDLE_ID], summary["gtbarrier.gt"]) == (
        "p1",
        "2",
        "2",
    )
    assert summary["added-records"] == "1"
    assert lake.values() == [b"0:0", b"0:1", b"0:2", b"1:0"]
    last = lake.consumer.last_bundle()
    assert last is not None and (last.bundle_id, last.gt) == (2, 2)
    assert lake.consumer.staging.list(lake.consumer.staging.root_prefix) == []
    assert set(table.properties) == {LAST_BUNDLE_PROPERTY + "p1", "schema.name-mapping.default"}


def test_last_bundle_skips_other_writers_snapshots(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    assert lake.consumer.last_bundle() is None
    lake.commit(0, 3, [[gt_batch(3, 0, [0])]])
    other_append(lake)
    other_append(lake, b"other-2")
    table = lake.table()
    table.transaction().remove_properties(LAST_BUNDLE_PROPERTY + "p1").commit_transaction()
    last = lake.consumer.last_bundle()
    assert last is not None and last.bundle_id == 3  # found three snapshots back
    lake.commit(1, 4, [[gt_batch(4, 0, [1])]])
    assert lake.values() == [b"0:0", b"0:1", b"other", b"other-2"]


def test_the_marker_survives_expiring_its_snapshot(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    lake.commit(0, 5, [[gt_batch(5, 0, [0])]])
    other_append(lake)
    table = lake.table()
    ours = table.snapshots()[0].snapshot_id
    table.maintenance.expire_snapshots().by_id(ours).commit()
    table = lake.table()
    assert [s.snapshot_id for s in table.snapshots()] != [ours]
    last = last_bundle_of(table, "p1")
    assert last is not None and last.bundle_id == 5  # from the table property


class RaceAt(FaultInjector):
    """Run ``action`` once when the consumer reaches ``step`` (files moved, not committed)."""

    def __init__(self, step: str, action: Any) -> None:
        super().__init__()
        self.step, self.action = step, action

    def armed(self, step: str, n: int | None) -> bool:
        return step == self.step

    def at(self, step: str, n: int | None) -> None:
        if step == self.step:
            self.step = "done"
            self.action()


@pytest.mark.parametrize("pyiceberg_retries", ["4", "0"])
def test_a_concurrent_commit_is_retried_with_the_same_bundle(
    tmp_path: Path, pyiceberg_retries: str
) -> None:
    """With pyiceberg's own commit retries, and without (then gtbarrier's cas_loop)."""
    lake = Lake(tmp_path)
    lake.table().transaction().set_properties(
        {"commit.retry.num-retries": pyiceberg_retries}
    ).commit_transaction()
    lake.consumer.faults = RaceAt("after_deliver", lambda: other_append(lake, b"racer"))
    outcome = lake.commit(0, 1, [[gt_batch(1, 0, [0, 1])]])
    assert outcome.action == "delivered"
    assert lake.values() == [b"0:0", b"0:1", b"racer"]
    markers = [marker_of(s.summary, "p1") for s in lake.table().snapshots()]
    assert [m.bundle_id for m in markers if m is not None] == [1]


def test_a_conflict_with_the_same_bundle_already_committed_is_delivered(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    twin = Lake(tmp_path)  # another consumer of the same pipeline (a second attempt)
    p = lake.p
    p.record_batch(0, 1)
    msgs = [p.write(0, [gt_batch(1, 0, [0, 1])])]
    from sink.bundle import Bundle

    bundle = Bundle.from_messages("p1", 1, 0, msgs)
    # while this attempt has moved its files, the twin commits the same bundle
    lake.consumer.faults = RaceAt("after_deliver", lambda: twin.consumer.deliver(bundle))
    ack = lake.consumer.deliver(bundle)
    assert ack.bundle_id == 1
    assert lake.values() == [b"0:0", b"0:1"]  # once
    assert len(lake.table().snapshots()) == 1


class Crash(RaceAt):
    def __init__(self, step: str) -> None:
        super().__init__(step, self._raise)

    def _raise(self) -> None:
        raise InjectedFault("crash")


def test_a_crash_between_the_file_move_and_the_commit_is_redelivered_once(
    tmp_path: Path,
) -> None:
    lake = Lake(tmp_path)
    lake.consumer.faults = Crash("after_deliver")
    with pytest.raises(InjectedFault):
        lake.commit(0, 1, [[gt_batch(1, 0, [0, 1])]])
    assert lake.consumer.last_bundle() is None
    assert lake.table().snapshots() == []
    staging = lake.consumer.staging
    assert len(staging.list(data_prefix("p1"))) == 1  # moved, not committed
    lake.p.run_id = "run-b"  # a restart resolves the bundle in flight
    outcome = lake.commit(0, 1, [[gt_batch(1, 0, [0, 1])]])
    assert outcome.recovered == 1 and outcome.action == "dropped"
    assert lake.values() == [b"0:0", b"0:1"]
    assert lake.orphans().orphans == ()


def commit_then_fail(real: Any) -> Any:
    def commit(self: Any) -> Any:
        real(self)
        raise ConnectionResetError("connection lost after the commit was sent")

    return commit


def test_an_unknown_commit_outcome_is_resolved_by_reading_the_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyiceberg.table import Transaction

    lake = Lake(tmp_path)
    monkeypatch.setattr(
        Transaction, "commit_transaction", commit_then_fail(Transaction.commit_transaction)
    )
    outcome = lake.commit(0, 1, [[gt_batch(1, 0, [0])]])
    assert outcome.action == "delivered"
    assert lake.values() == [b"0:0"]


def test_an_unknown_outcome_that_did_not_land_is_commit_state_unknown(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from pyiceberg.table import Transaction

    lake = Lake(tmp_path)

    def lost(self: Any) -> Any:
        raise ConnectionResetError("connection lost before the commit arrived")

    p = lake.p
    p.record_batch(0, 1)
    msgs = [p.write(0, [gt_batch(1, 0, [0])])]
    from sink.bundle import Bundle

    bundle = Bundle.from_messages("p1", 1, 0, msgs)
    with monkeypatch.context() as m:
        m.setattr(Transaction, "commit_transaction", lost)
        with pytest.raises(CommitStateUnknown, match="not in the table now"):
            lake.consumer.deliver(bundle)
    lake.consumer.deliver(bundle, redelivery=True)  # the moved file is reused
    lake.consumer.deliver(bundle, redelivery=True)  # and found delivered
    assert lake.values() == [b"0:0"]


def test_sweep_lists_and_deletes_files_no_snapshot_references(tmp_path: Path) -> None:
    lake = Lake(tmp_path)
    zombie = Lake(tmp_path, run_id="run-z")
    p = zombie.p
    p.record_batch(0, 1)
    from sink.bundle import Bundle

    stale = Bundle.from_messages("p1", 1, 0, [p.write(0, [gt_batch(1, 0, [0])])])
    zombie.consumer.faults = Crash("after_deliver")
    with pytest.raises(InjectedFault):
        zombie.consumer.deliver(stale)  # moved its file, never committed
    lake.commit(0, 1, [[gt_batch(1, 0, [0])]])
    lake.commit(1, 2, [[gt_batch(2, 0, [1])]])
    found = lake.orphans()
    assert found.last_bundle == 2 and found.pending == ()
    assert len(found.orphans) == 1 and "-rrun-z" in found.orphans[0]
    assert delete_orphans(lake.settings, "p1", found.orphans) == 1
    assert lake.orphans().orphans == ()
    assert lake.values() == [b"0:0", b"0:1"]


def test_the_kind_sweeps_orphans_and_keeps_newer_bundles_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """What ``gtbarrier sweep`` lists and deletes for consumer=iceberg: an orphan of a
    delivered bundle goes, the moved but uncommitted files of a newer bundle stay."""
    lake = Lake(tmp_path)
    zombie = Lake(tmp_path, run_id="run-z")
    zombie.p.record_batch(0, 1)
    from sink.bundle import Bundle

    stale = Bundle.from_messages("p1", 1, 0, [zombie.p.write(0, [gt_batch(1, 0, [0])])])
    zombie.consumer.faults = Crash("after_deliver")
    with pytest.raises(InjectedFault):
        zombie.consumer.deliver(stale)
    lake.commit(0, 1, [[gt_batch(1, 0, [0])]])
    lake.p.record_batch(1, 2)
    newer = Bundle.from_messages("p1", 2, 1, [lake.p.write(1, [gt_batch(2, 0, [1])])])
    lake.consumer.faults = Crash("after_deliver")
    with pytest.raises(InjectedFault):
        lake.consumer.deliver(newer)  # moved, not committed: maybe in flight
    found = ICEBERG.find_leftovers(lake.options)
    assert sorted((f.what, f.kept) for f in found) == [(ORPHAN, False), (PENDING, True)]
    (orphan,) = [f.location for f in found if not f.kept]

    raw = raw_options(tmp_path)
    options = [f"--option={k}={v}" for k, v in raw.items() if k.startswith("consumer")]
    argv = ["sweep", "--pipeline", "p1", "--state-uri", raw["state.uri"], *options, "--json"]
    assert main(argv) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["consumer"] == "iceberg" and listed["consumer_path"] is None
    assert {(f["kind"], f["in_flight"]) for f in listed["found"]} >= {
        (ORPHAN, False),
        (PENDING, True),
    }
    assert main([*argv, "--delete", "--force"]) == 0
    assert orphan in json.loads(capsys.readouterr().out)["deleted"]
    assert [(f.what, f.kept) for f in ICEBERG.find_leftovers(lake.options)] == [(PENDING, True)]
    assert lake.values() == [b"0:0"]


def _process_io() -> tuple[int, int]:
    """Bytes this process read and wrote through system calls (``rchar``, ``wchar``)."""
    fields = dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())
    return int(fields["rchar"]), int(fields["wchar"])


@pytest.mark.skipif(not Path("/proc/self/io").exists(), reason="needs Linux /proc/self/io")
def test_the_driver_moves_no_item_bytes(tmp_path: Path) -> None:
    """Delivery reads the data files' footers and writes Iceberg metadata only: a small,
    per-file amount, not the bundle (driver-side ``table.append`` reads and writes it all)."""
    import os

    from sink.bundle import Bundle

    def batch(partition: int, n: int) -> pa.RecordBatch:
        gt = gt_batch(1, partition, range(n)).column(1)
        values = pa.array([os.urandom(200) for _ in range(n)], pa.binary())
        return pa.RecordBatch.from_arrays([values, gt], names=["value", "gt"])

    lake = Lake(tmp_path)
    lake.p.record_batch(0, 1)
    msgs = [lake.p.write(0, [batch(i, 20_000)], partition=i) for i in range(4)]
    bundle = Bundle.from_messages("p1", 1, 0, msgs)
    read0, written0 = _process_io()
    ack = lake.consumer.deliver(bundle)
    read1, written1 = _process_io()
    assert ack.driver_bytes == 0 and bundle.size > 16_000_000
    assert read1 - read0 < bundle.size / 20, f"read {read1 - read0:,} B"
    assert written1 - written0 < bundle.size / 100, f"wrote {written1 - written0:,} B"


def test_a_bundle_moved_but_not_committed_is_not_reported_lost(tmp_path: Path) -> None:
    """Its staged part is gone because delivery moved it to its data file: a restart
    commits it, so the operator's way out refuses to skip it (nothing is lost)."""
    from gtbarrier import resolve_lost_inflight
    from state.errors import StateError

    lake = Lake(tmp_path)
    lake.consumer.faults = Crash("after_deliver")
    with pytest.raises(InjectedFault):
        lake.commit(0, 1, [[gt_batch(1, 0, [0, 1])]])
    inflight = lake.p.inflight()
    assert lake.consumer.staging.missing(inflight.locations) == inflight.locations
    raw = raw_options(tmp_path, **{"pipeline.id": "p1"})
    with pytest.raises(StateError, match="restarting the query delivers it; nothing changed"):
        resolve_lost_inflight(
            {**raw, "state.uri": lake.options.store.uri}, bundle_id=1, acknowledge_loss=True
        )
    assert lake.p.inflight() == inflight and lake.p.state().skipped == ()


def test_catalog_secrets_given_by_reference_never_travel_resolved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A catalog property given as a secret reference resolves where pyiceberg's catalog
    or file system is made; the settings the write tasks receive keep the reference."""
    secret = "iceberg-secret-marker-5d2"
    monkeypatch.setenv("GTB_TEST_ICEBERG_SECRET", secret)
    reference = "${env:GTB_TEST_ICEBERG_SECRET}"
    raw = raw_options(tmp_path, **{"consumer.iceberg.catalog.s3.secret-access-key": reference})
    options = SinkOptions.parse(raw).check_at_start(SCHEMA)
    recorded = dict(iceberg_settings(options).io_properties)
    assert recorded["s3.secret-access-key"] == reference
    assert secret.encode() not in pickle.dumps(options)
