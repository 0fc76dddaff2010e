"""The resume point never moves backwards; stale drivers are fenced; fencing tokens grow."""

from __future__ import annotations

from typing import Any

import pytest

from state.errors import ConcurrentModification, CoordinationError, PipelineFenced
from state.layout import PipelineLayout
from state.protocol.fencing import check_token, read_driver_record, read_token, take_token
from state.protocol.resume_point import (
    StoreResumePoints,
    accepted_point,
    advance_resume_point,
    check_advance,
    new_generation,
    order_key,
    read_resume_point,
)
from state.records.codec import decode
from state.records.resume_point import ResumePoint, SnapshotRef
from state.retry import Retry
from state.stores import StateStore

LAYOUT = PipelineLayout("p1")


def point(
    epoch: int, *, generation: int = 0, token: int = 1, batch: int | None = None
) -> ResumePoint:
    b = epoch if batch is None else batch
    ref = SnapshotRef(epoch, f"p1/snapshots/{epoch:012d}/manifest.json", "ab" * 32, epoch, b)
    return ResumePoint(generation, token, epoch, b, "q", {"epoch": epoch + 1}, 1.0, (ref,))


def test_order_and_advance_rules() -> None:
    assert check_advance(None, point(0))
    assert check_advance(point(3), point(4))
    assert not check_advance(point(4), point(4))  # a repeated write: nothing to do
    assert not check_advance(point(5), point(4))  # never backwards
    assert check_advance(point(9), ResumePoint.empty(generation=1, token=1, created_at=0.0))
    assert not check_advance(point(1, generation=2), point(50, generation=1))
    assert check_advance(point(5, token=1), point(6, token=2))
    with pytest.raises(PipelineFenced, match="fencing token 3 > ours 2"):
        check_advance(point(5, token=3), point(6, token=2))
    assert order_key(ResumePoint.empty(generation=0, token=1, created_at=0)) < order_key(point(0))


def test_record_round_trip() -> None:
    p = point(7, generation=2, token=4)
    raw = p.to_json()
    assert raw["epoch"] == 7 and raw["batch_id"] == 7 and raw["manifest"].endswith("manifest.json")
    assert {"epoch", "frontier", "batch_id", "created_at", "manifest"} <= set(raw)
    assert ResumePoint.from_json(raw) == p
    empty = ResumePoint.empty(generation=3, token=1, created_at=2.0)
    assert empty.snapshot is None and empty.to_json()["manifest"] is None
    assert ResumePoint.from_json(empty.to_json()) == empty


def test_store_backend_never_moves_back(store: StateStore) -> None:
    backend = StoreResumePoints(store, LAYOUT)
    assert read_resume_point(backend) == (None, None)
    assert advance_resume_point(backend, lambda cur: point(3)) == point(3)
    assert advance_resume_point(backend, lambda cur: point(2)) is None  # late writer
    assert read_resume_point(backend)[0] == point(3)
    assert advance_resume_point(backend, lambda cur: point(5)) == point(5)
    assert decode(store.get(LAYOUT.resume_point).data, ResumePoint.from_json, "test").epoch == 5
    with pytest.raises(PipelineFenced):
        advance_resume_point(backend, lambda cur: point(9, token=0))
    assert read_resume_point(backend)[0] == point(5)


class RacingBackend:
    """Another writer slips a newer point in between our read and our write, once."""

    def __init__(self, inner: StoreResumePoints, sneak: ResumePoint) -> None:
        self.inner = inner
        self.sneak: ResumePoint | None = sneak
        self.description = "racing"

    def read(self) -> tuple[dict[str, Any] | None, str | None]:
        return self.inner.read()

    def write(self, record: dict[str, Any], expected_version: str | None) -> str:
        if self.sneak is not None:
            _, version = self.inner.read()
            self.inner.write(self.sneak.to_json(), version)
            self.sneak = None
        return self.inner.write(record, expected_version)


def test_lost_compare_and_swap_is_reread(store: StateStore) -> None:
    inner = StoreResumePoints(store, LAYOUT)
    advance_resume_point(inner, lambda cur: point(1))
    seen: list[int | None] = []

    def make(cur: ResumePoint | None) -> ResumePoint:
        seen.append(None if cur is None else cur.epoch)
        return point(4)

    assert advance_resume_point(RacingBackend(inner, point(2)), make) == point(4)
    assert seen == [1, 2]  # rebuilt on the newer point after the lost CAS
    # If the racer wrote a newer point than ours, ours is not written.
    assert advance_resume_point(RacingBackend(inner, point(8)), lambda cur: point(6)) is None
    assert read_resume_point(inner)[0] == point(8)


def test_cas_conflict_exhausts_retry(store: StateStore) -> None:
    class AlwaysRacing(RacingBackend):
        def write(self, record: dict[str, Any], expected_version: str | None) -> str:
            raise ConcurrentModification("memory://x", "k", expected_version)

    backend = AlwaysRacing(StoreResumePoints(store, LAYOUT), point(0))
    retry = Retry(
        max_attempts=3,
        base_delay=0.0,
        sleep=lambda s: None,
        is_retriable=lambda e: isinstance(e, ConcurrentModification),
    )
    with pytest.raises(ConcurrentModification):
        advance_resume_point(backend, lambda cur: point(1), retry=retry)


def test_fencing_tokens_grow_and_fence(store: StateStore) -> None:
    assert read_token(store, LAYOUT) == 0
    first = take_token(store, LAYOUT, identifier="a")
    second = take_token(store, LAYOUT, identifier="b")
    assert (first, second) == (1, 2)
    record = read_driver_record(store, LAYOUT)
    assert record is not None and record.owner is not None and record.owner.identifier == "b"
    check_token(store, LAYOUT, second)
    with pytest.raises(PipelineFenced, match="newer driver"):
        check_token(store, LAYOUT, first)


def ref(epoch: int) -> SnapshotRef:
    return SnapshotRef(epoch, f"p1/snapshots/{epoch:012d}/manifest.json", "cd" * 32, epoch, epoch)


def accept(current: ResumePoint | None, epoch: int, generation: int) -> ResumePoint:
    return accepted_point(
        current,
        ref(epoch),
        generation=generation,
        token=2,
        query_id="q",
        frontier={"epoch": epoch + 1},
        retain=2,
        created_at=5.0,
    )


def test_an_accepted_snapshot_becomes_the_point_and_keeps_the_newest_retained() -> None:
    first = accept(None, 3, 0)
    assert (first.generation, first.epoch, first.batch_id, first.token) == (0, 3, 3, 2)
    assert [r.epoch for r in first.retained] == [3]
    third = accept(accept(first, 5, 0), 7, 0)
    assert [r.epoch for r in third.retained] == [7, 5]  # retain=2
    assert third.frontier == {"epoch": 8} and check_advance(first, third)


def test_a_snapshot_is_never_accepted_into_another_generation() -> None:
    replayed = new_generation(accept(None, 3, 0), token=3, created_at=6.0)
    assert (replayed.generation, replayed.epoch, replayed.retained) == (1, -1, ())
    with pytest.raises(CoordinationError, match=r"belongs to generation 0 .* at generation 1"):
        accept(replayed, 9, 0)
    assert accept(replayed, 9, 1).generation == 1


def test_a_new_generation_follows_the_current_one() -> None:
    assert new_generation(None, token=1, created_at=0.0).generation == 1
    assert new_generation(point(4, generation=3), token=1, created_at=0.0).generation == 4
