"""A round's verdict: what the consumer holds against what a failure-free run delivers.

Every expected item (a record for ``stateless``, a window, a key's state after an epoch)
must be delivered exactly once, with the expected content, in the expected bundle where
the query fixes it. In a poison round the consumer and the dead letters are counted
together: every item is in exactly one of them, a poison row (``Item.dead``) in the dead
letters of the bundle of its epoch, every other item in the consumer. ``lost`` counts
expected items in neither (and input records that no epoch read), ``duplicated`` the
extra copies (twice in one place, or in both), ``differing`` items with other content or
in another bundle, items nobody expected, poison rows in the consumer and other rows in
the dead letters. Order: bundles arrive in strictly increasing bundle id (where the
consumer shows the order), and rows within a bundle in ascending ``gt``. The barrier must
end drained at the last epoch.

A round whose consumer setting changed between driver starts (:mod:`.variants`) has rows
that one setting refuses and the other accepts (``Item.dead`` None): each may be in
either place, but in exactly one, and the rows of one bundle all follow one setting (a
bundle's refused set is its dead-letter file's, written once): a bundle with some of
them delivered and others dead-lettered is ``differing``. A sparse round's state must stay
bounded: at the end at most ``epoch_bound`` epochs stored.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from integration_tests.chaos.consumers import DeliveredBundle
from integration_tests.chaos.queries import Item, Query, Refusal
from integration_tests.chaos.reference import EpochedInput
from state.records.barrier import BarrierState

EXAMPLES = 5


@dataclass(frozen=True)
class Verdict:
    records: int
    expected: int
    delivered: int
    bundles: int
    lost: int
    duplicated: int
    differing: int
    order_errors: int
    problems: list[str] = field(default_factory=list)
    #: Rows in the dead letters (poison rounds, setting changes).
    dead_letters: int = 0
    #: Epochs stored at the end (sparse rounds; None: not counted).
    stored_epochs: int | None = None

    @property
    def exactly_once(self) -> bool:
        return not (
            self.lost or self.duplicated or self.differing or self.order_errors or self.problems
        )


def _gt_key(gt: dict[str, Any]) -> tuple[int, str, int, int]:
    return int(gt["epoch"]), str(gt["topic"]), int(gt["partition"]), int(gt["offset"])


def check_order(bundles: list[DeliveredBundle], ordered: bool) -> list[str]:
    """Bundles in strictly increasing id (each id once); rows in ``gt`` order."""
    problems = []
    ids = [b.bundle_id for b in bundles]
    if ordered and any(a >= b for a, b in itertools.pairwise(ids)):
        problems.append(f"bundles out of order or repeated in delivery order: {ids}")
    elif not ordered and len(set(ids)) != len(ids):
        problems.append(f"bundle ids repeated: {ids}")
    for b in bundles:
        gts = [_gt_key(r["gt"]) for r in b.rows if r.get("gt") is not None]
        if gts != sorted(gts):
            problems.append(f"bundle {b.bundle_id}: rows not in gt order")
    return problems


def judge(  # noqa: PLR0917 - the round's facts, each named at the call
    query: Query,
    shape: str,
    ordered: bool,
    epoched: EpochedInput,
    bundles: list[DeliveredBundle],
    barrier: BarrierState,
    final_epoch: int | None,
    *,
    dead_letters: Sequence[DeliveredBundle] = (),
    poison: Collection[int] = (),
    refused: Refusal | None = None,
    keep_divisor: int = 0,
    stored_epochs: int | None = None,
    epoch_bound: int | None = None,
) -> Verdict:
    """The round's verdict (module docstring): ``bundles`` as the consumer holds them,
    ``dead_letters`` the dead-letter files' rows by bundle, ``poison`` the input record
    numbers whose rows the target refuses, ``refused`` which other rows it refuses (None:
    under one setting of the round only), ``keep_divisor`` the sparse filter's;
    ``stored_epochs`` how many epochs the log stores at the end, at most ``epoch_bound``."""
    expected = {
        item.identity: item
        for item in query.expected(
            epoched.records, shape, poison, refused=refused, keep_divisor=keep_divisor
        )
    }
    delivered: list[Item] = [i for b in bundles for i in query.items(b.bundle_id, b.rows, shape)]
    dead: list[Item] = [
        replace(i, dead=True) for b in dead_letters for i in query.items(b.bundle_id, b.rows, shape)
    ]
    got = delivered + dead
    counts = Counter(i.identity for i in got)
    first: dict[Any, Item] = {}
    for i in got:
        first.setdefault(i.identity, i)
    lost = [k for k in expected if k not in counts]
    duplicated = {k: c for k, c in counts.items() if c > 1}
    unexpected = [k for k in counts if k not in expected]
    wrong = [
        k
        for k, e in expected.items()
        if k in first
        and (first[k].value != e.value or (e.bundle >= 0 and first[k].bundle != e.bundle))
    ]
    # A refused row that reached the consumer, or a row nobody refuses in the dead letters.
    misplaced = [
        i.identity
        for i in got
        if i.identity in expected
        and expected[i.identity].dead is not None
        and i.dead != expected[i.identity].dead
        and i.identity not in wrong
    ]
    mixed = mixed_bundles(got, expected)
    problems = list(epoched.problems)
    if lost:
        problems.append(f"lost {len(lost)}, e.g. {sorted(lost, key=repr)[:EXAMPLES]}")
    if epoched.unread:
        problems.append(
            f"{len(epoched.unread)} input record(s) in no epoch, e.g. {epoched.unread[:EXAMPLES]}"
        )
    if duplicated:
        problems.append(
            f"duplicated {sum(duplicated.values()) - len(duplicated)}, e.g. "
            f"{sorted(duplicated.items(), key=repr)[:EXAMPLES]}"
        )
    for k in wrong[:EXAMPLES]:
        problems.append(
            f"differs: {k!r}: got {first[k].value} in bundle {first[k].bundle}, "
            f"expected {expected[k].value} in bundle {expected[k].bundle}"
        )
    for k in misplaced[:EXAMPLES]:
        where = "in the dead letters" if expected[k].dead is False else "in the consumer"
        problems.append(
            f"misplaced: {k!r} {where}, expected "
            + ("in the dead letters (refused)" if expected[k].dead else "in the consumer")
        )
    for bundle, (kept, dropped) in list(mixed.items())[:EXAMPLES]:
        problems.append(
            f"bundle {bundle} follows two settings: rows refused by one setting only are "
            f"both delivered ({kept[:EXAMPLES]}) and dead-lettered ({dropped[:EXAMPLES]})"
        )
    if stored_epochs is not None and epoch_bound is not None and stored_epochs > epoch_bound:
        problems.append(
            f"state not bounded: {stored_epochs} epochs stored at the end, at most "
            f"{epoch_bound} expected"
        )
    if unexpected:
        problems.append(
            f"unexpected {len(unexpected)}, e.g. "
            f"{[(k, first[k].value) for k in unexpected[:EXAMPLES]]}"
        )
    order = check_order(bundles, ordered)
    problems.extend(order)
    epochs = {e.epoch for e in epoched.epochs}
    strays = [b.bundle_id for b in bundles if b.bundle_id not in epochs]
    if strays:
        problems.append(f"bundles that are no epoch of the log: {strays}")
    if barrier.inflight is not None:
        problems.append(f"barrier: bundle {barrier.inflight.bundle_id} still in flight at the end")
    if final_epoch is not None and barrier.gt_last != final_epoch:
        problems.append(f"barrier: GT_last {barrier.gt_last}, the last epoch is {final_epoch}")
    return Verdict(
        records=len(epoched.records) + len(epoched.unread),
        expected=len(expected),
        delivered=len(delivered),
        bundles=len(bundles),
        lost=len(lost) + (len(epoched.unread) if query.name == "stateless" else 0),
        duplicated=sum(duplicated.values()) - len(duplicated),
        differing=len(wrong) + len(unexpected) + len(misplaced) + len(mixed),
        order_errors=len(order),
        problems=problems,
        dead_letters=len(dead),
        stored_epochs=stored_epochs,
    )


def mixed_bundles(
    got: Sequence[Item], expected: dict[Any, Item]
) -> dict[int, tuple[list[Any], list[Any]]]:
    """The bundles whose rows that one setting only refuses (expected ``dead`` None) are
    some delivered and some dead-lettered: bundle -> (delivered, dead-lettered)."""
    split: dict[int, tuple[list[Any], list[Any]]] = {}
    for i in got:
        e = expected.get(i.identity)
        if e is None or e.dead is not None:
            continue
        kept, dropped = split.setdefault(i.bundle, ([], []))
        (dropped if i.dead else kept).append(i.identity)
    return {b: (sorted(k), sorted(d)) for b, (k, d) in sorted(split.items()) if k and d}
