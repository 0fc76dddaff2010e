"""``consumer=postgres`` against a real PostgreSQL server (``postgres`` fixture).

Most tests run the barrier protocol in-process (tests/sink_helpers.Pipeline, the barrier
state in memory://) with faults raised at a protocol step or done to the server: the
connection terminated while the COPY is under way, the server SIGKILLed between the COPY
and the COMMIT, a bad DSN, a missing table. The slow test runs gtkafka -> barrier ->
postgres in driver processes SIGKILLed between the COPY and the COMMIT and after the
COMMIT before the acknowledgement. After each fault the table holds every row exactly
once and ``gtbarrier_bundles`` lists the bundles in gt order.
"""

from __future__ import annotations

import datetime
import decimal
import signal
import threading
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from harness.ports import free_port
from harness.postgres import PostgresSchema, PostgresServer
from harness.process import wait_until
from integration_tests.test_sink_pipeline import check_exactly_once_in_gt_order, produce_numbered
from sink.bundle import Bundle
from sink.consumers import open_consumer
from sink.consumers.base import LastBundle
from sink.consumers.postgres.postgres_connections import CONNECTIONS
from sink.consumers.postgres.postgres_consumer import PostgresConsumer
from sink.consumers.postgres.postgres_options import PostgresSettings
from sink.faults import FaultInjector, InjectedFault
from sink.options import SinkOptions
from sink.staging import StoreStaging
from state.errors import (
    CommitFailed,
    CommitStateUnknown,
    ConfigError,
    DeliveryFailed,
    GtBarrierError,
)
from state.layout import PipelineLayout
from state.protocol.barrier_state import read_barrier_state
from state.records.inflight_bundle import StagedPart
from state.stores import open_store
from tests.sink_helpers import Pipeline, gt_batch, plain_batch

pytestmark = pytest.mark.timeout(240)
PROGRAM = Path(__file__).with_name("sink_driver_program.py")
DRIVER_TIMEOUT = 240.0


class At(FaultInjector):
    """Run ``action`` (default: raise) at one step of one bundle, once."""

    def __init__(self, step: str, n: int, action: Any = None) -> None:
        super().__init__()
        self.step, self.n, self.action = step, n, action

    def armed(self, step: str, n: int | None) -> bool:
        return (step, n) == (self.step, self.n)

    def at(self, step: str, n: int | None) -> None:
        if not self.armed(step, n):
            return
        self.step = "done"
        if self.action is not None:
            self.action()
            return
        raise InjectedFault(f"crash at {step}:{n}")


def pg_pipeline(
    postgres: PostgresSchema,
    table: str = "events",
    *,
    faults: FaultInjector | None = None,
    options: dict[str, str] | None = None,
) -> Pipeline:
    raw = options or {}
    given = {
        "pipeline.id": "p1",
        "consumer": "postgres",
        "consumer.postgres.dsn": postgres.dsn,
        "consumer.postgres.table": postgres.table(table),
        "delivery.retryBackoffMs": "10",
        **raw,
    }
    p = Pipeline(SinkOptions.parse({**given, "state.uri": "memory://unused"}))
    p.options = SinkOptions.parse({**given, "state.uri": f"memory://{p.query_id}"})
    p.store = open_store(p.options.store)
    faults = faults if faults is not None else FaultInjector()
    p.consumer = open_consumer(p.options, p.store, faults)  # type: ignore[assignment]
    p.staging = p.consumer.staging
    return p


def commit_epoch(
    p: Pipeline, batch_id: int, epoch: int, parts: list[list[pa.RecordBatch]], **kw: Any
) -> Any:
    p.record_batch(batch_id, epoch)
    msgs = [p.write(batch_id, batches, partition=i, **kw) for i, batches in enumerate(parts)]
    return p.barrier().commit(msgs, batch_id)


def consumer(p: Pipeline) -> PostgresConsumer:
    c = p.consumer
    assert isinstance(c, PostgresConsumer)
    return c


