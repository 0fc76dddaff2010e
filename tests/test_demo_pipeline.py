"""demo.pipeline's pure parts: the per-customer state function and the job file."""

from __future__ import annotations

import pandas as pd

from demo.pipeline import CUSTOMER_COLUMNS, OUTPUT_COLUMNS, OUTPUT_SCHEMA, customer_totals


class FakeState:
    """The part of pyspark's GroupState the function uses."""

    def __init__(self, value: tuple[int, ...] | None) -> None:
        self.exists = value is not None
        self.get = value
        self.updates: list[tuple[int, ...]] = []

    def update(self, value: tuple[int, ...]) -> None:
        self.updates.append(value)


def frame(*rows: tuple[str, int]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["event_type", "amount_usd_cents"])


def test_first_batch_of_a_customer_starts_from_zero() -> None:
    state = FakeState(None)
    (out,) = customer_totals(("c-1",), iter([frame(("order", 100), ("payment", 40))]), state)
    assert list(out.columns) == CUSTOMER_COLUMNS
    assert out.to_dict("records") == [
        {"customer_id": "c-1", "ordered": 100, "paid": 40, "orders": 1, "payments": 1}
    ]
    assert state.updates == [(100, 40, 1, 1)]


def test_totals_continue_from_the_state_across_chunks() -> None:
    state = FakeState((1000, 500, 3, 2))
    chunks = [frame(("order", 10), ("order", 20)), frame(("payment", 7))]
    (out,) = customer_totals(("c-2",), iter(chunks), state)
    assert out.iloc[0].to_dict() == {
        "customer_id": "c-2",
        "ordered": 1030,
        "paid": 507,
        "orders": 5,
        "payments": 3,
    }
    assert state.updates == [(1030, 507, 5, 3)]


def test_output_schema_lists_every_column_once() -> None:
    names = [n for n, _ in OUTPUT_COLUMNS]
    assert len(names) == len(set(names)) and names[0] == "kind"
    assert OUTPUT_SCHEMA.startswith("kind string, event_id string")
