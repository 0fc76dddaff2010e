"""Timing: opt-in spans for the performance breakdown, and the steps of one operation.

* :func:`span` / :func:`record` (``python -m benchmarks.breakdown``):

  with ``GTBARRIER_PROFILE=<directory>`` in the environment of the driver (and so of
  Spark's Python workers, which inherit the JVM's environment), every span appends one JSON
  line ``{"span", "start", "seconds", "pid", ...attributes}`` to
  ``<directory>/<pid>.jsonl``. Without it a span costs one dictionary lookup: the hook is
  for benchmarks and never changes what the code does.
* :class:`StepTimer`: how long each named step of one operation took (the barrier's
  commit reports its steps in its log and metrics lines), kept out of the operation's code
  as ``with timer.step("deliver"): ...``. A timer made with ``on=enabled()`` measures only
  when profiling is on (off, a step is a shared no-op context: for steps in a hot loop).
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path

ENV = "GTBARRIER_PROFILE"

#: When this process imported gtbarrier's first module (process start is read from /proc).
IMPORTED_AT = time.time()


_UNTIMED: AbstractContextManager[None] = nullcontext()


class StepTimer:
    """The seconds spent in each named step of one operation, in the order first run;
    ``started`` is when the timer was made (epoch seconds, the start of its spans)."""

    def __init__(self, *, on: bool = True) -> None:
        self.seconds: dict[str, float] = {}
        self.on = on
        self.started = time.time()

    def step(self, name: str) -> AbstractContextManager[None]:
        """Add the block's wall time to step ``name`` (also when it raises); nothing if
        the timer is off."""
        return self._timed(name) if self.on else _UNTIMED

    @contextmanager
    def _timed(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + time.perf_counter() - t0

    def clear(self) -> None:
        self.seconds.clear()


def enabled() -> bool:
    return bool(os.environ.get(ENV))


@contextmanager
def span(name: str, **attributes: object) -> Iterator[dict[str, object]]:
    """Time the block as ``name`` (recorded even if it raises, with ``"error"`` set). The
    block is given a dict for the attributes it learns (recorded with the span's own)."""
    directory = os.environ.get(ENV)
    if not directory:
        yield {}
        return
    start = time.time()
    t0 = time.perf_counter()
    error: str | None = None
    learnt: dict[str, object] = {}
    try:
        yield learnt
    except BaseException as err:
        error = type(err).__name__
        raise
    finally:
        seconds = time.perf_counter() - t0
        record(name, start, seconds, **{**attributes, **learnt, "error": error})


def record(name: str, start: float, seconds: float, **attributes: object) -> None:
    """Append one span (measured by the caller) if profiling is on."""
    directory = os.environ.get(ENV)
    if not directory:
        return
    line = {"span": name, "start": start, "seconds": seconds, "pid": os.getpid(), **attributes}
    path = Path(directory) / f"{os.getpid()}.jsonl"
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as f:
        f.write(json.dumps(line, sort_keys=True, default=str) + "\n")


def process_started_at() -> float | None:
    """This process's start time (epoch seconds) from ``/proc``; None where unavailable."""
    try:
        stat = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        ticks = int(stat[19])  # field 22 of proc(5), counted after the command name
        boot = next(
            float(line.split()[1])
            for line in Path("/proc/stat").read_text().splitlines()
            if line.startswith("btime ")
        )
        return boot + ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return None