def values(postgres: PostgresSchema, table: str = "events") -> list[bytes]:
    """The ``value`` of every row in gt order ([] while the table does not exist)."""
    [(exists,)] = postgres.rows(f'SELECT to_regclass(\'"{{schema}}"."{table}"\') IS NOT NULL')
    if not exists:
        return []
    rows = postgres.rows(
        f'SELECT value FROM "{{schema}}"."{table}" '
        "ORDER BY gt_epoch, gt_topic, gt_partition, gt_offset"
    )
    return [bytes(r[0]) for r in rows]


def bundles(postgres: PostgresSchema) -> list[tuple[int, int, int]]:
    """``(bundle_id, gt, rows)`` in the order they were committed."""
    rows = postgres.rows(
        'SELECT bundle_id, gt, rows FROM "{schema}".gtbarrier_bundles ORDER BY committed_at'
    )
    out = [(int(a), int(b), int(c)) for a, b, c in rows]
    assert [b[1] for b in out] == sorted({b[1] for b in out}), f"bundles not in gt order: {out}"
    return out


def test_bundles_are_copied_with_their_id_in_one_transaction(postgres: PostgresSchema) -> None:
    p = pg_pipeline(postgres)
    assert consumer(p).last_bundle() is None
    first = commit_epoch(p, 0, 1, [[gt_batch(1, 0, [0, 1, 2])], [gt_batch(1, 1, [0, 1])]])
    assert first.action == "delivered" and first.rows == 5
    commit_epoch(p, 1, 2, [[gt_batch(2, 0, [3])]])
    assert values(postgres) == [b"0:0", b"0:1", b"0:2", b"1:0", b"1:1", b"0:3"]
    assert bundles(postgres) == [(1, 1, 5), (2, 2, 1)]
    assert consumer(p).last_bundle() == LastBundle(2, 2)
    # one transaction per bundle: a row's xmin is its bundle's (docs/sink.md)
    per_bundle = postgres.rows(
        'SELECT b.bundle_id, count(*) FROM "{schema}".events e JOIN "{schema}".gtbarrier_bundles b '
        "ON b.xmin = e.xmin GROUP BY 1 ORDER BY 1"
    )
    assert per_bundle == [(1, 5), (2, 1)]
    gt = postgres.rows('SELECT gt_epoch, gt_topic, gt_partition, gt_offset FROM "{schema}".events')
    assert (1, "t", 1, 1) in gt
    # a replayed batch is dropped by the barrier; a redelivery is recognised by the consumer
    assert commit_epoch(p, 1, 2, [[gt_batch(2, 0, [3])]]).action == "dropped"
    assert values(postgres)[-1] == b"0:3" and len(values(postgres)) == 6


def test_the_bookkeeping_table_keeps_the_newest_bundles_of_each_pipeline(
    postgres: PostgresSchema,
) -> None:
    """``gtbarrier_bundles`` stays bounded: each delivery's transaction deletes the
    pipeline's rows older than the last ``bundlesRetained``; another pipeline's rows in
    the same schema are left alone."""
    other = pg_pipeline(postgres, options={"pipeline.id": "p2"})
    commit_epoch(other, 0, 1, [[gt_batch(1, 0, [100])]])
    p = pg_pipeline(postgres, options={"consumer.postgres.bundlesRetained": "3"})
    for epoch in range(1, 8):
        commit_epoch(p, epoch - 1, epoch, [[gt_batch(epoch, 0, [epoch])]])
    rows = postgres.rows(
        'SELECT pipeline, bundle_id FROM "{schema}".gtbarrier_bundles ORDER BY 1, 2'
    )
    assert rows == [("p1", 5), ("p1", 6), ("p1", 7), ("p2", 1)]
    assert consumer(p).last_bundle() == LastBundle(7, 7)
    assert len(values(postgres)) == 8  # every row delivered once
    # a redelivery of the bundle in flight is still recognised by its row
    assert commit_epoch(p, 6, 7, [[gt_batch(7, 0, [7])]]).action == "dropped"
    assert len(values(postgres)) == 8


