"""Poison rows in a chaos round: rows the consumer's target refuses, and their dead letters.

A poison round is a ``stateless`` round some of whose input records the query turns into
rows without a ``gt`` (``gt`` null): every consumer refuses such a row (the check every
consumer shares, docs/sink.md "Bad rows and dead letters"), so the round needs no
consumer-specific bad value. The other queries aggregate, and their output has no ``gt``
column to null; they get no poison.

A round draws its poison (:func:`draw_poison`) from a seeded generator of its own, so that
the rest of its plan (query, consumer, sizes, faults' draws) is what it was without poison.
It runs either

* at ``errors.tolerance=all`` from the start, with ``errors.deadLetter.path``: the poison
  rows go to one dead-letter file per bundle, the rest is delivered; or
* at ``errors.tolerance=none``: the query fails at the first poison bundle, before any of
  it is delivered, and so does every restart; the round (the operator) then stops the
  driver, checks that nothing of that bundle reached the consumer, and restarts it on the
  same checkpoint with ``errors.tolerance=all`` (:meth:`RoundRunner.operator_switch
  <integration_tests.chaos.rounds.RoundRunner.operator_switch>`).

Either way the verdict counts what the consumer holds and what the dead letters hold
together (:func:`integration_tests.chaos.checks.judge`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from integration_tests.chaos.consumers import DeliveredBundle
from sink.dead_letters.dead_letter_files import open_dead_letters
from sink.dead_letters.dead_letter_format import BUNDLE_COLUMN

if TYPE_CHECKING:
    from state.stores import S3Settings

Tolerance = Literal["none", "all"]
#: The query whose rounds may have poison rows (its output carries ``gt``).
POISONED_QUERY = "stateless"
#: The share of stateless rounds with poison rows, unless ``--poison-share`` says otherwise.
DEFAULT_SHARE = 0.6
#: The text a driver's output holds once its query failed at a poison bundle.
REFUSED = "RowsRefused"


@dataclass(frozen=True)
class Poison:
    """A round's poison: the input record numbers whose row has a null ``gt``, and the
    ``errors.tolerance`` the round starts at (``none``: switched to ``all`` once the
    query stopped at the poison bundle)."""

    numbers: tuple[int, ...]
    tolerance: Tolerance

    def describe(self) -> str:
        start = "none, switched to all" if self.tolerance == "none" else "all"
        return f"poison {list(self.numbers)} at errors.tolerance={start}"


def draw_poison(seed: int, index: int, query: str, records: int, share: float) -> Poison | None:
    """Round ``index``'s poison (None: it has none): for a ``stateless`` round with
    probability ``share``, one or two record numbers below ``records`` and the tolerance
    the round starts at. Drawn from ``random.Random(f"{seed}:{index}:poison")``, which no
    other draw of the round uses."""
    if query != POISONED_QUERY or share <= 0:
        return None
    rng = random.Random(f"{seed}:{index}:poison")
    if rng.random() >= share:
        return None
    numbers = tuple(sorted(rng.sample(range(records), rng.choice((1, 1, 2)))))
    tolerance: Tolerance = rng.choice(("none", "all"))
    return Poison(numbers, tolerance)


def poison_sink_options(tolerance: Tolerance, dead_letters: str) -> dict[str, str]:
    """The sink's ``errors.*`` options at ``tolerance`` (none: the defaults, nothing set)."""
    if tolerance == "none":
        return {}
    return {"errors.tolerance": "all", "errors.deadLetter.path": dead_letters}


def read_dead_letters(uri: str, s3: S3Settings | None = None) -> list[DeliveredBundle]:
    """Every dead-letter file under ``uri``, as bundles of rows (by bundle id); ``s3``: the
    settings to read an ``s3://`` destination with (straight to the server, not through
    the fault proxy). Each file's rows must name its bundle (``_gtb_bundle``)."""
    destination = open_dead_letters(uri, s3)
    try:
        out = []
        for found in destination.files():
            rows = destination.read(found.bundle_id).to_pylist()
            wrong = {r[BUNDLE_COLUMN] for r in rows} - {found.bundle_id}
            if wrong:
                raise AssertionError(
                    f"{found.location}: rows of bundle(s) {sorted(wrong)} in the file of "
                    f"bundle {found.bundle_id}"
                )
            out.append(DeliveredBundle(found.bundle_id, rows))
        return out
    finally:
        destination.close()
