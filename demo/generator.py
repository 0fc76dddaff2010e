"""A deterministic stream of shop traffic: orders and payments as JSON, keyed by customer.

``generate(GeneratorConfig(events=20_000, seed=7))`` always returns the same events:

* an **order** ``{"type": "order", "order_id", "customer_id", "category", "quantity",
  "amount", "currency", "ts"}`` (``amount`` in minor units of ``currency``);
* a **payment** ``{"type": "payment", "payment_id", "order_id", "customer_id", "amount",
  "currency", "method", "ts"}`` that settles an earlier order of the same customer.

Event times (``ts``, ISO 8601 UTC with milliseconds) advance by ``60 / events_per_minute``
seconds per event with up to ``jitter_ms`` of disorder, starting at a fixed instant. The
Kafka key is the customer id and the partition is ``crc32(customer id) % partitions``,
so each customer's events are in order in one partition (as a keyed producer would put
them). :func:`ticks` makes the end-of-stream heartbeats that move the watermark past the
last window (see :mod:`demo.pipeline`).
"""

from __future__ import annotations

import json
import random
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import accumulate

from demo.catalog import CATEGORIES, CURRENCIES, PAYMENT_METHODS, from_usd_cents

START = datetime(2025, 3, 1, 9, 0, 0, tzinfo=UTC)

# (key, value, headers, partition): the shape the Kafka helpers produce.
Record = tuple[bytes | None, bytes, list[tuple[str, bytes]] | None, int | None]


@dataclass(frozen=True)
class GeneratorConfig:
    events: int
    seed: int = 7
    partitions: int = 8
    customers: int | None = None  # default: one per 50 events, at least 20
    events_per_minute: int = 1000
    payment_share: float = 0.4
    jitter_ms: int = 3000

    def __post_init__(self) -> None:
        if self.events < 1:
            raise ValueError(f"events must be >= 1, got {self.events}")
        if self.partitions < 1:
            raise ValueError(f"partitions must be >= 1, got {self.partitions}")
        if self.events_per_minute < 1:
            raise ValueError(f"events_per_minute must be >= 1, got {self.events_per_minute}")
        if not 0.0 <= self.payment_share < 1.0:
            raise ValueError(f"payment_share must be in [0, 1), got {self.payment_share}")

    @property
    def customer_count(self) -> int:
        return self.customers if self.customers is not None else max(20, self.events // 50)


@dataclass(frozen=True)
class Event:
    key: bytes | None
    value: bytes
    partition: int
    time_ms: int  # event time, milliseconds since the Unix epoch

    def record(self) -> Record:
        return (self.key, self.value, None, self.partition)


def partition_for(key: str, partitions: int) -> int:
    """The partition of a key: stable across runs, processes and Python versions."""
    return zlib.crc32(key.encode()) % partitions


def iso_millis(time_ms: int) -> str:
    """``2025-03-01T09:00:00.120Z``: what the Spark query's JSON schema parses as a timestamp."""
    t = datetime.fromtimestamp(time_ms / 1000, tz=UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%S.") + f"{time_ms % 1000:03d}Z"


class _Weighted:
    """rng.choices with precomputed cumulative weights (fast in a long loop)."""

    def __init__(self, items: Iterable[tuple[object, int]]) -> None:
        pairs = list(items)
        self.values = [v for v, _ in pairs]
        self.cum = list(accumulate(w for _, w in pairs))

    def pick(self, rng: random.Random) -> object:
        return rng.choices(self.values, cum_weights=self.cum)[0]


def generate(config: GeneratorConfig) -> list[Event]:
    """The events of ``config``, in production order (event time, with small disorder)."""
    return list(iter_events(config))


def iter_events(config: GeneratorConfig) -> Iterator[Event]:
    rng = random.Random(config.seed)
    start_ms = int(START.timestamp() * 1000)
    step = 60_000 / config.events_per_minute
    customers = [f"c-{i:05d}" for i in range(config.customer_count)]
    # A few customers buy much more than others (a Zipf-like skew, as in real shops).
    customer_weights = [max(1, 1000 // (i + 1)) + 5 for i in range(len(customers))]
    rng.shuffle(customer_weights)
    pick_customer = _Weighted(zip(customers, customer_weights, strict=True))
    pick_category = _Weighted((c, c.weight) for c in CATEGORIES)
    pick_currency = _Weighted((c.code, c.weight) for c in CURRENCIES)
    pick_method = _Weighted(PAYMENT_METHODS)
    open_orders: list[tuple[str, str, int, str]] = []  # order id, customer, amount, currency
    n_orders = n_payments = 0
    for i in range(config.events):
        time_ms = int(start_ms + i * step) - rng.randint(0, config.jitter_ms)
        time_ms = max(start_ms, time_ms)
        ts = iso_millis(time_ms)
        if open_orders and rng.random() < config.payment_share:
            j = rng.randrange(len(open_orders))
            open_orders[j], open_orders[-1] = open_orders[-1], open_orders[j]
            order_id, customer, amount, currency = open_orders.pop()
            n_payments += 1
            body: dict[str, object] = {
                "type": "payment",
                "payment_id": f"p-{n_payments:07d}",
                "order_id": order_id,
                "customer_id": customer,
                "amount": amount,
                "currency": currency,
                "method": pick_method.pick(rng),
                "ts": ts,
            }
        else:
            customer = str(pick_customer.pick(rng))
            category = pick_category.pick(rng)
            assert isinstance(category, tuple)
            name, _, _, low, high = category
            currency = str(pick_currency.pick(rng))
            quantity = 1 if rng.random() < 0.7 else rng.randint(2, 4)
            usd = rng.randint(low, high) * quantity
            amount = from_usd_cents(usd, currency)
            n_orders += 1
            order_id = f"o-{n_orders:07d}"
            open_orders.append((order_id, customer, amount, currency))
            body = {
                "type": "order",
                "order_id": order_id,
                "customer_id": customer,
                "category": name,
                "quantity": quantity,
                "amount": amount,
                "currency": currency,
                "ts": ts,
            }
        key = str(body["customer_id"])
        yield Event(
            key=key.encode(),
            value=json.dumps(body, separators=(",", ":")).encode(),
            partition=partition_for(key, config.partitions),
            time_ms=time_ms,
        )


def ticks(partitions: int, time_ms: int) -> list[Event]:
    """One end-of-stream heartbeat per partition with event time ``time_ms``.

    Heartbeats carry no order or payment; they only move the query's watermark (Spark
    advances it from the event times of a batch, for the *next* batch)."""
    value = json.dumps({"type": "tick", "ts": iso_millis(time_ms)}, separators=(",", ":"))
    return [Event(None, value.encode(), p, time_ms) for p in range(partitions)]


def last_event_time_ms(config: GeneratorConfig) -> int:
    """An upper bound of every event time of ``config`` (the nominal time of the last event)."""
    start_ms = int(START.timestamp() * 1000)
    return int(start_ms + (config.events - 1) * 60_000 / config.events_per_minute)


def minute_floor(time_ms: int) -> int:
    return time_ms - time_ms % 60_000


def describe(config: GeneratorConfig) -> str:
    span = timedelta(milliseconds=last_event_time_ms(config) - int(START.timestamp() * 1000))
    return (
        f"{config.events:,} events (orders and payments, seed {config.seed}) from "
        f"{config.customer_count:,} customers over {config.partitions} partitions, "
        f"{span} of event time"
    )