def test_types_round_trip(postgres: PostgresSchema) -> None:
    at = datetime.datetime(2024, 5, 6, 7, 8, 9, 123456, tzinfo=datetime.UTC)
    batch = pa.RecordBatch.from_pydict(
        {
            "id": pa.array([1, 2], pa.int64()),
            "small": pa.array([3, None], pa.int16()),
            "ok": pa.array([True, None]),
            "x": pa.array([1.5, float("nan")], pa.float64()),
            "price": pa.array([decimal.Decimal("12.34"), None], pa.decimal128(10, 2)),
            "name": pa.array(['a "quoted", line\nbreak', ""]),
            "raw": pa.array([b"\x00\x01\xff", None], pa.binary()),
            "day": pa.array([datetime.date(2024, 1, 31), None], pa.date32()),
            "at": pa.array([at, None], pa.timestamp("us", tz="UTC")),
            "tags": pa.array([["a", None, 'b"\\'], []], pa.list_(pa.string())),
            "nums": pa.array([[1, 2], None], pa.list_(pa.int32())),
        }
    )
    p = pg_pipeline(postgres, "typed")
    commit_epoch(p, 0, 1, [[batch]], has_gt=False)
    rows = postgres.rows('SELECT * FROM "{schema}".typed ORDER BY id')
    assert rows[0][:6] == (1, 3, True, 1.5, decimal.Decimal("12.34"), 'a "quoted", line\nbreak')
    assert bytes(rows[0][6]) == b"\x00\x01\xff"
    assert rows[0][7:] == (datetime.date(2024, 1, 31), at, ["a", None, 'b"\\'], [1, 2])
    assert rows[1][1:3] == (None, None) and rows[1][5] == "" and rows[1][6] is None
    assert rows[1][9] == [] and rows[1][10] is None
    types = dict(
        postgres.rows(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_schema = %s AND table_name = 'typed'",
            (postgres.schema,),
        )
    )
    assert types["at"] == "timestamp with time zone" and types["raw"] == "bytea"
    assert types["price"] == "numeric" and types["tags"] == "ARRAY"


def test_upsert_keeps_the_last_row_of_each_key(postgres: PostgresSchema) -> None:
    p = pg_pipeline(
        postgres,
        "counts",
        options={"consumer.postgres.mode": "upsert", "consumer.postgres.keyColumns": "key"},
    )
    commit_epoch(p, 0, 1, [[plain_batch(["a", "b", "a"], [1, 2, 3])]], has_gt=False)
    commit_epoch(p, 1, 2, [[plain_batch(["a", "c"], [10, 5])]], has_gt=False)
    rows = postgres.rows('SELECT key, count FROM "{schema}".counts ORDER BY key')
    assert rows == [("a", 10), ("b", 2), ("c", 5)]
    assert bundles(postgres) == [(1, 1, 3), (2, 2, 2)]


def test_crash_before_and_after_commit_is_resolved_exactly_once(
    postgres: PostgresSchema,
) -> None:
    # between the COPY and the COMMIT: the transaction dies with its connection
    p = pg_pipeline(postgres, faults=At("after_deliver", 1))
    with pytest.raises(InjectedFault):
        commit_epoch(p, 0, 1, [[gt_batch(1, 0, [0, 1])]])
    assert values(postgres) == [] and p.inflight().bundle_id == 1
    p.run_id = "run-b"  # a restarted driver replays batch 0: bundle 1 is delivered again
    replay = commit_epoch(p, 0, 1, [[gt_batch(1, 0, [0, 1])]])
    assert (replay.recovered, replay.action) == (1, "dropped")
    assert bundles(postgres) == [(1, 1, 2)]
    # after the COMMIT, before the acknowledgement
    consumer(p).faults = At("after_consumer_commit", 2)
    with pytest.raises(InjectedFault):
        commit_epoch(p, 1, 2, [[gt_batch(2, 0, [2])]])
    assert p.state().gt_last == 1 and p.inflight().bundle_id == 2
    p.run_id = "run-c"
    replay = commit_epoch(p, 1, 2, [[gt_batch(2, 0, [2])]])
    assert (replay.recovered, replay.action) == (2, "dropped")  # found: not copied again
    commit_epoch(p, 2, 3, [[gt_batch(3, 0, [3])]])
    assert values(postgres) == [b"0:0", b"0:1", b"0:2", b"0:3"]
    assert bundles(postgres) == [(1, 1, 2), (2, 2, 1), (3, 3, 1)]


