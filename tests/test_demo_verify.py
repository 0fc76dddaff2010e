"""demo.verify: the batch computation, the comparison and the table."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from demo.generator import GeneratorConfig, generate, iso_millis
from demo.verify import (
    Expected,
    expected_from_records,
    parse_table,
    read_file_consumer,
    render_table,
    table_rows,
    verify,
)

T0 = 1_740_819_600_000  # 2025-03-01T09:00:00Z


def records(config: GeneratorConfig) -> list[tuple[int, int, bytes]]:
    """(partition, offset, value) as Kafka would number them."""
    next_offset: dict[int, int] = {}
    out = []
    for e in generate(config):
        off = next_offset.get(e.partition, 0)
        next_offset[e.partition] = off + 1
        out.append((e.partition, off, e.value))
    return out


def delivered_from(expected: Expected, bundles: int = 4) -> pd.DataFrame:
    """What a correct consumer holds: the enriched records split into bundles by offset,
    then the windows and the final customer totals in one last bundle."""
    ev = expected.events.copy()
    ev["kind"] = "event"
    ev["bundle_id"] = ev["src_offset"] * bundles // (ev["src_offset"].max() + 1)
    last = bundles
    w = expected.windows.rename(columns={"revenue": "amount_usd_cents"}).assign(
        kind="category_minute", bundle_id=last
    )
    c = expected.customers.rename(columns={"ordered": "amount_usd_cents", "paid": "paid_usd_cents"})
    c = c.assign(kind="customer_total", bundle_id=last)
    return pd.concat([ev, w, c], ignore_index=True)


@pytest.fixture(scope="module")
def expected() -> Expected:
    return expected_from_records(records(GeneratorConfig(events=1500, seed=11, partitions=4)))


def test_batch_computation_by_hand() -> None:
    orders = [
        {
            "type": "order",
            "order_id": "o-1",
            "customer_id": "c-1",
            "category": "books",
            "quantity": 1,
            "amount": 1000,
            "currency": "EUR",
            "ts": iso_millis(T0 + 5_000),
        },
        {
            "type": "order",
            "order_id": "o-2",
            "customer_id": "c-2",
            "category": "books",
            "quantity": 2,
            "amount": 300,
            "currency": "USD",
            "ts": iso_millis(T0 + 59_999),
        },
        {
            "type": "order",
            "order_id": "o-3",
            "customer_id": "c-1",
            "category": "books",
            "quantity": 1,
            "amount": 10000,
            "currency": "JPY",
            "ts": iso_millis(T0 + 60_000),
        },
        {
            "type": "payment",
            "payment_id": "p-1",
            "order_id": "o-1",
            "customer_id": "c-1",
            "amount": 1000,
            "currency": "EUR",
            "method": "card",
            "ts": iso_millis(T0 + 61_000),
        },
        {"type": "tick", "ts": iso_millis(T0 + 600_000)},
    ]
    got = expected_from_records((0, i, json.dumps(o).encode()) for i, o in enumerate(orders))
    assert got.records == 4 and got.heartbeats == 1
    usd = dict(zip(got.events["event_id"], got.events["amount_usd_cents"], strict=True))
    assert usd == {"o-1": 1085, "o-2": 300, "o-3": 6700, "p-1": 1085}
    windows = got.windows.set_index("window_start_ms")
    assert windows.loc[T0, "revenue"] == 1385 and windows.loc[T0, "orders"] == 2
    assert windows.loc[T0 + 60_000, "revenue"] == 6700
    assert set(got.windows["department"]) == {"media"}
    c1 = got.customers.set_index("customer_id").loc["c-1"]
    assert (c1["ordered"], c1["paid"], c1["orders"], c1["payments"]) == (7785, 1085, 2, 1)


def test_a_correct_delivery_passes(expected: Expected) -> None:
    result = verify(delivered_from(expected), expected)
    assert result.ok, result.details
    assert (result.duplicates, result.missing, result.bundles) == (0, 0, 5)
    assert result.records_in == 1500


def test_a_duplicated_record_is_counted(expected: Expected) -> None:
    d = delivered_from(expected)
    d = pd.concat([d, d[d["kind"] == "event"].iloc[[10]].assign(bundle_id=4)], ignore_index=True)
    result = verify(d, expected)
    assert result.duplicates == 1 and not result.ok
    assert "duplicated record" in " ".join(result.details)


def test_a_missing_record_is_counted(expected: Expected) -> None:
    d = delivered_from(expected)
    d = d.drop(index=d.index[(d["kind"] == "event")][:3])
    result = verify(d, expected)
    assert result.missing == 3 and not result.ok


def test_a_changed_aggregate_or_total_is_unequal(expected: Expected) -> None:
    d = delivered_from(expected)
    i = d.index[d["kind"] == "category_minute"][0]
    d.loc[i, "amount_usd_cents"] += 1
    assert not verify(d, expected).windows_equal
    d = delivered_from(expected)
    i = d.index[d["kind"] == "customer_total"][0]
    d.loc[i, "paid_usd_cents"] += 1
    result = verify(d, expected)
    assert result.windows_equal and not result.customers_equal and not result.stateful_equal


def test_only_the_last_customer_total_counts(expected: Expected) -> None:
    d = delivered_from(expected)
    early = d[d["kind"] == "customer_total"].assign(bundle_id=0, paid_usd_cents=0)
    assert verify(pd.concat([early, d], ignore_index=True), expected).ok
    twice = d[d["kind"] == "customer_total"].iloc[[0]]
    assert verify(pd.concat([twice, d], ignore_index=True), expected).duplicates == 1


def test_a_record_in_a_later_bundle_than_its_successors_is_out_of_order(
    expected: Expected,
) -> None:
    d = delivered_from(expected)
    events = d[d["kind"] == "event"]
    first = events[events["bundle_id"] == 0].index[0]
    d.loc[first, "bundle_id"] = 3
    result = verify(d, expected)
    assert not result.in_gt_order and not result.ok


def test_read_file_consumer_skips_hidden_files_and_numbers_bundles(tmp_path: Path) -> None:
    stamps = pa.array([T0 * 1000], pa.timestamp("us", "UTC"))
    table = pa.table({"kind": ["event"], "event_time": stamps})
    pq.write_table(table, tmp_path / "bundle-000000000007.parquet")
    pq.write_table(table, tmp_path / ".tmp-partial")
    (tmp_path / "_last_bundle.json").write_text("{}")
    frame = read_file_consumer(tmp_path)
    assert list(frame["bundle_id"]) == [7]
    assert list(frame["event_time_ms"]) == [T0]


def test_table_renders_and_parses_back(expected: Expected) -> None:
    result = verify(delivered_from(expected), expected)
    rows = table_rows(result, [("recovery time", "3.0 s")])
    text = "noise\n" + render_table(rows, "Verification:") + "\nmore noise"
    parsed = parse_table(text)
    assert parsed["duplicates"] == "0" and parsed["missing"] == "0"
    assert parsed["stateful results equal"].startswith("yes")
    assert parsed["recovery time"] == "3.0 s" and parsed["verdict"] == "PASS"
