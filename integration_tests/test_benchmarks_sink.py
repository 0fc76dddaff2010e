"""benchmarks.sink_bench, small, against the harness's Kafka broker and S3 server, for the
``delta`` consumer beside ``file``: both modes of each deliver every record, and the summary
lines that ``make bench`` reads give a delta row. Timings and ratios are printed, never
asserted (a run this small measures shapes, not speed)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from benchmarks.__main__ import parse_sink
from harness.kafka import KafkaBroker
from harness.process import REPO_ROOT, repo_env
from harness.s3 import S3Server

pytestmark = pytest.mark.slow

RECORDS = 4000


@pytest.mark.timeout(900)
def test_the_sink_benchmark_runs_the_delta_consumer_in_both_modes(
    kafka_broker: KafkaBroker, s3_server: S3Server
) -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks.sink_bench",
            "--records",
            str(RECORDS),
            "--per-batch",
            "1000",
            "--targets",
            "file,delta",
            "--no-warmup",
            "--no-parquet",
            "--bootstrap",
            kafka_broker.bootstrap,
            "--s3-endpoint",
            s3_server.endpoint,
        ],
        cwd=REPO_ROOT,
        env=repo_env(),
        capture_output=True,
        text=True,
        timeout=840,
        check=False,
    )
    print(done.stdout[-6000:])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-4000:]
    for target in ("file", "delta"):
        for mode in ("exactly-once", "at-least-once"):
            line = re.search(rf"^\s*{target}\s+{mode}\s+([\d,]+) records in", done.stdout, re.M)
            assert line is not None, (target, mode)
            assert int(line[1].replace(",", "")) == RECORDS, (target, mode, line[0])
    ratios, data = parse_sink(done.stdout)
    assert "delta" in data and "file" in data, data
    assert any(r.measure.startswith("delta: exactly-once / at-least-once") for r in ratios)
