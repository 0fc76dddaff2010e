"""Snapshot retention decided from the resume point read after the acceptance
(:func:`decide_retention`, :func:`doomed`, pure), and :func:`prune` sparing what a newer
driver is writing."""

from __future__ import annotations

from pathlib import Path

import pytest

from state.coordinator.snapshot.retention import Retention, decide_retention, doomed, prune
from state.coordinator.snapshot.write import SnapshotWriter
from state.layout import PipelineLayout
from state.records.resume_point import ResumePoint, SnapshotRef
from state.stores import StateStore
from tests.coordinator_fakes import add_batch, write_checkpoint, write_snapshot

LAYOUT = PipelineLayout("p1")


def ref(sid: int) -> SnapshotRef:
    return SnapshotRef(sid, f"p1/snapshots/{sid:012d}/manifest.json", "ab" * 32, sid, sid)


def point(*sids: int, token: int = 3, generation: int = 0) -> ResumePoint:
    retained = tuple(ref(s) for s in sids)
    newest = retained[0].epoch if retained else 0
    return ResumePoint(generation, token, newest, newest, "q", None, 1.0, retained)


@pytest.mark.unit
def test_a_driver_prunes_only_from_its_own_point_in_its_own_generation() -> None:
    assert decide_retention(point(7, 6, 5), token=3, generation=0) == Retention(keep=(7, 6, 5))
    newer_driver = decide_retention(point(9, 8, 7, token=4), token=3, generation=0)
    assert newer_driver.keep == () and "fencing token 4" in str(newer_driver.skipped)
    newer_generation = decide_retention(point(9, generation=1), token=3, generation=0)
    assert newer_generation.keep == () and "generation 1" in str(newer_generation.skipped)
    assert decide_retention(None, token=3, generation=0).skipped == "there is no resume point"
    empty = decide_retention(point(generation=1), token=3, generation=1)
    assert empty.skipped == "the resume point retains no snapshot"


@pytest.mark.unit
def test_only_the_snapshots_below_the_oldest_retained_one_are_doomed() -> None:
    # 8 is between the retained ones (abandoned before its acceptance), 11 and 12 newer
    # (another driver writes or accepts them now): only 1 to 4 are never needed again.
    assert doomed({1, 2, 3, 4, 5, 7, 8, 9, 11, 12}, (9, 7, 5)) == [1, 2, 3, 4]
    assert doomed({1, 2, 3}, ()) == []
    assert doomed({4, 5}, (4,)) == []


def test_a_snapshot_newer_than_the_kept_ones_keeps_its_manifest_and_its_packs(
    store: StateStore, tmp_path: Path
) -> None:
    """A paused driver prunes while a newer driver has written snapshot 3 and not yet
    accepted it: 3 and every pack it names survive, and it restores."""
    cp = write_checkpoint(tmp_path / "cp", 1)
    ours = SnapshotWriter(store, LAYOUT)
    first = write_snapshot(ours, cp, 1)
    add_batch(cp, 2)
    second = write_snapshot(ours, cp, 2)
    add_batch(cp, 3)
    (cp / "state" / "0" / "0" / "9.snapshot").write_bytes(b"only the newer driver has it")
    newer = write_snapshot(SnapshotWriter(store, LAYOUT), cp, 3)
    assert newer.snapshot_id == 3 and newer.packs

    pruned, deleted = prune(store, LAYOUT, [second.snapshot_id], ours.manifests)

    heads = {k.split("/")[2] for k in store.list("p1/snapshots/")}
    assert heads == {f"{second.snapshot_id:012d}", f"{newer.snapshot_id:012d}"}
    assert pruned.snapshots == 1 and not store.list(f"p1/snapshots/{first.snapshot_id:012d}/")
    stored = {k.rsplit("/", 1)[1] for k in store.list("p1/snapshot-blobs/")}
    assert newer.blobs <= stored and second.blobs <= stored
    assert not (deleted & (newer.blobs | second.blobs))
