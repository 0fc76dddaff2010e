"""A standby driver queued on the ZooKeeper lock before ``recover(mode="replay")`` began a
new generation of the resume point refuses to take the pipeline afterwards (SeaweedFS S3
and ZooKeeper; the coordinators run in this process, the queries are fakes).

The standby may run the previous version of the query: if it took the pipeline, it would
start fresh in the new generation and its snapshots of the old version's state would
become the new generation's resume point. It must refuse before writing anything: no
fencing token, no barrier claim, no resume point, no checkpoint marker, no snapshot.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from gtbarrier import SnapshotCoordinator
from gtbarrier.errors import FatalError, PipelineFenced
from harness.process import wait_until
from state.layout import PipelineLayout
from state.protocol.barrier_state import read_barrier_state
from state.protocol.fencing import read_token
from state.records.checkpoint_marker import MARKER_FILE
from state.stores import StoreConfig, open_store
from tests.coordinator_fakes import FakeQuery, FakeSpark, batch, write_checkpoint

PIPELINE = "standby-gens"


def assert_refused(err: BaseException) -> None:
    """The refusal: fatal, a fenced driver, naming both generations and what to do."""
    assert type(err).__name__ == "GenerationSuperseded", repr(err)
    assert isinstance(err, PipelineFenced) and isinstance(err, FatalError)
    assert not err.retriable
    message = str(err)
    assert "generation 1" in message and "generation 0" in message, message
    assert "recover(mode='replay')" in message and PIPELINE in message, message
    assert "restart" in message, message


@pytest.mark.timeout(120)
def test_a_standby_started_before_a_replay_refuses_the_new_generation(
    s3: Any, zk: Any, tmp_path: Path
) -> None:
    started = time.monotonic()
    state_uri = s3.uri("gtb")
    store = open_store(StoreConfig(state_uri, s3.config().s3))
    layout = PipelineLayout(PIPELINE)
    zkc = zk.client()

    def coordinator(cp: Path) -> SnapshotCoordinator:
        return SnapshotCoordinator(
            FakeSpark(),  # type: ignore[arg-type]  # batches are offered directly
            PIPELINE,
            state_uri,
            cp,
            zookeeper_hosts=zk.hosts,
            state_options=s3.options(),
            snapshot_period="1h",
            drain_timeout="30s",
            zookeeper_session_timeout="4s",
            driver_wait="60s",
        )

    def queued(n: int) -> bool:
        return len(zkc.get_children(layout.zookeeper_driver_lock)) == n

    # A runs version 1 and holds the lock; its snapshot of batch 3 is generation 0's point.
    a = coordinator(write_checkpoint(tmp_path / "a", 3))
    a.recover()
    query = FakeQuery()
    a.watch(query)  # type: ignore[arg-type]
    a.on_batch_completed(batch(3))
    assert a.request_snapshot(wait="30s") is not None

    # R (version 2) queues for the lock to begin generation 1; then S, a standby of
    # version 1 with version 1's checkpoint, queues behind it at generation 0.
    r = coordinator(tmp_path / "r")
    replay = r.recover_async(mode="replay")
    wait_until(lambda: queued(2), timeout=30, what="R queued on the driver lock")
    s_cp = write_checkpoint(tmp_path / "s", 3)
    s = coordinator(s_cp)
    standby = s.recover_async()
    wait_until(lambda: queued(3), timeout=30, what="S queued on the driver lock")

    # A stops: R takes the lock and begins generation 1; then R stops too.
    query.stop()
    a.close()
    assert replay.result(60).action == "fresh"
    r.close()
    resume_raw, resume_stat = zkc.get(layout.zookeeper_resume)
    assert json.loads(resume_raw)["generation"] == 1
    token = read_token(store, layout)
    owner = read_barrier_state(store, layout).owner
    snapshots = sorted(store.list(layout.snapshots_prefix))

    # S takes the lock: it started at generation 0 and must refuse generation 1.
    err = standby.exception(60)
    try:
        assert err is not None, (
            f"the standby of generation 0 took the pipeline in generation 1: {standby.result()}"
        )
        assert_refused(err)

        # Nothing of S was written, and its lock is released.
        raw, stat = zkc.get(layout.zookeeper_resume)
        assert (raw, stat.version) == (resume_raw, resume_stat.version)
        assert read_token(store, layout) == token == 2  # A took 1, R 2
        assert read_barrier_state(store, layout).owner == owner
        assert sorted(store.list(layout.snapshots_prefix)) == snapshots
        assert not (s_cp / MARKER_FILE).exists()
        assert (s_cp / "commits" / "3").is_file()
        assert s.ownership.token is None
        assert queued(0), zkc.get_children(layout.zookeeper_driver_lock)
    finally:
        s.close()
        store.close()
    assert time.monotonic() - started < 90
