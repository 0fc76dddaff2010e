"""The fencing window: a zombie is fenced as soon as a new driver takes the pipeline.

Driver A (a subprocess, ``coordinator_driver.py``) delivers the keyed pipeline and goes
idle. Cutting its ZooKeeper proxy makes it a zombie: its session expires on the server,
but A only sees a suspended connection and its query keeps running. Driver B (this
test's SparkSession) then takes the lock and fencing token 2 in ``recover()`` and does
*not* start its query yet. New input arrives: A's next micro-batch commits after B took
the pipeline but before B's first commit. That commit must be refused
(``PipelineFenced``) and nothing of it may reach the consumer: a zombie is fenced by the
new driver's claim, not only by its first commit (25-45 s later, which would leave the
zombie delivering until then). B then runs the pipeline to the end: every key's state is
delivered exactly once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gtbarrier import SnapshotCoordinator
from harness.coordinator_program import driver_args, gt_last, produce
from harness.fault_proxy import Fault, FaultProxy
from harness.process import wait_until
from integration_tests.coordinator_support import bundles, check_keyed, final_rows, start_pipeline
from state.layout import PipelineLayout
from state.protocol.barrier_state import read_barrier_state

pytestmark = [pytest.mark.slow]

DRIVER = Path(__file__).with_name("coordinator_driver.py")
PIPELINE = "window-keyed"


def delivered_records(out: Path) -> int:
    """How many input records the keyed pipeline's consumer has accounted for."""
    if not out.exists():
        return 0
    last, _ = final_rows(out, "key")
    return sum(int(row["n"]) for row in last.values())


@pytest.mark.timeout(600)
def test_zombie_is_fenced_before_the_new_drivers_first_commit(  # noqa: PLR0917
    spark: Any, kafka: Any, s3: Any, zk: Any, driver: Any, tmp_path: Path
) -> None:
    topic = kafka.create_topic(partitions=2)
    n = 2000
    produce(kafka, topic, 0, n)
    state_uri, out = s3.uri("gtb"), tmp_path / "keyed"
    host, port = zk.server.hosts.split(":")
    b = SnapshotCoordinator(
        spark,
        pipeline_id=PIPELINE,
        state_uri=state_uri,
        checkpoint_location=tmp_path / "host-b",
        zookeeper_hosts=zk.hosts,
        state_options=s3.options(),
        snapshot_period="2s",
        driver_wait="60s",
        reset_timeout="90s",
        zookeeper_session_timeout="4s",
    )
    store = b.store
    with FaultProxy(host, int(port)) as proxy, b:
        a = driver.run(
            DRIVER,
            *driver_args(
                bootstrap=kafka.bootstrap,
                topic=topic,
                state_uri=state_uri,
                zk=f"{host}:{proxy.port}{zk.chroot}",
                prefix="window",
                pipelines="keyed",
                out_root=tmp_path,
                cp_root=tmp_path / "host-a",
                trigger="processing",
                max_offsets=500,
                period="2s",
                session_timeout="4s",
            ),
        )
        zkc = zk.client()

        def settled() -> bool:
            # Every record delivered *and* acknowledged: the file consumer writes a bundle
            # before the barrier advances GT_last to it, and a GT_last that moves after
            # ``cut`` is read must be the zombie's doing, not A's last legitimate commit.
            if delivered_records(out) != n or not zkc.exists(f"/gtbarrier/{PIPELINE}/resume"):
                return False
            state = read_barrier_state(store, PipelineLayout(PIPELINE))
            last = max(bundle_id for bundle_id, _ in bundles(out))
            return state.inflight is None and state.gt_last == last

        wait_until(
            settled,
            timeout=240,
            what="driver A to deliver and acknowledge the first records and take a snapshot",
        )

        # A becomes a zombie: cut off from ZooKeeper, its query idle but running.
        proxy.always(Fault.RESET)
        cut = gt_last(store, PIPELINE)
        delivered_before = [bundle_id for bundle_id, _ in bundles(out)]

        # B takes the pipeline (waiting for A's session to expire); its query is not started.
        result = b.recover()
        assert b.fencing_token == 2, result

        # A's next commit comes now, after B took the pipeline, before B's first commit.
        produce(kafka, topic, n, 2 * n)
        wait_until(
            lambda: not a.running or gt_last(store, PIPELINE) > cut,
            timeout=180,
            what="driver A's next commit (fenced, or delivering as a zombie)",
        )
        delivered_by_zombie = [bundle_id for bundle_id, _ in bundles(out)][len(delivered_before) :]
        assert gt_last(store, PIPELINE) == cut and not delivered_by_zombie, (
            f"the zombie delivered bundle(s) {delivered_by_zombie} (GT_last {cut} -> "
            f"{gt_last(store, PIPELINE)}) after driver B took fencing token 2 and before "
            "B's first commit"
        )
        assert a.wait(60) == 3, a.output()[-3000:]  # its query failed
        a_out = a.output()
        assert "PipelineFenced" in a_out and "fencing.token 1 < 2" in a_out, a_out[-3000:]
        owner = read_barrier_state(store, PipelineLayout(PIPELINE)).owner
        assert owner is not None and owner.token == 2 and owner.driver is not None

        # B runs the pipeline to the end: everything exactly once, in order.
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
        proxy.clear()
    check_keyed(out, 2 * n)
    state = read_barrier_state(store, PipelineLayout(PIPELINE))
    assert state.owner is not None and state.owner.token == 2 and state.inflight is None
    # claims: A's coordinator (generation 1), A's run (2), B's coordinator (3), B's run (4)
    assert state.owner.generation == 4 and state.owner.driver is None
    assert not list((out / "_staging").rglob("*.parquet")), "staged parts left behind"
