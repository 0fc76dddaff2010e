"""The coordinator's snapshot thread, driven by fake completed-batch events (memory store)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from gtbarrier import SnapshotCoordinator
from state.coordinator.config import CoordinatorConfig
from state.coordinator.driver_ownership import DriverOwnership
from state.coordinator.snapshot.attempt import Lineage, SnapshotPipeline
from state.errors import ConfigError, CoordinationError, PipelineFenced, StoreUnavailable
from state.layout import PipelineLayout
from state.protocol.resume_point import advance_resume_point, read_resume_point
from state.records.barrier import BarrierState
from state.records.inflight_bundle import InflightBundle
from state.records.resume_point import ResumePoint
from state.stores import open_store
from tests.coordinator_fakes import FakeQuery, add_batch, batch, fake_spark, write_checkpoint


def wait_for(check: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.02)
    raise AssertionError(f"condition not met within {timeout}s")


def put_barrier(coord: SnapshotCoordinator, gt_last: int, inflight_batch: int | None) -> None:
    """The barrier state: ``GT_last`` and, unless None, batch ``b``'s bundle (epoch
    ``b + 10``) in flight."""
    inflight = None
    if inflight_batch is not None:
        epoch = inflight_batch + 10
        inflight = InflightBundle(epoch, "q-1", inflight_batch, None, (), False, True)
    state = BarrierState(gt_last=gt_last, inflight=inflight)
    coord.store.put_json(PipelineLayout("p1").barrier_state, state.to_json())


@pytest.fixture
def make(memory_uri: str, tmp_path: Path) -> Iterator[Callable[..., SnapshotCoordinator]]:
    made: list[SnapshotCoordinator] = []

    def factory(**kw: Any) -> SnapshotCoordinator:
        kw.setdefault("snapshot_period", "1h")
        kw.setdefault("drain_timeout", "10s")
        c = SnapshotCoordinator(
            fake_spark(),
            pipeline_id="p1",
            state_uri=memory_uri,
            checkpoint_location=tmp_path / "cp",
            **kw,
        )
        made.append(c)
        return c

    yield factory
    for c in made:
        c.close()


def test_requested_snapshots_advance_and_prune(
    make: Callable[..., SnapshotCoordinator], tmp_path: Path
) -> None:
    coord = make(retain=2)
    cp = write_checkpoint(tmp_path / "cp", 3)
    q = FakeQuery()
    coord.watch(q)  # type: ignore[arg-type]
    assert len(coord.spark.streams.listeners) == 1  # type: ignore[union-attr]
    coord.on_batch_completed(batch(3))
    time.sleep(0.3)
    assert coord.accepted == 0  # the period (1h) has not elapsed
    point = coord.request_snapshot(wait="10s")
    assert point is not None and point["batch_id"] == 3 and point["epoch"] == 13
    assert point["frontier"] == {"epoch": 14, "offsets": {"t": {"0": 400}}}
    assert coord.resume_point() == point
    for k in (4, 5):
        add_batch(cp, k)
        coord.on_batch_completed(batch(k))
        point = coord.request_snapshot(wait="10s")
        assert point is not None and point["batch_id"] == k
    assert [r["batch_id"] for r in point["retained"]] == [5, 4]
    manifests = [k for k in coord.store.list("p1/snapshots/") if k.endswith("manifest.json")]
    assert len(manifests) == 2
    # A request with nothing new since the last snapshot is answered by that snapshot.
    again = coord.request_snapshot(wait="5s")
    assert again is not None and again["batch_id"] == 5
    status = coord.status()
    assert status["snapshots_accepted"] == 3 and status["last_snapshot"]["batch_id"] == 5
    assert status["last_snapshot"]["uploaded_bytes"] < status["last_snapshot"]["bytes"]
    assert status["fencing_token"] == coord.fencing_token == 1


def test_period_triggers_snapshots(
    make: Callable[..., SnapshotCoordinator], tmp_path: Path
) -> None:
    coord = make(snapshot_period="100ms")
    cp = write_checkpoint(tmp_path / "cp", 0)
    coord.watch(FakeQuery())  # type: ignore[arg-type]
    for k in range(1, 4):
        add_batch(cp, k)
        coord.on_batch_completed(batch(k))

        def reached(k: int = k) -> bool:
            return (coord.resume_point() or {}).get("batch_id") == k

        wait_for(reached)
    assert coord.accepted == 3


def test_events_of_other_queries_are_ignored(
    make: Callable[..., SnapshotCoordinator], tmp_path: Path
) -> None:
    coord = make(snapshot_period="50ms")
    write_checkpoint(tmp_path / "cp", 2)
    coord.watch(FakeQuery("q-1"))  # type: ignore[arg-type]
    coord.on_batch_completed(batch(2, query_id="another"))
    time.sleep(0.4)
    assert coord.accepted == 0 and coord.resume_point() is None


def request_with_bundle_13_in_flight(coord: SnapshotCoordinator, tmp_path: Path) -> None:
    """Batch 3 (epoch 13) completed while its bundle is still in flight; a snapshot is
    requested and given half a second (it must not be accepted before bundle 13 is acked)."""
    write_checkpoint(tmp_path / "cp", 3)
    put_barrier(coord, 12, inflight_batch=3)
    coord.watch(FakeQuery())  # type: ignore[arg-type]
    coord.on_batch_completed(batch(3))
    coord.request_snapshot()
    time.sleep(0.5)


def test_snapshot_waits_for_the_barrier_to_drain(
    make: Callable[..., SnapshotCoordinator], tmp_path: Path
) -> None:
    coord = make()
    request_with_bundle_13_in_flight(coord, tmp_path)
    assert coord.accepted == 0  # bundle 13 is still in flight
    assert coord.status()["inflight"]["epoch"] == 13
    put_barrier(coord, 13, inflight_batch=None)
    wait_for(lambda: coord.accepted == 1)
    assert coord.status()["gt_last"] == 13


def test_in_flight_bundle_after_the_epoch_does_not_block(
    make: Callable[..., SnapshotCoordinator], tmp_path: Path
) -> None:
    coord = make()
    write_checkpoint(tmp_path / "cp", 3)
    put_barrier(coord, 13, inflight_batch=4)
    coord.watch(FakeQuery())  # type: ignore[arg-type]
    coord.on_batch_completed(batch(3))
    point = coord.request_snapshot(wait="10s")
    assert point is not None and point["epoch"] == 13


def test_drain_timeout_abandons_and_keeps_the_previous_point(
    make: Callable[..., SnapshotCoordinator], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # Long enough for the upload on a loaded machine; the barrier never drains in it.
    coord = make(drain_timeout="3s")
    cp = write_checkpoint(tmp_path / "cp", 3)
    coord.watch(FakeQuery())  # type: ignore[arg-type]
    coord.on_batch_completed(batch(3))
    first = coord.request_snapshot(wait="10s")
    assert first is not None
    add_batch(cp, 4)
    put_barrier(coord, 13, inflight_batch=4)
    with caplog.at_level("WARNING", logger="state.coordinator"):
        coord.on_batch_completed(batch(4))
        coord.request_snapshot()
        wait_for(lambda: coord.abandoned == 1)
    assert "abandoned" in caplog.text and "epoch 13" in caplog.text
    assert "in flight" in (coord.status()["last_error"] or "")
    assert coord.resume_point() == first


def test_a_newer_driver_fences_this_one(
    make: Callable[..., SnapshotCoordinator], tmp_path: Path
) -> None:
    old = make()
    cp = write_checkpoint(tmp_path / "cp", 3)
    q = FakeQuery()
    old.watch(q)  # type: ignore[arg-type]
    assert old.fencing_token == 1
    new = make()
    assert new.fencing_token == 2  # the second driver takes the pipeline
    add_batch(cp, 4)
    old.on_batch_completed(batch(4))
    old.request_snapshot()
    wait_for(lambda: q.stopped == 1)  # the stale driver stops its query
    stop = old.take_stop_error()
    assert isinstance(stop, PipelineFenced) and not stop.retriable
    assert old.resume_point() is None  # nothing written by the zombie


def test_missing_commit_is_retried_with_the_next_batch(
    make: Callable[..., SnapshotCoordinator], tmp_path: Path
) -> None:
    coord = make(drain_timeout="500ms")
    cp = write_checkpoint(tmp_path / "cp", 3)
    coord.watch(FakeQuery())  # type: ignore[arg-type]
    coord.on_batch_completed(batch(4))  # commits/4 never appears (e.g. removed)
    coord.request_snapshot()
    wait_for(lambda: "not committed" in (coord.last_error or ""))
    add_batch(cp, 4)
    add_batch(cp, 5)
    coord.on_batch_completed(batch(5))
    wait_for(lambda: (coord.resume_point() or {}).get("batch_id") == 5)


@pytest.mark.parametrize(
    ("kwargs", "argument"),
    [
        ({"pipeline_id": "bad id!"}, "pipeline_id"),
        ({"state_uri": "ftp://x"}, "state_uri"),
        ({"state_uri": ""}, "state_uri"),
        ({"checkpoint_location": ""}, "checkpoint_location"),
        ({"checkpoint_location": "hdfs://nn/cp"}, "checkpoint_location"),
        ({"zookeeper_hosts": "no-port"}, "zookeeper_hosts"),
        ({"snapshot_period": "soon"}, "snapshot_period"),
        ({"snapshot_period": "0s"}, "snapshot_period"),
        ({"retain": 0}, "retain"),
        ({"drain_timeout": "-1s"}, "drain_timeout"),
        ({"reset_timeout": "x"}, "reset_timeout"),
        ({"driver_wait": "forever"}, "driver_wait"),
        ({"state_options": {"s3.bogus": "1"}}, "s3.bogus"),
    ],
)
def test_arguments_are_validated(kwargs: dict[str, Any], argument: str, tmp_path: Path) -> None:
    args: dict[str, Any] = {
        "pipeline_id": "p1",
        "state_uri": "memory://args",
        "checkpoint_location": tmp_path / "cp",
    }
    args.update(kwargs)
    with pytest.raises(ConfigError) as info:
        SnapshotCoordinator(None, **args)
    assert info.value.option == argument
    assert argument in str(info.value)


def test_durations_and_paths_are_parsed(tmp_path: Path) -> None:
    c = SnapshotCoordinator(
        None,
        "p1",
        "memory://parse",
        f"file://{tmp_path}/cp",
        "127.0.0.1:2181,127.0.0.2:2181/chroot",
        "500ms",
        2,
        "3m",
        90,
        driver_wait="1m",
    )
    assert (c.snapshot_period, c.drain_timeout, c.reset_timeout, c.driver_wait) == (
        0.5,
        180.0,
        90.0,
        60.0,
    )
    assert c.checkpoint == tmp_path / "cp"
    assert c.zookeeper_hosts == "127.0.0.1:2181,127.0.0.2:2181/chroot"


def test_close_does_not_wait_for_a_stuck_snapshot(
    make: Callable[..., SnapshotCoordinator], tmp_path: Path
) -> None:
    coord = make(drain_timeout="60s")
    request_with_bundle_13_in_flight(coord, tmp_path)
    started = time.monotonic()
    coord.close()
    assert time.monotonic() - started < 5
    assert coord.accepted == 0 and coord.resume_point() is None


def test_request_catches_up_with_the_query_progress(
    make: Callable[..., SnapshotCoordinator], tmp_path: Path
) -> None:
    coord = make()
    cp = write_checkpoint(tmp_path / "cp", 3)
    add_batch(cp, 4)
    q = FakeQuery()
    coord.watch(q)  # type: ignore[arg-type]
    coord.on_batch_completed(batch(3))
    # Batch 4 completed, but its listener event has not arrived yet.
    q.lastProgress = {
        "id": "q-1",
        "runId": "run-1",
        "batchId": 4,
        "numInputRows": 1,
        "batchDuration": 1,
        "sources": [{"description": "gtkafka", "endOffset": '{"epoch": 15, "offsets": {}}'}],
    }
    point = coord.request_snapshot(wait="10s")
    assert point is not None and point["batch_id"] == 4 and point["epoch"] == 14


def test_a_snapshot_of_the_old_version_is_not_accepted_into_a_new_generation(
    make: Callable[..., SnapshotCoordinator], tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A snapshot of version 1 is uploaded and waits for the barrier to
    drain; meanwhile the query is stopped and recover(mode="replay") starts generation 1.
    When the barrier drains, the old snapshot must not become generation 1's resume point."""
    coord = make()
    write_checkpoint(tmp_path / "cp", 3)
    put_barrier(coord, 12, inflight_batch=3)
    q = FakeQuery()
    coord.watch(q)  # type: ignore[arg-type]
    coord.on_batch_completed(batch(3))
    coord.request_snapshot()
    wait_for(lambda: coord.store.list("p1/snapshots/"))  # uploaded; waiting for bundle 13
    q.stop()
    with caplog.at_level("WARNING", logger="state.coordinator"):
        assert coord.recover(mode="replay").action == "fresh"
        put_barrier(coord, 13, inflight_batch=None)  # the barrier drains
        wait_for(lambda: coord.accepted + coord.abandoned == 1)
    point, _ = read_resume_point(coord.ownership.backend)
    assert point is not None and point.generation == 1
    assert point.snapshot is None, (
        f"version 1's snapshot {point.snapshot} was accepted into generation 1"
    )
    assert coord.accepted == 0 and coord.abandoned == 1
    assert "generation" in caplog.text and "abandoned" in caplog.text
    # The new version's own snapshots are accepted into generation 1.
    write_checkpoint(tmp_path / "cp", 0, query_id="q-2")
    coord.watch(FakeQuery("q-2"))  # type: ignore[arg-type]
    coord.on_batch_completed(batch(0, query_id="q-2", run_id="run-2"))
    new = coord.request_snapshot(wait="10s")
    assert new is not None and (new["generation"], new["batch_id"]) == (1, 0)


