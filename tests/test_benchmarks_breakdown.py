"""benchmarks.spans, benchmarks.recovery and the profiling hooks: pure logic, no Spark."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.common import Ratio, verdict
from benchmarks.recovery import timeline
from benchmarks.spans import Span, Trigger, break_down, covered, load_spans, table
from state import profiling

T0 = 1_800_000_000.0


def _progress(
    batch: int, start: float, trigger_ms: float, first: int, last: int
) -> dict[str, object]:
    def offsets(n: int) -> str:
        return json.dumps({"epoch": batch, "offsets": {"t": {"0": n}}})

    return {
        "batchId": batch,
        "timestamp": f"2027-01-15T08:00:{start:06.3f}Z",
        "numInputRows": 3 * (last - first),
        "durationMs": {"triggerExecution": trigger_ms, "addBatch": trigger_ms - 100},
        "sources": [{"startOffset": offsets(first), "endOffset": offsets(last)}],
    }


def test_a_trigger_reads_its_window_and_its_kafka_records() -> None:
    t = Trigger.from_progress(_progress(3, 1.5, 2000, 100, 200))
    assert t.records == 100 and t.input_rows == 300  # three scans, 100 Kafka records
    assert t.seconds == 2.0 and t.end - t.start == pytest.approx(2.0)


def test_covered_counts_overlaps_once_and_clips_to_the_window() -> None:
    spans = [Span("a", 0.0, 2.0, 1), Span("b", 1.0, 2.0, 2), Span("c", 5.0, 10.0, 3)]
    assert covered(spans, 0.0, 6.0) == pytest.approx(4.0)


def test_break_down_per_batch_per_task_per_record() -> None:
    triggers = []
    spans = []
    for n in range(3):
        t = Trigger.from_progress(_progress(n, 10.0 * n, 4000, 100 * n, 100 * n + 100))
        triggers.append(t)
        spans.append(Span("driver.latestOffset", t.start, 0.1, 1))
        spans += [Span("read.client", t.start + 0.2 + i * 0.1, 0.05, 2) for i in range(8)]
        spans.append(Span("commit.call", t.start + 3.0, 0.5, 3))
        spans.append(Span("commit.total", t.start + 3.1, 0.4, 3, {"action": "delivered"}))
        spans.append(Span("read.client", t.end + 0.001, 5.0, 2))  # the next trigger's
        spans.append(Span("mystery.step", t.start + 1.0, 0.2, 4))
    b = break_down("q", triggers, spans, "1.00 1.00 1.00")
    rows = {r.name: r for r in b.rows}
    client = rows["read.client"]
    assert client.count_per_batch == 8 and client.per_batch_ms == pytest.approx(400)
    assert client.per_span_ms == pytest.approx(50) and client.per_record_us == pytest.approx(4000)
    assert rows["mystery.step"].section == "other"
    assert b.ours_ms == pytest.approx(100 + 400 + 200 + 500)
    assert b.rest_ms == pytest.approx(4000 - b.ours_ms)
    headers, lines = table(b)
    assert headers[0] == "part" and any(
        line[0] == "[commit]" and line[1] == "500" for line in lines
    )


def test_load_spans_reads_what_profiling_records(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(profiling.ENV, str(tmp_path))
    with profiling.span("driver.partitions", batch=1):
        pass
    with pytest.raises(KeyError), profiling.span("driver.commit"):
        raise KeyError("x")
    spans = load_spans(tmp_path)
    assert [s.name for s in spans] == ["driver.partitions", "driver.commit"]
    assert spans[0].attrs == {"batch": 1, "error": None}
    assert spans[1].attrs["error"] == "KeyError"


def test_a_span_records_what_its_block_learnt_and_nothing_when_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(profiling.ENV, str(tmp_path))
    with profiling.span("read.client", partition=1) as learnt:
        learnt.update(created=True)
    monkeypatch.delenv(profiling.ENV)
    with profiling.span("read.client", partition=2) as learnt:
        learnt.update(created=False)
    assert [(s.attrs["partition"], s.attrs["created"]) for s in load_spans(tmp_path)] == [(1, True)]


def test_a_step_timer_made_off_measures_nothing() -> None:
    off, on = profiling.StepTimer(on=False), profiling.StepTimer()
    for timer in (off, on):
        with timer.step("fetch"):
            pass
        with pytest.raises(KeyError), timer.step("fetch"):
            raise KeyError("x")
    assert off.seconds == {} and list(on.seconds) == ["fetch"] and on.seconds["fetch"] >= 0


def test_recovery_timeline_from_events_and_spans() -> None:
    killed = T0
    events = [
        {"event": "driver_started", "t": T0 + 2.0},
        {"event": "spark_ready", "t": T0 + 12.0},
        {"event": "recovered", "t": T0 + 13.0, "seconds": 0.5, "action": "keep"},
        {"event": "query_started", "t": T0 + 20.0},
        {"event": "batch", "t": T0 + 31.0, "durations": {"triggerExecution": 10000}},
    ]
    spans = [
        Span("driver.latestOffset", T0 + 20.5, 0.5, 1),
        Span("commit.call", T0 + 29.0, 1.0, 2),
        Span("commit.call", T0 + 35.0, 1.0, 2),
    ]
    tl = timeline(
        "recovery",
        origin=killed,
        launched=T0 + 0.5,
        events=events,
        spans=spans,
        bundle_at=T0 + 36.0,
    )
    steps = dict(tl.steps)
    assert steps["SIGKILL -> new driver launched"] == pytest.approx(0.5)
    assert steps["Python start + imports"] == pytest.approx(1.5)
    assert steps["JVM and Spark start"] == pytest.approx(10.0)
    assert steps["coordinator setup (ZooKeeper lock, store)"] == pytest.approx(0.5)
    assert steps["recover()"] == pytest.approx(0.5)
    assert steps["query start"] == pytest.approx(7.0)
    assert steps["first micro-batch (to its commit's end)"] == pytest.approx(10.0)
    assert steps["to the first new bundle"] == pytest.approx(6.0)
    assert sum(steps.values()) == pytest.approx(tl.total_s) == pytest.approx(36.0)
    assert tl.first_batch_ms == {"triggerExecution": 10000.0}
    assert tl.first_batch_spans == {"driver.latestOffset": 0.5, "commit.call": 1.0}


def test_verdicts() -> None:
    assert verdict(2.0, "<= 2.0x") and not verdict(2.01, "<= 2.0x")
    assert verdict(0.9, ">= 0.9") and not verdict(0.5, ">= 0.9")
    with pytest.raises(ValueError, match="target"):
        verdict(1.0, "== 1")
    assert Ratio("a", "b", 1.5, "<= 2.0x", True).cells()[4] == "met"


def test_summary_lists_the_issue_targets_first_in_order() -> None:
    from benchmarks.__main__ import Outcome, summary_table

    outcomes = [
        Outcome(
            "sink",
            [],
            1.0,
            0,
            "",
            ratios=[
                Ratio("sink", "file: exactly-once's one extra step", 3.0, "<= 10 ms", True, "ms"),
                Ratio(
                    "sink", "file: exactly-once / at-least-once throughput", 1.0, ">= 0.95", True
                ),
            ],
            load="1.00 2.00 3.00",
        ),
        Outcome(
            "fixed_cost",
            [],
            1.0,
            0,
            "",
            ratios=[
                Ratio("fixed cost", "fixed cost: median", 9.0, "<= 2.0x", False),
                Ratio(
                    "fixed cost", "gtbarrier over Spark's Python floor: x", 1.2, "<= 1.10x", False
                ),
            ],
        ),
        Outcome("demo", [], 1.0, 1, "", error="exit code 1"),
    ]
    rows = summary_table(outcomes)
    assert [r[1] for r in rows] == [
        "fixed cost: median",
        "gtbarrier over Spark's Python floor: x",
        "file: exactly-once / at-least-once throughput",
        "FAILED: exit code 1",
        "other measurements",
        "file: exactly-once's one extra step",
    ]
    assert rows[2][5] == "1.00 2.00 3.00"


def test_own_time_leaves_out_the_waits() -> None:
    from benchmarks.spans import own_time

    spans = [
        Span("read.task", 0.0, 5.0, 1),
        Span("read.fetch", 0.5, 1.0, 1),
        Span("write.stage", 0.0, 4.0, 2, {"input_s": 3.0}),
        Span("write.input", 0.0, 3.0, 2),
    ]
    own = own_time(spans)
    assert [(s.name, s.start, s.seconds) for s in own] == [
        ("read.fetch", 0.5, 1.0),
        ("write.own", 3.0, 1.0),
    ]
    assert covered(own, 0.0, 10.0) == pytest.approx(2.0)


def test_the_commit_records_its_steps_and_the_write_its_input_wait(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyarrow as pa

    from sink import timing
    from sink.commit_outcome import CommitOutcome

    monkeypatch.setenv(profiling.ENV, str(tmp_path))
    timings = {"read_state": 0.5, "cas_inflight": 0.25, "deliver": 1.0, "total": 2.0}
    timing.commit_steps(CommitOutcome(3, 7, "delivered", 10, timings=timings), T0 + 2.0)
    timed = timing._TimedInput(iter([pa.record_batch({"x": [1, 2]}), pa.record_batch({"x": [3]})]))
    assert sum(b.num_rows for b in timed) == 3 and timed.rows == 3 and timed.seconds >= 0
    spans = {s.name: s for s in load_spans(tmp_path)}
    assert spans["commit.total"].start == T0 and spans["commit.total"].attrs["epoch"] == 7
    assert spans["commit.cas_inflight"].start == T0 + 0.5
    assert spans["commit.deliver"].start == T0 + 0.75
    monkeypatch.delenv(profiling.ENV)
    timing.commit_steps(CommitOutcome(4, 8, "delivered", 1, timings=timings), T0)
    assert len(load_spans(tmp_path)) == len(spans)  # nothing without GTBARRIER_PROFILE
