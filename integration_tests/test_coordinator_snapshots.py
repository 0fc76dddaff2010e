"""Snapshot machinery against real ZooKeeper, S3 (SeaweedFS), Spark, on a stateful query.

The query is Spark's ``rate`` source -> ``groupBy(k).agg(count, max)`` -> memory sink,
so the operator state (counts per key) is what snapshots must carry: after a restore
on a new checkpoint directory, the counts must continue exactly (sum of counts ==
number of rows 0..max(value) seen), neither lost nor counted twice.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest

from gtbarrier import SnapshotCoordinator
from harness.process import wait_until
from state.coordinator.snapshot.files import sha256_hex
from state.records.manifest import Manifest


def _start_counting(spark: Any, checkpoint: Path, name: str) -> Any:
    from pyspark.sql import functions as sf

    rows = spark.readStream.format("rate").option("rowsPerSecond", 40).load()
    counts = rows.groupBy((sf.col("value") % 7).alias("k")).agg(
        sf.count("*").alias("n"), sf.max("value").alias("mx")
    )
    return (
        counts.writeStream.format("memory")
        .queryName(name)
        .outputMode("complete")
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="300 milliseconds")
        .start()
    )


def _coordinator(spark: Any, zk: Any, s3: Any, checkpoint: Path, **kw: Any) -> SnapshotCoordinator:
    kw.setdefault("snapshot_period", "1s")
    kw.setdefault("retain", 2)
    kw.setdefault("zookeeper_session_timeout", "4s")
    return SnapshotCoordinator(
        spark,
        pipeline_id=kw.pop("pipeline_id", "rate-counts"),
        state_uri=s3.uri("gtb"),
        checkpoint_location=checkpoint,
        zookeeper_hosts=zk.hosts,
        state_options=s3.options(),
        drain_timeout="30s",
        reset_timeout="60s",
        **kw,
    )


def _manifest_keys(s3: Any, pipeline: str) -> list[str]:
    client = s3.client()
    out: list[str] = []
    for page in client.get_paginator("list_objects_v2").paginate(
        Bucket=s3.bucket, Prefix=f"gtb/{pipeline}/snapshots/"
    ):
        out += [o["Key"] for o in page.get("Contents", [])]
    return sorted(k for k in out if k.endswith("manifest.json"))


def _consistent(spark: Any, name: str) -> tuple[int, int]:
    rows = spark.sql(f"select sum(n) as total, max(mx) as mx from {name}").collect()[0]
    return int(rows["total"] or 0), int(rows["mx"] if rows["mx"] is not None else -1)


@pytest.mark.timeout(240)
def test_periodic_snapshots_prune_request_and_restore(
    spark: Any, zk: Any, s3: Any, tmp_path: Path
) -> None:
    cp = tmp_path / "cp"
    coord = _coordinator(spark, zk, s3, cp)
    try:
        assert coord.recover().action == "keep"  # nothing yet: start from scratch
        q = _start_counting(spark, cp, "counts_a")
        coord.watch(q)
        wait_until(lambda: coord.accepted >= 4, timeout=90, what="4 accepted snapshots")

        # The resume point in ZooKeeper moved forward and lists `retain` snapshots.
        zkc = zk.client()
        raw, _ = zkc.get("/gtbarrier/rate-counts/resume")
        point = json.loads(raw)
        assert point["batch_id"] >= 1 and point["epoch"] == point["batch_id"]
        assert len(point["retained"]) == 2
        assert [r["snapshot_id"] for r in point["retained"]] == sorted(
            (r["snapshot_id"] for r in point["retained"]), reverse=True
        )
        # Pruning: only the retained manifests are left in S3.
        wait_until(
            lambda: len(_manifest_keys(s3, "rate-counts")) == 2,
            timeout=30,
            what="old snapshots pruned",
        )

        # Incremental: a later snapshot uploads less than it references.
        last = coord.status()["last_snapshot"]
        assert last["uploaded_bytes"] < last["bytes"]
        assert last["files"] > 0

        # Operator-requested snapshot: answered by a snapshot of the newest completed batch.
        before = point["batch_id"]
        got = coord.request_snapshot(wait="60s")
        assert got is not None and got["batch_id"] >= before

        # The driver lock is held while the coordinator runs.
        assert zkc.get_children("/gtbarrier/rate-counts/driver")
        q.stop()
        snap = coord.resume_point()
        assert snap is not None
    finally:
        coord.close()

    # Restore on a fresh directory: the counts continue from the snapshot.
    cp2 = tmp_path / "cp-restored"
    coord2 = _coordinator(spark, zk, s3, cp2)
    try:
        result = coord2.recover()
        assert result.action == "materialise", result
        assert result.batch_id == snap["batch_id"]
        assert (cp2 / "commits" / str(snap["batch_id"])).is_file()
        assert not (cp2 / "commits" / str(snap["batch_id"] + 1)).exists()
        q2 = _start_counting(spark, cp2, "counts_b")
        try:
            wait_until(
                lambda: (q2.lastProgress or {}).get("batchId", -1) >= snap["batch_id"] + 2,
                timeout=60,
                what="two batches after the restore",
            )
            first = q2.recentProgress[0]
            assert first["batchId"] == snap["batch_id"] + 1  # restarted after the snapshot
        finally:
            q2.stop()
        total, mx = _consistent(spark, "counts_b")
        assert total == mx + 1  # every row 0..mx counted exactly once across the restore
    finally:
        coord2.close()


@pytest.mark.timeout(120)
def test_manifest_lists_checksums_of_what_spark_needs(
    spark: Any, zk: Any, s3: Any, tmp_path: Path
) -> None:
    cp = tmp_path / "cp"
    coord = _coordinator(spark, zk, s3, cp, pipeline_id="rate-manifest", snapshot_period="1h")
    try:
        q = _start_counting(spark, cp, "counts_m")
        coord.watch(q)
        wait_until(
            lambda: (q.lastProgress or {}).get("batchId", -1) >= 2, timeout=60, what="batch 2"
        )
        point = coord.request_snapshot(wait="60s")
        q.stop()
        assert point is not None
        store = coord.store
        manifest = Manifest.from_bytes(store.get(point["manifest"]).data, where="test")
        paths = {f.path for f in manifest.files}
        n = manifest.batch_id
        assert {"metadata", f"offsets/{n}", f"commits/{n}"} <= paths
        assert not any(p.endswith(".crc") or "/." in p for p in paths)
        assert not any(p in paths for p in (f"offsets/{n + 1}", f"commits/{n + 1}"))
        deltas = [p for p in paths if p.startswith("state/") and p.endswith(".delta")]
        assert deltas and max(int(Path(p).name.split(".")[0]) for p in deltas) == n + 1
        assert manifest.packs and all(f.pack is not None for f in manifest.files)
        for f in manifest.files:
            pack = store.get(f"rate-manifest/snapshot-blobs/{f.blob}").data
            assert sha256_hex(pack[f.offset : f.offset + f.size]) == f.sha256
    finally:
        coord.close()
    _ = time


ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


@pytest.mark.timeout(240)
def test_rocksdb_state_store_snapshot_and_restore(
    spark: Any, zk: Any, s3: Any, tmp_path: Path
) -> None:
    """RocksDB checkpoints (``<v>.zip`` + shared ``SSTs/``) restore as well as HDFS ones."""
    key = "spark.sql.streaming.stateStore.providerClass"
    spark.conf.set(key, ROCKSDB)
    try:
        cp = tmp_path / "cp"
        with _coordinator(spark, zk, s3, cp, pipeline_id="rate-rocksdb", snapshot_period="1h") as c:
            q = _start_counting(spark, cp, "counts_r")
            c.watch(q)
            wait_until(
                lambda: (q.lastProgress or {}).get("batchId", -1) >= 3, timeout=90, what="batch 3"
            )
            first = c.request_snapshot(wait="60s")
            assert first is not None
            wait_until(
                lambda: (q.lastProgress or {}).get("batchId", -1) >= first["batch_id"] + 2,
                timeout=90,
                what="two more batches",
            )
            second = c.request_snapshot(wait="60s")
            q.stop()
            assert second is not None
            manifest = Manifest.from_bytes(c.store.get(second["manifest"]).data, where="test")
            paths = {f.path for f in manifest.files}
            n = manifest.batch_id
            assert any(p.endswith(f"/{n + 1}.zip") for p in paths)
            assert any("/SSTs/" in p for p in paths)
            assert c.last_snapshot is not None
            assert c.last_snapshot.uploaded_bytes < c.last_snapshot.bytes  # SSTs shared
        cp2 = tmp_path / "cp-restored"
        with _coordinator(spark, zk, s3, cp2, pipeline_id="rate-rocksdb") as c2:
            result = c2.recover()
            assert result.action == "materialise" and result.batch_id == n
            q2 = _start_counting(spark, cp2, "counts_r2")
            try:
                wait_until(
                    lambda: (q2.lastProgress or {}).get("batchId", -1) >= n + 2,
                    timeout=90,
                    what="two batches after the restore",
                )
                assert q2.recentProgress[0]["batchId"] == n + 1
            finally:
                q2.stop()
        total, mx = _consistent(spark, "counts_r2")
        assert total == mx + 1
    finally:
        spark.conf.unset(key)
