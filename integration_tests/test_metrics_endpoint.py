"""Prometheus metrics scraped during a real run: the coordinator's endpoint and the exporter.

gtkafka -> applyInPandasWithState -> barrier (file consumer) on Tansu, the state in
SeaweedFS S3 and the coordinator on ZooKeeper with ``metrics_port=0``; ``python -m
gtbarrier exporter`` runs beside it as a subprocess, given the S3 keys as secret
references. Both endpoints are scraped twice while batches run: GT_last and the bundles
delivered grow, the offsets behind are there for every partition, and after a snapshot
its age is finite. Neither the exporter's output nor a scrape shows the secret.
"""

from __future__ import annotations

import math
import re
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from gtbarrier import SnapshotCoordinator
from harness.coordinator_program import produce
from harness.process import REPO_ROOT, repo_env, wait_until
from integration_tests.coordinator_support import start_pipeline

PIPELINE = "metrics"
SECRET_ENV = "GTB_METRICS_TEST_SECRET_KEY"
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> tuple[str, Samples]:
    with urllib.request.urlopen(url, timeout=30) as answer:
        text = answer.read().decode()
    samples: Samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return text, samples


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted({"pipeline": PIPELINE, **labels}.items()))))


def start_exporter(s3: Any, kafka: Any, zk: Any) -> tuple[subprocess.Popen[str], str]:
    options = {**s3.options(), "s3.secretAccessKey": f"${{env:{SECRET_ENV}}}"}
    env = {**repo_env(), SECRET_ENV: s3.options()["s3.secretAccessKey"]}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "gtbarrier",
            "exporter",
            "--pipeline",
            PIPELINE,
            "--state-uri",
            s3.uri("gtb"),
            *(f"--option={k}={v}" for k, v in options.items()),
            "--zookeeper",
            zk.hosts,
            "--bootstrap",
            kafka.bootstrap,
            "--port",
            "0",
            "--address",
            "127.0.0.1",
        ],
        cwd=REPO_ROOT,
        env=env,
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
    )
    assert proc.stderr is not None
    line = proc.stderr.readline()
    found = re.search(r"serving (http://\S+/metrics)", line)
    if found is None:
        proc.kill()
        raise AssertionError(f"the exporter did not start: {line}{proc.stderr.read()}")
    return proc, found.group(1)


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_metrics_move_during_a_real_run(
    spark: Any, kafka: Any, s3: Any, zk: Any, tmp_path: Path
) -> None:
    topic = kafka.create_topic(partitions=2)
    produce(kafka, topic, 0, 1600)
    secret = s3.options()["s3.secretAccessKey"]
    coord = SnapshotCoordinator(
        spark,
        pipeline_id=PIPELINE,
        state_uri=s3.uri("gtb"),
        checkpoint_location=tmp_path / "cp",
        zookeeper_hosts=zk.hosts,
        state_options=s3.options(),
        snapshot_period="1h",
        zookeeper_session_timeout="4s",
        metrics_port=0,
        metrics_address="127.0.0.1",
    )
    exporter, exporter_url = start_exporter(s3, kafka, zk)
    driver_url = f"http://127.0.0.1:{coord.metrics_port}/metrics"
    q = None
    try:
        coord.recover()
        q = start_pipeline(
            spark,
            "keyed",
            bootstrap=kafka.bootstrap,
            topic=topic,
            pipeline=PIPELINE,
            state_uri=s3.uri("gtb"),
            checkpoint=tmp_path / "cp",
            sink={"consumer": "file", "consumer.path": str(tmp_path / "out")},
            token=coord.fencing_token,
            max_offsets=100,
            available_now=False,
            processing_time="1 second",
            store_options=s3.options(),
        )
        coord.watch(q)

        def ready(url: str) -> bool:
            # a bundle delivered, and the lag of every partition read (the driver learns
            # it from the batch's progress, posted after the batch's commit)
            samples = scrape(url)[1]
            behind = [
                value(samples, "gtbarrier_source_offsets_behind", topic=topic, partition=p)
                for p in ("0", "1")
            ]
            return (value(samples, "gtbarrier_gt_last") or -1) >= 0 and all(
                b is not None and b >= 0 for b in behind
            )

        first = {}
        for url in (driver_url, exporter_url):
            wait_until(lambda u=url: ready(u), timeout=180, what=f"a bundle and the lag at {url}")  # type: ignore[misc]
            first[url] = scrape(url)[1]

        def moved(url: str) -> bool:
            now = scrape(url)[1]
            return all(
                (value(now, name) or 0) > (value(first[url], name) or 0)
                for name in ("gtbarrier_gt_last", "gtbarrier_bundles_delivered_total")
            )

        for url in (driver_url, exporter_url):
            wait_until(lambda u=url: moved(u), timeout=180, what=f"GT_last to grow at {url}")  # type: ignore[misc]

        assert coord.request_snapshot(wait="120s") is not None
        for url in (driver_url, exporter_url):
            text, samples = scrape(url)
            age = value(samples, "gtbarrier_snapshot_age_seconds")
            assert age is not None and math.isfinite(age) and 0 <= age < 300, (url, age)
            assert (value(samples, "gtbarrier_owner_generation") or 0) >= 1
            assert secret not in text
        driver = scrape(driver_url)[1]
        assert value(driver, "gtbarrier_snapshots_total", outcome="accepted") == 1
        assert (value(driver, "gtbarrier_bundle_delivery_seconds_count") or 0) >= 2
        assert value(driver, "gtbarrier_replayed_bundles_dropped_total") == 0
    finally:
        if q is not None:
            q.stop()
        exporter.send_signal(signal.SIGTERM)
        try:
            _, err = exporter.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            exporter.kill()
            _, err = exporter.communicate()
        coord.close()
    assert exporter.returncode == 0, err
    assert secret not in err
    assert coord.metrics_port is None
    with pytest.raises(OSError):
        urllib.request.urlopen(driver_url, timeout=5)
