"""Zero-call registration, the sink's decision log and the operator CLI, end to end.

A fresh SparkSession with no ``register_all`` call runs gtkafka -> barrier (the sources
come from PySpark's discovery of ``pyspark_gtkafka``/``pyspark_barrier``), with the state
in S3; then ``python -m gtbarrier`` (the console script's entry point) reads the pipeline
back: ``status`` (with Kafka's ends and the resume point in ZooKeeper), ``epochs`` and
``sweep``. Without ``spark.sql.streaming.noDataMicroBatches.enabled=false`` the query
fails naming the setting.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.process import REPO_ROOT, repo_env
from integration_tests.sink_helpers import read_bundles
from state.layout import PipelineLayout
from state.records.codec import dumps
from state.records.resume_point import ResumePoint, SnapshotRef
from state.records.source_offset import SourceOffset
from state.stores import open_store

PROGRAM = Path(__file__).with_name("zero_call_program.py")
DRIVER_TIMEOUT = 300.0
CLI_TIMEOUT = 120.0


def gtbarrier(*argv: str) -> subprocess.CompletedProcess[str]:
    """``python -m gtbarrier ...`` in a subprocess (what the console script runs)."""
    return subprocess.run(
        [sys.executable, "-m", "gtbarrier", *argv],
        cwd=REPO_ROOT,
        env=repo_env(),
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )


def gtbarrier_json(*argv: str) -> dict[str, Any]:
    proc = gtbarrier(*argv, "--json")
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def s3_options(s3: Any) -> list[str]:
    return [f"--option={k}={v}" for k, v in s3.options().items()]


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_zero_call_pipeline_then_status_epochs_and_sweep(
    driver: Any, kafka: Any, s3: Any, zk: Any, tmp_path: Path
) -> None:
    topic = kafka.create_topic(partitions=2)
    kafka.produce_values(topic, [str(i).encode() for i in range(300)])
    pipeline, state, out = "cli-p1", s3.uri("state"), tmp_path / "out"
    proc = driver.run(
        PROGRAM,
        *("--bootstrap", kafka.bootstrap, "--topic", topic, "--pipeline", pipeline),
        *("--state", state, "--out", str(out), "--checkpoint", str(tmp_path / "cp")),
        *("--max-offsets", "100"),
        # the per-bundle and per-epoch lines are DEBUG (INFO has the periodic summary)
        env={"GTBARRIER_LOG_LEVEL": "DEBUG"},
    )
    assert proc.wait(DRIVER_TIMEOUT) == 0, proc.output()
    assert read_bundles(out).num_rows == 300

    # the decision log (the commit's Python worker writes to the driver's stderr)
    log = proc.output()
    for epoch in range(3):
        assert f"bundle {epoch} (batch {epoch}, 100 rows) delivered to file consumer" in log
        assert f"gtkafka: pipeline {pipeline}: epoch {epoch} planned, 100 record(s)" in log
    assert "minOffsetsBehindLatest=0 maxOffsetsBehindLatest=" in log

    kafka.produce_values(topic, [b"x"] * 40, partition=0)
    ends = kafka.end_offsets(topic)
    ids = ("--pipeline", pipeline, "--state-uri", state, *s3_options(s3))

    status = gtbarrier_json("status", *ids, "--bootstrap", kafka.bootstrap)
    barrier = status["barrier"]
    assert barrier["gt_last"] == 2 and barrier["inflight"] is None
    assert barrier["owner"]["generation"] == 1 and barrier["owner"]["run_id"]
    assert status["epochs"]["recorded"] == 3
    assert [e["records"] for e in status["epochs"]["newest"]] == [100, 100, 100]
    lag = status["lag"]
    assert lag["behind_total"] == 40 and lag["maxOffsetsBehindLatest"] == 40
    assert lag["minOffsetsBehindLatest"] == 0 and lag["acknowledged_behind_total"] == 40
    assert {p["partition"]: p["kafka_end"] for p in lag["partitions"]} == ends
    assert status["resume_point"] is None  # no coordinator, no ZooKeeper given

    text = gtbarrier("status", *ids, "--bootstrap", kafka.bootstrap)
    assert text.returncode == 0, text.stderr
    assert "GT_last" in text.stdout and "lag behind Kafka's end: 40 offsets" in text.stdout

    epochs = gtbarrier_json("epochs", *ids, "--from", "1")
    assert [e["epoch"] for e in epochs["epochs"]] == [1, 2]
    assert all(e["acknowledged"] for e in epochs["epochs"])
    assert epochs["epochs"][1]["end"] == {
        topic: {str(p): ends[p] - (40 if p == 0 else 0) for p in sorted(ends)}
    }

    # the resume point the coordinator would keep in ZooKeeper
    point = ResumePoint(
        generation=1,
        token=3,
        epoch=2,
        batch_id=2,
        query_id="q",
        frontier=None,
        created_at=1.0,
        retained=(SnapshotRef(4, "m4", "sha", 2, 2), SnapshotRef(3, "m3", "sha", 1, 1)),
    )
    client = zk.client()
    client.create(PipelineLayout(pipeline).zookeeper_resume, dumps(point.to_json()), makepath=True)
    resume = gtbarrier_json("status", *ids, "--zookeeper", zk.hosts)["resume_point"]
    assert resume["generation"] == 1 and resume["token"] == 3 and resume["epoch"] == 2
    assert resume["snapshot"]["snapshot_id"] == 4
    assert [r["snapshot_id"] for r in resume["retained"]] == [4, 3]

    # leftovers: a part staged by a driver that died before its commit, a temp file
    dead = out / "_staging" / "q-dead" / "000000000007" / "p00000-t1-rdead-run.parquet"
    dead.parent.mkdir(parents=True)
    pq.write_table(pa.table({"v": [1]}), dead)
    (out / ".tmp-123").write_bytes(b"x")
    consumer = ("--option", "consumer=file", "--option", f"consumer.path={out}")
    listed = gtbarrier_json("sweep", *ids, *consumer)
    assert sorted((f["kind"], f["run_id"], f["batch_id"]) for f in listed["found"]) == [
        ("consumer temp file", None, None),
        ("staged part", "dead-run", 7),
    ]
    assert dead.exists() and listed["deleted"] == []
    swept = gtbarrier_json("sweep", *ids, *consumer, "--delete", "--zookeeper", zk.hosts)
    assert len(swept["deleted"]) == 2
    assert not dead.exists() and not (out / ".tmp-123").exists()
    assert read_bundles(out).num_rows == 300


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_without_the_no_data_setting_the_query_fails_naming_it(
    driver: Any, kafka: Any, tmp_path: Path
) -> None:
    topic = kafka.create_topic(partitions=1)
    kafka.produce_values(topic, [b"1", b"2", b"3"])
    out = tmp_path / "out"
    proc = driver.run(
        PROGRAM,
        *("--bootstrap", kafka.bootstrap, "--topic", topic, "--pipeline", "cli-p2"),
        *("--state", f"file://{tmp_path}/state", "--out", str(out)),
        *("--checkpoint", str(tmp_path / "cp"), "--no-data-setting", "unset"),
    )
    assert proc.wait(DRIVER_TIMEOUT) == 1, proc.output()
    failure = proc.output()
    assert "QUERY FAILED" in failure
    assert (
        "option 'spark.sql.streaming.noDataMicroBatches.enabled' = \"unset (Spark's default: "
        'true)" is invalid' in failure
    )
    assert "spark.conf.set('spark.sql.streaming.noDataMicroBatches.enabled', 'false')" in failure
    assert not list(out.glob("bundle-*"))


def test_unreachable_servers_and_a_missing_pipeline_are_one_line_exit_2(
    tmp_path: Path, s3: Any
) -> None:
    state = f"file://{tmp_path}/state"
    open_store(state).create_json(
        PipelineLayout("p").source_start, SourceOffset(0, {("t", 0): 0}).to_json()
    )
    cases = {
        "pipeline 'nope' not found in": gtbarrier(
            "status", "--pipeline", "nope", "--state-uri", state
        ),
        "Kafka at 127.0.0.1:9 is unavailable": gtbarrier(
            "status",
            "--pipeline",
            "p",
            "--state-uri",
            state,
            "--bootstrap",
            "127.0.0.1:9",
            "--epochs",
            "1",
        ),
        "ZooKeeper at 127.0.0.1:9 could not be reached": gtbarrier(
            "status", "--pipeline", "p", "--state-uri", state, "--zookeeper", "127.0.0.1:9"
        ),
        "the state store cannot be reached": gtbarrier(
            "epochs",
            "--pipeline",
            "p",
            "--state-uri",
            s3.uri("x"),
            "--option",
            "s3.endpoint=http://127.0.0.1:9",
            "--option",
            "s3.retryDeadline=2s",
        ),
        "pipeline 'p' not found in s3://": gtbarrier(
            "epochs", "--pipeline", "p", "--state-uri", s3.uri("empty"), *s3_options(s3)
        ),
    }
    for message, proc in cases.items():
        assert proc.returncode == 2, (message, proc.stdout, proc.stderr)
        assert proc.stdout == "" and proc.stderr.count("\n") == 1, (message, proc.stderr)
        assert message in proc.stderr, proc.stderr
