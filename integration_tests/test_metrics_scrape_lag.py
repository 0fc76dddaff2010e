"""The driver's endpoint reads the source's lag at each scrape, not only when a batch ends.

gtkafka (Tansu) -> applyInPandasWithState -> barrier (consumer=postgres), watched by a
coordinator whose metrics endpoint is given the source's Kafka settings
(``source_ends=gtbarrier.kafka_ends(...)``) through a loopback proxy in front of the broker,
so that the broker can stop answering the endpoint alone. With PostgreSQL paused the
query blocks in its batch's commit; records produced then raise
``gtbarrier_source_offsets_behind`` from one scrape to the next while no batch completes
(GT_last and the micro-batch count stay). With the proxy stopped a scrape still answers
with the store's metrics, the lag absent (not the last value), ``gtbarrier_up`` 0 and the
error counted.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from gtbarrier import SnapshotCoordinator, kafka_ends
from harness.coordinator_program import produce
from harness.kafka_proxy import KafkaProxy
from harness.process import wait_until
from integration_tests.coordinator_support import start_pipeline
from integration_tests.metrics_support import Samples, scrape, value

pytestmark = pytest.mark.slow

PIPELINE = "scrapelag"
FIRST = 400
MORE = 150


def metric(samples: Samples, name: str, **labels: str) -> float | None:
    return value(samples, name, pipeline=PIPELINE, **labels)


def behind(samples: Samples, topic: str) -> int | None:
    """The offsets behind summed over both partitions (None: the series is absent)."""
    got = [
        metric(samples, "gtbarrier_source_offsets_behind", topic=topic, partition=p)
        for p in ("0", "1")
    ]
    return None if any(g is None for g in got) else int(sum(g or 0 for g in got))


@pytest.mark.timeout(420)
def test_the_lag_rises_at_scrapes_while_the_query_is_stuck_and_is_absent_when_kafka_is_not(
    spark: Any, kafka: Any, postgres: Any, postgres_server: Any, tmp_path: Path
) -> None:
    topic = kafka.create_topic(partitions=2)
    produce(kafka, topic, 0, FIRST)
    state_uri = f"file://{tmp_path}/state"
    table = postgres.table("counts")
    proxy = KafkaProxy(kafka.bootstrap).start()
    coord = SnapshotCoordinator(
        spark,
        pipeline_id=PIPELINE,
        state_uri=state_uri,
        checkpoint_location=tmp_path / "cp",
        snapshot_period="1h",
        metrics_port=0,
        metrics_address="127.0.0.1",
        source_ends=kafka_ends({"kafka.bootstrap.servers": proxy.bootstrap, "subscribe": topic}),
    )
    url = f"http://127.0.0.1:{coord.metrics_port}/metrics"
    q = None
    paused = False
    try:
        coord.recover()
        q = start_pipeline(
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
            token=coord.fencing_token,
            max_offsets=1000,
            available_now=False,
            processing_time="1 second",
        )
        coord.watch(q)
        # 1. every record delivered: nothing behind
        wait_until(lambda: behind(scrape(url)[1], topic) == 0, timeout=180, what="lag 0")

        # 2. PostgreSQL paused, records produced: the query plans an epoch of them and
        #    blocks in its commit
        postgres_server.pause()
        paused = True
        planned = metric(scrape(url)[1], "gtbarrier_planned_epoch")
        produce(kafka, topic, FIRST, FIRST + MORE)
        wait_until(
            lambda: (metric(scrape(url)[1], "gtbarrier_planned_epoch") or -1) > (planned or -1),
            timeout=60,
            what="the query to plan an epoch of the new records",
        )
        time.sleep(3.0)  # the endpoint's cache of Kafka's ends (a few seconds) is past
        before = scrape(url)[1]
        lag_before = behind(before, topic)
        assert lag_before == 0, lag_before  # the blocked epoch planned every record

        # 3. more records while the query is blocked: the next scrapes see them
        produce(kafka, topic, FIRST + MORE, FIRST + 2 * MORE)

        def risen() -> Samples | None:
            samples = scrape(url)[1]
            return samples if behind(samples, topic) == MORE else None

        after = wait_until(
            risen,
            timeout=30,
            what=f"{MORE} offsets behind at a scrape",
        )
        for name in ("gtbarrier_gt_last", "gtbarrier_microbatch_duration_seconds_count"):
            assert metric(after, name) == metric(before, name), name  # no batch completed
        assert metric(after, "gtbarrier_up") == 1

        # 4. Kafka stops answering the endpoint: the scrape answers without the lag
        proxy.stop()
        time.sleep(3.0)
        started = time.monotonic()
        text, down = scrape(url, timeout=60)
        took = time.monotonic() - started
        assert behind(down, topic) is None, text
        assert "gtbarrier_source_offsets_behind" not in text
        assert "gtbarrier_source_end_offset{" not in text
        assert metric(down, "gtbarrier_gt_last") == metric(before, "gtbarrier_gt_last")
        assert metric(down, "gtbarrier_up") == 0
        assert (metric(down, "gtbarrier_scrape_errors_total", error="SourceUnavailable") or 0) >= 1
        print(f"a scrape with Kafka not answering took {took:.1f}s")
    finally:
        if paused:
            postgres_server.resume()
        if q is not None:
            q.stop()
        coord.close()
        proxy.stop()
