"""Reference data of the demo shop, shared by the generator, the Spark query and the check.

Money is integer minor units everywhere (cents, pence, yen), so sums are exact whatever
order Spark adds them in, and a streaming result can be compared with a batch result
for equality rather than within a tolerance.
"""

from __future__ import annotations

from typing import NamedTuple


class Category(NamedTuple):
    name: str
    department: str
    weight: int  # relative frequency in orders
    min_price_usd_cents: int
    max_price_usd_cents: int


class Currency(NamedTuple):
    code: str
    weight: int
    # USD cents per one minor unit of the currency, times 1,000,000 (an exact integer rate).
    usd_micro_cents: int


CATEGORIES: tuple[Category, ...] = (
    Category("books", "media", 14, 499, 4_999),
    Category("music", "media", 6, 99, 2_499),
    Category("games", "media", 7, 1_999, 6_999),
    Category("phones", "electronics", 5, 19_900, 129_900),
    Category("laptops", "electronics", 3, 49_900, 249_900),
    Category("audio", "electronics", 6, 2_900, 39_900),
    Category("kitchen", "home", 10, 999, 29_900),
    Category("garden", "home", 7, 499, 19_900),
    Category("furniture", "home", 3, 4_900, 99_900),
    Category("toys", "kids", 9, 499, 9_999),
    Category("clothing", "fashion", 16, 999, 14_900),
    Category("shoes", "fashion", 8, 2_900, 24_900),
    Category("sports", "outdoor", 6, 999, 49_900),
)

CURRENCIES: tuple[Currency, ...] = (
    Currency("USD", 55, 1_000_000),
    Currency("EUR", 25, 1_085_000),
    Currency("GBP", 12, 1_265_000),
    Currency("JPY", 8, 670_000),  # minor unit is the yen: 1 yen = 0.67 US cents
)

PAYMENT_METHODS: tuple[tuple[str, int], ...] = (("card", 70), ("paypal", 20), ("bank", 10))

DEPARTMENT_OF: dict[str, str] = {c.name: c.department for c in CATEGORIES}
RATE_OF: dict[str, int] = {c.code: c.usd_micro_cents for c in CURRENCIES}
MICRO = 1_000_000


def to_usd_cents(amount: int, currency: str) -> int:
    """``amount`` minor units of ``currency`` in US cents, rounded down (exact integers).

    The Spark query computes ``amount * rate div 1000000``, the same floor division."""
    return amount * RATE_OF[currency] // MICRO


def from_usd_cents(usd_cents: int, currency: str) -> int:
    """The price in minor units of ``currency`` for a price of ``usd_cents`` (rounded)."""
    return max(1, round(usd_cents * MICRO / RATE_OF[currency]))
