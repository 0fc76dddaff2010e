"""Processes found by their place in the process tree (Linux ``/proc``), for fault injection.

A driver program starts a JVM, the JVM starts ``python -m pyspark.daemon``, and the
daemon forks Spark's Python workers (tasks' workers, and on the driver the sink's commit
process); a standalone worker JVM starts executor JVMs, which start their own daemons.
:func:`python_workers` finds the forked workers under any of those roots, so a test can
kill one by pid. Nothing here signals a process: callers do, by pid.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
DAEMON_MODULE = "pyspark.daemon"


@dataclass(frozen=True)
class ProcessInfo:
    """One process: its pid, its parent's, its command line (arguments joined by spaces)."""

    pid: int
    ppid: int
    cmdline: str


def process_table() -> dict[int, ProcessInfo]:
    """Every process visible now; processes that end while being read are left out."""
    table: dict[int, ProcessInfo] = {}
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            # The command name may contain spaces and parentheses: split after the last ")".
            ppid = int(stat[stat.rindex(")") + 2 :].split()[1])
            raw = (entry / "cmdline").read_bytes()
            table[int(entry.name)] = ProcessInfo(
                int(entry.name), ppid, raw.replace(b"\0", b" ").decode(errors="replace").strip()
            )
    return table


def descendants(root: int, table: dict[int, ProcessInfo] | None = None) -> list[ProcessInfo]:
    """The processes below ``root`` (children, their children...), ``root`` excluded."""
    table = process_table() if table is None else table
    children: dict[int, list[ProcessInfo]] = {}
    for info in table.values():
        children.setdefault(info.ppid, []).append(info)
    found: list[ProcessInfo] = []
    stack = [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child.pid)
    return found


def python_workers(roots: list[int]) -> list[ProcessInfo]:
    """Spark's Python workers under ``roots``: the children of every ``pyspark.daemon``
    process below them (the daemons themselves are not workers)."""
    table = process_table()
    below = {info.pid: info for root in roots for info in descendants(root, table)}
    daemons = {pid for pid, info in below.items() if DAEMON_MODULE in info.cmdline}
    return sorted(
        (info for info in below.values() if info.ppid in daemons), key=lambda info: info.pid
    )
