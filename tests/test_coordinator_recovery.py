"""recover(): the decision table and materialising with fallback to older snapshots."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from state.coordinator.checkpoint_recovery import (
    Decision,
    LocalCheckpoint,
    decide,
    read_marker,
    recover_checkpoint,
    write_marker,
)
from state.coordinator.snapshot.files import sha256_hex
from state.coordinator.snapshot.write import SnapshotWriter
from state.errors import SnapshotCorrupted
from state.layout import PipelineLayout
from state.records.checkpoint_marker import MARKER_FILE, CheckpointMarker
from state.records.manifest import Manifest
from state.records.resume_point import ResumePoint, SnapshotRef
from state.stores import StateStore
from tests.coordinator_fakes import add_batch, write_checkpoint

LAYOUT = PipelineLayout("p1")


def _snapshots(
    store: StateStore, cp: Path, batches: list[int], *, generation: int = 0
) -> ResumePoint:
    """Snapshots of ``batches`` (ascending) taken in ``generation``, and the resume point
    listing them newest first."""
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
            generation=generation,
            token=1,
            query_id="q-1",
        )
        key = writer.manifest_key(m.snapshot_id)
        refs.append(SnapshotRef(m.snapshot_id, key, sha256_hex(store.get(key).data), k + 10, k))
    newest = refs[-1]
    return ResumePoint(
        generation,
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


def _decide(point: ResumePoint | None, local: LocalCheckpoint, mode: str = "restore") -> Decision:
    return decide(point, local, mode, pipeline_id="p1")


def test_decision_table(tmp_path: Path) -> None:
    ref = SnapshotRef(1, "m", "s", 15, 5)
    snap = ResumePoint(0, 1, 15, 5, "q-1", None, 0.0, (ref,))
    missing = _local(tmp_path / "none")
    assert _decide(snap, missing, "replay").action == "fresh"
    assert _decide(None, missing).action == "keep"
    assert _decide(ResumePoint.empty(generation=1, token=1, created_at=0), missing).action == "keep"
    assert _decide(snap, missing).action == "materialise"
    (tmp_path / "empty").mkdir()
    assert _decide(snap, _local(tmp_path / "empty")).action == "materialise"
    older = write_checkpoint(tmp_path / "older", 3)
    assert _decide(snap, _local(older)).action == "materialise"
    same = write_checkpoint(tmp_path / "same", 5)
    assert _decide(snap, _local(same)).action == "keep"
    ahead = write_checkpoint(tmp_path / "ahead", 9)
    assert _decide(snap, _local(ahead)).action == "keep"
    other = write_checkpoint(tmp_path / "other", 9, query_id="another-query")
    d = _decide(snap, _local(other))
    assert d.action == "materialise" and "another-query" in d.reason


def _marked(path: Path, generation: int | None, *, pipeline: str = "p1") -> LocalCheckpoint:
    """A checkpoint after batch 9 of query q-1, marked with ``generation`` (None: no marker)."""
    write_checkpoint(path, 9)
    if generation is not None:
        write_marker(path, CheckpointMarker(pipeline, generation))
    return LocalCheckpoint.inspect(path)


@pytest.mark.parametrize(
    ("marker", "generation", "snapshot", "action"),
    [
        # Generation 0: a checkpoint without a marker predates the marker (kept as before).
        (None, 0, False, "keep"),
        (None, 0, True, "keep"),
        (0, 0, False, "keep"),
        (0, 0, True, "keep"),
        # A new generation (mode="replay" happened): only its own checkpoint is used.
        (None, 1, False, "fresh"),
        (None, 1, True, "materialise"),
        (0, 1, False, "fresh"),
        (0, 1, True, "materialise"),
        (1, 1, False, "keep"),
        (1, 1, True, "keep"),
        (2, 1, False, "fresh"),
        (2, 1, True, "materialise"),
        # No resume point at all: generation 0.
        (None, None, False, "keep"),
        (0, None, False, "keep"),
        (1, None, False, "fresh"),
    ],
)
def test_decision_table_with_generation_markers(
    tmp_path: Path, marker: int | None, generation: int | None, snapshot: bool, action: str
) -> None:
    local = _marked(tmp_path / "cp", marker)
    point: ResumePoint | None = None
    if generation is not None:
        refs = (SnapshotRef(1, "m", "s", 15, 5),) if snapshot else ()
        point = ResumePoint(generation, 1, 15, 5, "q-1", None, 0.0, refs)
    d = _decide(point, local)
    assert d.action == action, d.reason
    if action != "keep":
        assert "generation" in d.reason
    # mode="replay" always starts fresh, marker or not.
    assert _decide(point, local, "replay").action == "fresh"


def test_markers_of_another_pipeline_or_unreadable_are_foreign(tmp_path: Path) -> None:
    snap = ResumePoint(0, 1, 15, 5, "q-1", None, 0.0, (SnapshotRef(1, "m", "s", 15, 5),))
    other = _marked(tmp_path / "other", 0, pipeline="another-pipeline")
    d = _decide(snap, other)
    assert d.action == "materialise" and "another-pipeline" in d.reason
    assert _decide(None, other).action == "fresh"
    broken = write_checkpoint(tmp_path / "broken", 9)
    (broken / MARKER_FILE).write_text('{"generation": "one"}')
    local = LocalCheckpoint.inspect(broken)
    assert local.marker is None and "generation marker" in (local.marker_error or "")
    d = _decide(snap, local)
    assert d.action == "materialise" and "unreadable" in d.reason
    # An empty directory holds nothing to reuse, whatever its marker says.
    (tmp_path / "empty").mkdir()
    write_marker(tmp_path / "empty", CheckpointMarker("p1", 7))
    assert _decide(None, _local(tmp_path / "empty")).action == "keep"


def test_materialise_into_a_new_directory(store: StateStore, tmp_path: Path) -> None:
    cp = write_checkpoint(tmp_path / "cp", 2)
    point = _snapshots(store, cp, [2, 4])
    target = tmp_path / "host2" / "cp"
    result = recover_checkpoint(store, LAYOUT, point, target, "restore")
    assert result.action == "materialise" and result.batch_id == 4 and result.epoch == 14
    assert result.files == len(
        list(p for p in target.rglob("*") if p.is_file() and p.name != MARKER_FILE)
    )
    assert read_marker(target) == CheckpointMarker("p1", 0)
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
    with caplog.at_level("WARNING", logger="state.coordinator.checkpoint_recovery"):
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
    _snapshots(store, cp, [3])
    new_generation = ResumePoint.empty(generation=1, token=2, created_at=1.0)
    result = recover_checkpoint(store, LAYOUT, new_generation, cp, "replay")
    assert result.action == "fresh" and LocalCheckpoint.inspect(cp).empty
    assert [p.name for p in cp.iterdir()] == [MARKER_FILE]
    assert read_marker(cp) == CheckpointMarker("p1", 1)


def test_keep_when_no_snapshot(store: StateStore, tmp_path: Path) -> None:
    cp = write_checkpoint(tmp_path / "cp", 3)
    result = recover_checkpoint(store, LAYOUT, None, cp, "restore")
    assert result.action == "keep" and LocalCheckpoint.inspect(cp).last_committed == 3
    assert read_marker(cp) == CheckpointMarker("p1", 0)  # marked for the next recovery


def test_keep_creates_a_marked_directory(store: StateStore, tmp_path: Path) -> None:
    """A new host without a snapshot: the directory Spark will use is created, marked with
    the generation, so that a restart on it later keeps it."""
    cp = tmp_path / "new-host" / "cp"
    point = ResumePoint.empty(generation=2, token=3, created_at=1.0)
    assert recover_checkpoint(store, LAYOUT, point, cp, "restore").action == "keep"
    assert read_marker(cp) == CheckpointMarker("p1", 2)
    write_checkpoint(cp, 4)  # the query ran on it
    result = recover_checkpoint(store, LAYOUT, point, cp, "restore")
    assert result.action == "keep" and LocalCheckpoint.inspect(cp).last_committed == 4


def test_a_new_generation_materialises_its_snapshot_over_an_old_checkpoint(
    store: StateStore, tmp_path: Path
) -> None:
    """Generation 1 has a snapshot of batch 2; the old version's checkpoint (generation 0,
    same query id, further on) is not kept, and neither is it as the fallback."""
    new = write_checkpoint(tmp_path / "v2", 2)
    point = _snapshots(store, new, [2], generation=1)
    old = _marked(tmp_path / "v1", 0).path
    result = recover_checkpoint(store, LAYOUT, point, old, "restore")
    assert result.action == "materialise" and "generation 0" in result.reason
    assert LocalCheckpoint.inspect(old).last_committed == 2
    assert read_marker(old) == CheckpointMarker("p1", 1)
    # Unusable snapshot: the foreign checkpoint is not kept as the fallback.
    store.put(point.retained[0].manifest, b"garbage")
    old = _marked(tmp_path / "v1-again", 0).path
    with pytest.raises(SnapshotCorrupted):
        recover_checkpoint(store, LAYOUT, point, old, "restore")


def test_a_new_generation_does_not_keep_the_old_versions_checkpoint(
    store: StateStore, tmp_path: Path
) -> None:
    """After recover(mode="replay") on another host, the resume point is
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


def test_a_snapshot_of_another_generation_is_not_materialised(
    store: StateStore, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A resume point of generation 1 that lists a snapshot taken in generation 0 (accepted
    into the wrong generation): that snapshot is skipped."""
    cp = write_checkpoint(tmp_path / "cp", 1)
    point = _snapshots(store, cp, [1, 3], generation=1)
    stray = _snapshots(store, cp, [5], generation=0).retained[0]
    point = dataclasses.replace(point, retained=(stray, *point.retained))
    with caplog.at_level("WARNING", logger="state.coordinator.checkpoint_recovery"):
        result = recover_checkpoint(store, LAYOUT, point, tmp_path / "t", "restore")
    assert result.batch_id == 3 and "taken in generation 0" in result.skipped[0]
