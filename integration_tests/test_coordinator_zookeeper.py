"""ZooKeeper faults during a run: the server stopped and restarted, a session expired.

gtkafka -> applyInPandasWithState -> barrier (file consumer) in the test's SparkSession,
real Tansu, SeaweedFS S3 and ZooKeeper (the session fixture's server is stopped by pid).
"""

from __future__ import annotations

import json
import logging
import threading
from pathlib import Path
from typing import Any

import pytest

from gtbarrier import SnapshotCoordinator
from harness.coordinator_program import gt_last, produce
from harness.process import wait_until
from integration_tests.coordinator_support import check_keyed, start_pipeline

pytestmark = pytest.mark.slow


@pytest.mark.timeout(300)
def test_zookeeper_down_delivery_continues_and_snapshots_resume(  # noqa: PLR0917
    spark: Any, kafka: Any, s3: Any, zk: Any, zk_server: Any, tmp_path: Path
) -> None:
    topic = kafka.create_topic(partitions=2)
    # The outage lasts while the epochs after the first snapshot are delivered, and must
    # stay within the session timeout (the harness's server allows at most 60 s): on a
    # loaded machine 18 epochs took longer than 40 s, the session expired and the driver
    # rightly gave the pipeline up.
    n, per_batch = 1200, 100
    last_epoch = n // per_batch - 1
    produce(kafka, topic, 0, n)
    state_uri, cp, out = s3.uri("gtb"), tmp_path / "cp", tmp_path / "out"
    coord = SnapshotCoordinator(
        spark,
        pipeline_id="zk-outage",
        state_uri=state_uri,
        checkpoint_location=cp,
        zookeeper_hosts=zk.hosts,
        state_options=s3.options(),
        snapshot_period="500ms",
        drain_timeout="120s",
        zookeeper_session_timeout="60s",
    )
    try:
        coord.recover()
        q = start_pipeline(
            spark,
            "keyed",
            bootstrap=kafka.bootstrap,
            topic=topic,
            pipeline="zk-outage",
            state_uri=state_uri,
            checkpoint=cp,
            token=coord.fencing_token,
            max_offsets=per_batch,
            available_now=False,
            processing_time="200 milliseconds",
            sink={"consumer": "file", "consumer.path": str(out)},
            store_options=s3.options(),
        )
        coord.watch(q)
        wait_until(lambda: coord.accepted >= 1, timeout=120, what="a first snapshot")
        before = coord.resume_point()
        assert before is not None

        zk_server.stop()
        accepted = coord.accepted
        # The barrier needs no ZooKeeper: every bundle reaches the consumer ...
        wait_until(
            lambda: gt_last(coord.store, coord.pipeline_id) == last_epoch,
            timeout=120,
            what="every epoch delivered while ZooKeeper is down",
        )
        # ... while no snapshot can be accepted.
        assert coord.accepted == accepted
        assert coord.status()["zookeeper"] == "SUSPENDED"

        # The query is idle now: no batch completes after ZooKeeper is back, so the
        # snapshot that moves the resume point to the last epoch is a retry of the last
        # batch's (an attempt stalled by the outage may be accepted first).
        zk_server.start()
        wait_until(
            lambda: coord.last_snapshot is not None and coord.last_snapshot.epoch == last_epoch,
            timeout=120,
            what="the idle query's last batch snapshotted after ZooKeeper came back",
        )
        assert coord.accepted > accepted
        assert coord.status()["zookeeper"] == "CONNECTED"
        zkc = zk.client()
        after = json.loads(zkc.get("/gtbarrier/zk-outage/resume")[0])
        assert after["epoch"] == last_epoch > before["epoch"]
        assert after["token"] == coord.fencing_token == 1  # the same driver, never lost
        q.stop()
    finally:
        coord.close()
    check_keyed(out, n)


@pytest.mark.timeout(300)
def test_expired_session_stops_the_query_and_run_restarts_it(  # noqa: PLR0917
    spark: Any, kafka: Any, s3: Any, zk: Any, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    topic = kafka.create_topic(partitions=2)
    n = 2000
    produce(kafka, topic, 0, n)
    state_uri, cp, out = s3.uri("gtb"), tmp_path / "cp", tmp_path / "out"
    coord = SnapshotCoordinator(
        spark,
        pipeline_id="zk-expiry",
        state_uri=state_uri,
        checkpoint_location=cp,
        zookeeper_hosts=zk.hosts,
        state_options=s3.options(),
        snapshot_period="500ms",
        zookeeper_session_timeout="4s",
    )
    tokens: list[int] = []

    def build(c: SnapshotCoordinator) -> Any:
        tokens.append(c.fencing_token)
        return start_pipeline(
            spark,
            "keyed",
            bootstrap=kafka.bootstrap,
            topic=topic,
            pipeline="zk-expiry",
            state_uri=state_uri,
            checkpoint=cp,
            token=c.fencing_token,
            max_offsets=100,
            sink={"consumer": "file", "consumer.path": str(out)},
            store_options=s3.options(),
        )

    outcome: dict[str, Any] = {}

    def supervise() -> None:
        try:
            outcome["query"] = coord.run(build, max_consecutive_reset_attempts=2, backoff="500ms")
        except Exception as err:
            outcome["error"] = err

    runner = threading.Thread(target=supervise)
    try:
        with caplog.at_level(logging.INFO, logger="gtbarrier.coordinator"):
            runner.start()
            wait_until(lambda: coord.accepted >= 1, timeout=120, what="a first snapshot")
            session = coord.ownership.session
            assert session is not None
            zk.expire_session(session.client)
            runner.join(240)
        assert not runner.is_alive()
        assert "error" not in outcome, outcome.get("error")
        assert "session" in caplog.text and "expired" in caplog.text
        assert tokens == [1, 2]  # the restarted query runs under a new fencing token
        zkc = zk.client()
        assert len(zkc.get_children("/gtbarrier/zk-expiry/driver")) == 1  # the lock, retaken
    finally:
        coord.close()
        runner.join(30)
    check_keyed(out, n)
