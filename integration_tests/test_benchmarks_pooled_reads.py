"""benchmarks.pooled_reads against the harness's Kafka broker: each read client, in each
shape (a backlog, and live batches after a pause that parks librdkafka's consumers),
reads every batch's records exactly (the benchmark checks each batch's count) and is
printed. Timings are printed, never asserted."""

from __future__ import annotations

import pytest

from benchmarks import pooled_reads
from harness.kafka import KafkaBroker


def test_both_clients_read_every_batch_in_both_shapes(
    kafka_broker: KafkaBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    pooled_reads.main(
        [
            "--partitions",
            "4",
            "--per-range",
            "20",
            "--batches",
            "2",
            "--pause",
            "2.0",
            "--bootstrap",
            kafka_broker.bootstrap,
        ]
    )
    out = capsys.readouterr().out
    print(out)
    for shape in ("backlog", "live"):
        for client in ("kafka-python", "confluent"):
            assert f"  {shape:8} {client:12}: first " in out, (shape, client)
    assert "vs kafka-python" in out
