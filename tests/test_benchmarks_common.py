"""benchmarks.common: running variants in turn and the ``--repeat`` option."""

from __future__ import annotations

import argparse
from collections.abc import Callable

import pytest

from benchmarks.common import add_repeat_option, best_in_turn


def test_variants_run_in_turn_and_each_keeps_its_lowest_cost(
    capsys: pytest.CaptureFixture[str],
) -> None:
    calls: list[tuple[str, int]] = []
    costs = {
        ("a", 0): 5.0,
        ("b", 0): 1.0,
        ("a", 1): 3.0,
        ("b", 1): 2.0,
        ("a", 2): 4.0,
        ("b", 2): 9.0,
    }

    def variant(name: str) -> Callable[[int], tuple[str, int, float]]:
        def run(turn: int) -> tuple[str, int, float]:
            calls.append((name, turn))
            return name, turn, costs[(name, turn)]

        return run

    kept = best_in_turn(
        [variant("a"), variant("b")], 3, cost=lambda r: r[2], describe=lambda r: f"{r[0]}{r[1]}"
    )
    assert calls == [("a", 0), ("b", 0), ("a", 1), ("b", 1), ("a", 2), ("b", 2)]
    assert kept == [("a", 1, 3.0), ("b", 0, 1.0)]
    assert capsys.readouterr().out.splitlines() == [
        "  round 1/3: a0; b0",
        "  round 2/3: a1; b1",
        "  round 3/3: a2; b2",
    ]


def test_once_without_describe_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert best_in_turn([lambda turn: turn + 7], 1, cost=float) == [7]
    assert capsys.readouterr().out == ""


@pytest.mark.parametrize("bad", ["0", "-2", "two"])
def test_repeat_below_one_or_not_a_number_is_refused(
    bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    parser = argparse.ArgumentParser(prog="bench")
    add_repeat_option(parser, "runs in turn")
    assert parser.parse_args([]).repeat == 1
    assert parser.parse_args(["--repeat", "3"]).repeat == 3
    with pytest.raises(SystemExit):
        parser.parse_args(["--repeat", bad])
    assert (
        f"argument --repeat: {bad!r}; expected an integer of at least 1" in capsys.readouterr().err
    )