def test_the_pipeline_refuses_to_accept_into_another_generation(
    memory_uri: str, tmp_path: Path
) -> None:
    """The generation check in the snapshot pipeline itself: the generation is captured when
    the snapshot starts. A new generation written while it waits (by a recovery that did
    not cancel it) makes the acceptance refuse, even though this driver's lineage moved."""
    cp = write_checkpoint(tmp_path / "cp", 3)
    config = CoordinatorConfig.from_arguments("p1", memory_uri, cp, drain_timeout="10s")
    store = open_store(config.store)
    ownership = DriverOwnership(config, store)
    token = ownership.acquire()
    lineage = Lineage()
    pipeline = SnapshotPipeline(config, store, ownership, lineage)
    state = BarrierState(gt_last=12, inflight=InflightBundle(13, "q-1", 3, None, (), False, True))
    store.put_json(PipelineLayout("p1").barrier_state, state.to_json())
    outcome: list[BaseException | ResumePoint] = []

    def snapshot() -> None:
        try:
            outcome.append(pipeline.run(batch(3), closing=lambda: None)[1])
        except BaseException as err:
            outcome.append(err)

    thread = threading.Thread(target=snapshot)
    thread.start()
    wait_for(lambda: store.list("p1/snapshots/"))  # uploaded; waiting for bundle 13
    new_generation = advance_resume_point(
        ownership.backend,
        lambda current: ResumePoint.empty(generation=1, token=token, created_at=time.time()),
    )
    lineage.seen(new_generation)
    store.put_json(PipelineLayout("p1").barrier_state, BarrierState(gt_last=13).to_json())
    thread.join(10)
    point, _ = read_resume_point(ownership.backend)
    assert point is not None and point.generation == 1
    assert point.snapshot is None, (
        f"a generation-0 snapshot was accepted into generation 1: {point}"
    )
    assert isinstance(outcome[0], CoordinationError) and "generation" in str(outcome[0])


