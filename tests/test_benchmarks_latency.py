"""benchmarks.latency: the pure parts (values, the visibility bookkeeping, percentiles, the
rate search's decision) and the reader of Spark's file sink, over files made here."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchmarks.latency import (
    EO,
    PRODUCER_SHARE,
    SPARK_PARQUET,
    RunResult,
    RunSpec,
    SparkFileReader,
    Step,
    Visibility,
    decode_value,
    driver_label,
    driver_report,
    encode_value,
    highest_sustained,
    parse_args,
    plan,
    quantiles,
    step_verdict,
    warm_ups,
)


def test_a_value_carries_its_sequence_and_produce_time() -> None:
    value = encode_value(12345, 1_764_000_000.123456)
    assert decode_value(value) == (12345, 1_764_000_000.123456)
    assert decode_value(memoryview(value).tobytes()) == (12345, 1_764_000_000.123456)


def test_each_record_counts_from_its_first_sighting_and_later_ones_are_duplicates() -> None:
    book = Visibility()
    book.observe([(encode_value(0, 10.0), 3), (encode_value(1, 10.5), 3)], at=11.0)
    book.observe([(encode_value(2, 11.0), 4), (encode_value(0, 10.0), 7)], at=12.0)
    book.observe([(encode_value(1, 10.5), None)], at=13.0)

    assert book.first_seen == {0: 11.0, 1: 11.0, 2: 12.0}
    assert book.duplicates == {0: 1, 1: 1}
    assert book.bundle == {0: 3, 1: 3, 2: 4}  # a duplicate's bundle is not taken
    assert book.latencies_ms(range(3)) == [1000.0, 500.0, 1000.0]
    assert book.seen(range(5)) == 3
    assert book.missing(range(5)) == [3, 4]
    assert book.unexpected(range(2)) == [2]


def test_a_record_not_yet_seen_has_no_latency() -> None:
    book = Visibility()
    book.observe([(encode_value(1, 5.0), None)], at=5.25)
    assert book.latencies_ms(range(3)) == [250.0]


def test_the_wait_is_from_produce_to_the_start_of_the_batch_that_carried_the_record() -> None:
    book = Visibility()
    book.observe([(encode_value(0, 10.0), 1), (encode_value(1, 10.2), 2)], at=12.0)
    book.observe([(encode_value(2, 10.4), None), (encode_value(3, 10.6), 9)], at=12.5)
    # bundle 9's batch is unknown, record 2's bundle too: neither has a wait
    assert book.waits_ms(range(4), {1: 10.5, 2: 11.0}) == pytest.approx([500.0, 800.0])


def test_quantiles_are_nearest_rank() -> None:
    values = [float(v) for v in range(1, 101)]  # 1..100
    q = quantiles(values[::-1])
    assert q == {"p50": 51.0, "p95": 95.0, "p99": 99.0}
    assert quantiles([7.0]) == {"p50": 7.0, "p95": 7.0, "p99": 7.0}
    assert all(math.isnan(v) for v in quantiles([]).values())


def test_a_step_is_sustained_only_when_produced_drained_and_under_the_bound() -> None:
    ok, why = step_verdict(rate=1000, achieved=990, drained=True, p99_ms=1500, bound_ms=2000)
    assert ok and "1,500" in why

    slow, why = step_verdict(rate=1000, achieved=990, drained=True, p99_ms=2000, bound_ms=2000)
    assert not slow and ">=" in why

    behind, why = step_verdict(rate=1000, achieved=990, drained=False, p99_ms=100, bound_ms=2000)
    assert not behind and "drain" in why

    short = PRODUCER_SHARE * 1000 - 1
    producer, why = step_verdict(rate=1000, achieved=short, drained=True, p99_ms=1, bound_ms=2000)
    assert not producer and "producer" in why

    nan, _ = step_verdict(rate=1000, achieved=1000, drained=True, p99_ms=math.nan, bound_ms=2000)
    assert not nan


def test_the_highest_sustained_rate_is_the_last_before_the_first_failure() -> None:
    assert highest_sustained([(1000, True), (10000, True), (20000, False)]) == 10000
    assert highest_sustained([(1000, True), (10000, False), (20000, True)]) == 1000
    assert highest_sustained([(1000, False)]) is None
    assert highest_sustained([(1000, True), (2000, True)]) == 2000
    assert highest_sustained([]) is None


def _committed(out: Path, log: str, files: dict[str, list[bytes]]) -> None:
    """Write ``files`` (name -> values) and a ``_spark_metadata`` log entry naming them."""
    meta = out / "_spark_metadata"
    meta.mkdir(parents=True, exist_ok=True)
    entries = []
    for name, values in files.items():
        pq.write_table(pa.table({"value": pa.array(values, pa.binary())}), out / name)
        entries.append(json.dumps({"path": (out / name).as_uri(), "action": "add"}))
    (meta / log).write_text("\n".join(["v1", *entries]))


def test_the_spark_file_reader_sees_only_committed_files_once_with_their_batch(
    tmp_path: Path,
) -> None:
    out = tmp_path / "out"
    book = Visibility()
    reader = SparkFileReader(book, 0.05, out)
    assert reader.poll()[0] == []  # no output directory yet
    _committed(out, "0", {"part-a.parquet": [encode_value(0, 1.0)]})
    # a file that no log names yet, and a log being written (temporary name): not visible
    pq.write_table(pa.table({"value": pa.array([encode_value(9, 1.0)])}), out / "part-x.parquet")
    (out / "_spark_metadata" / ".1.1234.tmp").write_text("v1\n")
    values, _ = reader.poll()
    assert values == [(encode_value(0, 1.0), 0)]
    # batch 1, then a compact log repeating batch 0's file: each file is read once
    _committed(out, "1", {"part-b.parquet": [encode_value(1, 1.0), encode_value(2, 1.0)]})
    _committed(out, "2.compact", {"part-a.parquet": [encode_value(0, 1.0)]})
    values, _ = reader.poll()
    assert values == [(encode_value(1, 1.0), 1), (encode_value(2, 1.0), 1)]
    assert reader.poll()[0] == []


def _result(label: str, latencies: list[float], batches: list[float]) -> RunResult:
    spec = RunSpec(label, SPARK_PARQUET, EO, 0.0, (100,), 1.0)
    step = Step(100, range(len(latencies)), 1.0, True, latencies, batches)
    return RunResult(spec, [step], len(latencies), len(latencies), 0, 0, 0, min(latencies))


def test_the_driver_side_comparison_is_printed_only_with_both_sources(
    capsys: pytest.CaptureFixture[str],
) -> None:
    gtkafka = _result(driver_label("gtkafka", 0.0), [100.0, 400.0], [300.0])
    driver = _result(driver_label("kafka_driver", 0.0), [50.0, 100.0], [200.0])
    driver_report([gtkafka])  # no kafka_driver run: nothing to compare
    assert capsys.readouterr().out == ""
    driver_report([gtkafka, driver])
    out = capsys.readouterr().out
    assert "trigger 0 s: kafka_driver p50 50 / p99 100 ms (median batch 200 ms)" in out
    assert "gtkafka p50 100 / p99 400 ms (median batch 300 ms)" in out
    assert "p99 kafka_driver / gtkafka = 0.25" in out
    assert "trigger 1 s" not in out


def test_each_variant_of_the_comparison_gets_a_short_unmeasured_run_first() -> None:
    turns, _ = plan(parse_args([]))
    warm = warm_ups(turns)
    assert [w.label for w in warm] == [f"warm-up: {v.label}" for v in turns[0]]
    assert [(w.delivery, w.snapshots) for w in warm] == [
        (v.delivery, v.snapshots) for v in turns[0]
    ]
    assert {(w.rates, w.seconds) for w in warm} == {((1000,), 2.0)}
    (alone,) = warm_ups([])
    assert alone.rates == (1000,) and not alone.snapshots
