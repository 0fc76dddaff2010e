"""recover() and recover_async(): a cancellable future, bounded by reset_timeout in recover()."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gtbarrier import SnapshotCoordinator
from state.coordinator.checkpoint_recovery import LocalCheckpoint
from state.errors import ConfigError, CoordinationError, SnapshotIncomplete
from state.stores import StoreConfig, Versioned
from state.stores.memory_store import MemoryStore, reset_memory_stores
from tests.coordinator_fakes import FakeQuery, batch, fake_spark, write_checkpoint


class GatedStore(MemoryStore):
    """A memory store whose reads of some keys hang until ``gate`` opens (an S3 endpoint
    that stopped answering)."""

    def __init__(self, uri: str, blocks: Callable[[str], bool]) -> None:
        super().__init__(StoreConfig(uri))
        self.blocks = blocks
        self.gate = threading.Event()
        self.entered = threading.Event()

    def get(self, key: str) -> Versioned:
        if self.blocks(key):
            self.entered.set()
            self.gate.wait(30)
        return super().get(key)


@pytest.fixture
def uri() -> Iterator[str]:
    yield f"memory://recover-{uuid.uuid4().hex}"
    _join_recoveries()
    reset_memory_stores()


def _join_recoveries() -> None:
    for t in threading.enumerate():
        if t.name == "gtbarrier-recover":
            t.join(10)


def _snapshot_of_batch_3(uri: str, cp: Path) -> None:
    write_checkpoint(cp, 3)
    with SnapshotCoordinator(fake_spark(), "p1", uri, cp, snapshot_period="1h") as first:
        first.watch(FakeQuery())  # type: ignore[arg-type]
        first.on_batch_completed(batch(3))
        assert first.request_snapshot(wait="10s") is not None


def test_recover_returns_the_result_and_records_it(uri: str, tmp_path: Path) -> None:
    _snapshot_of_batch_3(uri, tmp_path / "cp")
    with SnapshotCoordinator(None, "p1", uri, tmp_path / "host2") as coord:
        result = coord.recover()
        assert result.action == "materialise" and result.batch_id == 3
        assert coord.last_recovery == result
        assert coord.fencing_token == 2  # recover() took the pipeline
        again = coord.recover_async().result(10)
        assert again.action == "keep" and coord.last_recovery == again
        with pytest.raises(ConfigError, match="mode"):
            coord.recover_async("rewind")


def test_recover_expires_at_reset_timeout_naming_the_step(uri: str, tmp_path: Path) -> None:
    store = GatedStore(uri, blocks=lambda key: True)
    with SnapshotCoordinator(
        None, "p1", uri, tmp_path / "cp", reset_timeout="200ms", store=store
    ) as coord:
        with pytest.raises(CoordinationError) as info:
            coord.recover()
        assert str(info.value) == (
            "recover() of pipeline 'p1' did not finish within reset_timeout=0.2s while "
            f"taking the fencing token in the state store {uri}"
        )
        assert coord.last_recovery is None
        store.gate.set()
        _join_recoveries()
        assert coord.last_recovery is None  # it finished, but too late to count


def test_a_cancelled_recovery_leaves_the_checkpoint_alone(uri: str, tmp_path: Path) -> None:
    _snapshot_of_batch_3(uri, tmp_path / "cp")
    store = GatedStore(uri, blocks=lambda key: "/snapshot-blobs/" in key)
    with SnapshotCoordinator(None, "p1", uri, tmp_path / "host2", store=store) as coord:
        future = coord.recover_async()
        assert store.entered.wait(10)  # materialising: downloading blobs
        assert future.cancel() is False  # running: it is asked to stop instead
        store.gate.set()
        with pytest.raises(SnapshotIncomplete, match="cancelled"):
            future.result(10)
        assert not (tmp_path / "host2").exists() and coord.last_recovery is None


def test_failover_after_a_replay_does_not_resume_the_old_version(uri: str, tmp_path: Path) -> None:
    """A failover after a replay, with coordinators: version 1 runs on host A; version 2 starts
    with mode="replay" on host B (a new generation, no snapshot yet) and then fails over
    back to host A, whose checkpoint still is version 1's."""
    host_a, host_b = tmp_path / "host-a" / "cp", tmp_path / "host-b" / "cp"
    with SnapshotCoordinator(None, "p1", uri, host_a) as v1:
        assert v1.recover().action == "keep"
        write_checkpoint(host_a, 3, query_id="version-1")  # version 1 ran batches 0..3
    with SnapshotCoordinator(None, "p1", uri, host_b) as v2:
        assert v2.recover(mode="replay").action == "fresh"
        write_checkpoint(host_b, 1, query_id="version-2")
    with SnapshotCoordinator(None, "p1", uri, host_a) as failover:
        result = failover.recover()
    local = LocalCheckpoint.inspect(host_a)
    assert local.query_id != "version-1", (
        f"version 2 would resume version 1's checkpoint (batch {local.last_committed}): {result}"
    )
    assert result.action == "fresh" and local.empty
    # Version 2's own checkpoint, on host B, is still kept by a plain restart.
    with SnapshotCoordinator(None, "p1", uri, host_b) as restart:
        again = restart.recover()
    assert again.action == "keep" and LocalCheckpoint.inspect(host_b).query_id == "version-2"
