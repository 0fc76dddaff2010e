"""docs/alerts.yml evaluated by a real Prometheus that scrapes a real pipeline.

gtkafka (Tansu) -> applyInPandasWithState -> barrier (consumer=postgres), under
``SnapshotCoordinator.run`` with its metrics endpoint; Prometheus (Debian's package)
scrapes it every second. The stuck and bundle-in-flight alerts run with their windows
scaled from minutes to seconds (:data:`SCALED`, each replacement checked to apply), the
expressions otherwise as shipped; ``tests/alerts_test.yml`` tests the shipped windows with
``promtool``. While data flows neither alert fires; with PostgreSQL paused (SIGSTOP) the
stuck alert fires within its window and keeps firing (the commit fails before its bundle
is recorded in flight, and each restart fails connecting: no bundle in flight); after it
resumes the alert resolves and every record is delivered exactly once; a pipeline with no
input left raises neither.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import yaml

from gtbarrier import SnapshotCoordinator
from harness.coordinator_program import produce
from harness.process import wait_until
from harness.prometheus import PrometheusServer
from harness.server import serving
from integration_tests.coordinator_support import expected_keyed, start_pipeline

pytestmark = pytest.mark.slow

RULES = Path(__file__).resolve().parents[1] / "docs" / "alerts.yml"
STUCK = "GtbarrierPipelineStuck"
IN_FLIGHT = "GtbarrierBundleInFlightTooLong"
#: Per alert: the text replacements of its expression, and its `for` (seconds for minutes).
SCALED: dict[str, tuple[dict[str, str], str]] = {
    STUCK: (
        {
            "gtbarrier_source_offsets_behind[10m]": "gtbarrier_source_offsets_behind[20s]",
            "gtbarrier_last_progress_timestamp_seconds)) > 600": (
                "gtbarrier_last_progress_timestamp_seconds)) > 20"
            ),
        },
        "5s",
    ),
    IN_FLIGHT: (
        {"gtbarrier_inflight_age_seconds) > 300": "gtbarrier_inflight_age_seconds) > 8"},
        "3s",
    ),
}
RECORDS = 2400
PIPELINE = "alerting"


def scaled_rules() -> str:
    """The two alerts of docs/alerts.yml with their windows in seconds."""
    doc = yaml.safe_load(RULES.read_text())
    kept = []
    for rule in doc["groups"][0]["rules"]:
        if rule["alert"] not in SCALED:
            continue
        replacements, window = SCALED[rule["alert"]]
        for old, new in replacements.items():
            assert old in rule["expr"], f"{rule['alert']}: {old!r} no longer in its expression"
            rule["expr"] = rule["expr"].replace(old, new)
        rule["for"] = window
        kept.append(rule)
    assert {r["alert"] for r in kept} == set(SCALED)
    return yaml.safe_dump({"groups": [{"name": "gtbarrier-scaled", "rules": kept}]})


def delivered(postgres: Any, table: str) -> list[tuple[bytes, int, int, int]]:
    return [
        (bytes(k), n, total, mx)
        for k, n, total, mx in postgres.rows(f"SELECT key, n, total, mx FROM {table}")
    ]


def check_exactly_once(rows: list[tuple[bytes, int, int, int]], n: int) -> None:
    """Each key's running count appears once per bundle (a bundle delivered twice repeats
    it) and its newest row is the whole input's."""
    repeated = [kn for kn, c in Counter((k, n_) for k, n_, _, _ in rows).items() if c > 1]
    assert not repeated, f"rows delivered twice: {repeated[:5]}"
    last: dict[bytes, tuple[int, int, int]] = {}
    for k, n_, total, mx in sorted(rows, key=lambda r: r[1]):
        last[k] = (n_, total, mx)
    assert last == expected_keyed(n)


