"""Durable directory entries: a file created or renamed into a directory survives a crash
of the machine only once the directory itself is fsynced."""

from __future__ import annotations

import os

__all__ = ["fsync_dir"]


def fsync_dir(path: str | os.PathLike[str]) -> None:
    """fsync the directory ``path``, so that the entries created, renamed or removed in it
    so far are on disk. Raises the ``OSError`` of the open or the fsync."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
