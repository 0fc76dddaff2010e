"""The chaos run's driver program: one pipeline under the snapshot coordinator's supervised
run (``coord.run``: recover, start, watch, restart a failed query with backoff).

    python integration_tests/chaos/driver_program.py JOB.json

It reads a :class:`~integration_tests.chaos.job.DriverJob`, starts Spark, and runs
``gtkafka -> query -> barrier`` with a processing-time trigger until the job's stop file
appears; then it stops the query and exits 0. It exits 3 when the supervised run gives
up (``ResetAttemptsExhausted``, ``PipelineFenced``, ``DriverLockHeld``...). Events go to
stdout as JSON lines (``{"event": "started", ...}``); the ZooKeeper session id and
password are kept in the job's session file so that a test can expire the session.
"""

from __future__ import annotations

import json
import logging
import os
import sys
import threading
from pathlib import Path
from typing import Any

from harness.driver_program import emit
from integration_tests.chaos.job import DriverJob
from integration_tests.chaos.queries import QUERIES
from state.errors import CoordinationError


def spark_session(job: DriverJob) -> Any:
    from pyspark.sql import SparkSession

    from gtbarrier import register_all

    work = Path(job.workdir)
    builder = (
        SparkSession.builder.appName(f"chaos-{job.pipeline}")
        .master(job.master)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.driver.memory", "768m")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.local.dir", str(work / "spark-local"))
        .config("spark.sql.warehouse.dir", str(work / "spark-warehouse"))
        .config("spark.driver.extraJavaOptions", f"-Dderby.system.home={work / 'derby'}")
        .config("spark.sql.streaming.stateStore.minDeltasForSnapshot", "3")
    )
    for key, value in job.spark_conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    register_all(spark)
    return spark


def start_query(spark: Any, job: DriverJob, token: int) -> Any:
    query = QUERIES[job.query]
    df = (
        spark.readStream.format("gtkafka")
        .option("kafka.bootstrap.servers", job.bootstrap)
        .option("subscribe", job.topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(job.max_offsets))
        .option("pipeline.id", job.pipeline)
        .option("state.uri", job.state_uri)
        .option("state.epochsRetained", str(job.epochs_retained))
        .option("readMode", job.read_mode)
        .options(**job.s3_options)
        .load()
    )
    out = query.build(
        df, job.poison, label_modulus=job.label_modulus, keep_divisor=job.keep_divisor
    )
    if job.shape == "kafka":
        out = query.for_kafka(out)
    return (
        out.writeStream.format("barrier")
        .option("pipeline.id", job.pipeline)
        .option("state.uri", job.state_uri)
        .options(**job.s3_options)
        .options(**job.sink_options)
        .option("fencing.token", str(token))
        .option("checkpointLocation", job.checkpoint)
        .outputMode(query.mode)
        .trigger(processingTime=f"{job.trigger_ms} milliseconds")
        .start()
    )


class Monitor(threading.Thread):
    """Keeps the session file current and stops the query once the stop file appears."""

    def __init__(self, job: DriverJob, coord: Any) -> None:
        super().__init__(name="chaos-monitor", daemon=True)
        self.job = job
        self.coord = coord
        self.query: Any = None
        self.stopping = threading.Event()
        self.done = threading.Event()
        self._written: tuple[int, bytes] | None = None

    def run(self) -> None:
        while not self.done.wait(0.2):
            self._write_session()
            if Path(self.job.stop_path).exists():
                self.stopping.set()
            query = self.query
            if self.stopping.is_set() and query is not None and query.isActive:
                emit("stopping", query_id=str(query.id))
                query.stop()

    def _write_session(self) -> None:
        session = self.coord.ownership.session
        client_id = None
        if session is not None:
            try:
                client_id = session.client.client_id
            except CoordinationError:  # the session is being closed
                client_id = None
        if not client_id or client_id == self._written:
            return
        self._written = (int(client_id[0]), bytes(client_id[1]))
        path = Path(self.job.session_path)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"session_id": client_id[0], "password": client_id[1].hex()}))
        os.replace(tmp, path)


def main(argv: list[str]) -> int:
    job = DriverJob.load(Path(argv[0]))
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stdout,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    logging.getLogger("kazoo").setLevel(logging.WARNING)
    logging.getLogger("py4j").setLevel(logging.WARNING)
    emit(
        "driver",
        pid=os.getpid(),
        checkpoint=job.checkpoint,
        master=job.master,
        fault=os.environ.get("GTBARRIER_FAULT"),
    )
    spark = spark_session(job)
    from gtbarrier import SnapshotCoordinator
    from state.errors import GtBarrierError

    coord = SnapshotCoordinator(
        spark,
        pipeline_id=job.pipeline,
        state_uri=job.state_uri,
        checkpoint_location=job.checkpoint,
        zookeeper_hosts=job.zookeeper_hosts,
        snapshot_period=job.snapshot_period,
        retain=2,
        drain_timeout="60s",
        reset_timeout="120s",
        state_options=job.s3_options,
        driver_wait=job.driver_wait,
        zookeeper_session_timeout=job.session_timeout,
        epochs_retained=job.epochs_retained,
    )
    monitor = Monitor(job, coord)
    monitor.start()

    def build(c: Any) -> Any:
        recovery = c.last_recovery
        if recovery is not None:
            emit(
                "recovered",
                action=recovery.action,
                batch_id=recovery.batch_id,
                epoch=recovery.epoch,
                token=c.fencing_token,
            )
        token = c.fencing_token
        q = start_query(spark, job, token)
        monitor.query = q
        emit("started", query_id=str(q.id), run_id=str(q.runId), token=token)
        if monitor.stopping.is_set():
            q.stop()
        return q

    code = 0
    try:
        coord.run(
            build,
            max_consecutive_reset_attempts=job.reset_attempts,
            backoff="500ms",
            max_backoff="5s",
        )
        emit("finished")
    except GtBarrierError as err:
        emit("failed", error=f"{type(err).__name__}: {err}"[:3000])
        code = 3
    finally:
        monitor.done.set()
        coord.close()
        spark.stop()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
