"""A restore writes only inside the checkpoint it restores: a manifest whose file paths are
absolute, climb with ``..`` or lead through a symbolic link is refused before anything is
written (write access to the bucket must not mean writing files on the driver host)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from state.coordinator.snapshot.restore import load_manifest, materialise
from state.coordinator.snapshot.write import SnapshotWriter
from state.errors import SnapshotCorrupted
from state.layout import PipelineLayout
from state.records.manifest import Manifest
from state.stores import StateStore
from tests.coordinator_fakes import write_checkpoint, write_snapshot

LAYOUT = PipelineLayout("p1")


def _tree(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def _crafted(manifest: Manifest, path: str) -> Manifest:
    """``manifest`` with its ``offsets/2`` renamed ``path`` (its bytes and checksum kept)."""
    files = tuple(
        dataclasses.replace(f, path=path) if f.path == "offsets/2" else f for f in manifest.files
    )
    return dataclasses.replace(manifest, files=files)


def _hostile_paths(tmp_path: Path) -> list[str]:
    return [
        "../escaped",
        "offsets/../../escaped",
        str(tmp_path / "escaped"),
        "offsets/./2",
        "offsets//2",
        "",
    ]


def test_a_manifest_naming_paths_outside_the_checkpoint_is_refused_before_any_write(
    store: StateStore, tmp_path: Path
) -> None:
    cp = write_checkpoint(tmp_path / "cp", 2)
    m = write_snapshot(SnapshotWriter(store, LAYOUT), cp, 2)
    host = tmp_path / "host"
    target = write_checkpoint(host / "cp", 0, query_id="old")
    before = _tree(target)
    for path in _hostile_paths(host):
        with pytest.raises(SnapshotCorrupted) as info:
            materialise(store, LAYOUT, _crafted(m, path), target)
        assert repr(path) in str(info.value), str(info.value)
        assert _tree(target) == before
        assert not (host / "escaped").exists() and not (tmp_path / "escaped").exists()
        assert [p.name for p in host.iterdir()] == ["cp"]  # not even a staging directory


def test_a_stored_manifest_with_such_paths_is_malformed(store: StateStore, tmp_path: Path) -> None:
    cp = write_checkpoint(tmp_path / "cp", 2)
    writer = SnapshotWriter(store, LAYOUT)
    m = write_snapshot(writer, cp, 2)
    key = writer.manifest_key(m.snapshot_id)
    for path in _hostile_paths(tmp_path):
        doc = json.loads(store.get(key).data)
        for entry in doc["files"]:
            if entry["path"] == "offsets/2":
                entry["path"] = path
        store.put(key, json.dumps(doc).encode())
        with pytest.raises(SnapshotCorrupted, match="malformed") as info:
            load_manifest(store, key, None)
        assert "path" in str(info.value)


def test_a_path_through_a_symbolic_link_out_of_the_staging_directory_is_refused(
    tmp_path: Path,
) -> None:
    from state.coordinator.snapshot.restore import destination

    staging, outside = tmp_path / "staging", tmp_path / "outside"
    staging.mkdir()
    outside.mkdir()
    (staging / "offsets").mkdir()
    (staging / "link").symlink_to(outside, target_is_directory=True)
    assert destination(staging, "offsets/2") == staging.resolve() / "offsets" / "2"
    with pytest.raises(SnapshotCorrupted, match="leaves the checkpoint") as info:
        destination(staging, "link/2")
    assert "'link/2'" in str(info.value)
