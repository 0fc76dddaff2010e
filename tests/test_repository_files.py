"""What the repository holds, read from git's index: no symbolic link (a link names a place
on the machine that made it, and a clone elsewhere gets a dangling or looping one) and no
tracked text that names the checkout's own absolute path."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SYMLINK_MODE = "120000"


def tracked() -> list[tuple[str, str]]:
    """``(mode, path)`` of every file in git's index."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.fail("the repository's tests run from a git checkout with git installed")
    out = subprocess.run(
        ["git", "ls-files", "-s", "-z"], cwd=ROOT, capture_output=True, check=True
    ).stdout.decode()
    rows = []
    for entry in filter(None, out.split("\0")):
        meta, path = entry.split("\t", 1)
        rows.append((meta.split()[0], path))
    return rows


def test_no_symbolic_link_is_tracked() -> None:
    links = [path for mode, path in tracked() if mode == SYMLINK_MODE]
    assert links == [], f"symbolic links tracked in git (git rm --cached them): {links}"


def test_no_tracked_file_names_the_checkouts_path() -> None:
    here = str(ROOT)
    naming = []
    for mode, path in tracked():
        file = ROOT / path
        if mode == SYMLINK_MODE or not file.is_file():
            continue
        if here.encode() in file.read_bytes():
            naming.append(path)
    assert naming == [], f"tracked files name this checkout's path {here}: {naming}"
