"""consumer=postgres refusing a NUL character in text, with a real driver and server.

As a new user tried it: 20,000 orders into consumer=postgres, one with a NUL in a text
column. With ``errors.tolerance=none`` the query stops before anything of that bundle is
delivered, naming the row; restarted on the same checkpoint with ``errors.tolerance=all``
it goes on, the row in dead letters, the others in the table, each once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from integration_tests.test_sink_dead_letters import (
    PARTITIONS,
    Chain,
    failed,
    finished,
    produce,
)
from sink.dead_letters.dead_letter_format import COLUMN_COLUMN


class PostgresChain(Chain):
    """The same into consumer=postgres."""

    def __init__(self, *args: Any, postgres: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.postgres = postgres
        self.table = postgres.table("orders")

    def consumer_options(self) -> dict[str, str]:
        return {
            "consumer": "postgres",
            "consumer.postgres.dsn": self.postgres.dsn,
            "consumer.postgres.table": self.table,
        }

    def delivered_numbers(self) -> list[int]:
        try:
            rows = self.postgres.rows(f"SELECT value FROM {self.table}")
        except Exception:  # no table yet
            return []
        return [int(bytes(r[0])) for r in rows]


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_postgres_refuses_a_nul_in_text_until_all_sends_it_to_dead_letters(
    driver: Any, kafka: Any, postgres: Any, tmp_path: Path
) -> None:
    n, poison = 20_000, 12_345  # as a new user tried it: 20,000 orders, one NUL, epoch 1
    topic = kafka.create_topic(partitions=PARTITIONS)
    produce(kafka, topic, n)
    c = PostgresChain(
        driver, kafka, tmp_path, topic, postgres=postgres, per_epoch=10_000, nul=str(poison)
    )

    out = failed(c.run())
    assert "RowsRefused" in out and "bundle 1 (epoch 1" in out and "column 'note'" in out, out[
        -3000:
    ]
    assert "0x00" in out or "NUL" in out
    assert c.progress() == (0, None) and len(c.delivered_numbers()) == 10_000

    finished(c.run(options=c.tolerant()))
    delivered = c.delivered_numbers()
    dead = c.dead_letters()
    refused = [int(v) for v in dead.column("value").to_pylist()]
    assert refused == [poison] and dead.column(COLUMN_COLUMN).to_pylist() == ["note"]
    assert sorted(delivered + refused) == list(range(n))
