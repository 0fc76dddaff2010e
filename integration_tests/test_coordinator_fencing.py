"""Two drivers for one pipeline: the second fails fast, or waits and fences a zombie.

Driver A is a subprocess (``coordinator_driver.py``) that reaches ZooKeeper through a
TCP proxy. Cutting the proxy partitions A from ZooKeeper: A's session expires on the
server, but A only sees a suspended connection, so its query goes on delivering: a
zombie. Driver B (this test's SparkSession) then takes the lock with a higher fencing
token, restores A's snapshot and runs the pipeline to the end; the barrier sink (and
A's own coordinator, which sees the newer token) stop A.

(Freezing A with SIGSTOP does not make a zombie: every micro-batch of a query with a
Python data source merges accumulators into the driver's Python process, so a frozen
driver freezes its query.)
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from gtbarrier import SnapshotCoordinator
from harness.coordinator_program import driver_args, gt_last, produce
from harness.fault_proxy import Fault, FaultProxy
from harness.process import wait_until
from integration_tests.coordinator_support import check_keyed, start_pipeline
from state.errors import DriverLockHeld
from state.layout import PipelineLayout
from state.protocol.barrier_state import read_barrier_state

pytestmark = pytest.mark.slow

DRIVER = Path(__file__).with_name("coordinator_driver.py")
PIPELINE = "fence-keyed"


@pytest.mark.timeout(420)
def test_second_driver_fails_fast_then_fences_a_zombie(  # noqa: PLR0917
    spark: Any, kafka: Any, s3: Any, zk: Any, driver: Any, tmp_path: Path
) -> None:
    topic = kafka.create_topic(partitions=2)
    n = 4000
    produce(kafka, topic, 0, n)
    state_uri, out = s3.uri("gtb"), tmp_path / "out"
    host, port = zk.server.hosts.split(":")
    with FaultProxy(host, int(port)) as proxy:
        a = driver.run(
            DRIVER,
            *driver_args(
                bootstrap=kafka.bootstrap,
                topic=topic,
                state_uri=state_uri,
                zk=f"{host}:{proxy.port}{zk.chroot}",
                prefix="fence",
                pipelines="keyed",
                out_root=tmp_path,
                cp_root=tmp_path / "host-a",
                trigger="processing",
                max_offsets=100,
                period="2s",
                session_timeout="4s",
            ),
        )
        out = tmp_path / "keyed"  # the driver's consumer directory: <out-root>/<kind>
        zkc = zk.client()
        wait_until(
            lambda: zkc.exists(f"/gtbarrier/{PIPELINE}/resume"),
            timeout=180,
            what="driver A's first snapshot",
        )

        # A second driver fails fast, naming the lock and its holder.
        def driver_b(**options: Any) -> SnapshotCoordinator:
            return SnapshotCoordinator(
                spark,
                pipeline_id=PIPELINE,
                state_uri=state_uri,
                checkpoint_location=tmp_path / "host-b",
                zookeeper_hosts=zk.hosts,
                state_options=s3.options(),
                **options,
            )

        b = driver_b(reset_timeout="30s")
        started = time.monotonic()
        with pytest.raises(DriverLockHeld) as info:
            b.recover()
        assert time.monotonic() - started < 15
        msg = str(info.value)
        assert f"/gtbarrier/{PIPELINE}/driver" in msg and f":{a.pid}:" in msg
        b.close()
        store = b.store

        # A is cut off from ZooKeeper and keeps delivering; B waits for A's session to expire.
        proxy.always(Fault.RESET)
        cut_at = gt_last(store, PIPELINE)
        wait_until(
            lambda: gt_last(store, PIPELINE) > cut_at,
            timeout=90,
            what="the partitioned driver still delivering (a zombie)",
        )
        b = driver_b(
            snapshot_period="2s",
            driver_wait="60s",
            reset_timeout="90s",
            zookeeper_session_timeout="4s",
        )
        with b:
            result = b.recover()
            assert result.action == "materialise"
            assert b.fencing_token == 2
            q = start_pipeline(
                spark,
                "keyed",
                bootstrap=kafka.bootstrap,
                topic=topic,
                pipeline=PIPELINE,
                state_uri=state_uri,
                checkpoint=tmp_path / "host-b",
                token=b.fencing_token,
                max_offsets=1000,
                store_options=s3.options(),
                sink={"consumer": "file", "consumer.path": str(out)},
            )
            b.watch(q)
            assert q.awaitTermination(240)
            assert q.exception() is None
            point = json.loads(zkc.get(f"/gtbarrier/{PIPELINE}/resume")[0])
            assert point["token"] == 2 or b.accepted == 0  # never written by the zombie after B

        # A was fenced, by the barrier sink (a commit with token 1 after B's token 2) or by
        # its own coordinator (a newer token in the driver record), and stopped delivering.
        proxy.clear()
        a.wait(120)
    a_out = a.output()
    assert "PipelineFenced" in a_out or "newer driver" in a_out, a_out[-3000:]
    # Exactly once: bundles unique and in order, every key's count rising strictly to the
    # batch result (check_keyed); the barrier's owner is B.
    check_keyed(out, n)
    owner = read_barrier_state(store, PipelineLayout(PIPELINE)).owner
    assert owner is not None and owner.token == 2
