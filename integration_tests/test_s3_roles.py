"""Each role's least S3 permissions (docs/security.md), against SeaweedFS with exactly those.

One SeaweedFS server for the module, started with an identity per role and form
(``harness/s3_roles.py``): its grants as SeaweedFS actions (``Read``/``Write``/``List``
scoped to ``bucket/prefix*``) and as the AWS IAM policy document attached to the identity
(SeaweedFS evaluates those too), and, per role and permission, the policy without that
permission. Each role runs its real code paths (no Spark: the product's functions that
Spark's hooks call):

* driver: the coordinator's ``recover()`` (fencing token, barrier claim, resume point in
  the store), the source's planning (start, epochs), the sink's commits of two batches
  (batch records, run claim, in-flight record, parts read and deleted), two snapshots
  with ``retain=1`` (blobs, manifests, resume point, pruning);
* executor: the read task's batch record (created, then found again by a retried task),
  the write tasks' staged parts;
* CLI, read-only: ``gtbarrier status``, ``epochs``, ``sweep``;
* CLI ``sweep --delete``: takes the pipeline and deletes two leftover parts.

Every role works with its grants, in both forms; without any one of its permissions it
fails with a gtbarrier error that names the operation, the key and that permission.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from gtbarrier import SnapshotCoordinator
from gtbarrier.cli import main as gtbarrier
from harness.s3 import S3Server
from harness.s3_roles import (
    CLI_READ,
    CLI_SWEEP,
    DRIVER,
    EXECUTOR,
    ROLES,
    Role,
    aws_policy,
    weed_actions,
    without,
)
from harness.seaweedfs import WeedIdentity
from harness.server import serving
from sink.barrier import Barrier
from sink.bundle import BarrierCommitMessage
from sink.faults import FaultInjector
from sink.options import SinkOptions
from sink.staging import StoreStaging
from sink.writer import BarrierStreamWriter
from state.errors import GtBarrierError
from state.layout import PipelineLayout
from state.protocol import batch_records
from state.protocol.batch_records import write_batch_record
from state.protocol.epoch_log import EpochLog
from state.records.source_offset import SourceOffset
from state.spark_task import StreamingTask
from state.stores import StateStore, StoreConfig, new_store
from tests.coordinator_fakes import FakeQuery, add_batch, batch, fake_spark, write_checkpoint
from tests.sink_helpers import FakeConsumer, gt_batch

BUCKET = "gtb-roles"
PREFIX = "state"
URI = f"s3://{BUCKET}/{PREFIX}"
PIPELINE = "p1"
LAYOUT = PipelineLayout(PIPELINE)
QUERY = "q-roles"
RUN = "run-roles"

pytestmark = pytest.mark.timeout(300)


def identity(name: str, **grants: Any) -> WeedIdentity:
    return WeedIdentity(name, f"AK{secrets.token_hex(6)}", secrets.token_hex(12), **grants)


def identities() -> tuple[dict[str, WeedIdentity], dict[str, dict[str, Any]]]:
    """Per role: ``<role>-actions`` (SeaweedFS actions), ``<role>-policy`` (the AWS
    document) and ``<role>-without-<Permission>`` (the document minus that permission)."""
    found: dict[str, WeedIdentity] = {}
    policies: dict[str, dict[str, Any]] = {}
    for r in ROLES:
        found[f"{r.name}-actions"] = identity(
            f"{r.name}-actions", actions=tuple(weed_actions(r, BUCKET, PREFIX, PIPELINE))
        )
        for variant in (r, *(without(r, a) for a in dict.fromkeys(r.actions()))):
            name = variant.name if variant is not r else f"{r.name}-policy"
            policies[name] = aws_policy(variant, BUCKET, PREFIX)
            found[name] = identity(name, policies=(name,))
    return found, policies


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[S3Server]:
    found, policies = identities()
    s3 = S3Server(
        tmp_path_factory.mktemp("seaweedfs-roles"),
        identities=list(found.values()),
        policies=policies,
    )
    s3.role_identities = found  # type: ignore[attr-defined]
    with serving(s3, "s3 (seaweedfs, roles)", fixture="server"):
        s3.client().create_bucket(Bucket=BUCKET)
        yield s3


@pytest.fixture(autouse=True)
def empty_state(server: S3Server) -> Iterator[None]:
    """Every test starts from an empty state prefix (the policies name it)."""
    yield
    admin = server.client()
    keys = [o["Key"] for o in admin.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
    while keys:
        admin.delete_objects(Bucket=BUCKET, Delete={"Objects": [{"Key": k} for k in keys]})
        keys = [o["Key"] for o in admin.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
    batch_records._RECORDED.clear()  # a new test's tasks are other Python workers


def options(server: S3Server, name: str | None) -> dict[str, str]:
    """The ``s3.*`` options of identity ``name`` (None: the harness's admin)."""
    found: dict[str, WeedIdentity] = server.role_identities  # type: ignore[attr-defined]
    return {**server.options(None if name is None else found[name]), "s3.retryDeadline": "5s"}


def store(server: S3Server, name: str | None) -> StateStore:
    return new_store(StoreConfig.from_options({"state.uri": URI, **options(server, name)}))


def sink_options(server: S3Server, name: str | None, token: int | None = None) -> SinkOptions:
    raw = {
        "pipeline.id": PIPELINE,
        "state.uri": URI,
        "consumer": "http",  # parts staged in the state store; the test's consumer delivers
        "consumer.url": "http://127.0.0.1:9/bundles",
        **options(server, name),
    }
    if token is not None:
        raw["fencing.token"] = str(token)
    return SinkOptions.parse(raw)


# --- what each role does ---------------------------------------------------------------


def executor_tasks(server: S3Server, name: str | None, batch_id: int) -> BarrierCommitMessage:
    """Batch ``batch_id`` on the executors: the marked read task writes the batch record
    (and a retried attempt, in another Python worker, finds it), two write tasks stage a
    part each; the message of one of them (both for the commit: :func:`messages`)."""
    s = store(server, name)
    try:
        write_batch_record(s, LAYOUT, QUERY, batch_id, epoch=batch_id)
        batch_records._RECORDED.clear()
        write_batch_record(s, LAYOUT, QUERY, batch_id, epoch=batch_id)
    finally:
        s.close()
    writer = BarrierStreamWriter(sink_options(server, name), True)
    return writer.write_task(
        iter([gt_batch(batch_id, 0, [batch_id * 10, batch_id * 10 + 1])]),
        StreamingTask(QUERY, batch_id, RUN, partition=0, task_attempt=1),
    )


def messages(server: S3Server, name: str | None, batch_id: int) -> list[BarrierCommitMessage]:
    first = executor_tasks(server, name, batch_id)
    writer = BarrierStreamWriter(sink_options(server, name), True)
    second = writer.write_task(
        iter([gt_batch(batch_id, 1, [batch_id * 10])]),
        StreamingTask(QUERY, batch_id, RUN, partition=1, task_attempt=2),
    )
    return [first, second]


def pipeline(server: S3Server, driver: str | None, executor: str | None, cp: Path) -> None:
    """A pipeline's life, each step with the identity of the role that runs it."""
    coord = SnapshotCoordinator(
        fake_spark(),
        pipeline_id=PIPELINE,
        state_uri=URI,
        checkpoint_location=cp,
        state_options=options(server, driver),
        snapshot_period="1h",
        retain=1,
        drain_timeout="20s",
        reset_timeout="30s",
    )
    try:
        coord.recover()  # fencing token, barrier claim, resume point (none yet)
        token = coord.fencing_token
        s = store(server, driver)
        try:
            source = EpochLog(s, LAYOUT)
            start = source.create_start(SourceOffset(0, {("t", 0): 0, ("t", 1): 0}))
            for epoch in (0, 1):
                end = SourceOffset(epoch + 1, {("t", 0): 10 * epoch + 2, ("t", 1): 10 * epoch + 1})
                assert source.recorded_end(start) is None
                assert source.record(start, end).same_as(end)
                start = end
            for batch_id in (0, 1):
                staged = messages(server, executor, batch_id)
                consumer = FakeConsumer(StoreStaging(s, LAYOUT))
                barrier = Barrier(
                    sink_options(server, driver, token),
                    s,
                    consumer,
                    consumer.staging,
                    FaultInjector(),
                )
                outcome = barrier.commit(staged, batch_id)
                assert outcome.action == "delivered", outcome
                assert [b for b, _, _ in consumer.delivered] == [batch_id]
        finally:
            s.close()
        write_checkpoint(cp, 0, query_id="q-1")
        coord.watch(FakeQuery("q-1"))  # type: ignore[arg-type]
        for k in (0, 1):
            if k:
                add_batch(cp, k)
            coord.on_batch_completed(batch(k, epoch=k))
            point = coord.request_snapshot(wait="20s")
            assert point is not None and point["batch_id"] == k, coord.status()
            retained = [r["batch_id"] for r in point["retained"]]
        assert retained == [1]  # snapshot 0 pruned
    finally:
        coord.close()


def cli_read(server: S3Server, name: str | None) -> list[str]:
    """``status``, ``epochs``, ``sweep``: the errors they print (none when they work)."""
    ids = ["--pipeline", PIPELINE, "--state-uri", URI]
    opts = [f"--option={k}={v}" for k, v in options(server, name).items()]
    consumer = ["--option=consumer=http", "--option=consumer.url=http://127.0.0.1:9/b"]
    errors: list[str] = []
    for argv in (
        ["status", *ids, *opts],
        ["epochs", *ids, *opts],
        ["sweep", *ids, *opts, *consumer],
    ):
        if gtbarrier([*argv, "--json"]) != 0:
            errors.append(argv[0])
    return errors


def cli_sweep_delete(server: S3Server, name: str | None) -> int:
    ids = ["--pipeline", PIPELINE, "--state-uri", URI]
    opts = [f"--option={k}={v}" for k, v in options(server, name).items()]
    consumer = ["--option=consumer=http", "--option=consumer.url=http://127.0.0.1:9/b"]
    return gtbarrier(["sweep", *ids, *opts, *consumer, "--delete", "--force", "--json"])


def leftover_parts(server: S3Server) -> list[str]:
    """Two parts a dead driver's run staged for a batch it never committed."""
    s = store(server, None)
    try:
        staging = StoreStaging(s, LAYOUT)
        locations = [staging.part_location("q-dead", 7, p, 1, "dead-run") for p in (0, 1)]
        for location in locations:
            s.put(location, b"PAR1")
        return locations
    finally:
        s.close()


def assert_names(message: str, r: Role, action: str) -> None:
    """The error names an operation on a key and ``action``, the permission taken away."""
    assert action in message, f"{r.name}: {message}"
    assert f"{URI}: " in message and ("key" in message or "keys" in message), message


# --- the roles with their grants -----------------------------------------------------------


@pytest.mark.parametrize("form", ["actions", "policy"])
def test_driver_and_executors_work_with_their_grants(
    server: S3Server, form: str, tmp_path: Path
) -> None:
    pipeline(server, f"driver-{form}", f"executor-{form}", tmp_path / "cp")
    admin = store(server, None)
    try:
        assert admin.list(LAYOUT.staging_prefix) == []  # delivered parts deleted
        assert [k for k in admin.list(LAYOUT.snapshots_prefix) if k.endswith("manifest.json")]
    finally:
        admin.close()


@pytest.mark.parametrize("form", ["actions", "policy"])
def test_the_cli_works_with_its_grants(
    server: S3Server, form: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pipeline(server, None, None, tmp_path / "cp")
    parts = leftover_parts(server)
    assert cli_read(server, f"cli-read-{form}") == []
    capsys.readouterr()
    assert cli_sweep_delete(server, f"cli-sweep-delete-{form}") == 0, capsys.readouterr().err
    admin = store(server, None)
    try:
        assert not set(parts) & set(admin.list(LAYOUT.staging_prefix))
    finally:
        admin.close()


def test_the_read_only_cli_cannot_write_or_delete(
    server: S3Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pipeline(server, None, None, tmp_path / "cp")
    leftover_parts(server)
    capsys.readouterr()
    assert cli_sweep_delete(server, "cli-read-policy") == 1
    assert_names(capsys.readouterr().err, CLI_READ, "s3:PutObject")


# --- each permission is needed ---------------------------------------------------------


@pytest.mark.parametrize("action", list(dict.fromkeys(DRIVER.actions())))
def test_the_driver_without_a_permission_fails_naming_it(
    server: S3Server, action: str, tmp_path: Path
) -> None:
    name = without(DRIVER, action).name
    began = time.monotonic()
    with pytest.raises(GtBarrierError) as info:
        pipeline(server, name, "executor-policy", tmp_path / "cp")
    assert_names(str(info.value), DRIVER, action)
    assert time.monotonic() - began < 60  # refused, not retried until a deadline


@pytest.mark.parametrize("action", list(dict.fromkeys(EXECUTOR.actions())))
def test_executors_without_a_permission_fail_naming_it(server: S3Server, action: str) -> None:
    with pytest.raises(GtBarrierError) as info:
        executor_tasks(server, without(EXECUTOR, action).name, 0)
    assert_names(str(info.value), EXECUTOR, action)


@pytest.mark.parametrize("action", list(dict.fromkeys(CLI_READ.actions())))
def test_the_read_only_cli_without_a_permission_fails_naming_it(
    server: S3Server, action: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pipeline(server, None, None, tmp_path / "cp")
    capsys.readouterr()
    assert cli_read(server, without(CLI_READ, action).name) != []
    err = capsys.readouterr().err
    assert_names(err, CLI_READ, action)
    assert "Traceback" not in err


@pytest.mark.parametrize("action", list(dict.fromkeys(CLI_SWEEP.actions())))
def test_sweep_delete_without_a_permission_fails_naming_it(
    server: S3Server, action: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pipeline(server, None, None, tmp_path / "cp")
    leftover_parts(server)
    capsys.readouterr()
    assert cli_sweep_delete(server, without(CLI_SWEEP, action).name) != 0
    err = capsys.readouterr().err
    assert_names(err, CLI_SWEEP, action)
    assert err.count("\n") == 1 and "Traceback" not in err
