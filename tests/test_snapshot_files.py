"""Which checkpoint files a snapshot of batch N copies (pure rules + directory listing)."""

from __future__ import annotations

from pathlib import Path

import pytest

from state.coordinator.snapshot.files import checkpoint_files, wanted
from state.errors import SnapshotIncomplete
from tests.coordinator_fakes import add_batch, write_checkpoint


@pytest.mark.parametrize(
    ("path", "batch", "expected"),
    [
        ("metadata", 5, True),
        ("offsets/5", 5, True),
        ("offsets/4", 5, True),  # where batch 5 starts
        ("offsets/3", 5, False),
        ("offsets/6", 5, False),
        ("commits/4", 5, True),
        ("commits/3", 5, False),
        ("commits/6", 5, False),
        ("offsets/.5.crc", 5, False),
        ("offsets/.5.tmp", 5, False),
        ("sources/0/0", 5, True),
        # HDFS-backed store: version v is the state after batch v - 1.
        ("state/0/1/6.delta", 5, True),
        ("state/0/1/7.delta", 5, False),
        ("state/0/1/6.snapshot", 5, True),
        ("state/0/1/9.snapshot", 5, False),
        # RocksDB store, checkpoint format 1 and 2, changelog checkpointing.
        ("state/0/0/6.zip", 5, True),
        ("state/0/0/7.zip", 5, False),
        ("state/0/0/6_0b1c2d3e-aaaa-bbbb-cccc-0123456789ab.zip", 5, True),
        ("state/0/0/7_0b1c2d3e-aaaa-bbbb-cccc-0123456789ab.zip", 5, False),
        ("state/0/0/6.changelog", 5, True),
        ("state/0/0/SSTs/000123-5f1c0b7e-1111-2222-3333-444455556666.sst", 5, True),
        ("state/0/0/logs/000009-abc.log", 5, True),
        # Operator metadata and schemas keyed by batch id.
        ("state/0/_metadata/metadata", 5, True),
        ("state/0/0/_metadata/schema", 5, True),
        ("state/0/_metadata/v2/5", 5, True),
        ("state/0/_metadata/v2/6", 5, False),
        ("state/0/_stateSchema/default/0_1234abcd", 5, True),
        ("state/0/_stateSchema/default/7_1234abcd", 5, False),
        # Hidden directories (a write in progress) are never copied.
        ("state/0/.tmp/6.delta", 5, False),
    ],
)
def test_wanted(path: str, batch: int, expected: bool) -> None:
    assert wanted(path, batch) is expected


def test_listing_takes_batch_files_and_leaves_later_ones(tmp_path: Path) -> None:
    cp = write_checkpoint(tmp_path / "cp", 4)
    add_batch(cp, 5)  # a later batch already ran while the snapshot of batch 4 is taken
    (cp / "offsets" / "6").write_text("in progress")  # planned, not committed
    files = {f.path: f for f in checkpoint_files(cp, 4)}
    assert "offsets/4" in files and "commits/4" in files
    assert "offsets/5" not in files and "offsets/6" not in files and "commits/5" not in files
    assert "state/0/0/5.delta" in files and "state/0/0/6.delta" not in files
    assert not [p for p in files if "/." in p or p.startswith(".")]
    assert files["metadata"].size == (cp / "metadata").stat().st_size
    assert list(files) == sorted(files)


def test_missing_commit_means_incomplete(tmp_path: Path) -> None:
    cp = write_checkpoint(tmp_path / "cp", 3)
    with pytest.raises(SnapshotIncomplete, match="batch 4 is not committed"):
        checkpoint_files(cp, 4)
    (cp / "offsets" / "3").unlink()  # deleted by Spark's retention
    with pytest.raises(SnapshotIncomplete, match="offsets/3"):
        checkpoint_files(cp, 3)


def test_an_hdfs_state_store_is_copied_from_its_newest_snapshot_on(tmp_path: Path) -> None:
    cp = write_checkpoint(tmp_path / "cp", 30)
    part0, part1 = cp / "state/0/0", cp / "state/0/1"
    (part0 / "20.snapshot").write_text("state after version 20")  # maintenance wrote it
    (part0 / "12.snapshot").write_text("state after version 12")
    (part0 / "40.snapshot").write_text("a later batch's")  # after the snapshot's batch

    files = [f.path for f in checkpoint_files(cp, 30)]

    # partition 0: the newest snapshot at or below version 31, and the deltas after it
    assert [p for p in files if p.startswith("state/0/0/")] == sorted(
        ["state/0/0/20.snapshot", *(f"state/0/0/{v}.delta" for v in range(21, 32))]
    )
    # partition 1 has no snapshot: every delta up to version 31
    assert len([p for p in files if p.startswith("state/0/1/")]) == 31
    assert part1.exists()
    # the last two offsets and commits, Spark's operator metadata, the query's metadata
    assert [p for p in files if p.startswith(("offsets/", "commits/"))] == [
        "commits/29",
        "commits/30",
        "offsets/29",
        "offsets/30",
    ]
    assert "state/0/_metadata/metadata" in files and "metadata" in files
