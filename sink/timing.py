"""The sink's profiling spans (``python -m benchmarks.breakdown``; nothing happens unless
``GTBARRIER_PROFILE`` is set, :mod:`state.profiling`).

* a write task: ``write.stage`` (the task, with ``input_s``: the time it waited for its
  input) and ``write.input``;
* a commit process: ``commit.process`` (process start until gtbarrier's first import) and
  ``commit.imports`` (from there until the first commit or abort began), once per process;
* a commit: ``commit.total`` and ``commit.<step>`` for each of the barrier's steps
  (:attr:`~sink.commit_outcome.CommitOutcome.timings`), laid end to end.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from typing import TypeVar

import pyarrow as pa

from sink.commit_outcome import CommitOutcome
from state import profiling
from state.spark_task import StreamingTask

#: The barrier's steps in the order it runs them (CommitOutcome.timings keys).
COMMIT_STEPS = ("read_state", "recover", "cas_inflight", "deliver", "cas_gt_last", "cleanup")

_profiled_process = False


M = TypeVar("M")


def timed_write(
    batches: Iterator[pa.RecordBatch],
    task: StreamingTask,
    write: Callable[[Iterator[pa.RecordBatch]], M],
) -> M:
    """``write(batches)``, recorded as ``write.stage`` and ``write.input`` spans."""
    timed = _TimedInput(batches)
    t0 = time.perf_counter()
    error: str | None = None
    try:
        return write(timed)
    except BaseException as err:
        error = type(err).__name__
        raise
    finally:
        attrs = {"batch_id": task.batch_id, "rows": timed.rows, "error": error}
        profiling.record(
            "write.stage",
            timed.started,
            time.perf_counter() - t0,
            input_s=timed.seconds,
            partition=task.partition,
            **attrs,
        )
        profiling.record("write.input", timed.started, timed.seconds, **attrs)


def process_start(entered: float, batch_id: int) -> None:
    """Once per commit process: ``commit.process`` and ``commit.imports``."""
    global _profiled_process  # noqa: PLW0603 - once per process
    if _profiled_process or not profiling.enabled():
        return
    _profiled_process = True
    started = profiling.process_started_at()
    imported = profiling.IMPORTED_AT
    if started is not None and started <= imported:
        profiling.record("commit.process", started, imported - started, batch_id=batch_id)
    profiling.record("commit.imports", imported, entered - imported, batch_id=batch_id)


def commit_steps(outcome: CommitOutcome, returned: float) -> None:
    """The barrier's own timings as ``commit.<step>`` spans, laid end to end before
    ``returned`` (when :meth:`~sink.barrier.Barrier.commit` returned)."""
    if not profiling.enabled() or not outcome.timings:
        return
    attrs = {"batch_id": outcome.batch_id, "epoch": outcome.epoch, "action": outcome.action}
    total = outcome.timings.get("total", sum(outcome.timings.values()))
    at = returned - total
    profiling.record("commit.total", at, total, rows=outcome.rows, **attrs)
    for step in COMMIT_STEPS:
        if step in outcome.timings:
            profiling.record(f"commit.{step}", at, outcome.timings[step], **attrs)
            at += outcome.timings[step]


class _TimedInput:
    """Wraps a write task's input and times how long it waits for each batch."""

    def __init__(self, batches: Iterator[pa.RecordBatch]) -> None:
        self._batches = batches
        self.started = time.time()
        self.seconds = 0.0
        self.rows = 0

    def __iter__(self) -> Iterator[pa.RecordBatch]:
        return self

    def __next__(self) -> pa.RecordBatch:
        t0 = time.perf_counter()
        try:
            batch = next(self._batches)
        finally:
            self.seconds += time.perf_counter() - t0
        self.rows += batch.num_rows
        return batch
