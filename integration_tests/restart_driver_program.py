"""A driver program for the graceful-restart tests: one supervised pipeline (``coord.run``).

``gtkafka -> applyInPandasWithState -> barrier (file consumer)``, the keyed pipeline of
:mod:`integration_tests.coordinator_support`, under a :class:`SnapshotCoordinator` with
the default ``driver_wait`` (None: fail fast if another driver holds the lock). It prints
one JSON line per event so that a test can follow it:

* ``metrics``: the metrics endpoint's port (with ``--metrics``);
* ``started``: the query started (its id);
* ``committed``: a micro-batch completed (Spark's progress event, heard on the driver);
* ``stopped``: ``run()`` returned (the query ended without an error);
* ``failed``: ``run()`` raised (the error's type and text); exit code 3.

Exit code 0 after ``stopped``, once the coordinator is closed and Spark stopped.
"""

from __future__ import annotations

import argparse
import logging
import sys
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
    p.add_argument("--pipeline", required=True)
    p.add_argument("--cp", required=True)
    p.add_argument("--out", required=True)
    p.add_argument("--max-offsets", type=int, default=100)
    p.add_argument("--processing-time", default="200 milliseconds")
    p.add_argument("--session-timeout", default="30s")
    p.add_argument("--metrics", action="store_true", help="serve metrics on a free port")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse(argv)
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stdout,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    from pyspark.sql.streaming.listener import StreamingQueryListener

    from gtbarrier import SnapshotCoordinator
    from harness.driver_program import program_session

    class Commits(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            pass

        def onQueryProgress(self, event: Any) -> None:
            progress = event.progress
            emit("committed", batch=progress.batchId, rows=progress.numInputRows)

        def onQueryIdle(self, event: Any) -> None:
            pass

        def onQueryTerminated(self, event: Any) -> None:
            pass

    spark = program_session("restart")
    spark.streams.addListener(Commits())
    coord = SnapshotCoordinator(
        spark,
        pipeline_id=args.pipeline,
        state_uri=args.state_uri,
        checkpoint_location=Path(args.cp),
        zookeeper_hosts=args.zk,
        snapshot_period="2s",
        zookeeper_session_timeout=args.session_timeout,
        metrics_port=0 if args.metrics else None,
    )
    if coord.metrics_port is not None:
        emit("metrics", port=coord.metrics_port)

    def build(c: Any) -> Any:
        q = start_pipeline(
            spark,
            "keyed",
            bootstrap=args.bootstrap,
            topic=args.topic,
            pipeline=args.pipeline,
            state_uri=args.state_uri,
            checkpoint=Path(args.cp),
            sink={"consumer": "file", "consumer.path": args.out},
            token=c.fencing_token,
            max_offsets=args.max_offsets,
            available_now=False,
            processing_time=args.processing_time,
        )
        emit("started", query_id=str(q.id), token=c.fencing_token)
        return q

    try:
        coord.run(build, max_consecutive_reset_attempts=0)
    except Exception as err:
        emit("failed", error=type(err).__name__, text=str(err)[:2000])
        return 3
    finally:
        coord.close()
        spark.stop()
    emit("stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