def test_connection_terminated_during_copy_is_retried(postgres: PostgresSchema) -> None:
    p = pg_pipeline(postgres)
    commit_epoch(p, 0, 1, [[gt_batch(1, 0, [0])]])
    admin = postgres.connect()
    locker = postgres.connect(autocommit=False)
    locker.execute(f'LOCK TABLE "{postgres.schema}".events IN ACCESS EXCLUSIVE MODE')
    result: dict[str, Any] = {}

    def run() -> None:
        try:
            result["out"] = commit_epoch(p, 1, 2, [[gt_batch(2, 0, [1, 2])]])
        except BaseException as err:
            result["err"] = err

    worker = threading.Thread(target=run)
    worker.start()

    def copying() -> int | None:
        row = admin.execute(
            "SELECT pid FROM pg_stat_activity WHERE query LIKE 'COPY%%' "
            "AND wait_event_type = 'Lock' AND application_name = 'gtbarrier'"
        ).fetchone()
        return None if row is None else int(row[0])

    pid = wait_until(copying, timeout=30, what="the COPY to wait for the table lock")
    admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
    locker.rollback()
    worker.join(60)
    admin.close()
    locker.close()
    assert "err" not in result, result.get("err")
    assert result["out"].action == "delivered"
    assert values(postgres) == [b"0:0", b"0:1", b"0:2"]
    assert bundles(postgres) == [(1, 1, 1), (2, 2, 2)]


def test_server_killed_before_commit_then_restarted(
    postgres: PostgresSchema, postgres_server: PostgresServer
) -> None:
    if postgres_server.external:
        # GTB_POSTGRES_DSN names a server this test does not own and must not stop.
        pytest.skip("stops and restarts the server: needs the harness's own, not GTB_POSTGRES_DSN")
    p = pg_pipeline(
        postgres,
        faults=At("after_deliver", 2, postgres_server.stop),
        options={"delivery.maxRetries": "1"},
    )
    commit_epoch(p, 0, 1, [[gt_batch(1, 0, [0])]])
    with pytest.raises(GtBarrierError) as info:
        commit_epoch(p, 1, 2, [[gt_batch(2, 0, [1, 2])]])
    assert isinstance(info.value, DeliveryFailed | CommitStateUnknown), info.value
    assert p.inflight().bundle_id == 2
    postgres_server.start()
    p.run_id = "run-b"  # the restarted query replays batch 1
    out = commit_epoch(p, 1, 2, [[gt_batch(2, 0, [1, 2])]])
    assert out.recovered == 2 and out.action == "dropped"
    assert values(postgres) == [b"0:0", b"0:1", b"0:2"]
    assert bundles(postgres) == [(1, 1, 1), (2, 2, 2)]


def spark_schema() -> Any:
    from pyspark.sql import types as st

    from state.records.gt import spark_type

    return st.StructType(
        [st.StructField("value", st.BinaryType()), st.StructField("gt", spark_type())]
    )