@pytest.mark.timeout(600)
def test_a_paused_database_fires_the_stuck_alerts_which_resolve_after_it_resumes(
    spark: Any, kafka: Any, postgres: Any, postgres_server: Any, tmp_path: Path
) -> None:
    topic = kafka.create_topic(partitions=2)
    produce(kafka, topic, 0, RECORDS)
    state_uri = f"file://{tmp_path}/state"
    table = postgres.table("counts")
    coord = SnapshotCoordinator(
        spark,
        pipeline_id=PIPELINE,
        state_uri=state_uri,
        checkpoint_location=tmp_path / "cp",
        snapshot_period="1h",
        metrics_port=0,
        metrics_address="127.0.0.1",
    )

    def build(c: SnapshotCoordinator) -> Any:
        return start_pipeline(
            spark,
            "keyed",
            bootstrap=kafka.bootstrap,
            topic=topic,
            pipeline=PIPELINE,
            state_uri=state_uri,
            checkpoint=tmp_path / "cp",
            sink={
                "consumer": "postgres",
                "consumer.postgres.dsn": postgres.dsn,
                "consumer.postgres.table": table,
            },
            token=c.fencing_token,
            max_offsets=60,
            available_now=False,
            processing_time="1 second",
        )

    failure: list[BaseException] = []

    def supervise() -> None:
        try:
            coord.run(build, max_consecutive_reset_attempts=20, backoff="1s")
        except BaseException as err:
            failure.append(err)

    prometheus = PrometheusServer(
        tmp_path / "prometheus", targets=[f"127.0.0.1:{coord.metrics_port}"], rules=scaled_rules()
    )
    runner = threading.Thread(target=supervise, name="alerting-driver", daemon=True)
    with serving(prometheus, "prometheus"):
        runner.start()
        try:
            wait_until(prometheus.targets_up, timeout=60, what="Prometheus scraping the driver")
            # 1. data flows: bundles are delivered every few seconds, neither alert fires
            wait_until(lambda: coord.status()["gt_last"] >= 3, timeout=180, what="bundle 3")
            for _ in range(25):
                assert prometheus.firing(STUCK) == [] and prometheus.firing(IN_FLIGHT) == []
                time.sleep(1.0)
            assert not failure, failure

            # 2. PostgreSQL paused: the commit fails before its bundle is in flight, every
            #    restart fails connecting, records wait in Kafka
            postgres_server.pause()
            paused = time.monotonic()
            try:
                [labels] = wait_until(
                    lambda: prometheus.firing(STUCK) or None, timeout=90, what=STUCK
                )
                fired = time.monotonic() - paused
                assert labels["pipeline"] == PIPELINE and labels["severity"] == "critical"
                print(f"{STUCK} firing {fired:.0f}s after PostgreSQL was paused")
                for _ in range(10):  # and it keeps firing while nothing moves
                    time.sleep(1.0)
                    assert prometheus.firing(STUCK), (coord.status(), prometheus.alerts())
            finally:
                postgres_server.resume()

            # 3. resumed: everything is delivered, and both alerts resolve
            wait_until(
                lambda: (
                    sum(n for _, (n, _, _) in _last(delivered(postgres, table)).items()) == RECORDS
                ),
                timeout=240,
                what="every record in PostgreSQL",
            )
            wait_until(
                lambda: prometheus.firing(STUCK) == [] and prometheus.firing(IN_FLIGHT) == [],
                timeout=60,
                what="the alerts to resolve",
            )

            # 4. no input left: an idle pipeline raises neither alert past the stuck window
            for _ in range(35):
                assert prometheus.firing(STUCK) == [] and prometheus.firing(IN_FLIGHT) == []
                time.sleep(1.0)
        finally:
            coord.request_stop()
            runner.join(120)
            coord.close()
    assert not runner.is_alive(), "the driver did not stop"
    assert not failure, failure
    check_exactly_once(delivered(postgres, table), RECORDS)


def _last(rows: list[tuple[bytes, int, int, int]]) -> dict[bytes, tuple[int, int, int]]:
    last: dict[bytes, tuple[int, int, int]] = {}
    for k, n, total, mx in sorted(rows, key=lambda r: r[1]):
        last[k] = (n, total, mx)
    return last
