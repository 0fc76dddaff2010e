"""benchmarks.soak in two minutes against the harness's Kafka and ZooKeeper: the demo's
stateful query at a steady rate, SIGKILLed every minute and restarted on its checkpoint,
delivers every record exactly once; the restarted drivers resume; snapshots are taken;
the coordinator's pruning keeps the stored objects of every prefix of the pipeline
bounded; every measure is sampled; soak.json and soak.png are written. Timings and
ratios are printed, never asserted."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.kafka import KafkaHelper
from harness.process import REPO_ROOT, repo_env
from harness.zookeeper import ZooKeeperServer

pytestmark = pytest.mark.slow

MINUTES = 2
SAMPLE_SECONDS = 10


@pytest.mark.timeout(1500)
def test_soak_benchmark_short_run(
    kafka: KafkaHelper, zk_server: ZooKeeperServer, tmp_path: Path
) -> None:
    env = repo_env()
    command = [
        sys.executable,
        "-m",
        "benchmarks.soak",
        "--minutes",
        str(MINUTES),
        "--kill-every-minutes",
        "1",
        "--sample-seconds",
        str(SAMPLE_SECONDS),
        "--snapshot-seconds",
        "10",
        "--rate",
        "50",
        # two epochs: the coordinator prunes the log at every snapshot
        "--epochs-retained",
        "2",
        "--bootstrap",
        kafka.bootstrap,
        "--zk-hosts",
        zk_server.hosts,
        "--out",
        str(tmp_path),
    ]
    started = time.monotonic()
    done = subprocess.run(
        command, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=1440, check=False
    )
    print(done.stdout[-12000:])
    print(f"soak (short) wall time: {time.monotonic() - started:.0f} s")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-4000:]

    doc = json.loads((tmp_path / "soak.json").read_text())
    data = doc["data"]
    once = data["exactly_once"]
    assert once["ok"], once["details"]
    assert once["missing"] == 0 and once["duplicates"] == 0 and once["reader_duplicates"] == 0
    assert once["event_rows"] == once["records_in"] == data["produced"] > 0

    kills = data["kills"]
    assert len(kills) >= 1
    assert all(k["resumed_after_s"] is not None for k in kills), kills
    assert data["snapshots"] >= 1

    samples = data["samples"]
    assert len(samples) >= MINUTES * 60 // SAMPLE_SECONDS - 1
    assert max(s["driver"] for s in samples) == len(kills) + 1
    for measure in ("rss_mb", "fds", "threads"):
        for group in ("jvm", "python", "workers"):
            assert any(s[measure][group] > 0 for s in samples), (measure, group)
    assert any(s["p99_ms"] > 0 for s in samples if s["delivered"])
    # Where a micro-batch's time goes, and the broker's answer time, every minute.
    assert all(s["broker_ms"] > 0 for s in samples)
    assert any(s["add_batch_ms"] > 0 and s["latest_offset_ms"] >= 0 for s in samples)
    explained = {r["measure"]: r for r in doc["ratios"] if r["target"] == "(explains)"}
    assert "soak: the broker's ListOffsets, last sixth / minutes 5-15 of an hour" in explained
    assert all(r["met"] is None and r["value"] > 0 for r in explained.values()), explained
    assert sum(s["delivered"] for s in samples) > 0
    assert all(s["objects"] for s in samples)

    # Pruning worked: every prefix ends within its first half's max plus the slack (the
    # snapshots' packs too), and the epoch log holds far fewer epochs than the run made.
    bounded = {r["measure"]: r for r in doc["ratios"] if "objects under" in r["measure"]}
    assert len(bounded) == len(samples[-1]["objects"])
    assert all(r["met"] for r in bounded.values()), bounded
    assert max(s["objects"]["epochs/"] for s in samples) < data["gt_last"], data["gt_last"]
    assert (tmp_path / "soak.png").stat().st_size > 10_000


@pytest.mark.timeout(1500)
def test_soak_benchmark_one_driver_never_killed_with_sparse_output(
    kafka: KafkaHelper, zk_server: ZooKeeperServer, tmp_path: Path
) -> None:
    """``--no-kills --sparse`` (``make soak-sparse``) for two minutes: one driver runs the
    whole run, a sample (with the JVM's heap) is taken every interval, the output is exactly
    once (the few records the filter keeps, and only them), the table, the JSON and the plot
    are written. The growth targets need the hour: printed only. A dense run's output is
    checked by the short run with kills above; ``--no-kills`` alone differs from this one
    only in the filter."""
    command = [
        sys.executable,
        "-m",
        "benchmarks.soak",
        "--minutes",
        str(MINUTES),
        "--no-kills",
        "--sample-seconds",
        str(SAMPLE_SECONDS),
        "--snapshot-seconds",
        "10",
        "--rate",
        "50",
        "--bootstrap",
        kafka.bootstrap,
        "--zk-hosts",
        zk_server.hosts,
        "--out",
        str(tmp_path),
        "--sparse",
    ]
    started = time.monotonic()
    done = subprocess.run(
        command,
        cwd=REPO_ROOT,
        env=repo_env(),
        capture_output=True,
        text=True,
        timeout=1440,
        check=False,
    )
    print(done.stdout[-12000:])
    print(f"soak (one driver, sparse) wall time: {time.monotonic() - started:.0f} s")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-4000:]

    doc = json.loads((tmp_path / "soak.json").read_text())
    data = doc["data"]
    assert data["options"]["no_kills"] is True and data["options"]["sparse"] is True
    assert data["kills"] == []
    samples = data["samples"]
    assert {s["driver"] for s in samples} == {1}
    # A sample every interval, from the first to the end of the run.
    times = [s["t"] for s in samples]
    assert len(samples) == MINUTES * 60 // SAMPLE_SECONDS, times
    assert all(b - a < 2 * SAMPLE_SECONDS for a, b in zip([0.0, *times], times, strict=False))
    for measure in ("rss_mb", "fds", "threads"):
        for group in ("jvm", "python", "workers"):
            assert all(s[measure]["jvm"] > 0 for s in samples), (measure, group)
            assert any(s[measure][group] > 0 for s in samples), (measure, group)
    heaps = [s["heap"] for s in samples if s["heap"] is not None]
    assert heaps, "jcmd never answered"
    assert all(0 < h["used_mb"] <= h["committed_mb"] and h["metaspace_mb"] > 0 for h in heaps)
    assert all(s["load"] >= 0 for s in samples)
    assert data["snapshots"] >= 1

    once = data["exactly_once"]
    assert once["ok"], once["details"]
    assert once["missing"] == 0 and once["duplicates"] == 0 and once["reader_duplicates"] == 0
    assert once["event_rows"] == once["records_in"] > 0
    # The records whose offset is a multiple of rate x minutes (100) are output, a row
    # every 2 s: offset 0 of each of the 4 partitions, and one in 100 after it.
    modulus = 50 * MINUTES
    assert once["records_in"] <= data["produced"] // modulus + 4, (once, data["produced"])

    measures = {r["measure"] for r in doc["ratios"]}
    assert "soak: heap committed of the driver JVM, end / a sixth in" in measures
    assert "soak: threads of the driver JVM, end / a sixth in" in measures
    assert "(target <= 1.1x:" in done.stdout  # the targets' table is printed
    assert (tmp_path / "soak.png").stat().st_size > 10_000