def test_bad_dsn_is_a_clear_error(postgres: PostgresSchema) -> None:
    nobody = f"host=127.0.0.1 port={free_port()} user=postgres dbname=postgres connect_timeout=2"
    options = SinkOptions.parse(
        {
            "pipeline.id": "p1",
            "state.uri": "memory://bad-dsn",
            "consumer": "postgres",
            "consumer.postgres.dsn": nobody,
            "consumer.postgres.table": postgres.table("events"),
        }
    )
    with pytest.raises(ConfigError) as info:
        options.check_at_start(spark_schema())
    assert info.value.option == "consumer.postgres.dsn" and "accepts the connection" in str(
        info.value
    )
    no_db = postgres.dsn.replace("dbname=postgres", "dbname=nope")
    with pytest.raises(ConfigError, match='database "nope" does not exist'):
        SinkOptions.parse({**_raw(options), "consumer.postgres.dsn": no_db}).check_at_start(
            spark_schema()
        )
    p = pg_pipeline(postgres, options={"consumer.postgres.dsn": nobody, "delivery.maxRetries": "1"})
    with pytest.raises(DeliveryFailed, match="cannot connect"):
        commit_epoch(p, 0, 1, [[gt_batch(1, 0, [0])]])
    assert p.inflight().bundle_id == 1


def _raw(options: SinkOptions) -> dict[str, str]:
    settings = options.settings
    assert isinstance(settings, PostgresSettings)
    return {
        "pipeline.id": options.pipeline_id,
        "state.uri": options.store.uri,
        "consumer": "postgres",
        "consumer.postgres.dsn": settings.dsn,
        "consumer.postgres.table": settings.qualified,
    }


def test_missing_table_with_create_table_false(postgres: PostgresSchema) -> None:
    raw = {"consumer.postgres.createTable": "false"}
    p = pg_pipeline(postgres, options=raw)
    with pytest.raises(ConfigError) as info:
        p.options.check_at_start(spark_schema())
    assert info.value.option == "consumer.postgres.table"
    assert info.value.value == postgres.table("events")
    with pytest.raises(ConfigError, match="createTable=false"):
        commit_epoch(p, 0, 1, [[gt_batch(1, 0, [0])]])
    assert postgres.rows(
        "SELECT count(*) FROM pg_tables WHERE schemaname = %s", (postgres.schema,)
    ) == [(0,)]
    # created by the check at start when createTable is true, with the input's columns
    created = pg_pipeline(postgres)
    created.options.check_at_start(spark_schema())
    cols = postgres.rows(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
        "AND table_name = 'events' ORDER BY ordinal_position",
        (postgres.schema,),
    )
    assert [c[0] for c in cols] == ["value", "gt_epoch", "gt_topic", "gt_partition", "gt_offset"]
    # an existing table without an input column is refused naming the column
    postgres.execute('ALTER TABLE "{schema}".events DROP COLUMN value')
    with pytest.raises(ConfigError) as missing:
        created.options.check_at_start(spark_schema())
    assert missing.value.option == "value"


# --- Spark: driver processes SIGKILLed around the COMMIT ---------------------------------


def read_back(postgres: PostgresSchema) -> pa.Table:
    from state.records.gt import arrow_array

    rows = postgres.rows(
        'SELECT value, gt_epoch, gt_topic, gt_partition, gt_offset FROM "{schema}".events '
        "ORDER BY gt_epoch, gt_topic, gt_partition, gt_offset"
    )
    cols: list[Any] = [[r[i] for r in rows] for i in range(5)]
    gt = arrow_array(
        pa.array(cols[1], pa.int64()),
        pa.array(cols[2], pa.string()),
        pa.array(cols[3], pa.int32()),
        pa.array(cols[4], pa.int64()),
    )
    return pa.table({"value": pa.array([bytes(v) for v in cols[0]], pa.binary()), "gt": gt})


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_spark_driver_killed_around_the_commit_is_exactly_once(
    driver: Any, kafka: Any, postgres: PostgresSchema, tmp_path: Path
) -> None:
    n, partitions = 4_000, 2  # 4 epochs of 1000 records
    topic = kafka.create_topic(partitions=partitions)
    produce_numbered(kafka, topic, n, partitions)
    state_uri = f"file://{tmp_path}/state"
    layout = PipelineLayout("pg")

    def run(fault: str | None = None) -> Any:
        args = [
            "--bootstrap", kafka.bootstrap, "--topic", topic, "--pipeline", "pg",
            "--state", state_uri, "--checkpoint", str(tmp_path / "cp"), "--max-offsets", "1000",
        ]  # fmt: skip
        for option in (
            "consumer=postgres",
            f"consumer.postgres.dsn={postgres.dsn}",
            f"consumer.postgres.table={postgres.table('events')}",
        ):
            args += ["--sink-option", option]
        return driver.run(PROGRAM, *args, env={"GTBARRIER_FAULT": fault} if fault else None)

    def killed(proc: Any) -> None:
        code = proc.wait(DRIVER_TIMEOUT)
        assert code == -signal.SIGKILL, f"driver exited {code}:\n{proc.output()[-3000:]}"

    def progress() -> tuple[int, int | None]:
        s = read_barrier_state(open_store(state_uri), layout)
        return s.gt_last, None if s.inflight is None else s.inflight.bundle_id

    killed(run("after_deliver:1"))  # COPY done, COMMIT not sent
    assert progress() == (0, 1)
    assert [b[0] for b in bundles(postgres)] == [0]
    killed(run("after_consumer_commit:2"))  # COMMIT done, not acknowledged
    assert progress() == (1, 2)
    assert [b[0] for b in bundles(postgres)] == [0, 1, 2]
    final = run()
    assert final.wait(DRIVER_TIMEOUT) == 0, final.output()[-3000:]
    assert progress() == (3, None)
    assert [b[0] for b in bundles(postgres)] == [0, 1, 2, 3]
    check_exactly_once_in_gt_order(read_back(postgres), n, partitions)


