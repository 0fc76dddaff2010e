"""benchmarks.soak: the pure parts (the consumer rows it times, the process groups, the
targets' decisions, its options) and the latency pieces it shares with benchmarks.latency."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from benchmarks.latency import FileReader, Visibility
from benchmarks.soak import (
    decode_row,
    event_key,
    median_duration,
    parse_args,
    sparse_expected,
    sparse_modulus,
)
from benchmarks.soak_measures import (
    Heap,
    ProcessGroups,
    Sample,
    bound_of,
    explanations,
    group_of,
    heap_ratios,
    jvm_heap,
    jvm_pid,
    parse_heap_info,
    process_tree,
    reference_sample,
    sample_processes,
    sixth,
    targets,
)
from demo.verify import expected_from_records

pytestmark = pytest.mark.unit


def sample(t: float, rss: float, fds: int, objects: int) -> Sample:
    procs = ProcessGroups()
    procs.rss_mb["jvm"], procs.fds["jvm"] = rss, fds
    return Sample(t, procs, 10.0, 20.0, 1, 1.0, {"epochs/": objects}, 1, 0)


def test_orders_and_payments_get_distinct_keys() -> None:
    assert event_key("o-0000003") == 6
    assert event_key("p-0000003") == 7


def test_an_event_row_is_timed_from_its_event_time_and_aggregates_are_skipped() -> None:
    naive = datetime(2026, 1, 1, 12, 0, 0, 250000)
    assert decode_row(("event", "o-0000002", naive)) == (
        4,
        naive.replace(tzinfo=UTC).timestamp(),
    )
    aware = naive.replace(tzinfo=UTC)
    assert decode_row(("event", "p-0000001", aware)) == (3, aware.timestamp())
    assert decode_row(("customer_total", None, None)) is None


def test_a_file_reader_of_several_columns_books_only_the_rows_its_decoder_keeps(
    tmp_path: Path,
) -> None:
    at = datetime(2026, 1, 1, tzinfo=UTC)
    table = pa.table(
        {
            "kind": ["event", "category_minute", "event"],
            "event_id": ["o-0000001", None, "p-0000001"],
            "event_time": pa.array([at, None, at], pa.timestamp("us", tz="UTC")),
        }
    )
    pq.write_table(table, tmp_path / "bundle-000000000003.parquet")
    book = Visibility(decode_row)
    reader = FileReader(book, 0.05, tmp_path, ("kind", "event_id", "event_time"))
    values, seen_at = reader.poll()
    book.observe(values, seen_at)
    assert sorted(book.first_seen) == [2, 3]
    assert book.bundle == {2: 3, 3: 3}
    assert (
        book.seen_between(seen_at - 1, seen_at)
        == [pytest.approx(1000 * (seen_at - at.timestamp()))] * 2
    )
    assert book.seen_between(seen_at, seen_at + 1) == []


def test_the_process_tree_of_this_process_holds_it_as_the_driver_python() -> None:
    me = os.getpid()
    assert process_tree(me)[0] == me
    assert group_of(me, me) == "python"
    groups = sample_processes(me)
    assert groups.processes["python"] == 1
    assert groups.rss_mb["python"] > 0 and groups.fds["python"] > 0
    assert groups.threads["python"] >= 1
    assert sample_processes(None).processes == {"jvm": 0, "python": 0, "workers": 0}


def test_the_reference_is_the_first_sample_a_sixth_into_the_run() -> None:
    samples = [sample(t, 1, 1, 1) for t in (60, 120, 600, 660)]
    ref = reference_sample(samples, 3600)
    assert ref is not None and ref.t == 600


def test_the_bound_is_the_first_halfs_max_plus_a_slack() -> None:
    assert bound_of([3, 10, 8]) == 15  # + 5
    assert bound_of([200, 100]) == 220  # + 10%
    assert bound_of([]) == 5


def test_sixths_split_the_run_and_the_last_keeps_what_came_after_it() -> None:
    seen = [(5.0, 1.0), (15.0, 2.0), (59.0, 6.0), (61.0, 7.0)]
    assert sixth(seen, 60, 0) == [1.0]
    assert sixth(seen, 60, 1) == [2.0]
    assert sixth(seen, 60, 5) == [6.0, 7.0]


def test_the_latency_reference_is_minutes_5_to_15_before_the_first_kill() -> None:
    """The catch-up after the minute-15 kill (minutes 15-20) must not inflate the
    reference: a last sixth 1.5x slower than minutes 5-15 misses the target."""
    steady = [(m * 60.0, 100.0) for m in range(5, 15)]
    catch_up = [(m * 60.0, 60_000.0) for m in range(15, 20)]
    last = [(m * 60.0, 150.0) for m in range(50, 60)]
    samples = [sample(m * 60, 100, 50, 10) for m in range(0, 61, 10)]
    ratios = {r.measure: r for r in targets(samples, 3600, steady + catch_up + last, 0, 0)}
    p99 = ratios["soak: p99 latency, last sixth / minutes 5-15 of an hour"]
    assert p99.value == pytest.approx(1.5) and p99.met is False


def test_targets_flag_growth_unbounded_objects_and_lost_records() -> None:
    samples = [sample(10, 100, 50, 10), sample(30, 100, 50, 12), sample(60, 150, 50, 40)]
    seen = [(10.0, 100.0), (55.0, 100.0)]
    ratios = {r.measure: r for r in targets(samples, 60, seen, lost=1, duplicated=0)}
    assert ratios["soak: RSS of the driver JVM, end / a sixth in"].met is False
    assert ratios["soak: open fds of the driver JVM, end / a sixth in"].met is True
    assert ratios["soak: p99 latency, last sixth / minutes 5-15 of an hour"].met is True
    assert ratios["soak: objects under epochs/, last / (first half's max + slack)"].met is False
    assert ratios["soak: records lost"].met is False
    assert ratios["soak: records duplicated"].met is True
    # groups without a process are left out rather than divided by zero
    assert not any("Python workers" in m for m in ratios)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--minutes", "0"], "--minutes: '0': expected a number greater than 0"),
        (["--rate", "1.5"], "--rate: '1.5' is not an integer"),
        (["--minutes", "3", "--sample-seconds", "40"], "at most a sixth of the run"),
        (["--minutes", "3", "--kill-every-minutes", "3"], "less than --minutes"),
        (["--snapshot-seconds", "-1"], "--snapshot-seconds: '-1': expected an integer"),
        (["--send-every", "0"], "--send-every: '0': expected a number greater than 0"),
        (["--send-every", "60"], "less than --sample-seconds 60"),
        (
            ["--no-kills", "--kill-every-minutes", "5"],
            "--kill-every-minutes 5: not with --no-kills",
        ),
    ],
)
def test_bad_options_are_refused_with_what_was_expected(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_args(argv)
    assert message in capsys.readouterr().err


def test_the_defaults_are_the_hour_long_soak() -> None:
    args = parse_args([])
    assert (args.minutes, args.kill_every_minutes, args.snapshot_seconds) == (60, 15, 30)
    assert args.sample_seconds == 60
    # 720 record batches per partition in the hour, not 3,600: the test broker's lookups
    # grow with them (docs/operations.md, "Soak").
    assert (args.rate, args.send_every) == (100, 5.0)
    assert parse_args(["--minutes", "3", "--kill-every-minutes", "1"]).sample_seconds == 30


def test_the_explanations_compare_the_last_sixth_with_minutes_5_to_15() -> None:
    def timed(minute: int, add: float, latest: float, broker: float) -> Sample:
        s = sample(minute * 60.0, 1, 1, 1)
        return dataclasses.replace(s, add_batch_ms=add, latest_offset_ms=latest, broker_ms=broker)

    samples = [timed(m, 700.0, 20.0, 2.0) for m in range(5, 16)]
    samples += [timed(m, 5000.0, 900.0, 90.0) for m in range(16, 51)]  # not compared
    samples += [timed(m, 1000.0, 45.0, 10.0) for m in range(51, 61)]
    samples.append(timed(61, float("nan"), float("nan"), 10.0))  # no batch in that minute
    got = {r.measure.split(",")[0]: r for r in explanations(samples, 3600)}
    assert {k: round(r.value or 0, 2) for k, r in got.items()} == {
        "soak: addBatch": 1.43,
        "soak: latestOffset": 2.25,
        "soak: the broker's ListOffsets": 5.0,
    }
    assert all(r.met is None and r.target == "(explains)" for r in got.values())
    assert explanations(samples[:3], 3600) == []  # no last sixth yet: nothing to explain


def test_a_phase_missing_from_every_batch_has_no_median() -> None:
    batches = [{"durations": {"addBatch": 900}}, {"durations": {"addBatch": 700, "x": 1}}]
    assert median_duration(batches, "addBatch") in (700.0, 900.0)
    assert math.isnan(median_duration(batches, "latestOffset"))
    assert math.isnan(median_duration([], "addBatch"))


# --- the driver that is never killed, and sparse output --------------------------------

G1_HEAP_INFO = """12345:
 garbage-first heap   total 262144K, used 104857K [0x00000000c0000000, 0x0000000100000000)
  region size 1024K, 40 young (40960K), 3 survivors (3072K)
 Metaspace       used 153600K, committed 155648K, reserved 1179648K
  class space    used 19456K, committed 20480K, reserved 1048576K
