"""Snapshot packs: a snapshot stores the checkpoint files it is the first to need as one
object (a pack), so the store holds a handful of objects per pipeline however long it runs.

The contract (state/coordinator/snapshot/packs.py, docs/PROTOCOL.md "Snapshots"): every
file a manifest names lies, byte for byte, at its offset in a pack the manifest names; a
pack the new snapshot would use less than half of is not referenced, its files are copied
into the new pack; pruning deletes the packs no kept manifest names; a manifest of format 1
(a blob per file, written before packs) is still restored and its blobs kept.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from state.coordinator.snapshot.files import CheckpointFile
from state.coordinator.snapshot.packs import plan_packs
from state.coordinator.snapshot.restore import materialise
from state.coordinator.snapshot.retention import prune
from state.coordinator.snapshot.write import SnapshotWriter
from state.errors import SnapshotCorrupted
from state.layout import PipelineLayout
from state.records.manifest import Manifest, ManifestEntry, PackRef
from state.stores import StateStore
from tests.coordinator_fakes import add_batch, write_checkpoint, write_snapshot

LAYOUT = PipelineLayout("p1")
BLOBS = LAYOUT.snapshot_blobs_prefix


def _stored(store: StateStore) -> set[str]:
    return {k[len(BLOBS) :] for k in store.list(BLOBS)}


def _bytes_of(store: StateStore, entry: ManifestEntry) -> bytes:
    data = store.get(f"{BLOBS}{entry.blob}").data
    return data[entry.offset : entry.offset + entry.size]


def _spark_maintenance(cp: Path, k: int, *, every: int = 10, keep: int = 2) -> None:
    """What Spark's HDFS state store and its checkpoint cleaner do: every ``every`` versions
    a ``<v>.snapshot`` per partition, and files older than the last ``keep`` snapshots and
    offsets/commits older than 20 batches deleted."""
    version = k + 1
    for part in sorted((cp / "state" / "0").iterdir()):
        if not part.name.isdigit():
            continue
        if version % every == 0:
            (part / f"{version}.snapshot").write_bytes(
                f"snapshot {version} {part.name} ".encode() * 50
            )
        oldest = max(0, (version // every - keep + 1) * every)
        for f in part.iterdir():
            v = int(f.name.split(".")[0]) if f.name[0].isdigit() else None
            if v is not None and v < oldest:
                f.unlink()
    for sub in ("offsets", "commits"):
        for f in (cp / sub).iterdir():
            if f.name.isdigit() and int(f.name) < k - 20:
                f.unlink()


def test_a_snapshot_stores_its_new_files_as_one_pack(store: StateStore, tmp_path: Path) -> None:
    cp = write_checkpoint(tmp_path / "cp", 3)
    writer = SnapshotWriter(store, LAYOUT)
    first = write_snapshot(writer, cp, 3)
    assert [k.startswith("pack-") for k in _stored(store)] == [True]
    assert len(first.packs) == 1 and first.packs[0].name in _stored(store)
    add_batch(cp, 4)
    second = write_snapshot(writer, cp, 4)
    assert len(_stored(store)) == 2
    new_pack = next(p for p in second.packs if p not in first.packs)
    new_files = {"offsets/4", "state/0/0/5.delta", "state/0/1/5.delta"}  # commits/4 == commits/3
    assert {f.path for f in second.files if f.pack == new_pack.sha256} == new_files
    assert second.uploaded_files == len(new_files)
    assert second.uploaded_bytes == new_pack.size == sum((cp / p).stat().st_size for p in new_files)
    for m in (first, second):
        for entry in m.files:
            piece = _bytes_of(store, entry)
            assert piece == (cp / entry.path).read_bytes()
            assert hashlib.sha256(piece).hexdigest() == entry.sha256
    # Each pack is named by the SHA-256 of its bytes.
    for name in _stored(store):
        assert name == f"pack-{hashlib.sha256(store.get(f'{BLOBS}{name}').data).hexdigest()}"


def test_a_restarted_writer_references_the_stored_packs(store: StateStore, tmp_path: Path) -> None:
    cp = write_checkpoint(tmp_path / "cp", 3)
    first = write_snapshot(SnapshotWriter(store, LAYOUT), cp, 3)
    again = write_snapshot(SnapshotWriter(store, LAYOUT), cp, 3)
    assert again.uploaded_bytes == 0 and again.uploaded_files == 0
    assert again.packs == first.packs and again.files == first.files


def test_a_pack_the_snapshot_uses_less_than_half_of_is_copied_forward(
    store: StateStore, tmp_path: Path
) -> None:
    cp = write_checkpoint(tmp_path / "cp", 1)
    big = cp / "state" / "0" / "0" / "2.snapshot"
    big.write_bytes(b"x" * 50_000)
    writer = SnapshotWriter(store, LAYOUT)
    first = write_snapshot(writer, cp, 1)
    [old] = first.packs
    big.unlink()  # Spark's maintenance removed it: the old pack is now mostly dead
    add_batch(cp, 2)
    second = write_snapshot(writer, cp, 2)
    assert old not in second.packs and len(second.packs) == 1
    assert second.uploaded_files == len({f.sha256 for f in second.files})
    pruned, deleted = prune(store, LAYOUT, [second.snapshot_id], writer.manifests)
    assert pruned.snapshots == 1
    writer.forget_blobs(deleted)
    assert deleted == {old.name} and _stored(store) == {second.packs[0].name}
    add_batch(cp, 3)
    third = write_snapshot(writer, cp, 3)  # the moved files are referenced where they are now
    assert set(third.packs) >= set(second.packs) and len(third.packs) == 2
    target = tmp_path / "restored"
    materialise(store, LAYOUT, third, target)
    assert {f.path: (cp / f.path).read_bytes() for f in third.files} == {
        f.path: (target / f.path).read_bytes() for f in third.files
    }


def test_a_pack_holds_at_most_pack_bytes_unless_one_file_is_larger(
    store: StateStore, tmp_path: Path
) -> None:
    cp = write_checkpoint(tmp_path / "cp", 5)
    (cp / "state" / "0" / "0" / "6.snapshot").write_bytes(b"y" * 5_000)
    writer = SnapshotWriter(store, LAYOUT, pack_bytes=2_000)
    m = write_snapshot(writer, cp, 5)
    sizes = sorted(p.size for p in m.packs)
    assert len(m.packs) >= 3 and sizes[-1] == 5_000 and all(s <= 2_000 for s in sizes[:-1])
    for entry in m.files:
        assert _bytes_of(store, entry) == (cp / entry.path).read_bytes()


def test_objects_stay_a_handful_over_hundreds_of_snapshots(
    store: StateStore, tmp_path: Path
) -> None:
    cp = write_checkpoint(tmp_path / "cp", 0, partitions=8)
    writer = SnapshotWriter(store, LAYOUT)
    kept: list[int] = []
    most = 0
    for k in range(1, 301):
        add_batch(cp, k, partitions=8)
        _spark_maintenance(cp, k)
        if k % 3:
            continue
        m = write_snapshot(writer, cp, k)
        kept = [*kept, m.snapshot_id][-3:]
        _, deleted = prune(store, LAYOUT, kept, writer.manifests)
        writer.forget_blobs(deleted)
        most = max(most, len(_stored(store)))
        assert {b for sid in kept for b in writer.manifests[sid].blobs} == _stored(store)
    assert len(m.files) > 20  # a blob per file: more than that per snapshot
    assert most <= 8, most
    target = tmp_path / "restored"
    materialise(store, LAYOUT, m, target)
    assert all((target / f.path).read_bytes() == (cp / f.path).read_bytes() for f in m.files)


def test_bit_rot_inside_a_pack_names_the_file_and_keeps_the_target(
    store: StateStore, tmp_path: Path
) -> None:
    cp = write_checkpoint(tmp_path / "cp", 2)
    m = write_snapshot(SnapshotWriter(store, LAYOUT), cp, 2)
    victim = next(f for f in m.files if f.path == "offsets/2")
    key = f"{BLOBS}{victim.blob}"
    data = bytearray(store.get(key).data)
    data[victim.offset] ^= 0xFF
    store.put(key, bytes(data))
    target = write_checkpoint(tmp_path / "old", 0, query_id="old")
    before = {p: p.read_bytes() for p in target.rglob("*") if p.is_file()}
    with pytest.raises(SnapshotCorrupted, match=r"offsets/2") as info:
        materialise(store, LAYOUT, m, target)
    assert "commits/2" not in str(info.value)
    assert {p: p.read_bytes() for p in target.rglob("*") if p.is_file()} == before
    store.delete(key)
    with pytest.raises(SnapshotCorrupted, match=r"pack-[0-9a-f]{64} .*is missing"):
        materialise(store, LAYOUT, m, target)


def test_a_format1_snapshot_is_restored_and_its_blobs_kept(
    store: StateStore, tmp_path: Path
) -> None:
    """Written before packs: a blob per file, named by its SHA-256."""
    cp = write_checkpoint(tmp_path / "cp", 2)
    entries = []
    for path in ("commits/2", "metadata", "offsets/1", "offsets/2"):
        data = (cp / path).read_bytes()
        sha = hashlib.sha256(data).hexdigest()
        store.put(f"{BLOBS}{sha}", data)
        entries.append(ManifestEntry(path, len(data), sha))
    old = Manifest("p1", 4, 0, 1, 2, 12, {"epoch": 13}, "q-1", 1.0, tuple(entries))
    assert old.to_json()["format"] == 1
    store.create(f"{LAYOUT.snapshot(4)}manifest.json", old.to_bytes())
    target = tmp_path / "restored"
    done = materialise(store, LAYOUT, old, target)
    assert done.files == 4
    assert all((target / e.path).read_bytes() == (cp / e.path).read_bytes() for e in entries)
    # The next snapshot is packed; pruning keeps the old one's blobs while it is kept.
    writer = SnapshotWriter(store, LAYOUT)
    new = write_snapshot(writer, cp, 2)
    assert new.snapshot_id == 5 and new.packs
    _, deleted = prune(store, LAYOUT, [4, 5], writer.manifests)
    assert not deleted and {e.sha256 for e in entries} <= _stored(store)
    _, deleted = prune(store, LAYOUT, [5], writer.manifests)
    assert deleted == {e.sha256 for e in entries} and _stored(store) == new.blobs


# --- the plan, pure -------------------------------------------------------------------


def _file(path: str, size: int) -> CheckpointFile:
    return CheckpointFile(path, size, 0)


def test_plan_references_live_packs_and_groups_the_rest_in_path_order() -> None:
    live, dying = PackRef("a" * 64, 100), PackRef("b" * 64, 1_000)
    files = [
        (_file("x", 60), "1" * 64),  # 60 of live's 100 bytes: referenced
        (_file("y", 100), "2" * 64),  # 100 of dying's 1,000: copied forward
        (_file("z", 30), "3" * 64),
        (_file("w", 30), "3" * 64),  # the same content as z: stored once
        (_file("v", 70), "4" * 64),
    ]
    stored = {"1" * 64: (live, 40), "2" * 64: (dying, 0)}
    plan = plan_packs(files, stored, pack_bytes=150)
    assert plan.referenced == {"1" * 64: (live, 40)}
    # Distinct contents in the order of their first path, filled into packs of 150 bytes.
    assert plan.groups == [[("4" * 64, "v"), ("3" * 64, "w")], [("2" * 64, "y")]]
    assert plan_packs(files, stored, pack_bytes=1_000).groups == [
        [("4" * 64, "v"), ("3" * 64, "w"), ("2" * 64, "y")]
    ]


def test_the_writer_remembers_only_the_files_of_its_last_listing(
    store: StateStore, tmp_path: Path
) -> None:
    cp = write_checkpoint(tmp_path / "cp", 0)
    writer = SnapshotWriter(store, LAYOUT)
    for k in range(1, 40):
        add_batch(cp, k)
        _spark_maintenance(cp, k)
        m = write_snapshot(writer, cp, k)
    assert len(writer._hashes) == len(m.files)