# --- a unique violation: the user's index or the bundle's own row ------------------------


def stage(table: pa.Table, bundle_id: int = 1) -> tuple[StoreStaging, Bundle]:
    """``table`` staged as the one part of bundle ``bundle_id`` (memory://)."""
    staging = StoreStaging(open_store(f"memory://pg-unique-{uuid.uuid4().hex}"))
    size = staging.write_part("parts/p0.parquet", table)
    bundle = Bundle(
        pipeline_id="p1",
        epoch=bundle_id,
        query_id="q",
        batch_id=0,
        parts=(StagedPart("parts/p0.parquet", table.num_rows, size),),
        has_gt=False,
        ordered=True,
    )
    return staging, bundle


def unique_consumer(
    postgres: PostgresSchema,
    table: str,
    staging: StoreStaging,
    *,
    exactly_once: bool = True,
    faults: FaultInjector | None = None,
    key_columns: tuple[str, ...] = (),
) -> PostgresConsumer:
    settings = PostgresSettings(
        dsn=postgres.dsn,
        table=table,
        schema=postgres.schema,
        create_table=False,
        mode="upsert" if key_columns else "append",
        key_columns=key_columns,
    )
    return PostgresConsumer(
        settings,
        staging,
        faults if faults is not None else FaultInjector(),
        pipeline_id="p1",
        exactly_once=exactly_once,
    )


def emails(ids: list[int], addresses: list[str]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "email": pa.array(addresses)})


@pytest.mark.parametrize("exactly_once", [True, False], ids=["exactly-once", "at-least-once"])
def test_a_duplicate_of_a_stored_row_on_the_users_index_is_a_poison_row(
    postgres: PostgresSchema, exactly_once: bool
) -> None:
    """Validation cannot see the rows already in the table: the server's unique violation
    on the user's own index fails the delivery as a row the table refuses, naming the
    index, the bundle and the key; it is not taken for the bundle stored by another
    attempt, nor retried."""
    postgres.execute('CREATE TABLE "{schema}".users (id bigint PRIMARY KEY, email text UNIQUE)')
    postgres.execute("INSERT INTO \"{schema}\".users VALUES (1, 'a@example.com')")
    staging, bundle = stage(emails([2, 3], ["b@example.com", "a@example.com"]), bundle_id=7)
    consumer = unique_consumer(postgres, "users", staging, exactly_once=exactly_once)
    with pytest.raises(CommitFailed) as info:
        consumer.deliver(bundle)
    consumer.close()
    message = str(info.value)
    assert "poison row" in message and "bundle 7" in message, message
    assert "users_email_key" in message and "Key (email)=(a@example.com)" in message, message
    assert "SQLSTATE 23505" in message, message
    assert postgres.rows('SELECT id FROM "{schema}".users ORDER BY id') == [(1,)]
    if exactly_once:  # the bookkeeping table, created in the same transaction, is gone too
        recorded = postgres.rows(
            """SELECT to_regclass('"{schema}".gtbarrier_bundles') IS NOT NULL"""
        )
        assert recorded == [(False,)]


