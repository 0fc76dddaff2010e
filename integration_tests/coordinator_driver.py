"""A driver program for the coordinator's integration tests (run by the ``driver`` fixture).

It runs one or two stateful pipelines ``gtkafka -> Spark -> barrier (file consumer)``,
each under its own :class:`SnapshotCoordinator`, in one SparkSession:

* ``<prefix>-windowed``: a windowed aggregation (100-second event-time windows over the
  record number), output mode complete;
* ``<prefix>-keyed``: ``applyInPandasWithState`` keeping count, sum and max per key,
  output mode append.

Records are ``key = b"k<i % 13>"``, ``value = b"<i>"``; see :mod:`coordinator_support`
for the expected results. The program prints one JSON line per event (``recovered``,
``started``, ``requested``, ``finished``, ``failed``) so a test can follow it; with
``--request-file`` a test requests snapshots by creating that file. It exits 0 when every
query finished (``--trigger available-now``), 3 when a query failed.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
from pathlib import Path
from typing import Any

from harness.driver_program import emit
from integration_tests.coordinator_support import start_pipeline


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--bootstrap", required=True)
    p.add_argument("--topic", required=True)
    p.add_argument("--state-uri", required=True)
    p.add_argument("--zk", default=None)
    p.add_argument("--prefix", required=True)
    p.add_argument("--pipelines", default="windowed,keyed")
    p.add_argument("--cp-root", required=True)
    p.add_argument("--out-root", required=True)
    p.add_argument("--trigger", choices=("processing", "available-now"), default="processing")
    p.add_argument("--max-offsets", default="200")
    p.add_argument("--period", default="2s")
    p.add_argument("--mode", default="restore")
    p.add_argument("--driver-wait", default=None)
    p.add_argument("--session-timeout", default="4s")
    p.add_argument(
        "--epochs-retained",
        type=int,
        default=None,
        help="the coordinators' epochs_retained (default: theirs)",
    )
    p.add_argument(
        "--request-file",
        default=None,
        help="when this file appears, it is removed and every pipeline requests a snapshot",
    )
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

    from gtbarrier import SnapshotCoordinator, register_all

    spark = (
        SparkSession.builder.master("local[2]")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.driver.memory", "768m")
        .config("spark.sql.streaming.stateStore.minDeltasForSnapshot", "5")
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("WARN")
    register_all(spark)

    coords: dict[str, Any] = {}
    queries: dict[str, Any] = {}
    for kind in args.pipelines.split(","):
        pipeline = f"{args.prefix}-{kind}"
        coord = SnapshotCoordinator(
            spark,
            pipeline_id=pipeline,
            state_uri=args.state_uri,
            checkpoint_location=Path(args.cp_root) / kind,
            zookeeper_hosts=args.zk,
            snapshot_period=args.period,
            retain=2,
            drain_timeout="60s",
            reset_timeout="90s",
            driver_wait=args.driver_wait,
            zookeeper_session_timeout=args.session_timeout,
            **({} if args.epochs_retained is None else {"epochs_retained": args.epochs_retained}),
        )
        result = coord.recover(args.mode)
        emit(
            "recovered",
            pipeline=pipeline,
            action=result.action,
            batch_id=result.batch_id,
            epoch=result.epoch,
            seconds=round(result.seconds, 3),
            files=result.files,
            bytes=result.bytes,
            skipped=list(result.skipped),
            token=coord.fencing_token,
            snapshot=None if result.snapshot is None else result.snapshot.snapshot_id,
        )
        q = start_pipeline(
            spark,
            kind,
            bootstrap=args.bootstrap,
            topic=args.topic,
            pipeline=pipeline,
            state_uri=args.state_uri,
            checkpoint=Path(args.cp_root) / kind,
            sink={"consumer": "file", "consumer.path": str(Path(args.out_root) / kind)},
            token=coord.fencing_token,
            max_offsets=int(args.max_offsets),
            available_now=args.trigger == "available-now",
        )
        coord.watch(q)
        coords[kind], queries[kind] = coord, q
        emit("started", pipeline=pipeline, query_id=str(q.id))

    failed = threading.Event()

    def wait(kind: str) -> None:
        q = queries[kind]
        try:
            q.awaitTermination()
        except Exception as err:
            failed.set()
            emit("failed", pipeline=f"{args.prefix}-{kind}", error=str(err)[:2000])
            return
        progress = q.recentProgress
        emit(
            "finished",
            pipeline=f"{args.prefix}-{kind}",
            batches=[p["batchId"] for p in progress],
            stop_error=str(coords[kind].take_stop_error()),
        )

    threads = [threading.Thread(target=wait, args=(k,)) for k in queries]
    for t in threads:
        t.start()
    if args.request_file:
        request = Path(args.request_file)
        while any(t.is_alive() for t in threads):
            if request.exists():
                request.unlink()
                for coord in coords.values():
                    coord.request_snapshot()
                emit("requested")
            time.sleep(0.2)
    for t in threads:
        t.join()
    for coord in coords.values():
        coord.close()
    spark.stop()
    return 3 if failed.is_set() else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
