"""A driver works only in the resume point generation it started in, or in one it began
itself: a driver started before another's ``recover(mode="replay")`` refuses the new
generation (``GenerationSuperseded``) before writing anything (memory store, no ZooKeeper;
the standby queued on the ZooKeeper lock: test_coordinator_standby_generation.py in
integration_tests/)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gtbarrier import SnapshotCoordinator, errors
from state.coordinator.checkpoint_recovery import read_marker
from state.errors import GenerationSuperseded, PipelineFenced
from state.layout import PipelineLayout
from state.protocol.barrier_state import read_barrier_state
from state.protocol.fencing import read_token
from state.protocol.resume_point import check_driver_generation, generation_of
from state.records.resume_point import ResumePoint
from tests.coordinator_fakes import fake_spark, write_checkpoint

LAYOUT = PipelineLayout("p1")


def point(generation: int) -> ResumePoint:
    return ResumePoint.empty(generation=generation, token=1, created_at=0.0)


def test_the_rule_refuses_only_a_generation_newer_than_the_one_the_driver_started_in() -> None:
    check_driver_generation(None, started=0, pipeline_id="p1")
    check_driver_generation(point(0), started=0, pipeline_id="p1")
    check_driver_generation(point(2), started=2, pipeline_id="p1")
    check_driver_generation(point(1), started=2, pipeline_id="p1")  # never moves back anyway
    with pytest.raises(GenerationSuperseded) as info:
        check_driver_generation(point(3), started=1, pipeline_id="orders")
    message = str(info.value)
    assert "pipeline 'orders' was moved to generation 3" in message
    assert "recover(mode='replay') after this driver started at generation 1" in message
    assert "previous version of the query" in message and "restart it" in message
    err = info.value
    assert isinstance(err, PipelineFenced) and not err.retriable
    assert errors.GenerationSuperseded is GenerationSuperseded


@pytest.fixture
def make(memory_uri: str, tmp_path: Path) -> Iterator[Callable[[str], SnapshotCoordinator]]:
    made: list[SnapshotCoordinator] = []

    def factory(host: str) -> SnapshotCoordinator:
        coord = SnapshotCoordinator(
            fake_spark(),
            pipeline_id="p1",
            state_uri=memory_uri,
            checkpoint_location=write_checkpoint(tmp_path / host, 3),
            snapshot_period="1h",
        )
        made.append(coord)
        return coord

    yield factory
    for coord in made:
        coord.close()


def written(coord: SnapshotCoordinator) -> tuple[Any, ...]:
    """What the drivers wrote: the token record, the barrier's owner, the resume point."""
    raw = coord.store.get_or_none(LAYOUT.resume_point)
    owner = read_barrier_state(coord.store, LAYOUT).owner
    return read_token(coord.store, LAYOUT), owner, None if raw is None else raw.data


def test_a_driver_that_started_before_a_replay_refuses_it_without_writing(
    make: Callable[[str], SnapshotCoordinator],
) -> None:
    old = make("a")
    assert old.recover().action == "keep"  # generation 0, token 1
    replaying = make("b")
    assert replaying.recover(mode="replay").action == "fresh"  # generation 1, token 2
    before = written(old)
    marker = read_marker(old.checkpoint)

    old.ownership.revoke()  # fenced by the newer token: it takes the pipeline again
    with pytest.raises(GenerationSuperseded, match=r"generation 1 .* at generation 0"):
        old.recover()
    with pytest.raises(GenerationSuperseded):
        _ = old.fencing_token
    assert written(old) == before and before[0] == 2
    assert read_marker(old.checkpoint) == marker and (old.checkpoint / "commits" / "3").is_file()
    assert old.ownership.token is None

    # The replaying driver works in the generation it began; one started since, too.
    replaying.ownership.revoke()
    assert replaying.recover().action == "keep" and replaying.fencing_token == 3
    later = make("c")
    assert later.recover().action == "fresh" and later.fencing_token == 4


def test_a_replay_between_the_check_and_the_token_is_refused_after_the_claim(
    make: Callable[[str], SnapshotCoordinator],
) -> None:
    """Without a lock a replay may slip in after the driver's check and before its token;
    the read after the claim refuses it and the token is forgotten. (Its claim fenced the
    replaying driver, which must be restarted too: nothing of the old version's state
    enters generation 1 either way.)"""
    old = make("a")
    assert old.recover().action == "keep"
    replaying = make("b")
    replaying.recover()  # the replaying driver started at generation 0 too
    old.ownership.revoke()
    take = old.ownership.check_generation

    def replay_after_the_check(current: ResumePoint | None) -> None:
        take(current)
        if generation_of(current) == 0:
            old.ownership.check_generation = take  # type: ignore[method-assign]
            replaying.ownership.revoke()
            replaying.recover(mode="replay")

    old.ownership.check_generation = replay_after_the_check  # type: ignore[method-assign,assignment]
    with pytest.raises(GenerationSuperseded, match="generation 1"):
        _ = old.fencing_token  # the acquisition alone, not the recovery's own read
    assert old.ownership.token is None and not old.ownership.held
    assert read_token(old.store, LAYOUT) == 4  # 1 old, 2 and 3 the replaying driver, 4 old