def test_the_way_past_a_duplicate_of_a_stored_row_is_to_delete_the_row_the_error_names(
    postgres: PostgresSchema,
) -> None:
    """The operator's way out (docs/sink.md, "postgres"): the bundle stays in flight and
    every restart fails the same way, naming the index and the key; deleting the stored
    row with that key lets the next restart deliver the bundle, once, and go on."""
    postgres.execute('CREATE TABLE "{schema}".users (id bigint PRIMARY KEY, email text UNIQUE)')
    postgres.execute("INSERT INTO \"{schema}\".users VALUES (1, 'a@example.com')")
    p = Pipeline()
    assert isinstance(p.staging, StoreStaging)
    p.consumer = unique_consumer(postgres, "users", p.staging)  # type: ignore[assignment]
    rows = pa.RecordBatch.from_arrays(
        [pa.array([2, 3], pa.int64()), pa.array(["b@example.com", "a@example.com"])],
        names=["id", "email"],
    )
    p.record_batch(0, epoch=1)
    messages: list[str] = []
    for run in ("run-a", "run-b"):  # the first attempt, then a restart on the same checkpoint
        p.run_id = run
        with pytest.raises(CommitFailed) as info:
            p.barrier().commit([p.write(0, [rows], has_gt=False)], 0)
        messages.append(str(info.value))
        assert p.inflight().bundle_id == 1 and p.state().gt_last == -1
    assert all("bundle 1 has a row" in m and "poison row" in m for m in messages), messages
    assert (
        "unique index users_email_key: Key (email)=(a@example.com) already exists" in (messages[1])
    )
    assert postgres.rows('SELECT id FROM "{schema}".users ORDER BY id') == [(1,)]

    # the way out: the stored row with the key the error names is deleted (or changed)
    postgres.execute("DELETE FROM \"{schema}\".users WHERE email = 'a@example.com'")
    p.run_id = "run-c"
    outcome = p.barrier().commit([p.write(0, [rows], has_gt=False)], 0)
    assert outcome.recovered == 1 and outcome.action == "dropped"
    assert p.state().gt_last == 1 and p.state().inflight is None
    p.record_batch(1, epoch=2)
    more = pa.RecordBatch.from_arrays(
        [pa.array([4], pa.int64()), pa.array(["d@example.com"])], names=["id", "email"]
    )
    assert p.barrier().commit([p.write(1, [more], has_gt=False)], 1).action == "delivered"
    assert postgres.rows('SELECT id, email FROM "{schema}".users ORDER BY id') == [
        (2, "b@example.com"),
        (3, "a@example.com"),
        (4, "d@example.com"),
    ]
    p.consumer.close()


def test_a_duplicate_on_another_index_in_upsert_mode_is_a_poison_row(
    postgres: PostgresSchema,
) -> None:
    postgres.execute('CREATE TABLE "{schema}".accounts (id bigint PRIMARY KEY, email text UNIQUE)')
    postgres.execute("INSERT INTO \"{schema}\".accounts VALUES (1, 'a')")
    staging, bundle = stage(emails([2], ["a"]))
    consumer = unique_consumer(postgres, "accounts", staging, key_columns=("id",))
    with pytest.raises(CommitFailed) as info:
        consumer.deliver(bundle)
    consumer.close()
    assert "poison row" in str(info.value) and "accounts_email_key" in str(info.value)
    assert "Key (email)=(a)" in str(info.value)


