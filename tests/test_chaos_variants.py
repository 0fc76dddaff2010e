"""The chaos run's round variants (integration_tests/chaos/variants.py): a consumer
setting that changes between driver starts, sparse output, and the source read on the
driver; their draws, and how the verdict judges them."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from integration_tests.chaos.checks import judge, mixed_bundles
from integration_tests.chaos.consumers import CONSUMERS, DeliveredBundle
from integration_tests.chaos.faults import draw_plan
from integration_tests.chaos.plan import Sizing
from integration_tests.chaos.queries import QUERIES, Item
from integration_tests.chaos.reference import assign_epochs
from integration_tests.chaos.variants import (
    SettingChange,
    Sparse,
    draw_read_mode,
    draw_setting,
    draw_sparse,
    setting_fault_position,
)
from state.records.barrier import BarrierState
from tests.test_chaos_checks import TOPIC, epochs, records, stateless_bundles


@pytest.mark.parametrize(("before", "after", "modulus"), [(0, 3, 9), (4, 4, 9), (5, 8, 9)])
def test_a_setting_change_that_refuses_nothing_or_everything_is_refused(
    before: int, after: int, modulus: int
) -> None:
    with pytest.raises(ValueError, match="setting change needs"):
        SettingChange(modulus, before, after)


def test_rows_refused_under_one_setting_only_may_be_in_either_place() -> None:
    change = SettingChange(modulus=9, before=3, after=5)
    # label lengths 0..8: <= 3 fits both, 4..5 only the widened column, > 5 neither
    assert [change.refused(n) for n in range(9)] == [
        False, False, False, False, None, None, True, True, True
    ]  # fmt: skip
    assert change.refused(9 + 4) is None  # the length is n % modulus


def test_setting_changes_are_drawn_for_stateless_postgres_rounds_only() -> None:
    for i in range(50):
        assert draw_setting(3, i, "stateless", "file", 1.0) is None
        assert draw_setting(3, i, "keyed", "postgres", 1.0) is None
        assert draw_setting(3, i, "stateless", "postgres", 0.0) is None
        drawn = draw_setting(3, i, "stateless", "postgres", 1.0)
        assert drawn is not None  # and valid: the constructor checked it
        assert drawn == draw_setting(3, i, "stateless", "postgres", 1.0)
    shares = [draw_setting(3, i, "stateless", "postgres", 0.5) for i in range(200)]
    assert 40 < sum(s is not None for s in shares) < 160


def test_sparse_output_is_drawn_for_stateless_rounds_only_and_reproducibly() -> None:
    assert all(draw_sparse(5, i, "windowed", 1.0) is None for i in range(30))
    drawn = [draw_sparse(5, i, "stateless", 1.0) for i in range(30)]
    assert all(isinstance(s, Sparse) for s in drawn)
    assert drawn == [draw_sparse(5, i, "stateless", 1.0) for i in range(30)]
    for s in drawn:
        assert s is not None and s.bound() == int(1.25 * s.retained) + 1
        assert s.keeps(0, 10_000) and not s.keeps(1, 10_000) and s.keeps(10_001, 10_000)


def test_the_setting_change_goes_after_the_armed_faults() -> None:
    positions = {setting_fault_position(1, i, armed=2, others=3) for i in range(100)}
    assert positions == {2, 3, 4, 5}


def test_reads_on_the_driver_are_drawn_for_any_round_and_reproducibly() -> None:
    assert all(draw_read_mode(5, i, 0.0) == "executors" for i in range(50))
    assert all(draw_read_mode(5, i, 1.0) == "driver" for i in range(50))
    drawn = [draw_read_mode(5, i, 0.3) for i in range(300)]
    assert drawn == [draw_read_mode(5, i, 0.3) for i in range(300)]
    assert 50 < drawn.count("driver") < 130


def plan(index: int, setting: float, sparse: float, driver_reads: float = 0.0) -> Any:
    return draw_plan(
        11,
        index,
        queries=list(QUERIES),
        consumers=list(CONSUMERS),
        sizing=Sizing(),
        cluster_share=0.0,
        poison_share=0.6,
        setting_share=setting,
        sparse_share=sparse,
        driver_read_share=driver_reads,
    )


def test_the_variants_leave_every_other_draw_of_a_round_as_it_was() -> None:
    same = ("query", "consumer", "partitions", "records", "cluster")
    seen = {"setting": 0, "sparse": 0, "driver": 0}
    for i in range(120):
        plain, varied = plan(i, 0.0, 0.0), plan(i, 1.0, 1.0, 0.5)
        assert plain.setting is None and plain.sparse is None
        assert plain.read_mode == "executors"
        assert [getattr(plain, f) for f in same] == [getattr(varied, f) for f in same]
        seen["driver"] += varied.read_mode == "driver"
        # reading on the driver changes nothing else of the round
        driven = plan(i, 0.0, 0.0, 1.0)
        assert driven.read_mode == "driver"
        assert replace(driven, read_mode="executors") == plain
        if plain.poison is None:
            assert varied.poison is None
        else:
            assert varied.poison is not None
            assert varied.poison.numbers == plain.poison.numbers
            # a label may be refused from the first bundle on: the round runs at all
            tolerance = "all" if varied.setting is not None else plain.poison.tolerance
            assert varied.poison.tolerance == tolerance
        seen["setting"] += varied.setting is not None
        seen["sparse"] += varied.sparse is not None
        if varied.sparse is not None:
            assert varied.poison is None and varied.query == "stateless"
    assert seen["setting"] > 0 and seen["sparse"] > 0 and seen["driver"] > 0


def test_a_bundle_that_follows_two_settings_is_differing() -> None:
    query = QUERIES["stateless"]
    epoched = assign_epochs(TOPIC, records(6), epochs(3, 6))
    bundles = stateless_bundles(epoched.records)
    state = BarrierState(gt_last=1)
    may_refuse = {1, 2}

    def refused(n: int) -> bool | None:
        return None if n in may_refuse else False

    def verdict(consumer: list[DeliveredBundle], letters: list[DeliveredBundle]) -> Any:
        return judge(
            query, "arrow", False, epoched, consumer, state, 1, dead_letters=letters,
            refused=refused,
        )  # fmt: skip

    # both rows delivered, or both dead-lettered: either setting, followed whole
    assert verdict(bundles, []).exactly_once
    rows0 = bundles[0].rows
    both_dead = [DeliveredBundle(0, rows0[:1]), bundles[1]]
    assert verdict(both_dead, [DeliveredBundle(0, rows0[1:])]).exactly_once
    # one delivered, the other dead-lettered: bundle 0 followed two settings
    split = [DeliveredBundle(0, rows0[:2]), bundles[1]]
    mixed = verdict(split, [DeliveredBundle(0, rows0[2:])])
    assert mixed.differing == 1 and not mixed.exactly_once
    assert "follows two settings" in " ".join(mixed.problems)
    # in neither place: lost, in both: duplicated
    assert verdict([DeliveredBundle(0, rows0[:1]), bundles[1]], []).lost == 2
    twice = [DeliveredBundle(0, rows0), bundles[1]]
    assert verdict(twice, [DeliveredBundle(0, rows0[1:2])]).duplicated == 1


def test_mixed_bundles_ignores_rows_with_one_place() -> None:
    got = [Item(("a",), (1,), 0), Item(("b",), (1,), 0, dead=True), Item(("c",), (1,), 1)]
    expected = {
        ("a",): Item(("a",), (1,), -1, dead=None),
        ("b",): Item(("b",), (1,), -1, dead=None),
    }
    assert mixed_bundles(got, expected) == {0: ([("a",)], [("b",)])}
    assert mixed_bundles(got[:1] + got[2:], expected) == {}


def test_a_sparse_round_whose_state_is_not_bounded_fails() -> None:
    query = QUERIES["stateless"]
    epoched = assign_epochs(TOPIC, records(6), epochs(3, 6))
    bundles = stateless_bundles(epoched.records)
    state = BarrierState(gt_last=1)
    ok = judge(query, "arrow", False, epoched, bundles, state, 1, stored_epochs=11, epoch_bound=11)
    assert ok.exactly_once and ok.stored_epochs == 11
    over = judge(
        query, "arrow", False, epoched, bundles, state, 1, stored_epochs=12, epoch_bound=11
    )
    assert not over.exactly_once
    assert "state not bounded: 12 epochs stored" in " ".join(over.problems)
