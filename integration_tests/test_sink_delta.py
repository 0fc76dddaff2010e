"""consumer=delta with real Spark drivers, Kafka (Tansu) and S3 (SeaweedFS): Delta tables
on the local file system and on S3, written by the ``deltalake`` package (delta-rs).

Each driver runs ``integration_tests/sink_driver_program.py`` (gtkafka -> drop multiples
of 3 -> barrier) or ``dead_letter_driver_program.py`` in its own process group; faults
are injected with ``GTBARRIER_FAULT``. At the end every surviving input record is in the
table exactly once, each bundle is one Delta commit, and the table's transaction version
for the pipeline is the last bundle.
"""

from __future__ import annotations

import shutil
import signal
import threading
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from integration_tests.test_sink_pipeline import check_exactly_once_in_gt_order, produce_numbered
from sink.gt_column import sort_by_gt
from state.layout import PipelineLayout
from state.protocol.barrier_state import read_barrier_state
from state.stores import open_store

pytest.importorskip("deltalake")

from deltalake import CommitProperties, DeltaTable, Transaction, write_deltalake

PROGRAM = Path(__file__).with_name("sink_driver_program.py")
DEAD_LETTER_PROGRAM = Path(__file__).with_name("dead_letter_driver_program.py")
DRIVER_TIMEOUT = 240.0


class Lake:
    """One pipeline into a Delta table, run by successive driver processes."""

    def __init__(
        self,
        driver: Any,
        kafka: Any,
        tmp_path: Path,
        pipeline: str,
        topic: str,
        *,
        uri: str | None = None,
        storage: dict[str, str] | None = None,
        extra: dict[str, str] | None = None,
    ) -> None:
        self.driver, self.kafka, self.tmp_path = driver, kafka, tmp_path
        self.pipeline, self.topic = pipeline, topic
        self.state_uri = f"file://{tmp_path}/state"
        self.uri = uri or f"file://{tmp_path}/table"
        self.storage = storage or {}
        self.sink_options = {
            "consumer": "delta",
            "consumer.delta.uri": self.uri,
            **{f"consumer.delta.storage.{k}": v for k, v in self.storage.items()},
            **(extra or {}),
        }
        self.store = open_store(self.state_uri)
        self.layout = PipelineLayout(pipeline)

    def run(
        self,
        checkpoint: str,
        *extra: str,
        fault: str | None = None,
        program: Path = PROGRAM,
        env: dict[str, str] | None = None,
    ) -> Any:
        args = [
            "--bootstrap", self.kafka.bootstrap, "--topic", self.topic,
            "--pipeline", self.pipeline, "--state", self.state_uri,
            "--checkpoint", str(self.tmp_path / checkpoint), "--max-offsets", "1000", *extra,
        ]  # fmt: skip
        for key, value in self.sink_options.items():
            args += ["--sink-option", f"{key}={value}"]
        environment = dict(env or {})
        if fault:
            environment["GTBARRIER_FAULT"] = fault
        return self.driver.run(program, *args, env=environment or None)

    def progress(self) -> tuple[int, int | None]:
        s = read_barrier_state(self.store, self.layout)
        return s.gt_last, None if s.inflight is None else s.inflight.bundle_id

    def table(self, storage: dict[str, str] | None = None) -> DeltaTable:
        return DeltaTable(self.uri, storage_options=storage or self.resolved())

    def resolved(self) -> dict[str, str]:
        return self.storage

    def txn(self) -> int | None:
        return self.table().transaction_version(self.pipeline)

    def operations(self) -> list[str]:
        """The table's commits, oldest first."""
        return [h["operation"] for h in reversed(self.table().history())]

    def ours(self) -> pa.Table:
        return sort_by_gt(self.table().to_pyarrow_table())

    def staged(self) -> list[str]:
        """Parts still staged: in the state store (merge) or under the table (append)."""
        found = list(self.store.list(self.layout.staging_prefix))
        if self.uri.startswith("file://"):
            root = Path(self.uri[len("file://") :]) / "_gtbarrier" / self.pipeline / "staging"
            found += sorted(str(p) for p in root.rglob("*") if p.is_file())
        return found


def killed(proc: Any) -> None:
    code = proc.wait(DRIVER_TIMEOUT)
    assert code == -signal.SIGKILL, f"driver exited {code}, not killed:\n{proc.output()[-3000:]}"


def finished(proc: Any) -> str:
    code = proc.wait(DRIVER_TIMEOUT)
    out: str = proc.output()
    assert code == 0, out[-3000:]
    return out


