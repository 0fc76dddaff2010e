"""benchmarks.__main__: reading each benchmark's printed results, the summary, the plots."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.__main__ import (
    Outcome,
    Ratio,
    SparkLogFilter,
    parse_scaling,
    parse_sink,
    parse_snapshot,
    parse_source,
    plot_results,
    print_summary,
    table_rows,
)

SOURCE = """filled bench-1: 200,000 records of ~100 bytes over 8 partitions in 4.2s
mode                               workers  records  seconds  records/s  ratio
---------------------------------  -------  -------  -------  ---------  -----
plain kafka-python                       2  200,000      3.8     53,097   1.00
gtkafka AvailableNow -> noop             2  200,000     11.1     18,016   0.34
  same query, inside its triggers        2  200,000      7.2     27,716   0.52
gtkafka batch read -> noop               2  200,000      6.6     30,466   0.57
"""

SINK = """
sink                 records  wall s  records/s  vs ALO  addBatch p50 ms
-------------------  -------  ------  ---------  ------  ---------------
file exactly-once     12,000    10.4      1,153    0.74              812
file at-least-once    12,000     7.7      1,566    1.00              700
file parquet          12,000     8.4      1,426    0.91              650

""" + (
    "file: exactly-once / at-least-once throughput = 0.74 (target >= 0.95: NOT met); "
    "exactly-once's one extra step, the in-flight CAS, takes 8.7 ms at the median (target <= "
    "10 ms per bundle: met; difference of the commit medians of the best runs: +24.8 ms); "
    "item bytes through the driver = 0 (target 0: met)\n"
    "s3: exactly-once / at-least-once throughput = 1.08 (target >= 0.95: met); "
    "exactly-once adds +12.5 ms per bundle at the median (target <= 10 ms: NOT met); "
    "item bytes through the driver = 7,227,960 (target 0: NOT met)\n"
)

SNAPSHOT = """
run                          batches  p50 ms  p99 ms
---------------------------  -------  ------  ------
20,000 keys, no snapshots         15     812     990
20,000 keys, snapshots            15     830    1040

recovery              kill -> first bundle s  recover() s  action       files  bytes
--------------------  ----------------------  -----------  -----------  -----  -----
empty directory (S3)                    27.9         0.83  materialise     45  1,234

