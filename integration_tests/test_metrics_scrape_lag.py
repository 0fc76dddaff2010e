"""The driver's endpoint reads the source's lag at each scrape, not only when a batch ends.

gtkafka (Tansu) -> applyInPandasWithState -> barrier (consumer=postgres), watched by a
coordinator whose metrics endpoint is given the source's Kafka settings
(``source_ends=gtbarrier.kafka_ends(...)``) through a loopback proxy in front of the broker,
so that the broker can stop answering the endpoint alone. With PostgreSQL paused the
query's next batch cannot reach its target and the query fails: the pipeline is stuck.
Records produced then raise ``gtbarrier_source_offsets_behind`` from one scrape to the
next while no batch completes (GT_last and the micro-batch count stay); the lag each
completed batch reported would stand still. With the proxy stopped a scrape still answers
with the store's metrics, the lag absent (not the last value), ``gtbarrier_up`` 0 and the
error counted.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from datasource.offset_reader import OffsetReader
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


def print_scrape_costs(url: str) -> None:
    """What a scrape costs: one that reads Kafka (the kept answer too old), one right after."""
    time.sleep(2.5)
    costs = []
    for _ in range(2):
        started = time.monotonic()
        scrape(url)
        costs.append((time.monotonic() - started) * 1000)
    print(f"a scrape reading Kafka: {costs[0]:.0f} ms; with Kafka's answer kept: {costs[1]:.0f} ms")


@pytest.fixture
def offset_readers(monkeypatch: pytest.MonkeyPatch) -> dict[str, int]:
    """Counts of the OffsetReaders this process makes and closes during the test."""
    counts = {"made": 0, "closed": 0}
    make, close = OffsetReader.__init__, OffsetReader.close

    def made(self: OffsetReader, *args: Any, **kwargs: Any) -> None:
        counts["made"] += 1
        make(self, *args, **kwargs)

    def closed(self: OffsetReader) -> None:
        counts["closed"] += 1
        close(self)

    monkeypatch.setattr(OffsetReader, "__init__", made)
    monkeypatch.setattr(OffsetReader, "close", closed)
    return counts


@pytest.mark.timeout(420)
def test_the_lag_rises_at_scrapes_while_the_query_is_stuck_and_is_absent_when_kafka_is_not(  # noqa: PLR0917 - fixtures
    spark: Any,
    kafka: Any,
    postgres: Any,
    postgres_server: Any,
    tmp_path: Path,
    offset_readers: dict[str, int],
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

        # 2. PostgreSQL paused, records produced: the query's next batch cannot reach its
        #    target and the query fails; nothing is delivered from now on
        postgres_server.pause()
        paused = True
        produce(kafka, topic, FIRST, FIRST + MORE)
        wait_until(lambda: not q.isActive, timeout=240, what="the query to fail")
        time.sleep(3.0)  # the endpoint's answer from Kafka (kept 2 s) is past
        before = scrape(url)[1]
        lag_before = behind(before, topic)
        assert lag_before is not None and lag_before in (0, MORE), lag_before

        # 3. more records while the query is down: the next scrapes see them
        produce(kafka, topic, FIRST + MORE, FIRST + 2 * MORE)

        def risen() -> Samples | None:
            samples = scrape(url)[1]
            return samples if behind(samples, topic) == (lag_before or 0) + MORE else None

        after = wait_until(
            risen,
            timeout=30,
            what=f"{MORE} more offsets behind at a scrape",
        )
        for name in ("gtbarrier_gt_last", "gtbarrier_microbatch_duration_seconds_count"):
            assert metric(after, name) == metric(before, name), name  # no batch completed
        assert metric(after, "gtbarrier_up") == 1
        print_scrape_costs(url)

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
    # every scrape of this driver read through one Kafka client, closed with the endpoint
    # (the source's own readers live in Spark's Python workers, not in this process)
    assert offset_readers == {"made": 1, "closed": 1}, offset_readers
