"""benchmarks.consumer_reuse against the harness's Kafka broker: every way of getting a
range's consumer, kafka-python's and librdkafka's, reads every range exactly (each mode
checks its count) and is printed. Timings are printed, never asserted."""

from __future__ import annotations

import pytest

from benchmarks import consumer_reuse
from harness.kafka import KafkaBroker


def test_every_mode_reads_every_range(
    kafka_broker: KafkaBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    assert consumer_reuse.librdkafka_installed(), "confluent-kafka is in the test extra"
    consumer_reuse.main(
        [
            "--ranges",
            "4",
            "--per-range",
            "50",
            "--batches",
            "2",
            "--bootstrap",
            kafka_broker.bootstrap,
        ]
    )
    out = capsys.readouterr().out
    print(out)
    for mode in (
        "1 partition",
        "pooled consumer per partition",
        "new consumer per range",
        "one consumer for all ranges",
        "librdkafka: 1 partition",
        "librdkafka: pooled consumer per partition",
        "librdkafka: new consumer per range (closed after the task)",
        "librdkafka: one consumer for all ranges",
    ):
        assert f"\n{mode} " in out, mode