""" + (
    "p99 batch duration with snapshots / without, 20,000 keys = 1.05x "
    "(target <= 1.1x: met); p50 ratio 1.02x\n"
)


def test_source_table_gives_the_ratio_and_its_target() -> None:
    ratios, data = parse_source(SOURCE)
    first = ratios[0]
    assert (first.value, first.target, first.met) == (0.34, ">= 0.9", False)
    assert [r.value for r in ratios] == [0.34, 0.52, 0.57]
    assert data["plain kafka-python"]["records_per_s"] == 53_097


def test_sink_summary_lines_give_every_target() -> None:
    ratios, data = parse_sink(SINK)
    by = {r.measure: r for r in ratios}
    assert by["file: exactly-once / at-least-once throughput"].met is False
    cas = by["file: exactly-once's one extra step, the in-flight CAS"]
    assert (cas.value, cas.unit, cas.target, cas.met) == (8.7, "ms", "<= 10 ms per bundle", True)
    assert by["file: item bytes through the driver"].met is True
    assert by["s3: exactly-once"].value == 12.5 and by["s3: exactly-once"].met is False
    s3_bytes = by["s3: item bytes through the driver"]
    assert (s3_bytes.value, s3_bytes.unit, s3_bytes.met) == (7_227_960, "B", False)
    assert len(ratios) == 7  # 3 + 3 clauses with targets, and the parquet reference
    assert data["runs"]["file parquet"]["vs_alo"] == 0.91


def test_snapshot_targets_and_recovery_rows() -> None:
    ratios, data = parse_snapshot(SNAPSHOT)
    assert ratios[0].value == 1.05 and ratios[0].target == "<= 1.1x" and ratios[0].met
    assert ratios[1].unit == "s" and ratios[1].value == 27.9
    assert len(data["recovery"]) == 1


def test_output_without_results_is_an_error() -> None:
    with pytest.raises(ValueError, match="no table"):
        table_rows("Traceback (most recent call last): ...", "mode")
    with pytest.raises(ValueError, match="summary line"):
        parse_sink("sink failed\n")


def test_summary_and_plots(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    points = [
        {
            "axis": "partitions",
            "partitions": p,
            "cores": 2,
            "records": 4000,
            "wall_s": 4.0 * p,
            "triggers_s": 2.0 * p,
            "batches": 4,
        }
        for p in (1, 4)
    ] + [
        {
            "axis": "cores",
            "partitions": 8,
            "cores": c,
            "records": 4000,
            "wall_s": 8.0 / c,
            "triggers_s": 4.0 / c,
            "batches": 4,
        }
        for c in (1, 2)
    ]
    (tmp_path / "scaling.json").write_text(json.dumps(points))
    scaling_ratios, scaling_data = parse_scaling(tmp_path / "scaling.json")
    assert [round(r.value or 0, 2) for r in scaling_ratios] == [0.25, 2.0]
    outcomes = [
        Outcome("source", [], 1.0, 0, SOURCE, ratios=parse_source(SOURCE)[0]),
        Outcome("scaling", [], 1.0, 0, "", ratios=scaling_ratios, data=scaling_data),
        Outcome("snapshot", [], 0.0, 1, "", error="exit code 1"),
    ]
    print_summary(outcomes)
    text = capsys.readouterr().out
    assert "NOT met" in text and "FAILED: exit code 1" in text
    written = plot_results(outcomes, tmp_path)
    assert [p.name for p in written] == ["ratios.png", "scaling.png"]
    assert all(p.read_bytes()[:4] == b"\x89PNG" for p in written)
    assert Ratio("x", "y", None, "-", None).cells()[2] == "-"


def test_scaling_points_of_two_read_clients_make_a_curve_and_a_target_each(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from dataclasses import asdict

    from benchmarks.scaling import Point, report

    points = [
        Point("partitions", p, 2, 4000, 2.0, t, 4, client=client)
        for client, times in (("kafka-python", (1.0, 2.0)), ("confluent", (1.0, 1.25)))
        for p, t in zip((1, 64), times, strict=True)
    ]
    ratios = report(points)
    assert [(r.measure.endswith("confluent"), round(r.value or 0, 2)) for r in ratios] == [
        (False, 0.5),
        (True, 0.8),
    ]
    assert "confluent / kafka-python with 64 partitions: 1.60x" in capsys.readouterr().out
    (tmp_path / "scaling.json").write_text(json.dumps([asdict(p) for p in points]))
    curve, _ = parse_scaling(tmp_path / "scaling.json")
    assert [(r.measure, round(r.value or 0, 2)) for r in curve] == [
        ("64 partitions / 1 partitions", 0.5),
        ("64 partitions / 1 partitions, confluent", 0.8),
    ]


# A query stopped by a benchmark: Spark's ERROR lines and a Java stack trace, between the
# benchmark's own lines (one of them indented as the table rows are).
STOPPED_QUERY = """  20,000 keys, no snapshots: p50 372 ms, p99 514 ms over 15 batches
26/11/29 16:47:19 ERROR Utils: Aborting task
org.apache.spark.TaskKilledException: Stage cancelled: [SPARK_JOB_CANCELLED] Job 19 cancelled
\tat org.apache.spark.api.python.BasePythonRunner$ReaderIterator.hasNext(PythonRunner.scala:1034)
\tat java.base/java.lang.Thread.run(Thread.java:840)
Caused by: java.io.EOFException
\t... 12 more
26/11/29 16:47:19 ERROR DataWritingSparkTask: Aborted commit for partition 1 (task 33)
WARNING: Using incubator modules: jdk.incubator.vector
  20,000 keys, snapshots: p50 310 ms, p99 382 ms over 15 batches, 2 snapshots
run                         batches  p50 ms
org.apache.spark.SparkException: not after a log line, so the benchmark's own
"""


def test_spark_log_lines_and_their_stack_traces_are_not_echoed() -> None:
    shown = SparkLogFilter()
    echoed = [line for line in STOPPED_QUERY.splitlines(keepends=True) if shown(line)]
    assert echoed == [
        "  20,000 keys, no snapshots: p50 372 ms, p99 514 ms over 15 batches\n",
        "  20,000 keys, snapshots: p50 310 ms, p99 382 ms over 15 batches, 2 snapshots\n",
        "run                         batches  p50 ms\n",
        "org.apache.spark.SparkException: not after a log line, so the benchmark's own\n",
    ]
