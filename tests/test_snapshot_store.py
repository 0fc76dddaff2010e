"""Snapshots in a store: incremental content-addressed upload, manifest checks, restore, prune."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from state.coordinator.snapshot.files import sha256_hex
from state.coordinator.snapshot.restore import load_manifest, materialise
from state.coordinator.snapshot.retention import prune
from state.coordinator.snapshot.write import SnapshotWriter
from state.errors import SnapshotCorrupted, SnapshotIncomplete
from state.layout import PipelineLayout
from state.stores import StateStore
from tests.coordinator_fakes import add_batch, write_checkpoint, write_snapshot

LAYOUT = PipelineLayout("p1")


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def test_incremental_upload_references_known_blobs(store: StateStore, tmp_path: Path) -> None:
    cp = write_checkpoint(tmp_path / "cp", 3)
    writer = SnapshotWriter(store, LAYOUT)
    first = write_snapshot(writer, cp, 3)
    assert first.snapshot_id == 1
    unique = {f.sha256: f.size for f in first.files}  # equal contents are stored once
    assert first.uploaded_bytes == sum(unique.values()) > 0
    assert first.uploaded_files == len(unique) < len(first.files)
    add_batch(cp, 4)
    second = write_snapshot(writer, cp, 4)
    assert second.snapshot_id == 2
    new_files = {"offsets/4", "state/0/0/5.delta", "state/0/1/5.delta"}  # commits/4 == commits/3
    assert second.uploaded_files == len(new_files)
    assert second.uploaded_bytes == sum((cp / p).stat().st_size for p in new_files)
    # Another writer (a restarted coordinator) learns the stored blobs from the store.
    third = write_snapshot(SnapshotWriter(store, LAYOUT), cp, 4)
    assert third.uploaded_bytes == 0 and third.snapshot_id == 3
    # Every manifest entry names a pack holding exactly that file at its offset.
    for entry in second.files:
        pack = store.get(f"p1/snapshot-blobs/{entry.blob}").data
        piece = pack[entry.offset : entry.offset + entry.size]
        assert piece == (cp / entry.path).read_bytes()
        assert hashlib.sha256(piece).hexdigest() == entry.sha256


def test_manifest_round_trip_and_checksum(store: StateStore, tmp_path: Path) -> None:
    cp = write_checkpoint(tmp_path / "cp", 2)
    writer = SnapshotWriter(store, LAYOUT)
    m = write_snapshot(writer, cp, 2)
    key = writer.manifest_key(m.snapshot_id)
    data = store.get(key).data
    assert data == m.to_bytes()
    again = load_manifest(store, key, sha256_hex(data))
    assert again.files == m.files and again.batch_id == 2 and again.epoch == 12
    store.put(key, data.replace(b'"batch_id":2', b'"batch_id":1'))  # tampered
    with pytest.raises(SnapshotCorrupted, match="SHA-256"):
        load_manifest(store, key, sha256_hex(data))
    store.put(key, b"{not json")
    with pytest.raises(SnapshotCorrupted, match="malformed"):
        load_manifest(store, key, None)
    with pytest.raises(SnapshotCorrupted, match="does not exist"):
        load_manifest(store, "p1/snapshots/000000000099/manifest.json", None)


def test_file_vanishing_mid_copy_relists_then_gives_up(
    store: StateStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cp = write_checkpoint(tmp_path / "cp", 3)
    writer = SnapshotWriter(store, LAYOUT)
    import state.coordinator.snapshot.write as snapshot_mod

    real_read = snapshot_mod._read
    calls = {"n": 0}

    def flaky_read(path: Path) -> bytes:
        # Spark's maintenance deletes an old delta between listing and reading, once.
        if path.name == "1.delta" and calls["n"] == 0:
            calls["n"] += 1
            path.unlink()
            raise FileNotFoundError(2, "No such file", str(path))
        return real_read(path)

    monkeypatch.setattr(snapshot_mod, "_read", flaky_read)
    m = write_snapshot(writer, cp, 3)  # the second listing no longer has the file
    assert "state/0/0/1.delta" not in {f.path for f in m.files}

    def always_gone(path: Path) -> bytes:
        raise FileNotFoundError(2, "No such file", str(path))

    monkeypatch.setattr(snapshot_mod, "_read", always_gone)
    add_batch(cp, 4)
    with pytest.raises(SnapshotIncomplete, match="vanished"):
        write_snapshot(SnapshotWriter(store, LAYOUT), cp, 4)


def test_materialise_restores_exact_files(store: StateStore, tmp_path: Path) -> None:
    cp = write_checkpoint(tmp_path / "cp", 3)
    add_batch(cp, 4)
    m = write_snapshot(SnapshotWriter(store, LAYOUT), cp, 3)
    target = tmp_path / "new-host" / "cp"
    done = materialise(store, LAYOUT, m, target)
    restored = _tree(target)
    assert done.files == len(m.files) == len(restored)
    assert restored == {f.path: (cp / f.path).read_bytes() for f in m.files}
    assert "commits/4" not in restored
    assert [p.name for p in target.parent.iterdir()] == ["cp"]  # no staging left behind


def test_materialise_rejects_corrupt_blob_and_keeps_target(
    store: StateStore, tmp_path: Path
) -> None:
    cp = write_checkpoint(tmp_path / "cp", 2)
    m = write_snapshot(SnapshotWriter(store, LAYOUT), cp, 2)
    victim = next(f for f in m.files if f.path == "offsets/2")
    store.put(f"p1/snapshot-blobs/{victim.blob}", b"bit rot")
    target = write_checkpoint(tmp_path / "old", 0, query_id="old")
    before = _tree(target)
    with pytest.raises(
        SnapshotCorrupted,
        match=r"does not hold commits/1, commits/2, metadata, offsets/1, offsets/2 and 8 more",
    ):
        materialise(store, LAYOUT, m, target)
    assert _tree(target) == before
    store.delete(f"p1/snapshot-blobs/{victim.blob}")
    with pytest.raises(SnapshotCorrupted, match="missing"):
        materialise(store, LAYOUT, m, target)


def test_materialise_cancelled_leaves_target(store: StateStore, tmp_path: Path) -> None:
    cp = write_checkpoint(tmp_path / "cp", 2)
    m = write_snapshot(SnapshotWriter(store, LAYOUT), cp, 2)
    target = tmp_path / "t"
    with pytest.raises(SnapshotIncomplete, match="cancelled"):
        materialise(store, LAYOUT, m, target, cancelled=lambda: True)
    assert not target.exists()


def test_prune_keeps_retained_and_their_blobs(store: StateStore, tmp_path: Path) -> None:
    cp = write_checkpoint(tmp_path / "cp", 1)
    writer = SnapshotWriter(store, LAYOUT)
    manifests = [write_snapshot(writer, cp, 1)]
    for k in (2, 3):
        add_batch(cp, k)
        manifests.append(write_snapshot(writer, cp, k))
    # Spark dropped old files meanwhile: later snapshots no longer reference them.
    for k in (1, 2):
        (cp / "offsets" / str(k)).unlink()
        (cp / "commits" / str(k)).unlink()
    for v in (1, 2, 3):
        for part in (0, 1):
            (cp / "state" / "0" / str(part) / f"{v}.delta").unlink()
    for k in (4, 5):
        add_batch(cp, k)
        manifests.append(write_snapshot(writer, cp, k))
    keep = [manifests[-1].snapshot_id, manifests[-2].snapshot_id]
    pruned, deleted = prune(store, LAYOUT, keep)
    assert pruned.snapshots == 3
    left = {k.split("/")[2] for k in store.list("p1/snapshots/")}
    assert left == {f"{i:012d}" for i in keep}
    referenced = {name for m in manifests[-2:] for name in m.blobs}
    blobs = {k.rsplit("/", 1)[1] for k in store.list("p1/snapshot-blobs/")}
    assert blobs == referenced
    assert deleted and not (deleted & referenced)
    writer.forget_blobs(deleted)
    # A later snapshot re-uploads a deleted blob if a file needs it again.
    assert not (deleted & writer.known_blobs())


def test_prune_does_not_sweep_blobs_when_a_kept_manifest_is_unreadable(
    store: StateStore, tmp_path: Path
) -> None:
    cp = write_checkpoint(tmp_path / "cp", 1)
    writer = SnapshotWriter(store, LAYOUT)
    a = write_snapshot(writer, cp, 1)
    add_batch(cp, 2)
    b = write_snapshot(writer, cp, 2)
    store.put(writer.manifest_key(b.snapshot_id), b"garbage")
    before = set(store.list("p1/snapshot-blobs/"))
    pruned, deleted = prune(store, LAYOUT, [b.snapshot_id])
    assert pruned.snapshots == 1 and pruned.blobs == 0 and not deleted
    assert set(store.list("p1/snapshot-blobs/")) == before
    assert not store.list(f"p1/snapshots/{a.snapshot_id:012d}/")


def test_upload_is_verified_by_etag_or_read_back(store: StateStore, tmp_path: Path) -> None:
    import hashlib as _h

    from state.coordinator.snapshot.write import _etag_is_md5_of

    data = b"checkpoint bytes"
    assert _etag_is_md5_of(f'"{_h.md5(data).hexdigest()}"', data)  # S3 plain upload
    assert not _etag_is_md5_of(f'"{_h.md5(b"other").hexdigest()}"', data)
    assert not _etag_is_md5_of("17", data)  # memory/file store versions: read back
    assert not _etag_is_md5_of(None, data)

    class Lossy(type(store)):  # type: ignore[misc]
        """A store that silently stores something else than it was given."""

        def create(self, key: str, data: bytes) -> str:
            version: str = super().create(key, data[:-1])
            return version

    cp = write_checkpoint(tmp_path / "cp", 1)
    lossy = Lossy(store.config)
    with pytest.raises(SnapshotCorrupted, match="read back"):
        write_snapshot(SnapshotWriter(lossy, LAYOUT), cp, 1)
