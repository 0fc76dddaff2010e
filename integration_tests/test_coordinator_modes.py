"""recover() without a snapshot, with mode="replay", and against unreachable servers.

In the test's own SparkSession: gtkafka -> applyInPandasWithState -> barrier (file
consumer), with real Tansu, SeaweedFS S3 and ZooKeeper.
"""

from __future__ import annotations

import json
import shutil
import time
from pathlib import Path
from typing import Any

import pytest

from gtbarrier import SnapshotCoordinator
from harness.coordinator_program import produce
from harness.ports import free_port
from integration_tests.coordinator_support import check_keyed, start_pipeline
from state.coordinator.checkpoint_recovery import LocalCheckpoint
from state.errors import CoordinationError, ZooKeeperUnavailable


def _run(q: Any) -> Any:
    assert q.awaitTermination(240), "query did not finish"
    if q.exception() is not None:
        raise q.exception()
    return q


@pytest.mark.slow
@pytest.mark.timeout(360)
def test_no_snapshot_then_replay_mode(
    spark: Any, kafka: Any, s3: Any, zk: Any, tmp_path: Path
) -> None:
    topic = kafka.create_topic(partitions=2)
    produce(kafka, topic, 0, 1500)
    state_uri, cp, out = s3.uri("gtb"), tmp_path / "cp", tmp_path / "out"

    def coordinator() -> SnapshotCoordinator:
        return SnapshotCoordinator(
            spark,
            pipeline_id="modes",
            state_uri=state_uri,
            checkpoint_location=cp,
            zookeeper_hosts=zk.hosts,
            state_options=s3.options(),
            snapshot_period="1h",
            zookeeper_session_timeout="4s",
        )

    def start(coord: SnapshotCoordinator) -> Any:
        q = start_pipeline(
            spark,
            "keyed",
            bootstrap=kafka.bootstrap,
            topic=topic,
            pipeline="modes",
            state_uri=state_uri,
            checkpoint=cp,
            token=coord.fencing_token,
            max_offsets=500,
            sink={"consumer": "file", "consumer.path": str(out)},
            store_options=s3.options(),
        )
        coord.watch(q)
        return _run(q)

    with coordinator() as coord:
        assert coord.recover().action == "keep"
        start(coord)
        assert coord.resume_point() is None  # the period (1h) never elapsed
    check_keyed(out, 1500)

    # No snapshot, checkpoint lost: the query replays from the persisted start, and the
    # barrier drops the three epochs the consumer already has.
    shutil.rmtree(cp)
    produce(kafka, topic, 1500, 2000)
    with coordinator() as coord:
        result = coord.recover()
        assert result.action == "keep" and "no snapshot" in result.reason
        q = start(coord)
        assert [p["batchId"] for p in q.recentProgress] == [0, 1, 2, 3]
        point = coord.request_snapshot(wait="60s")  # operator trigger after the run
        assert point is not None and point["epoch"] == 3 and point["batch_id"] == 3
    check_keyed(out, 2000)
    assert sorted(p.name for p in out.glob("bundle-*")) == [
        f"bundle-{e:012d}.parquet" for e in range(4)
    ]

    # A new query version on a fresh checkpoint: the old one and its snapshot are not used.
    produce(kafka, topic, 2000, 2500)
    zkc = zk.client()
    with coordinator() as coord:
        result = coord.recover(mode="replay")
        assert result.action == "fresh" and LocalCheckpoint.inspect(cp).empty  # only the marker
        raw = json.loads(zkc.get("/gtbarrier/modes/resume")[0])
        assert raw["generation"] == 1 and raw["manifest"] is None
        assert coord.resume_point() is None
        start(coord)  # replays epochs 0..4, rebuilding state; only epoch 4 is new
        point = coord.request_snapshot(wait="60s")
        assert point is not None and point["generation"] == 1 and point["epoch"] == 4
    check_keyed(out, 2500)
    # A restore now uses the new generation's snapshot, never the old one.
    shutil.rmtree(cp)
    with coordinator() as coord:
        result = coord.recover()
        assert result.action == "materialise" and result.epoch == 4


@pytest.mark.timeout(60)
def test_unreachable_zookeeper_is_named_within_the_timeout(tmp_path: Path) -> None:
    hosts = f"127.0.0.1:{free_port()}"
    coord = SnapshotCoordinator(
        None,
        "p1",
        f"file://{tmp_path}/state",
        tmp_path / "cp",
        zookeeper_hosts=hosts,
        reset_timeout="3s",
    )
    started = time.monotonic()
    with pytest.raises(ZooKeeperUnavailable, match=hosts.replace(".", r"\.")):
        coord.recover()
    assert time.monotonic() - started < 6
    coord.close()


@pytest.mark.timeout(60)
def test_unreachable_s3_is_named_within_the_timeout(tmp_path: Path) -> None:
    endpoint = f"http://127.0.0.1:{free_port()}"
    coord = SnapshotCoordinator(
        None,
        "p1",
        "s3://nowhere/gtb",
        tmp_path / "cp",
        reset_timeout="4s",
        state_options={
            "s3.endpoint": endpoint,
            "s3.accessKeyId": "x",
            "s3.secretAccessKey": "y",
            "s3.region": "us-east-1",
        },
    )
    started = time.monotonic()
    with pytest.raises(CoordinationError) as info:
        coord.recover()
    assert time.monotonic() - started < 7
    assert endpoint in str(info.value) and "reset_timeout=4s" in str(info.value)
