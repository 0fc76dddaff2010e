"""The driver program of the upgrade test (``test_upgrade.py``), run on two releases.

gtkafka -> barrier (``consumer=file``) under a :class:`~gtbarrier.SnapshotCoordinator`
with ZooKeeper: ``recover("restore")``, then the query with ``Trigger.AvailableNow`` (so
it reads what the topic holds, ``--max-offsets`` records a batch, and stops), then, with
``--snapshot``, one snapshot of its last batch, waited for.

It imports nothing from this repository but gtbarrier's public API (``register_all``,
``SnapshotCoordinator``), so the same program runs on the previous release's tree (on its
``PYTHONPATH``) and on this one. It prints one JSON line per event (``recovered``,
``finished``, ``snapshot``) and exits 0, or 3 when the query failed.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any


def emit(event: str, **fields: Any) -> None:
    print(json.dumps({"event": event, "t": time.time(), **fields}, default=str), flush=True)


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--pipeline", required=True)
    p.add_argument("--state-uri", required=True)
    p.add_argument("--zk", required=True)
    p.add_argument("--checkpoint", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--max-offsets", default="200")
    p.add_argument("--snapshot", action="store_true")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stdout,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    from pyspark.sql import SparkSession

    import gtbarrier
    from gtbarrier import SnapshotCoordinator, register_all

    workdir = Path(args.workdir)
    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "768m")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.local.dir", str(workdir / "local"))
        .config("spark.sql.warehouse.dir", str(workdir / "warehouse"))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={workdir / 'derby'}")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    register_all(spark)

    coord = SnapshotCoordinator(
        spark,
        pipeline_id=args.pipeline,
        state_uri=args.state_uri,
        checkpoint_location=args.checkpoint,
        zookeeper_hosts=args.zk,
        snapshot_period="1h",  # only the snapshot asked for below
        retain=2,
        drain_timeout="60s",
    )
    result = coord.recover("restore")
    emit(
        "recovered",
        gtbarrier=gtbarrier.__file__,
        action=result.action,
        batch_id=result.batch_id,
        epoch=result.epoch,
        token=coord.fencing_token,
        snapshot=None if result.snapshot is None else result.snapshot.snapshot_id,
    )
    query = (
        spark.readStream.format("gtkafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", args.max_offsets)
        .option("pipeline.id", args.pipeline)
        .option("state.uri", args.state_uri)
        .load()
        .select("key", "value", "partition", "offset", "gt")
        .writeStream.format("barrier")
        .option("pipeline.id", args.pipeline)
        .option("state.uri", args.state_uri)
        .option("consumer", "file")
        .option("consumer.path", args.out)
        .option("fencing.token", str(coord.fencing_token))
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    coord.watch(query)
    try:
        query.awaitTermination()
    except Exception as err:
        emit("failed", error=str(err)[:4000])
        coord.close()
        spark.stop()
        return 3
    emit("finished", batches=[p["batchId"] for p in query.recentProgress])
    if args.snapshot:
        point = coord.request_snapshot(wait="120s")
        emit("snapshot", resume_point=point)
    coord.close()
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
