"""``gtbarrier retire --zookeeper`` on real servers: the state on SeaweedFS, the lock and
the resume point on ZooKeeper, the command run as the operator runs it.

The pipeline's records are written by the product's own code: the epoch log, batch
records and barrier commits of the sink, and a snapshot coordinator's driver taking the
pipeline (:class:`DriverOwnership`: the lock, a token, the barrier claim). While another
session holds the driver lock, retire refuses and deletes nothing; once it is free,
retire deletes every key and znode of the pipeline, and nothing of the one beside it.
"""

from __future__ import annotations

import json
import secrets
import subprocess
from pathlib import Path
from typing import Any

import pytest

from harness.process import run_python
from state.coordinator.config import CoordinatorConfig
from state.coordinator.driver_lock import DriverLock
from state.coordinator.driver_ownership import DriverOwnership
from state.coordinator.zookeeper_session import ZooKeeperSession
from state.layout import PipelineLayout
from state.protocol.epoch_log import EpochLog
from state.protocol.fencing import read_token
from state.records.codec import dumps
from state.records.source_offset import SourceOffset
from tests.sink_helpers import Pipeline, gt_batch, sink_options


def written_pipeline(s3: Any, zk: Any, tmp_path: Path, pipeline_id: str) -> Pipeline:
    """A pipeline on SeaweedFS that a coordinator's driver took and ran two batches of."""
    state = s3.uri("state")
    config = CoordinatorConfig.from_arguments(
        pipeline_id,
        state,
        tmp_path / f"cp-{pipeline_id}",
        zookeeper_hosts=zk.hosts,
        state_options=s3.options(),
    )
    p = Pipeline(sink_options(**{"state.uri": state, "pipeline.id": pipeline_id, **s3.options()}))
    with DriverOwnership(config, p.store):
        log = EpochLog(p.store, p.layout)
        start = log.create_start(SourceOffset(0, {("t", 0): 0}))
        for k, end in enumerate((2, 4)):
            start = log.record(start, SourceOffset(k + 1, {("t", 0): end}))
        for batch in (0, 1):
            p.record_batch(batch, epoch=batch)
            p.barrier().commit([p.write(batch, [gt_batch(batch, 0, [batch])])], batch)
        p.write(5, [gt_batch(2, 0, [4])], run_id="run-dead", partition=3)
        p.store.create_json(p.layout.snapshot(1) + "manifest.json", {"written": "by a test"})
    resume = PipelineLayout(pipeline_id).zookeeper_resume
    zk.client().create(resume, dumps({"written": "by a test"}), makepath=True)
    return p


def znodes(zk: Any, root: str, *, admin: bool = False) -> list[str]:
    client = zk.admin() if admin else zk.client()
    found, stack = [], [root]
    while stack:
        path = stack.pop()
        if client.exists(path) is None:
            continue
        found.append(path)
        stack.extend(f"{path}/{c}" for c in client.get_children(path))
    return sorted(found)


def retire(s3: Any, zk: Any, pipeline_id: str, *args: str) -> subprocess.CompletedProcess[str]:
    options = [item for k, v in s3.options().items() for item in ("--option", f"{k}={v}")]
    argv = ["--pipeline", pipeline_id, "--state-uri", s3.uri("state"), *options]
    return run_python("-m", "gtbarrier", "retire", *argv, "--zookeeper", zk.hosts, *args)


