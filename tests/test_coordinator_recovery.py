"""recover(): the decision table and materialising with fallback to older snapshots."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from state.errors import SnapshotCorrupted
from state.layout import PipelineLayout
from state.memory_store import reset_memory_stores
from state.records.manifest import Manifest
from state.records.resume_point import ResumePoint, SnapshotRef
from state.recovery import LocalCheckpoint, decide, recover_checkpoint
from state.snapshot import SnapshotWriter, sha256_hex
from state.store import StateStore, open_store
from tests.coordinator_fakes import add_batch, write_checkpoint

pytestmark = pytest.mark.unit

LAYOUT = PipelineLayout("p1")


@pytest.fixture
def store() -> Iterator[StateStore]:
    yield open_store(f"memory://recovery-{uuid.uuid4().hex}")
    reset_memory_stores()


def _snapshots(store: StateStore, cp: Path, batches: list[int]) -> ResumePoint:
    """Snapshots of ``batches`` (ascending) and the resume point listing them newest first."""
    writer = SnapshotWriter(store, LAYOUT)
    refs = []
    for k in batches:
        while not (cp / "commits" / str(k)).exists():
            last = max(int(p.name) for p in (cp / "commits").iterdir() if p.name.isdigit())
            add_batch(cp, last + 1)
        m: Manifest = writer.write(
            cp,
            batch_id=k,
            epoch=k + 10,
            frontier={"epoch": k + 11},
            generation=0,
            token=1,
            query_id="q-1",
        )
        key = writer.manifest_key(m.snapshot_id)
        refs.append(SnapshotRef(m.snapshot_id, key, sha256_hex(store.get(key).data), k + 10, k))
    newest = refs[-1]
    return ResumePoint(
        0,
        1,
        newest.epoch,
        newest.batch_id,
        "q-1",
        {"epoch": newest.epoch + 1},
        1.0,
        tuple(reversed(refs)),
    )


def _local(path: Path) -> LocalCheckpoint:
    return LocalCheckpoint.inspect(path)


def test_decision_table(tmp_path: Path) -> None:
    ref = SnapshotRef(1, "m", "s", 15, 5)
    snap = ResumePoint(0, 1, 15, 5, "q-1", None, 0.0, (ref,))
    missing = _local(tmp_path / "none")
    assert decide(snap, missing, "replay").action == "fresh"
    assert decide(None, missing, "restore").action == "keep"
    assert (
        decide(ResumePoint.empty(generation=1, token=1, created_at=0), missing, "restore").action
        == "keep"
    )
    assert decide(snap, missing, "restore").action == "materialise"
    (tmp_path / "empty").mkdir()
    assert decide(snap, _local(tmp_path / "empty"), "restore").action == "materialise"
    older = write_checkpoint(tmp_path / "older", 3)
    assert decide(snap, _local(older), "restore").action == "materialise"
    same = write_checkpoint(tmp_path / "same", 5)
    assert decide(snap, _local(same), "restore").action == "keep"
    ahead = write_checkpoint(tmp_path / "ahead", 9)
    assert decide(snap, _local(ahead), "restore").action == "keep"
    other = write_checkpoint(tmp_path / "other", 9, query_id="another-query")
    d = decide(snap, _local(other), "restore")
    assert d.action == "materialise" and "another-query" in d.reason


def test_materialise_into_a_new_directory(store: StateStore, tmp_path: Path) -> None:
    cp = write_checkpoint(tmp_path / "cp", 2)
    point = _snapshots(store, cp, [2, 4])
    target = tmp_path / "host2" / "cp"
    result = recover_checkpoint(store, LAYOUT, point, target, "restore")
    assert result.action == "materialise" and result.batch_id == 4 and result.epoch == 14
    assert result.files == len(list(p for p in target.rglob("*") if p.is_file()))
    assert LocalCheckpoint.inspect(target).last_committed == 4
    assert (target / "state/0/0/5.delta").read_bytes() == (cp / "state/0/0/5.delta").read_bytes()
    assert not (target / "state/0/0/6.delta").exists()


def test_corrupted_manifest_falls_back_to_previous_snapshot(
    store: StateStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    cp = write_checkpoint(tmp_path / "cp", 1)
    point = _snapshots(store, cp, [1, 3, 5])
    newest = point.retained[0]
    store.put(
        newest.manifest, store.get(newest.manifest).data.replace(b'"epoch":15', b'"epoch":16')
    )
    target = tmp_path / "t"
    with caplog.at_level("WARNING", logger="state.recovery"):
        result = recover_checkpoint(store, LAYOUT, point, target, "restore")
    assert result.batch_id == 3 and result.snapshot == point.retained[1]
    assert len(result.skipped) == 1 and "SHA-256" in result.skipped[0]
    assert "trying the previous retained snapshot" in caplog.text
    assert LocalCheckpoint.inspect(target).last_committed == 3


def test_every_snapshot_corrupted_is_an_error(store: StateStore, tmp_path: Path) -> None:
    cp = write_checkpoint(tmp_path / "cp", 1)
    point = _snapshots(store, cp, [1, 2])
    for ref in point.retained:
        store.put(ref.manifest, b"{}")
    with pytest.raises(SnapshotCorrupted, match="mode='replay'"):
        recover_checkpoint(store, LAYOUT, point, tmp_path / "t", "restore")
    assert not (tmp_path / "t").exists()


def test_fallback_keeps_a_local_checkpoint_past_the_older_snapshot(
    store: StateStore, tmp_path: Path
) -> None:
    cp = write_checkpoint(tmp_path / "cp", 1)
    point = _snapshots(store, cp, [2, 6])
    store.put(point.retained[0].manifest, b"garbage")
    local = write_checkpoint(tmp_path / "local", 4)  # older than 6, newer than 2
    result = recover_checkpoint(store, LAYOUT, point, local, "restore")
    assert result.action == "keep" and "past snapshot" in result.reason
    assert LocalCheckpoint.inspect(local).last_committed == 4


def test_replay_mode_removes_the_old_checkpoint(store: StateStore, tmp_path: Path) -> None:
    cp = write_checkpoint(tmp_path / "cp", 3)
    point = _snapshots(store, cp, [3])
    result = recover_checkpoint(store, LAYOUT, point, cp, "replay")
    assert result.action == "fresh" and not cp.exists()


def test_keep_when_no_snapshot(store: StateStore, tmp_path: Path) -> None:
    cp = write_checkpoint(tmp_path / "cp", 3)
    result = recover_checkpoint(store, LAYOUT, None, cp, "restore")
    assert result.action == "keep" and LocalCheckpoint.inspect(cp).last_committed == 3


def test_a_new_generation_does_not_keep_the_old_versions_checkpoint(
    store: StateStore, tmp_path: Path
) -> None:
    """Issue 10, finding 4: after recover(mode="replay") on another host, the resume point is
    generation 1 without a snapshot; this host still holds version 1's checkpoint (generation
    0). Restoring must not resume version 1's offsets and state."""
    old_version = write_checkpoint(tmp_path / "host-a" / "cp", 3, query_id="version-1")
    new_generation = ResumePoint.empty(generation=1, token=2, created_at=1.0)
    result = recover_checkpoint(store, LAYOUT, new_generation, old_version, "restore")
    local = LocalCheckpoint.inspect(old_version)
    assert (local.query_id, local.last_committed) == (None, None), (
        f"version 1's checkpoint (query {local.query_id}, batch {local.last_committed}) was "
        f"kept for generation 1: {result}"
    )
    assert result.action == "fresh" and "generation" in result.reason