def race(postgres: PostgresSchema, table: str, bundle_id: int) -> tuple[Any, Any]:
    """Two attempts at bundle ``bundle_id`` into ``table``: the first holds its transaction
    open after the COPY until the second is under way. Their outcomes (an Ack or the
    error), first and second."""
    staging, bundle = stage(emails([1, 2], ["a", "b"]), bundle_id)
    copied, release = threading.Event(), threading.Event()

    def hold() -> None:
        copied.set()
        assert release.wait(60)

    first = unique_consumer(postgres, table, staging, faults=At("after_deliver", bundle_id, hold))
    second = unique_consumer(postgres, table, staging)
    result: dict[str, Any] = {}

    def run_first() -> None:
        try:
            result["first"] = first.deliver(bundle)
        except BaseException as err:
            result["first"] = err

    worker = threading.Thread(target=run_first)
    worker.start()
    assert copied.wait(60), result
    threading.Timer(1.0, release.set).start()  # the second attempt waits on the first by then
    try:
        result["second"] = second.deliver(bundle)
    except BaseException as err:
        result["second"] = err
    worker.join(60)
    first.close()
    second.close()
    return result["first"], result["second"]


def test_a_concurrent_attempt_that_stored_the_bundle_still_acknowledges_it(
    postgres: PostgresSchema,
) -> None:
    """Two attempts at one bundle (a zombie driver's and the new one's): the second waits
    on the first's rows, and when the first commits it meets a unique violation, on the
    user's index or on the bundle's own row in gtbarrier_bundles. Either way the bundle
    is stored, once: the second attempt acknowledges it."""
    postgres.execute('CREATE TABLE "{schema}".users (id bigint PRIMARY KEY, email text UNIQUE)')
    postgres.execute('CREATE TABLE "{schema}".plain (id bigint, email text)')
    for bundle_id, table in enumerate(("users", "plain"), start=1):
        first, second = race(postgres, table, bundle_id)
        assert second.bundle_id == bundle_id, table
        assert not isinstance(first, BaseException), first
        assert postgres.rows(f'SELECT count(*) FROM "{{schema}}".{table}') == [(2,)]
    stored = postgres.rows('SELECT bundle_id FROM "{schema}".gtbarrier_bundles ORDER BY 1')
    assert stored == [(1,), (2,)]


def test_text_reaches_a_latin1_database_as_the_characters_it_is(
    postgres: PostgresSchema, postgres_server: PostgresServer
) -> None:
    """The rows are UTF-8 whatever the database's encoding: the connection says so, and the
    server converts them (a character the database cannot hold is refused, not stored as
    the text of its UTF-8 bytes)."""
    name = f"latin_{uuid.uuid4().hex[:8]}"
    postgres.execute(
        f"CREATE DATABASE {name} TEMPLATE template0 ENCODING 'LATIN1' LC_COLLATE 'C' LC_CTYPE 'C'"
    )
    dsn = postgres.dsn.replace("dbname=postgres", f"dbname={name}")
    try:
        with postgres_server.connect(dsn) as conn:
            conn.execute("CREATE TABLE t (s text)")
        settings = PostgresSettings(dsn=dsn, table="t", create_table=False)
        staging, bundle = stage(pa.table({"s": pa.array(["é", "ß"])}))
        consumer = PostgresConsumer(
            settings, staging, FaultInjector(), pipeline_id="p1", exactly_once=True
        )
        consumer.deliver(bundle)
        consumer.close()
        staging, euro = stage(pa.table({"s": pa.array(["€"])}), bundle_id=2)
        consumer = PostgresConsumer(
            settings, staging, FaultInjector(), pipeline_id="p1", exactly_once=True
        )
        with pytest.raises(CommitFailed, match="22P05"):
            consumer.deliver(euro)
        consumer.close()
        with postgres_server.connect(dsn) as conn:
            stored = conn.execute("SELECT s, convert_to(s, 'LATIN1') FROM t ORDER BY s").fetchall()
        assert stored == [("ß", b"\xdf"), ("é", b"\xe9")]
    finally:
        CONNECTIONS.clear()  # no pooled connection to a database about to be dropped
        postgres.execute(f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")
