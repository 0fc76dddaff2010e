"""Prometheus metrics scraped during a real run: the coordinator's endpoint and the exporter.

gtkafka -> applyInPandasWithState -> barrier (file consumer) on Tansu, the state in
SeaweedFS S3 and the coordinator on ZooKeeper with ``metrics_port=0``; ``python -m
gtbarrier exporter`` runs beside it as a subprocess, given the S3 keys as secret
references. Both endpoints are scraped twice while batches run: GT_last and the bundles
delivered grow, the offsets behind are there for every partition, and after a snapshot
its age is finite. Neither the exporter's output nor a scrape shows the secret. The
driver's ``/ready`` is 200 while the query runs and 503 once it stopped; ``/healthz`` is 200.
"""

from __future__ import annotations

import math
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from gtbarrier import SnapshotCoordinator
from harness.coordinator_program import produce
from harness.process import repo_env, wait_until
from integration_tests.coordinator_support import start_pipeline
from integration_tests.metrics_support import Samples, exporter, scrape, value

PIPELINE = "metrics"
SECRET_ENV = "GTB_METRICS_TEST_SECRET_KEY"


def metric(samples: Samples, name: str, **labels: str) -> float | None:
    return value(samples, name, pipeline=PIPELINE, **labels)


def exporter_args(s3: Any, kafka: Any, zk: Any) -> list[str]:
    """The exporter's arguments, the S3 secret key as a reference to ``$SECRET_ENV``."""
    options = {**s3.options(), "s3.secretAccessKey": f"${{env:{SECRET_ENV}}}"}
    return [
        "--pipeline",
        PIPELINE,
        "--state-uri",
        s3.uri("gtb"),
        *(f"--option={k}={v}" for k, v in options.items()),
        "--zookeeper",
        zk.hosts,
        "--bootstrap",
        kafka.bootstrap,
    ]


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
    driver_url = f"http://127.0.0.1:{coord.metrics_port}/metrics"
    env = {**repo_env(), SECRET_ENV: secret}
    q = None
    try:
        with exporter(
            exporter_args(s3, kafka, zk), env=env, output=tmp_path / "exporter.log"
        ) as run:
            q = run_and_scrape(
                coord,
                spark=spark,
                kafka=kafka,
                s3=s3,
                topic=topic,
                tmp_path=tmp_path,
                driver_url=driver_url,
                exporter_url=run.url,
            )
        assert run.process.returncode == 0, run.text()
        assert secret not in run.text()
    finally:
        if q is not None:
            q.stop()
        coord.close()
    assert coord.metrics_port is None
    with pytest.raises(OSError):
        urllib.request.urlopen(driver_url, timeout=5)


def probe(url: str) -> tuple[int, str]:
    """``(status, body)`` of a GET of ``url``, an error's too."""
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def run_and_scrape(
    coord: SnapshotCoordinator,
    *,
    spark: Any,
    kafka: Any,
    s3: Any,
    topic: str,
    tmp_path: Path,
    driver_url: str,
    exporter_url: str,
) -> Any:
    """Start the query, scrape both endpoints while it runs; the query (to stop)."""
    secret = s3.options()["s3.secretAccessKey"]
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
                metric(samples, "gtbarrier_source_offsets_behind", topic=topic, partition=p)
                for p in ("0", "1")
            ]
            return (metric(samples, "gtbarrier_gt_last") or -1) >= 0 and all(
                b is not None and b >= 0 for b in behind
            )

        first = {}
        for url in (driver_url, exporter_url):
            wait_until(lambda u=url: ready(u), timeout=180, what=f"a bundle and the lag at {url}")  # type: ignore[misc]
            first[url] = scrape(url)[1]

        def moved(url: str) -> bool:
            now = scrape(url)[1]
            return all(
                (metric(now, name) or 0) > (metric(first[url], name) or 0)
                for name in ("gtbarrier_gt_last", "gtbarrier_bundles_delivered_total")
            )

        for url in (driver_url, exporter_url):
            wait_until(lambda u=url: moved(u), timeout=180, what=f"GT_last to grow at {url}")  # type: ignore[misc]

        assert coord.request_snapshot(wait="120s") is not None
        for url in (driver_url, exporter_url):
            text, samples = scrape(url)
            age = metric(samples, "gtbarrier_snapshot_age_seconds")
            assert age is not None and math.isfinite(age) and 0 <= age < 300, (url, age)
            assert (metric(samples, "gtbarrier_owner_generation") or 0) >= 1
            assert secret not in text
        driver = scrape(driver_url)[1]
        assert metric(driver, "gtbarrier_snapshots_total", outcome="accepted") == 1
        assert (metric(driver, "gtbarrier_microbatch_duration_seconds_count") or 0) >= 2
        assert metric(driver, "gtbarrier_replayed_bundles_dropped_total") == 0
        # the probes: the process serves, and the running query is ready
        base = driver_url.removesuffix("/metrics")
        assert probe(f"{base}/healthz") == (200, "ok\n")
        status, body = probe(f"{base}/ready")
        assert status == 200 and body.startswith("ready: last heard from the query"), body
        exporter_base = exporter_url.removesuffix("/metrics")
        assert probe(f"{exporter_base}/healthz") == (200, "ok\n")
        assert probe(f"{exporter_base}/ready")[0] == 404
        q.stop()
        status, body = probe(f"{base}/ready")
        assert (status, body) == (503, "not ready: no query is running\n")
    except BaseException:
        if q is not None:
            q.stop()
        raise
    return q