def failed(proc: Any) -> str:
    code = proc.wait(DRIVER_TIMEOUT)
    out: str = proc.output()
    assert code == 1, f"driver exited {code}, expected a failed query:\n{out[-3000:]}"
    return out


@pytest.mark.slow
@pytest.mark.timeout(1500)
def test_sigkill_at_each_fault_point_and_a_lost_checkpoint_is_exactly_once(
    driver: Any, kafka: Any, tmp_path: Path
) -> None:
    n, partitions = 6_000, 2  # 6 epochs of 1000 records
    topic = kafka.create_topic(partitions=partitions)
    produce_numbered(kafka, topic, n, partitions)
    lake = Lake(driver, kafka, tmp_path, "lake", topic)

    # 1. bundle 0 committed; the driver dies before bundle 1 is recorded in flight
    killed(lake.run("cp1", fault="before_inflight:1"))
    assert lake.progress() == (0, None) and lake.txn() == 0
    # 2. bundle 1 recorded in flight, not committed
    killed(lake.run("cp1", fault="after_inflight:1"))
    assert lake.progress() == (0, 1) and lake.txn() == 0
    # 3. bundle 1 delivered from its staged parts; bundle 2 read, not committed
    killed(lake.run("cp1", fault="after_deliver:2"))
    assert lake.progress() == (1, 2) and lake.txn() == 1
    # 4. bundle 2 committed; the driver dies before it hears the answer
    killed(lake.run("cp1", fault="after_consumer_commit:3"))
    assert lake.progress() == (2, 3) and lake.txn() == 3
    # 5. bundle 3 is found in the table (not committed again); bundle 4 acknowledged, then
    #    the driver dies before GT_last moves
    killed(lake.run("cp1", fault="after_ack:4"))
    assert lake.progress() == (3, 4) and lake.txn() == 4
    writes = lake.operations().count("WRITE")
    assert writes == 5  # bundles 0..4, each once
    # 6. the checkpoint is lost: a new one replays epochs 0..4 (all found by the
    #    transaction id), and every attempt at bundle 5 fails before its commit: the
    #    query stops with the bundle in flight
    shutil.rmtree(tmp_path / "cp1")
    assert "injected fault deliver_error:5" in failed(lake.run("cp2", fault="deliver_error:5"))
    assert lake.progress() == (4, 5) and lake.txn() == 4
    # 7. to the end
    finished(lake.run("cp2"))
    assert lake.progress() == (5, None) and lake.txn() == 5
    assert lake.operations() == ["CREATE TABLE"] + ["WRITE"] * 6  # one commit per bundle
    check_exactly_once_in_gt_order(lake.ours(), n, partitions)
    assert lake.staged() == []


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_merge_mode_upserts_by_key_one_commit_per_bundle(
    driver: Any, kafka: Any, tmp_path: Path
) -> None:
    n, partitions, keys = 3_000, 2, 100
    topic = kafka.create_topic(partitions=partitions)
    # number i has key k<i % 100>, in partition i % 2: a key's records are in one partition
    kafka.produce(topic, ((b"k%d" % (i % keys), b"%d" % i, None, i % partitions) for i in range(n)))
    lake = Lake(
        driver,
        kafka,
        tmp_path,
        "merged",
        topic,
        extra={"consumer.delta.mode": "merge", "consumer.delta.keyColumns": "key"},
    )
    killed(lake.run("cp", fault="after_consumer_commit:1"))
    assert lake.txn() == 1
    finished(lake.run("cp"))
    assert lake.txn() == 2
    assert lake.operations() == ["CREATE TABLE"] + ["MERGE"] * 3
    rows = lake.table().to_pyarrow_table()
    got = dict(zip(rows.column("key").to_pylist(), rows.column("value").to_pylist(), strict=True))
    last: dict[bytes, bytes] = {}
    for i in range(n):
        if i % 3:
            last[b"k%d" % (i % keys)] = b"%d" % i
    assert rows.num_rows == len(got) == keys
    assert got == last


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_table_that_cannot_take_the_input_is_refused_before_data_moves(
    driver: Any, kafka: Any, tmp_path: Path
) -> None:
    topic = kafka.create_topic(partitions=1)
    produce_numbered(kafka, topic, 100, 1)
    lake = Lake(driver, kafka, tmp_path, "refused", topic)
    (tmp_path / "table").mkdir()
    DeltaTable.create(lake.uri, pa.schema([("key", pa.binary()), ("value", pa.string())]))
    out = failed(lake.run("cp"))
    assert "option 'consumer.delta.uri'" in out
    assert "column 'value' is string in the table and binary in the input" in out
    assert lake.operations() == ["CREATE TABLE"]
    assert lake.store.get_or_none(lake.layout.barrier_state) is None  # nothing claimed
    assert lake.staged() == []


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_rows_delta_refuses_go_to_dead_letters_and_the_rest_to_the_table(
    driver: Any, kafka: Any, tmp_path: Path
) -> None:
    n = 2_000
    topic = kafka.create_topic(partitions=2)
    kafka.produce(topic, ((b"k%d" % i, b"%d" % i, None, i % 2) for i in range(n)))
    dead = tmp_path / "dead"
    lake = Lake(
        driver,
        kafka,
        tmp_path,
        "dl",
        topic,
        extra={"errors.tolerance": "all", "errors.deadLetter.path": f"file://{dead}"},
    )
    bad = [5, 1_500]
    finished(lake.run("cp", "--bad-utf8", ",".join(map(str, bad)), program=DEAD_LETTER_PROGRAM))
    rows = lake.table().to_pyarrow_table()
    values = sorted(int(v) for v in rows.column("value").to_pylist())
    assert values == [i for i in range(n) if i not in bad]  # each once, the bad ones out
    import pyarrow.parquet as pq

    files = sorted(dead.glob("bundle-*.parquet"))
    refused = pa.concat_tables([pq.read_table(f) for f in files])
    assert sorted(int(v) for v in refused.column("value").to_pylist()) == bad
    assert lake.txn() == 1


