"""Recovery end to end: a driver killed, its checkpoint deleted, the pipeline restored from S3.

Real Tansu, SeaweedFS S3, ZooKeeper and Spark; the drivers are subprocesses
(``integration_tests/coordinator_driver.py``) killed with SIGKILL.
"""

from __future__ import annotations

import functools
import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from harness.coordinator_program import gt_last, produce
from harness.process import wait_until
from integration_tests.coordinator_support import check_keyed, check_windowed, events
from state.layout import PipelineLayout
from state.protocol.epoch_floor import read_floor
from state.protocol.epoch_log import EpochLog
from state.stores import StoreConfig, open_store

pytestmark = pytest.mark.slow

DRIVER = Path(__file__).with_name("coordinator_driver.py")


def _resume(zkc: Any, pipeline: str) -> dict[str, Any] | None:
    path = f"/gtbarrier/{pipeline}/resume"
    if not zkc.exists(path):
        return None
    point: dict[str, Any] = json.loads(zkc.get(path)[0])
    return point


def check_pruned_below_the_oldest_snapshot(store: Any, points: dict[str, Any]) -> None:
    """Each pipeline's epoch log was pruned, and kept every epoch from its oldest retained
    snapshot's on (a restore of that snapshot starts there)."""
    for pipeline, point in points.items():
        assert point is not None
        floor = read_floor(store, PipelineLayout(pipeline))
        oldest = min(r["epoch"] for r in point["retained"])
        assert floor is not None and 0 < floor.epoch <= oldest, (pipeline, floor, point)
        kept = EpochLog(store, PipelineLayout(pipeline)).epoch_numbers()
        assert oldest in kept, (pipeline, kept[:3], floor)


@pytest.mark.timeout(420)
def test_killed_driver_restored_from_snapshot_on_a_new_host(
    kafka: Any, s3: Any, zk: Any, driver: Any, tmp_path: Path
) -> None:
    topic = kafka.create_topic(partitions=2)
    first, total = 4000, 5000
    produce(kafka, topic, 0, first)
    state_uri = s3.uri("gtb")
    store = open_store(StoreConfig(state_uri, s3.config().s3))
    common = [
        "--bootstrap",
        kafka.bootstrap,
        "--topic",
        topic,
        "--state-uri",
        state_uri,
        "--zk",
        zk.hosts,
        "--prefix",
        "e2e",
        "--out-root",
        str(tmp_path / "out"),
        # the coordinators prune the epoch log after each snapshot, 2 epochs below GT_last
        # but never above their oldest retained snapshot, which the restore below needs
        "--epochs-retained",
        "2",
    ]
    host_a = tmp_path / "host-a"
    request = tmp_path / "request-snapshot"
    a = driver.run(
        DRIVER,
        *common,
        "--cp-root",
        str(host_a),
        "--trigger",
        "processing",
        "--max-offsets",
        "200",
        "--period",
        "1h",
        "--request-file",
        str(request),
    )
    zkc = zk.client()
    pipelines = ("e2e-windowed", "e2e-keyed")

    def delivered_past(points: dict[str, int]) -> bool:
        return all(gt_last(store, p) >= points[p] + 2 for p in pipelines)

    def snapshot() -> dict[str, int]:
        """Request a snapshot of both pipelines; their epochs once accepted."""
        seen = {p: (_resume(zkc, p) or {}).get("snapshot_id") for p in pipelines}
        request.touch()
        wait_until(
            lambda: all((_resume(zkc, p) or {}).get("snapshot_id") != seen[p] for p in pipelines),
            timeout=120,
            what="requested snapshots accepted",
        )
        return {p: int((_resume(zkc, p) or {})["epoch"]) for p in pipelines}

    # Two snapshots, each followed by two more delivered epochs (which the replay must drop).
    wait_until(
        lambda: delivered_past({p: 0 for p in pipelines}), timeout=180, what="first deliveries"
    )
    for _ in range(2):
        points = snapshot()
        wait_until(
            functools.partial(delivered_past, points),
            timeout=120,
            what="two epochs delivered past the snapshot",
        )
    before = {p: _resume(zkc, p) for p in ("e2e-windowed", "e2e-keyed")}
    a.kill()
    a.wait(30)
    check_pruned_below_the_oldest_snapshot(store, before)
    shutil.rmtree(host_a)  # the checkpoint is lost with the host

    # The newest windowed snapshot is corrupted: the previous retained one must be used.
    windowed = before["e2e-windowed"]
    assert windowed is not None
    manifest = windowed["manifest"]
    store.put(manifest, store.get(manifest).data.replace(b'"format":', b'"format": ', 1))
    produce(kafka, topic, first, total)

    b = driver.run(
        DRIVER,
        *common,
        "--cp-root",
        str(tmp_path / "host-b"),
        "--trigger",
        "available-now",
        "--max-offsets",
        "2500",
        "--driver-wait",
        "60s",
    )
    code = b.wait(300)
    out = b.output()
    assert code == 0, out[-5000:]
    evs = {(e["event"], e["pipeline"]): e for e in events(out)}
    rec_w, rec_k = evs[("recovered", "e2e-windowed")], evs[("recovered", "e2e-keyed")]
    keyed = before["e2e-keyed"]
    assert keyed is not None
    assert rec_k["action"] == "materialise" and rec_k["batch_id"] == keyed["batch_id"]
    assert rec_w["action"] == "materialise" and len(rec_w["skipped"]) == 1
    assert rec_w["snapshot"] == windowed["retained"][1]["snapshot_id"]
    assert "trying the previous retained snapshot" in out
    # The restored queries restarted right after their snapshots' batches.
    assert evs[("finished", "e2e-keyed")]["batches"][0] == keyed["batch_id"] + 1
    assert (
        evs[("finished", "e2e-windowed")]["batches"][0] == windowed["retained"][1]["batch_id"] + 1
    )
    assert rec_k["token"] > 1  # a new fencing token for the new driver

    check_windowed(tmp_path / "out" / "windowed", total)
    check_keyed(tmp_path / "out" / "keyed", total)
    _ = time
