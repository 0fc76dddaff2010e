"""demo.generator: a deterministic, realistic stream of orders and payments."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from demo.catalog import CATEGORIES, CURRENCIES, to_usd_cents
from demo.generator import (
    START,
    GeneratorConfig,
    generate,
    iso_millis,
    last_event_time_ms,
    partition_for,
    ticks,
)


def bodies(config: GeneratorConfig) -> list[dict[str, Any]]:
    return [json.loads(e.value) for e in generate(config)]


def test_same_seed_same_bytes_other_seed_other_bytes() -> None:
    a = generate(GeneratorConfig(events=2000, seed=3))
    b = generate(GeneratorConfig(events=2000, seed=3))
    c = generate(GeneratorConfig(events=2000, seed=4))
    assert [e.value for e in a] == [e.value for e in b]
    assert [e.value for e in a] != [e.value for e in c]


def test_keys_partitions_and_ids() -> None:
    config = GeneratorConfig(events=3000, seed=1, partitions=8)
    events = generate(config)
    assert len(events) == 3000
    for e in events:
        body = json.loads(e.value)
        assert e.key == body["customer_id"].encode()
        assert e.partition == partition_for(body["customer_id"], 8)
    used = Counter(e.partition for e in events)
    assert set(used) == set(range(8))  # keys spread over every partition
    ids = [b.get("payment_id") or b["order_id"] for b in map(json.loads, (e.value for e in events))]
    assert len(ids) == len(set(ids))


def test_payments_settle_earlier_orders_of_the_same_customer_once() -> None:
    seen: dict[str, dict[str, Any]] = {}
    paid: set[str] = set()
    kinds: Counter[str] = Counter()
    for body in bodies(GeneratorConfig(events=5000, seed=2)):
        kinds[body["type"]] += 1
        if body["type"] == "order":
            assert body["category"] in {c.name for c in CATEGORIES}
            assert body["currency"] in {c.code for c in CURRENCIES}
            assert body["amount"] > 0 and 1 <= body["quantity"] <= 4
            seen[body["order_id"]] = body
        else:
            order = seen[body["order_id"]]  # the order came first
            assert body["order_id"] not in paid
            paid.add(body["order_id"])
            assert (body["customer_id"], body["amount"], body["currency"]) == (
                order["customer_id"],
                order["amount"],
                order["currency"],
            )
    assert 0.3 < kinds["payment"] / 5000 < 0.45


def test_event_times_advance_with_bounded_disorder() -> None:
    config = GeneratorConfig(events=4000, seed=5, events_per_minute=1000, jitter_ms=3000)
    events = generate(config)
    start = int(START.timestamp() * 1000)
    for i, e in enumerate(events):
        nominal = start + i * 60
        assert nominal - 3000 <= e.time_ms <= nominal or e.time_ms == start
        assert json.loads(e.value)["ts"] == iso_millis(e.time_ms)
    assert max(e.time_ms for e in events) <= last_event_time_ms(config)
    assert last_event_time_ms(config) - start == 3999 * 60


def test_usd_amounts_are_close_to_the_drawn_price() -> None:
    for body in bodies(GeneratorConfig(events=1000, seed=9)):
        if body["type"] == "order":
            usd = to_usd_cents(body["amount"], body["currency"])
            low = min(c.min_price_usd_cents for c in CATEGORIES)
            assert usd >= low - 2


def test_iso_millis_and_ticks() -> None:
    assert iso_millis(int(START.timestamp() * 1000) + 120) == "2025-03-01T09:00:00.120Z"
    beats = ticks(4, 1_000)
    assert [b.partition for b in beats] == [0, 1, 2, 3]
    assert all(
        b.key is None and json.loads(b.value) == {"type": "tick", "ts": iso_millis(1000)}
        for b in beats
    )


def test_bad_configs_are_refused() -> None:
    with pytest.raises(ValueError, match="events"):
        GeneratorConfig(events=0)
    with pytest.raises(ValueError, match="partitions"):
        GeneratorConfig(events=1, partitions=0)
    with pytest.raises(ValueError, match="payment_share"):
        GeneratorConfig(events=1, payment_share=1.0)