@pytest.mark.timeout(300)
def test_retire_refuses_while_a_driver_holds_the_lock_then_deletes_every_key_and_znode(
    s3: Any, zk: Any, tmp_path: Path
) -> None:
    p = written_pipeline(s3, zk, tmp_path, "old")
    beside = written_pipeline(s3, zk, tmp_path, "old-2")
    keys, beside_keys = p.store.list("old/"), p.store.list("old-2/")
    assert len(keys) > 8
    nodes = znodes(zk, "/gtbarrier/old")
    assert {"/gtbarrier/old", "/gtbarrier/old/driver", "/gtbarrier/old/resume"} <= set(nodes)
    beside_nodes = znodes(zk, "/gtbarrier/old-2")

    # the dry run lists the keys and znodes and changes nothing
    dry = retire(s3, zk, "old", "--json")
    assert dry.returncode == 0, dry.stderr
    listed = json.loads(dry.stdout)
    assert listed["keys"] == keys and listed["znodes"] == nodes and not listed["deleted"]
    assert listed["driver_lock_holders"] == []
    assert p.store.list("old/") == keys and znodes(zk, "/gtbarrier/old") == nodes

    # another session holds the driver lock: refused, nothing deleted, no token taken
    session = ZooKeeperSession(zk.hosts)
    session.start(30)
    lock = DriverLock(session, PipelineLayout("old").zookeeper_driver_lock, "old")
    lock.acquire(None)
    token = read_token(p.store, p.layout)
    try:
        held = retire(s3, zk, "old", "--yes")
        assert held.returncode == 2, (held.stdout, held.stderr)
        assert held.stdout == "" and held.stderr.count("\n") == 1
        assert "pipeline 'old' has a running driver" in held.stderr
        assert lock.identifier in held.stderr and "nothing deleted" in held.stderr
        assert p.store.list("old/") == keys and read_token(p.store, p.layout) == token
        assert set(nodes) <= set(znodes(zk, "/gtbarrier/old"))
    finally:
        lock.release()
        session.stop()

    done = retire(s3, zk, "old", "--yes", "--json")
    assert done.returncode == 0, done.stderr
    deleted = json.loads(done.stdout)
    assert deleted["deleted"] is True and deleted["fencing_token"] == token + 1
    assert set(keys) <= set(deleted["keys"])
    assert p.store.list("old/") == [] and znodes(zk, "/gtbarrier/old") == []
    assert p.store.list("old-2/") == beside_keys
    assert znodes(zk, "/gtbarrier/old-2") == beside_nodes and beside.store.list("old-2/")

    gone = retire(s3, zk, "old")
    assert gone.returncode == 2 and "pipeline 'old' not found in s3://" in gone.stderr


@pytest.mark.timeout(300)
def test_a_pipeline_without_znodes_is_listed_unchanged_then_retired_leaving_none(
    s3: Any, zk: Any, tmp_path: Path
) -> None:
    p = Pipeline(
        sink_options(**{"state.uri": s3.uri("state"), "pipeline.id": "loose", **s3.options()})
    )
    EpochLog(p.store, p.layout).create_start(SourceOffset(0, {("t", 0): 0}))
    keys = p.store.list("loose/")

    dry = retire(s3, zk, "loose", "--json")
    assert dry.returncode == 0, dry.stderr
    listed = json.loads(dry.stdout)
    assert listed["keys"] == keys and listed["znodes"] == []
    assert listed["driver_lock_holders"] == []
    assert znodes(zk, "/gtbarrier/loose") == [] and p.store.list("loose/") == keys

    done = retire(s3, zk, "loose", "--yes")
    assert done.returncode == 0, done.stderr
    assert "retire loose: 3 key(s) deleted" in done.stdout  # the start, the token, the claim
    assert p.store.list("loose/") == [] and znodes(zk, "/gtbarrier/loose") == []


@pytest.mark.timeout(300)
def test_znodes_made_with_credentials_are_retired_only_with_them(
    zk_auth: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from gtbarrier.cli import main

    password = "zk-" + secrets.token_hex(8)
    auth = f"digest:gtb:{password}"
    state = f"file://{tmp_path}/state"
    config = CoordinatorConfig.from_arguments(
        "authp", state, tmp_path / "cp", zookeeper_hosts=zk_auth.hosts, zookeeper_auth=auth
    )
    p = Pipeline(sink_options(**{"state.uri": state, "pipeline.id": "authp"}))
    with DriverOwnership(config, p.store) as owner:
        p.record_batch(0, epoch=0)
        p.barrier().commit([p.write(0, [gt_batch(0, 0, [0])])], 0)
        owner.backend.write({"written": "by a test"}, None)
    keys = p.store.list("authp/")
    nodes = znodes(zk_auth, "/gtbarrier/authp", admin=True)
    assert "/gtbarrier/authp/resume" in nodes
    ids = ["--pipeline", "authp", "--state-uri", state, "--zookeeper", zk_auth.hosts]

    assert main(["retire", *ids, "--yes"]) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.count("\n") == 1 and "refused (NoAuth)" in err
    assert p.store.list("authp/") == keys
    assert znodes(zk_auth, "/gtbarrier/authp", admin=True) == nodes

    assert main(["retire", *ids, "--zookeeper-auth", auth, "--yes"]) == 0
    out, err = capsys.readouterr()
    assert password not in out + err
    assert p.store.list("authp/") == []
    # deleting the root needs DELETE on the shared /gtbarrier, which no identity has
    assert znodes(zk_auth, "/gtbarrier/authp", admin=True) == ["/gtbarrier/authp"]
    assert "/gtbarrier/authp kept: deleting it needs DELETE on /gtbarrier" in out
