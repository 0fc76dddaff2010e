"""``file://`` specifics beyond the shared contract: on-disk format, atomicity, locks."""

from __future__ import annotations

import fcntl
import os
import time
import zlib
from pathlib import Path

import pytest

from state.errors import ConcurrentModification, StateError, StoreConfigError, StoreUnavailable
from state.stores import StoreConfig
from state.stores.file_store import LOCK_STRIPES, FileStore


def make(tmp_path: Path, **kw: float) -> FileStore:
    return FileStore(StoreConfig(f"file://{tmp_path}/root"), **kw)


def test_file_holds_version_header_then_value(tmp_path: Path) -> None:
    store = make(tmp_path)
    version = store.put("a/b.json", b'{"x":1}')
    raw = (tmp_path / "root/a/b.json").read_bytes()
    assert raw == b"GTB1 " + version.encode() + b"\n" + b'{"x":1}'
    assert len(version) == 32


def test_file_written_by_another_tool_is_readable_and_cas_detects_changes(tmp_path: Path) -> None:
    store = make(tmp_path)
    (tmp_path / "root").mkdir()
    (tmp_path / "root/plain.txt").write_bytes(b"hello")
    got = store.get("plain.txt")
    assert got.data == b"hello"
    assert got.version.startswith("sha256-")
    (tmp_path / "root/plain.txt").write_bytes(b"changed")
    with pytest.raises(ConcurrentModification):
        store.compare_and_swap("plain.txt", b"mine", got.version)
    fresh = store.get("plain.txt")
    store.compare_and_swap("plain.txt", b"mine", fresh.version)
    assert store.get("plain.txt").data == b"mine"


def test_temp_and_lock_files_are_not_listed(tmp_path: Path) -> None:
    store = make(tmp_path)
    store.put("d/k", b"x")
    (tmp_path / "root/d/.gtb-tmp-leftover-from-a-crash").write_bytes(b"partial")
    assert (tmp_path / "root/.gtb-locks").is_dir()
    assert store.list() == ["d/k"]
    assert store.get("d/k").data == b"x"


def test_reserved_key_segments_are_refused(tmp_path: Path) -> None:
    store = make(tmp_path)
    for key in (".gtb-locks/00.lock", "a/.gtb-tmp-x"):
        with pytest.raises(StoreConfigError) as info:
            store.put(key, b"x")
        assert repr(key) in str(info.value)


def test_key_that_is_also_a_prefix_is_a_clear_error(tmp_path: Path) -> None:
    store = make(tmp_path)
    store.put("a", b"value")
    with pytest.raises(StateError) as info:
        store.put("a/b", b"x")
    assert "'a/b'" in str(info.value) and store.uri in str(info.value)
    store.put("p/q", b"x")
    with pytest.raises(StateError):
        store.put("p", b"x")
    with pytest.raises(StateError):
        store.create("p", b"x")
    assert store.get_or_none("p") is None
    assert store.list() == ["a", "p/q"]


def test_every_write_fsyncs_file_and_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make(tmp_path)
    store.put("warm/up", b"x")  # directories exist afterwards
    synced: list[str] = []
    real_fsync = os.fsync

    def spy(fd: int) -> None:
        synced.append("dir" if os.path.isdir(f"/proc/self/fd/{fd}") else "file")
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", spy)
    store.put("warm/up", b"y")
    assert synced == ["file", "dir"]
    synced.clear()
    store.create("warm/new", b"y")
    assert synced == ["file", "dir"]
    synced.clear()
    store.delete("warm/new")
    assert synced == ["dir"]


def test_failed_write_leaves_old_value_and_no_temp_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = make(tmp_path)
    store.put("k", b"old")

    def broken_replace(src: str, dst: str) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(StateError) as info:
        store.put("k", b"new")
    assert "'k'" in str(info.value) and "No space left" in str(info.value)
    monkeypatch.undo()
    assert store.get("k").data == b"old"
    assert sorted(p.name for p in (tmp_path / "root").iterdir()) == [".gtb-locks", "k"]


def test_held_lock_times_out_as_store_unavailable(tmp_path: Path) -> None:
    store = make(tmp_path, lock_timeout=0.3)
    store.put("k", b"x")
    stripe = zlib.crc32(b"k") % LOCK_STRIPES
    fd = os.open(tmp_path / f"root/.gtb-locks/{stripe:02d}.lock", os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        start = time.monotonic()
        with pytest.raises(StoreUnavailable) as info:
            store.put("k", b"y")
        assert 0.2 < time.monotonic() - start < 5
        assert "'k'" in str(info.value) and "lock" in str(info.value)
        assert info.value.retriable
    finally:
        os.close(fd)
    store.put("k", b"y")
    assert store.get("k").data == b"y"


def test_uri_path_is_percent_decoded(tmp_path: Path) -> None:
    store = FileStore(StoreConfig(f"file://{tmp_path}/with%20space"))
    store.put("k", b"x")
    assert (tmp_path / "with space/k").is_file()


def test_non_file_uri_is_refused() -> None:
    with pytest.raises(StoreConfigError) as info:
        FileStore(StoreConfig("s3://bucket/x"))
    assert "'state.uri'" in str(info.value)