# --- S3 (SeaweedFS) ------------------------------------------------------------------------


def s3_storage(server: Any, secret: str) -> dict[str, str]:
    return {
        "AWS_ENDPOINT_URL": server.endpoint,
        "AWS_REGION": server.region,
        "AWS_ACCESS_KEY_ID": server.access_key_id,
        "AWS_SECRET_ACCESS_KEY": secret,
        "AWS_ALLOW_HTTP": "true",
    }


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_table_on_s3_is_exactly_once_with_its_secret_given_by_reference(
    driver: Any, kafka: Any, s3: Any, tmp_path: Path
) -> None:
    n, partitions = 3_000, 2
    topic = kafka.create_topic(partitions=partitions)
    produce_numbered(kafka, topic, n, partitions)
    server = s3.server
    secret = server.secret_access_key
    lake = Lake(
        driver,
        kafka,
        tmp_path,
        "s3lake",
        topic,
        uri=s3.uri("tables/events"),
        storage=s3_storage(server, "${env:DELTA_TEST_S3_SECRET}"),
    )
    lake.resolved = lambda: s3_storage(server, secret)  # type: ignore[method-assign]
    env = {"DELTA_TEST_S3_SECRET": secret}
    killed(lake.run("cp", fault="after_consumer_commit:1", env=env))
    assert lake.txn() == 1
    out = finished(lake.run("cp", env=env))
    assert lake.txn() == 2
    assert lake.operations() == ["CREATE TABLE"] + ["WRITE"] * 3
    check_exactly_once_in_gt_order(lake.ours(), n, partitions)
    # the query ran with the reference (resolved where the table was opened: SeaweedFS
    # checks every request's signature), and its output never shows the secret by name
    assert "consumer.delta.storage.AWS_SECRET_ACCESS_KEY=${env:DELTA_TEST_S3_SECRET}" in out
    assert f"SECRET_ACCESS_KEY={secret}" not in out and f"'{secret}'" not in out
    listed = s3.client().list_objects_v2(Bucket=s3.bucket, Prefix="tables/events/_delta_log/")
    assert any(o["Key"].endswith("00000000000000000003.json") for o in listed["Contents"])


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_seaweedfs_lets_one_of_two_concurrent_commits_of_a_log_version_win(s3: Any) -> None:
    """Delta on S3 needs the server to refuse a second write of a log entry: delta-rs writes
    it with ``If-None-Match: *``. Asked directly, and through delta-rs with eight writers
    committing from the same table version at once."""
    from botocore.exceptions import ClientError

    client = s3.client()
    client.put_object(Bucket=s3.bucket, Key="probe", Body=b"first", IfNoneMatch="*")
    with pytest.raises(ClientError) as err:
        client.put_object(Bucket=s3.bucket, Key="probe", Body=b"second", IfNoneMatch="*")
    assert err.value.response["Error"]["Code"] == "PreconditionFailed"
    assert client.get_object(Bucket=s3.bucket, Key="probe")["Body"].read() == b"first"

    server = s3.server
    storage = s3_storage(server, server.secret_access_key)
    uri = s3.uri("race")
    DeltaTable.create(uri, pa.schema([("writer", pa.int64())]), storage_options=storage)
    writers = 8
    tables = [DeltaTable(uri, storage_options=storage) for _ in range(writers)]
    start = threading.Barrier(writers)
    won: list[int] = []
    lost: list[str] = []

    def commit(i: int) -> None:
        start.wait()
        try:
            write_deltalake(
                tables[i],
                pa.table({"writer": [i]}),
                mode="append",
                commit_properties=CommitProperties(
                    app_transactions=[Transaction("race", 1)], max_commit_retries=0
                ),
            )
        except Exception as e:
            lost.append(type(e).__name__)
            return
        won.append(i)

    threads = [threading.Thread(target=commit, args=(i,)) for i in range(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert len(won) == 1, f"{len(won)} writers committed version 1: {won}"
    assert lost == ["CommitFailedError"] * (writers - 1)
    table = DeltaTable(uri, storage_options=storage)
    assert table.version() == 1
    assert table.to_pyarrow_table().column("writer").to_pylist() == won
    assert pc.sum(pc.equal(table.to_pyarrow_table().column("writer"), won[0])).as_py() == 1


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_an_append_on_s3_moves_the_staged_parts_into_the_table_reading_no_rows_on_the_driver(
    s3: Any, tmp_path: Path
) -> None:
    """On SeaweedFS, write tasks stage their parts under the table, the commit copies them
    server-side to data files and adds them by their footers (no item bytes through the
    driver); a crash between the copy and the commit ends with every row exactly once, the
    redelivery committing the files the crashed attempt moved."""
    from sink.bundle import Bundle
    from sink.consumers import open_consumer
    from sink.consumers.delta.delta_staging import DeltaStaging, data_file_location
    from sink.faults import FaultInjector, InjectedFault
    from sink.options import SinkOptions
    from tests.sink_helpers import Pipeline, gt_batch
    from tests.test_sink_delta import SCHEMA, Crash, add_paths

    server = s3.server
    storage = s3_storage(server, server.secret_access_key)
    uri = s3.uri("tables/direct")
    options = SinkOptions.parse(
        {
            "pipeline.id": "p1",
            "state.uri": f"memory://{tmp_path.name}",
            "consumer": "delta",
            "consumer.delta.uri": uri,
            **{f"consumer.delta.storage.{k}": v for k, v in storage.items()},
        }
    ).check_at_start(SCHEMA)
    p = Pipeline(options)
    consumer = open_consumer(options, p.store, FaultInjector())
    assert isinstance(consumer.staging, DeltaStaging)
    p.consumer = consumer  # type: ignore[assignment]
    p.staging = consumer.staging
    client = s3.client()

    def keys(prefix: str) -> list[str]:
        listed = client.list_objects_v2(Bucket=s3.bucket, Prefix=f"tables/direct/{prefix}")
        return sorted(o["Key"].removeprefix("tables/direct/") for o in listed.get("Contents", []))

    p.record_batch(0, 1)
    first = Bundle.from_messages(
        "p1", 1, 0, [p.write(0, [gt_batch(1, i, [0, 1])], partition=i) for i in range(2)]
    )
    staged = sorted(part.location for part in first.parts)
    assert keys("_gtbarrier/p1/staging/") == staged
    ack = consumer.deliver(first)
    assert (ack.rows, ack.driver_bytes) == (4, 0)
    table = DeltaTable(uri, storage_options=storage)
    assert add_paths(table) == sorted(data_file_location("p1", 1, s) for s in staged)
    assert keys("_gtbarrier/p1/staging/") == []

    consumer.faults = Crash("after_deliver")  # after the copy, before the commit
    batches = [gt_batch(2, 0, [2, 3, 4])]
    p.record_batch(1, 2)
    with pytest.raises(InjectedFault):
        p.barrier().commit([p.write(1, batches)], 1)
    moved = [k for k in keys("gtbarrier/p1/") if k.startswith("gtbarrier/p1/000000000002-")]
    assert len(moved) == 1
    assert DeltaTable(uri, storage_options=storage).transaction_version("p1") == 1
    p.run_id = "run-b"  # a restart resolves the bundle in flight
    assert p.barrier().commit([p.write(1, batches)], 1).recovered == 2  # the bundle recovered
    table = DeltaTable(uri, storage_options=storage)
    assert table.transaction_version("p1") == 2
    assert set(moved) <= set(add_paths(table))
    assert keys("gtbarrier/p1/") == add_paths(table)  # nothing moved and left behind
    values = sorted(table.to_pyarrow_table().column("value").to_pylist())
    assert values == [b"0:0", b"0:1", b"0:2", b"0:3", b"0:4", b"1:0", b"1:1"]
