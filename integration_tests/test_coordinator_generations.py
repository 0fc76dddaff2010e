"""Generations of the resume point, against real servers.

``recover(mode="replay")`` starts a new query version on a fresh checkpoint: a new
*generation* of the resume point, with no snapshot yet. Two things must not leak from the
old version into the new generation:

* its checkpoint: a failover to a host that still holds the old version's checkpoint
  must not resume the old offsets and operator state (real Tansu, SeaweedFS S3, ZooKeeper,
  Spark: gtkafka -> applyInPandasWithState -> barrier, file consumer);
* its snapshot: one that was waiting for the barrier to drain when the new generation
  began must not become the new generation's resume point (SeaweedFS S3 and ZooKeeper).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from gtbarrier import SnapshotCoordinator
from harness.coordinator_program import produce
from integration_tests.coordinator_support import KEYED_SCHEMA, KEYED_STATE, bundles
from state.layout import PipelineLayout
from state.records.barrier import BarrierState
from state.records.inflight_bundle import InflightBundle
from state.stores import StoreConfig, open_store
from tests.coordinator_fakes import FakeQuery, FakeSpark, batch, write_checkpoint


def keyed_update_v2(
    key: tuple[Any, ...], pdfs: Iterator[pd.DataFrame], state: Any
) -> Iterator[pd.DataFrame]:
    """Version 2 of the keyed query: as ``coordinator_support.keyed_update`` (version 1),
    but ``total`` sums twice each value. Same state schema, so Spark would silently run it
    on version 1's state."""
    n, total, mx = state.get if state.exists else (0, 0, -1)
    for pdf in pdfs:
        values = pdf["value"].map(lambda b: int(bytes(b))).astype("int64")
        n += len(values)
        total += 2 * int(values.sum())
        mx = max(mx, int(values.max()))
    state.update((n, total, mx))
    yield pd.DataFrame({"key": [key[0]], "n": [n], "total": [total], "mx": [mx]})


def expected_v2(n: int) -> dict[bytes, tuple[int, int, int]]:
    out: dict[bytes, tuple[int, int, int]] = {}
    for i in range(n):
        k = b"k%d" % (i % 13)
        c, s, m = out.get(k, (0, 0, -1))
        out[k] = (c + 1, s + 2 * i, max(m, i))
    return out


def final_state(out: Path) -> dict[bytes, tuple[int, int, int]]:
    """The consumer's last row per key, in bundle order."""
    last: dict[bytes, tuple[int, int, int]] = {}
    for _, rows in bundles(out):
        for row in rows:
            last[bytes(row["key"])] = (int(row["n"]), int(row["total"]), int(row["mx"]))
    return last


