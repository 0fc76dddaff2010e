"""benchmarks.demo_bench --driver, small: the demo's query over a topic read on the driver
(``kafka_driver``) reads every event once, batch after batch, and the comparison with
gtkafka is printed. (The full comparison is in docs/performance.md.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from harness.kafka import KafkaHelper
from harness.process import REPO_ROOT, repo_env
from harness.s3 import S3Server

pytestmark = pytest.mark.slow


@pytest.mark.timeout(600)
def test_the_demo_query_over_driver_side_reads_reads_every_event(
    kafka: KafkaHelper, s3_server: S3Server, tmp_path: Path
) -> None:
    results = tmp_path / "demo.json"
    env = repo_env({"GTB_KAFKA_BOOTSTRAP": kafka.bootstrap, "GTB_S3_ENDPOINT": s3_server.endpoint})
    command = [
        sys.executable,
        "-m",
        "benchmarks.demo_bench",
        "--events",
        "3000",
        "--per-batch",
        "1000",
        "--no-warmup",
        "--repeat",
        "1",
        "--driver",
        "--json",
        str(results),
    ]
    done = subprocess.run(
        command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=540, check=False
    )
    print(done.stdout[-4000:])
    assert done.returncode == 0, done.stderr[-4000:]

    runs = {r["query"]: r for r in json.loads(results.read_text())["data"]["runs"]}
    driver = runs["kafka_driver -> demo query -> noop"]
    worker = runs["gtkafka -> demo query -> noop"]
    for run in (driver, worker):
        # every event counted once by Spark's scans: the branches share one read
        assert run["input_rows"] == run["records"] == 3000, run
        assert run["batches"] >= 3, run
    assert "driver-side reads: kafka_driver -> noop / gtkafka -> noop = " in done.stdout
    ratios = {r["measure"].split(" (")[0]: r for r in json.loads(results.read_text())["ratios"]}
    steady = ratios["the demo query after its first batch"]
    assert steady["value"] > 0 and steady["met"] is None, steady
    assert runs["gtkafka -> demo query -> barrier (file)"]["steady_rows"] == 2000
