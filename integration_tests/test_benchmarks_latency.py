"""benchmarks.latency at a tiny size against the harness's Kafka, PostgreSQL and ZooKeeper:
every record produced is seen exactly once by the reader of its consumer (file, postgres,
kafka), none before it was produced, and the results file has the fields
``python -m benchmarks`` and the docs read. Timings are printed, never asserted."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from harness.kafka import KafkaHelper
from harness.postgres import PostgresServer
from harness.process import REPO_ROOT, repo_env
from harness.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow


def run_latency(
    tmp_path: Path, servers: dict[str, str], args: list[str], timeout: float
) -> tuple[str, dict[str, Any]]:
    """``python -m benchmarks.latency <args>`` against ``servers`` (``GTB_*`` variables):
    its stdout and its results file, after asserting that it succeeded."""
    results = tmp_path / "latency.json"
    command = [
        sys.executable,
        "-m",
        "benchmarks.latency",
        *args,
        "--json",
        str(results),
        "--out",
        str(tmp_path),
    ]
    done = subprocess.run(
        command,
        cwd=REPO_ROOT,
        env=repo_env(servers),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    print(done.stdout[-6000:])
    assert done.returncode == 0, done.stderr[-4000:]
    doc: dict[str, Any] = json.loads(results.read_text())
    return done.stdout, doc


@pytest.mark.timeout(900)
def test_latency_benchmark_sees_every_record_once(
    kafka: KafkaHelper,
    postgres_server: PostgresServer,
    zk_server: ZooKeeperServer,
    tmp_path: Path,
) -> None:
    servers = {
        "GTB_KAFKA_BOOTSTRAP": kafka.bootstrap,
        "GTB_POSTGRES_DSN": postgres_server.dsn,
        "GTB_ZK_HOSTS": zk_server.hosts,
    }
    args = ["--comparison-rate", "200", "--comparison-seconds", "2", "--repeat", "1"]
    args += ["--fixed-rates", "100,400", "--search-rates", "100,400", "--step-seconds", "1.5"]
    args += ["--driver-mode"]
    stdout, doc = run_latency(tmp_path, servers, args, timeout=840)
    runs = doc["data"]["runs"]
    labels = {r["label"] for r in runs}
    assert {
        "file exactly-once",
        "file at-least-once",
        "file exactly-once, snapshots",
        "file exactly-once, readMode=driver",
        "file at-least-once, readMode=driver",
        "file trigger 0",
        "file trigger 1 s",
        "postgres trigger 0",
        "postgres trigger 1 s",
        "kafka trigger 0",
        "kafka trigger 1 s",
    } <= labels
    for run in runs:
        assert run["produced"] > 0, run["label"]
        assert run["seen"] == run["produced"], run["label"]
        assert run["missing"] == 0 and run["duplicates"] == 0 and run["unexpected"] == 0
        assert run["min_latency_ms"] >= 0, run["label"]
        assert run["steps"], run["label"]
        for step in run["steps"]:
            assert {"rate", "produced", "achieved_rate", "p50_ms", "p99_ms", "wait_p99_ms"} <= set(
                step
            )
            assert step["p50_ms"] <= step["p95_ms"] <= step["p99_ms"]
            assert len(step["cdf_ms"]) == 101
        assert {s["rate"] for s in run["steps"]} <= {100, 200, 400}
    assert any(r["snapshots"] for r in runs)
    on_driver = {r["label"] for r in runs if r["read_mode"] == "driver"}
    assert on_driver == {
        "file exactly-once, readMode=driver",
        "file at-least-once, readMode=driver",
    }

    measures = {r["measure"] for r in doc["ratios"]}
    assert "latency: exactly-once p99 / at-least-once p99" in measures
    assert any(m.startswith("latency: p99 with snapshots") for m in measures)
    assert "latency: exactly-once p99 / median micro-batch duration" in measures
    assert "latency: readMode=driver exactly-once p99 / executors exactly-once p99" in measures
    assert "latency: readMode=driver exactly-once p99 / at-least-once p99" in measures
    for consumer in ("file", "postgres", "kafka"):
        assert any(m.startswith(f"latency: {consumer}: highest rate") for m in measures)
    assert all(r["benchmark"] == "latency" for r in doc["ratios"])
    assert (tmp_path / "latency.png").stat().st_size > 0
    assert "driver-side reads" not in stdout  # only with --driver


@pytest.mark.timeout(600)
def test_driver_side_reads_are_measured_into_sparks_file_sink(
    kafka: KafkaHelper, tmp_path: Path
) -> None:
    """``--driver``: gtkafka and kafka_driver into Spark's parquet sink, each record seen
    once, both triggers, and the comparison printed."""
    args = ["--skip-comparison", "--consumers", "", "--driver"]
    args += ["--comparison-rate", "200", "--comparison-seconds", "2", "--repeat", "1"]
    stdout, doc = run_latency(tmp_path, {"GTB_KAFKA_BOOTSTRAP": kafka.bootstrap}, args, timeout=540)
    runs = doc["data"]["runs"]
    driver_runs = [r for r in runs if r["consumer"] == "spark-parquet"]
    assert {(r["source"], r["trigger_s"]) for r in driver_runs} == {
        ("gtkafka", 0.0),
        ("kafka_driver", 0.0),
        ("gtkafka", 1.0),
        ("kafka_driver", 1.0),
    }
    for run in driver_runs:
        assert run["produced"] > 0 and run["seen"] == run["produced"], run["label"]
        assert run["missing"] == 0 and run["duplicates"] == 0 and run["unexpected"] == 0
        assert run["steps"][0]["p99_ms"] >= run["steps"][0]["p50_ms"] > 0
        assert run["steps"][0]["wait_p99_ms"] >= 0, run["label"]
    assert "p99 kafka_driver / gtkafka = " in stdout