@pytest.mark.slow
@pytest.mark.timeout(480)
def test_failover_after_a_replay_does_not_resume_the_old_version(
    spark: Any, kafka: Any, s3: Any, zk: Any, tmp_path: Path
) -> None:
    from integration_tests.coordinator_support import keyed_update

    topic = kafka.create_topic(partitions=2)
    produce(kafka, topic, 0, 1500)
    state_uri, out = s3.uri("gtb"), tmp_path / "out"
    host_a, host_b = tmp_path / "host-a" / "cp", tmp_path / "host-b" / "cp"

    def coordinator(cp: Path) -> SnapshotCoordinator:
        return SnapshotCoordinator(
            spark,
            pipeline_id="gens",
            state_uri=state_uri,
            checkpoint_location=cp,
            zookeeper_hosts=zk.hosts,
            state_options=s3.options(),
            snapshot_period="1h",
            zookeeper_session_timeout="4s",
        )

    def run(coord: SnapshotCoordinator, cp: Path, update: Any) -> list[dict[str, Any]]:
        df = (
            spark.readStream.format("gtkafka")
            .option("kafka.bootstrap.servers", kafka.bootstrap)
            .option("subscribe", topic)
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "500")
            .option("pipeline.id", "gens")
            .option("state.uri", state_uri)
            .options(**s3.options())
            .load()
        )
        q = (
            df.groupBy("key")
            .applyInPandasWithState(update, KEYED_SCHEMA, KEYED_STATE, "append", "NoTimeout")
            .writeStream.format("barrier")
            .option("pipeline.id", "gens")
            .option("state.uri", state_uri)
            .options(**s3.options())
            .option("consumer", "file")
            .option("consumer.path", str(out))
            .option("fencing.token", str(coord.fencing_token))
            .option("checkpointLocation", str(cp))
            .outputMode("append")
            .trigger(availableNow=True)
            .start()
        )
        coord.watch(q)
        assert q.awaitTermination(240), "query did not finish"
        if q.exception() is not None:
            raise q.exception()
        progress: list[dict[str, Any]] = [json.loads(p.json) for p in q.recentProgress]
        return progress

    # Version 1 on host A: epochs 0..2 delivered, its checkpoint stays on host A.
    with coordinator(host_a) as coord:
        coord.recover()
        v1 = run(coord, host_a, keyed_update)
    assert [p["batchId"] for p in v1] == [0, 1, 2]

    # Version 2 starts on host B with mode="replay": generation 1, no snapshot; it rebuilds
    # its state from the persisted start and delivers epoch 3.
    produce(kafka, topic, 1500, 2000)
    with coordinator(host_b) as coord:
        assert coord.recover(mode="replay").action == "fresh"
        v2 = run(coord, host_b, keyed_update_v2)
    assert [p["batchId"] for p in v2] == [0, 1, 2, 3]
    assert final_state(out) == expected_v2(2000)

    # Version 2 fails over back to host A, which still holds version 1's checkpoint.
    produce(kafka, topic, 2000, 2500)
    with coordinator(host_a) as coord:
        result = coord.recover()
        failover = run(coord, host_a, keyed_update_v2)
    got, expected = final_state(out), expected_v2(2500)
    wrong = {k: (got.get(k), v) for k, v in expected.items() if got.get(k) != v}
    first = failover[0]
    assert not wrong and first["batchId"] == 0, (
        f"version 2 resumed version 1's checkpoint at batch {first['batchId']} (start offset "
        f"{first['sources'][0]['startOffset']}; recover: {result.action}, {result.reason}); "
        f"{len(wrong)} keys hold a wrong state (got, expected), e.g. {list(wrong.items())[:3]}"
    )
    assert result.action == "fresh" and "generation" in result.reason
    ids = [b for b, _ in bundles(out)]
    assert ids == [0, 1, 2, 3, 4], f"bundles repeated or missing: {ids}"


@pytest.mark.timeout(120)
def test_a_waiting_snapshot_is_not_accepted_into_a_new_generation(
    s3: Any, zk: Any, tmp_path: Path
) -> None:
    """A snapshot of batch 3 is uploaded to S3 and waits for bundle 13 to be acknowledged;
    the query stops and ``recover(mode="replay")`` starts generation 1 in ZooKeeper; then
    the bundle is acknowledged. The resume point stays generation 1 without a snapshot."""
    state_uri = s3.uri("gtb")
    store = open_store(StoreConfig(state_uri, s3.config().s3))
    barrier_key = PipelineLayout("gens").barrier_state
    inflight = InflightBundle(13, "q-1", 3, None, (), False, True)
    store.put_json(barrier_key, BarrierState(gt_last=12, inflight=inflight).to_json())
    cp = write_checkpoint(tmp_path / "cp", 3)
    zkc = zk.client()
    with SnapshotCoordinator(
        FakeSpark(),  # type: ignore[arg-type]  # no query events: they are offered below
        "gens",
        state_uri,
        cp,
        zookeeper_hosts=zk.hosts,
        state_options=s3.options(),
        snapshot_period="1h",
        drain_timeout="60s",
        zookeeper_session_timeout="4s",
    ) as coord:
        q = FakeQuery()
        coord.watch(q)  # type: ignore[arg-type]
        coord.on_batch_completed(batch(3))
        coord.request_snapshot()
        deadline = time.monotonic() + 30
        while not store.list("gens/snapshots/") and time.monotonic() < deadline:
            time.sleep(0.1)
        assert store.list("gens/snapshots/"), "the snapshot was not uploaded"
        q.stop()
        assert coord.recover(mode="replay").action == "fresh"
        store.put_json(barrier_key, BarrierState(gt_last=13).to_json())  # bundle 13 acked
        deadline = time.monotonic() + 30
        while coord.accepted + coord.abandoned == 0 and time.monotonic() < deadline:
            time.sleep(0.1)
        raw = json.loads(zkc.get("/gtbarrier/gens/resume")[0])
        assert (raw["generation"], raw["manifest"]) == (1, None), (
            f"the old version's snapshot became generation 1's resume point: {raw}"
        )
        assert coord.accepted == 0 and coord.abandoned == 1
        assert "generation" in (coord.last_error or "")
