"""benchmarks.fixed_cost's crossover between the read modes and its report (pure)."""

from __future__ import annotations

import pytest

from benchmarks.fixed_cost import (
    ALONE,
    DRIVER_SINK,
    FLOOR,
    FLOOR_SINK,
    OURS_DRIVER,
    QUERIES,
    Run,
    crossover_size,
    report,
)


def test_the_crossover_is_the_smallest_size_from_which_executors_stay_faster() -> None:
    # (executors, driver) median ms by records per batch
    assert crossover_size({100: (150, 90), 1000: (160, 120), 10000: (300, 400)}) == 10000
    assert crossover_size({100: (150, 90), 1000: (160, 170), 10000: (300, 400)}) == 1000


def test_a_size_where_the_driver_wins_again_ends_the_run_of_executor_wins() -> None:
    # executors faster at 1,000 but not at 10,000: no size from which they stay faster
    # below 10,000's
    assert crossover_size({100: (150, 90), 1000: (100, 120), 10000: (400, 300)}) is None
    assert crossover_size({100: (150, 150)}) == 100


def test_no_crossover_when_the_driver_is_faster_at_every_size() -> None:
    assert crossover_size({100: (150, 90), 1000: (160, 120)}) is None
    assert crossover_size({}) is None


def _run(query: str, ms: float) -> Run:
    return Run(query, [ms] * 3, [ms / 2] * 3, "0.1 0.1 0.1", {"triggerExecution": [ms] * 3})


def test_the_report_sets_driver_mode_and_a_sink_on_the_driver_against_the_python_sink(
    capsys: pytest.CaptureFixture[str],
) -> None:
    medians = dict.fromkeys(QUERIES, 300.0) | {
        ALONE: 100.0,
        FLOOR_SINK: 180.0,
        FLOOR: 200.0,
        DRIVER_SINK: 110.0,
        OURS_DRIVER: 165.0,
    }
    ratios = report([_run(q, ms) for q, ms in medians.items()])
    out = capsys.readouterr().out
    assert "a sink on the driver (rate -> foreachBatch" in out
    assert "(1.10x), a Python sink 80 ms (1.80x)" in out
    assert "0.92x rate -> python_floor" in out  # 165 / 180
    driver = [r for r in ratios if "on the driver" in r.measure]
    assert len(driver) == 1 and driver[0].value == pytest.approx(1.65)
