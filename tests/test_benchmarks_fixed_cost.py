"""benchmarks.fixed_cost's crossover between the read modes (pure)."""

from __future__ import annotations

from benchmarks.fixed_cost import crossover_size


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