"""

SERIAL_HEAP_INFO = """605:
 def new generation   total 78656K, used 33667K [0x00000000f0000000, 0x00000000f5550000)
  eden space 69952K,  48% used [0x00000000f0000000, 0x00000000f20e0cd8, 0x00000000f4450000)
  from space 8704K,   0% used [0x00000000f4450000, 0x00000000f4450000, 0x00000000f4cd0000)
  to   space 8704K,   0% used [0x00000000f4cd0000, 0x00000000f4cd0000, 0x00000000f5550000)
 tenured generation   total 174784K, used 1024K [0x00000000f5550000, 0x0000000100000000)
   the space 174784K,   0% used [0x00000000f5550000, 0x00000000f5550000, 0x0000000100000000)
 Metaspace       used 7310K, committed 7488K, reserved 1114112K
  class space    used 826K, committed 896K, reserved 1048576K
"""


def test_the_heap_of_g1_is_its_one_line_and_metaspace_its_own() -> None:
    heap = parse_heap_info(G1_HEAP_INFO)
    assert heap is not None
    assert (heap.used_mb, heap.committed_mb, heap.metaspace_mb) == pytest.approx(
        (104857 / 1024, 256.0, 150.0)
    )


def test_the_heap_of_a_generational_collector_sums_its_generations() -> None:
    heap = parse_heap_info(SERIAL_HEAP_INFO)
    assert heap is not None
    # the generations' lines only: eden/from/to are parts of the new generation
    assert heap.used_mb == pytest.approx((33667 + 1024) / 1024)
    assert heap.committed_mb == pytest.approx((78656 + 174784) / 1024)
    assert heap.metaspace_mb == pytest.approx(7310 / 1024)


def test_an_answer_without_a_heap_is_no_heap() -> None:
    assert parse_heap_info("12345:\ncom.sun.tools.attach.AttachNotSupportedException\n") is None


def test_no_jvm_has_no_heap() -> None:
    assert jvm_heap(None) is None
    assert jvm_pid(None) is None
    # A process of its own, without children: the test worker's tree may hold the JVMs of
    # the servers and Spark sessions other tests started in it.
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        assert jvm_pid(child.pid) is None
    finally:
        child.kill()
        child.wait(10)


def heap_sample(t: float, used: float, committed: float, metaspace: float) -> Sample:
    s = sample(t, 100, 50, 10)
    return dataclasses.replace(s, heap=Heap(used, committed, metaspace))


def test_the_heap_in_use_is_judged_by_its_lowest_samples_not_one_sawtooth_peak() -> None:
    """Between collections the heap in use saws: a peak at the end is not growth, a higher
    floor is."""
    saw = [heap_sample(m * 60.0, 200.0 + 300 * (m % 2), 512, 100) for m in range(0, 61)]
    ratios = {r.measure: r for r in heap_ratios(saw, 3600, saw[10], saw[-1])}
    in_use = ratios["soak: heap in use of the driver JVM (lowest), last sixth / minutes 5-15"]
    assert in_use.value == pytest.approx(1.0) and in_use.met is True
    assert ratios["soak: heap committed of the driver JVM, end / a sixth in"].met is True

    grown = saw[:50] + [heap_sample(m * 60.0, 300.0, 700, 130) for m in range(50, 61)]
    ratios = {r.measure: r for r in heap_ratios(grown, 3600, grown[10], grown[-1])}
    assert ratios[
        "soak: heap in use of the driver JVM (lowest), last sixth / minutes 5-15"
    ].value == pytest.approx(1.5)
    assert ratios["soak: heap committed of the driver JVM, end / a sixth in"].met is False
    assert ratios["soak: metaspace of the driver JVM, end / a sixth in"].met is False
    assert (
        heap_ratios([sample(600, 1, 1, 1)], 3600, sample(600, 1, 1, 1), sample(600, 1, 1, 1)) == []
    )


def test_threads_and_p50_have_the_growth_target() -> None:
    def threads(t: float, n: int) -> Sample:
        s = sample(t, 100, 50, 10)
        s.procs.threads["jvm"] = n
        return s

    samples = [threads(10, 100), threads(30, 105), threads(60, 120)]
    seen = [(10.0, 100.0), (55.0, 115.0)]
    ratios = {r.measure: r for r in targets(samples, 60, seen, lost=0, duplicated=0)}
    assert ratios["soak: threads of the driver JVM, end / a sixth in"].value == pytest.approx(1.2)
    assert ratios["soak: threads of the driver JVM, end / a sixth in"].met is False
    p50 = ratios["soak: p50 latency, last sixth / minutes 5-15 of an hour"]
    assert p50.value == pytest.approx(1.15) and p50.met is False


def test_no_kills_keeps_one_driver_and_sparse_outputs_a_row_a_sixtieth_of_the_run() -> None:
    args = parse_args(["--no-kills"])
    assert args.no_kills and args.minutes == 60 and args.snapshot_seconds == 30
    assert sparse_modulus(args) is None
    # an hour at 100/s: 6,000 records a minute, one of them kept
    assert sparse_modulus(parse_args(["--no-kills", "--sparse"])) == 6_000
    # three minutes at 50/s: a row every 3 s, one record in 150
    assert (
        sparse_modulus(parse_args(["--minutes", "3", "--no-kills", "--sparse", "--rate", "50"]))
        == 150
    )
    # --no-kills lifts the rule that a kill falls within the run
    assert parse_args(["--minutes", "3", "--no-kills"]).no_kills


def _record(kind: str, number: int, partition: int, offset: int) -> tuple[int, int, bytes]:
    body: dict[str, object] = {
        "type": kind,
        "customer_id": f"c-{number % 3}",
        "currency": "USD",
        "amount": 100 + number,
        "ts": "2026-01-01T00:00:00.000Z",
    }
    if kind == "order":
        body.update(order_id=f"o-{number:07d}", category="books")
    else:
        body.update(payment_id=f"p-{number:07d}", method="card")
    return partition, offset, json.dumps(body).encode()


def test_the_sparse_expectation_is_the_records_at_multiples_of_the_modulus() -> None:
    records = [_record("order" if i % 2 else "payment", i, i % 2, i) for i in range(12)]
    records.append((0, 12, json.dumps({"type": "tick", "ts": "2026-01-01T00:05:00.000Z"}).encode()))
    full = expected_from_records(records)
    sparse = sparse_expected(full, 4)
    assert sorted(sparse.events["src_offset"]) == [0, 4, 8]
    assert sparse.records == 3 and sparse.heartbeats == full.heartbeats == 1
    assert len(sparse.windows) == 0 and len(sparse.customers) == 0
    assert list(sparse.windows.columns) == list(full.windows.columns)