def test_a_store_failure_while_pruning_leaves_the_snapshot_accepted_and_prunes_after_the_next(
    memory_uri: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The snapshot is accepted before its retention runs: a store that fails the retention
    does not turn the accepted snapshot into a failed one; the next snapshot prunes."""
    cp = write_checkpoint(tmp_path / "cp", 3)
    config = CoordinatorConfig.from_arguments("p1", memory_uri, cp, drain_timeout="10s", retain=1)
    store = open_store(config.store)
    ownership = DriverOwnership(config, store)
    ownership.acquire()
    pipeline = SnapshotPipeline(config, store, ownership, Lineage())
    store.put_json(PipelineLayout("p1").barrier_state, BarrierState(gt_last=20).to_json())
    pipeline.run(batch(3), closing=lambda: None)
    listing = store.list

    def unavailable(prefix: str = "") -> list[str]:
        if prefix.startswith("p1/snapshots/"):
            raise StoreUnavailable(store.uri, prefix, "injected: no answer")
        return listing(prefix)

    monkeypatch.setattr(store, "list", unavailable)
    add_batch(cp, 4)
    with caplog.at_level(logging.WARNING):
        stats, point = pipeline.run(batch(4), closing=lambda: None)
    assert point.snapshot is not None and point.snapshot.snapshot_id == stats.snapshot_id == 2
    assert "tried after the next snapshot" in caplog.text
    assert {k.split("/")[2] for k in listing("p1/snapshots/")} == {f"{i:012d}" for i in (1, 2)}

    monkeypatch.setattr(store, "list", listing)
    add_batch(cp, 5)
    stats, _ = pipeline.run(batch(5), closing=lambda: None)
    assert {k.split("/")[2] for k in store.list("p1/snapshots/")} == {f"{stats.snapshot_id:012d}"}
