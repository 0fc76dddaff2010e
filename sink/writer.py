"""The barrier's stream writer: ``write`` on executors, ``commit``/``abort`` on the driver.

Spark 4.3 creates the writer for every micro-batch, pickles it to the executors for
``write()`` and creates it once more in a driver-side Python worker for ``commit`` or
``abort`` (a worker Spark reuses from batch to batch): the instance that commits never
wrote, so the protocol lives in the state store (:mod:`sink.barrier`). Clients are opened
inside these calls and never pickled; stores come from ``open_store``, which shares them
per worker process, so their ``close()`` here releases nothing a later call could reuse.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter

from sink.barrier import Barrier, run_id_from_description
from sink.bundle import BarrierCommitMessage
from sink.commit_outcome import CommitOutcome
from sink.consumers import open_consumer, open_staging
from sink.faults import FaultInjector
from sink.gt_column import check_arrow_schema, gt_bounds, sort_by_gt
from sink.options import SinkOptions
from sink.session import check_session
from state import profiling
from state.errors import GtBarrierError
from state.records.inflight_bundle import StagedPart
from state.stores import open_store


class TaskInfo:
    """What a write task knows about itself, from Spark's ``TaskContext``."""

    def __init__(  # noqa: PLR0913 - the fields of Spark's TaskContext it needs
        self,
        query_id: str,
        batch_id: int,
        run_id: str | None,
        *,
        partition: int,
        task_attempt: int,
        attempt_number: int,
    ) -> None:
        self.query_id = query_id
        self.batch_id = batch_id
        self.run_id = run_id
        self.partition = partition
        self.task_attempt = task_attempt
        self.attempt_number = attempt_number

    @classmethod
    def current(cls) -> TaskInfo:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is None:
            raise GtBarrierError("barrier: write() must run in a Spark task")
        query_id = ctx.getLocalProperty("sql.streaming.queryId")
        batch = ctx.getLocalProperty("streaming.sql.batchId")
        if not query_id or batch is None:
            raise GtBarrierError(
                "barrier: the task has no streaming query/batch id (the barrier sink is for "
                "writeStream micro-batch queries)"
            )
        check_session(ctx.getLocalProperty)
        return cls(
            query_id=query_id,
            batch_id=int(batch),
            run_id=run_id_from_description(ctx.getLocalProperty("spark.job.description")),
            partition=ctx.partitionId(),
            task_attempt=ctx.taskAttemptId(),
            attempt_number=ctx.attemptNumber(),
        )


class BarrierStreamWriter(DataSourceStreamArrowWriter):
    """``write`` stages a task's rows; ``commit``/``abort`` run the barrier protocol.

    Holds only the parsed options and whether the input has a ``gt`` column: it is
    pickled to every task and to the commit process.
    """

    def __init__(self, options: SinkOptions, has_gt: bool) -> None:
        self.options = options
        self.has_gt = has_gt

    # --- executors --------------------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> BarrierCommitMessage:
        task = TaskInfo.current()
        if not profiling.enabled():
            return self.write_task(iterator, task)
        timed = _TimedInput(iterator)
        t0 = time.perf_counter()
        error: str | None = None
        try:
            return self.write_task(timed, task)
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

    def write_task(
        self, iterator: Iterator[pa.RecordBatch], task: TaskInfo
    ) -> BarrierCommitMessage:
        """Stage the task's rows as one Parquet part sorted by ``gt``.

        No row is dropped here: whether output is a replay is decided for the whole bundle
        by the batch's epoch at commit, never by a row's ``gt`` (stateful output carries
        the ``gt`` of older records: windows closed late, outer-join rows, keyed state).
        """
        faults = FaultInjector.from_environment()
        store = open_store(self.options.store)
        try:
            kept: list[pa.RecordBatch] = []
            schema: pa.Schema | None = None
            for batch in iterator:
                if schema is None:
                    schema = batch.schema
                    check_arrow_schema(schema)
                if batch.num_rows:
                    kept.append(batch)
            part: StagedPart | None = None
            if kept:
                table = pa.Table.from_batches(kept)
                bounds = None
                if self.has_gt:
                    table = sort_by_gt(table)
                    bounds = gt_bounds(table)
                staging = open_staging(self.options, store)
                location = staging.part_location(
                    task.query_id, task.batch_id, task.partition, task.task_attempt, task.run_id
                )
                try:
                    size = staging.write_part(location, table)
                finally:
                    staging.close()
                part = StagedPart(
                    location=location,
                    rows=table.num_rows,
                    size=size,
                    min_gt=bounds[0] if bounds else None,
                    max_gt=bounds[1] if bounds else None,
                )
            if task.attempt_number == 0:
                faults.at("write_fail", task.batch_id)
            return BarrierCommitMessage(
                query_id=task.query_id,
                batch_id=task.batch_id,
                run_id=task.run_id,
                partition=task.partition,
                task_attempt=task.task_attempt,
                has_gt=self.has_gt,
                part=part,
            )
        finally:
            store.close()

    # --- driver -----------------------------------------------------------------------

    def commit(self, messages: Sequence[Any], batchId: int) -> None:
        self.commit_batch(messages, batchId)

    def commit_batch(self, messages: Sequence[Any], batchId: int) -> CommitOutcome:
        _profile_process_start(time.time(), batchId)
        with profiling.span("commit.call", batch_id=batchId), self._barrier() as barrier:
            outcome = barrier.commit(messages, batchId)
            returned = time.time()
        _profile_outcome(outcome, returned)
        return outcome

    def abort(self, messages: Sequence[Any], batchId: int) -> None:
        _profile_process_start(time.time(), batchId)
        with profiling.span("commit.abort", batch_id=batchId), self._barrier() as barrier:
            barrier.abort(messages, batchId)

    def _barrier(self) -> _OpenBarrier:
        return _OpenBarrier(self.options)


class _OpenBarrier:
    """A :class:`Barrier` with its store and consumer, closed on exit."""

    def __init__(self, options: SinkOptions) -> None:
        self.options = options

    def __enter__(self) -> Barrier:
        faults = FaultInjector.from_environment()
        with profiling.span("commit.open"):
            self.store = open_store(self.options.store)
            self.consumer = open_consumer(self.options, self.store, faults)
        return Barrier(self.options, self.store, self.consumer, self.consumer.staging, faults)

    def __exit__(self, *exc: object) -> None:
        with profiling.span("commit.close"):
            try:
                self.consumer.close()
            finally:
                self.store.close()


# --- profiling (benchmarks only: nothing happens unless GTBARRIER_PROFILE is set) -----

_profiled_process = False


def _profile_process_start(entered: float, batch_id: int) -> None:
    """Once per commit process: ``commit.process`` (process start until gtbarrier's first
    import) and ``commit.imports`` (from there until the first commit/abort began)."""
    global _profiled_process  # noqa: PLW0603 - once per process
    if _profiled_process or not profiling.enabled():
        return
    _profiled_process = True
    started = profiling.process_started_at()
    imported = profiling.IMPORTED_AT
    if started is not None and started <= imported:
        profiling.record("commit.process", started, imported - started, batch_id=batch_id)
    profiling.record("commit.imports", imported, entered - imported, batch_id=batch_id)


# The barrier's steps in the order it runs them (CommitOutcome.timings keys).
_STEPS = ("read_state", "recover", "cas_inflight", "deliver", "cas_gt_last", "cleanup")


def _profile_outcome(outcome: CommitOutcome, returned: float) -> None:
    """The barrier's own timings as ``commit.<step>`` spans, laid end to end before
    ``returned`` (when :meth:`Barrier.commit` returned)."""
    if not profiling.enabled() or not outcome.timings:
        return
    attrs = {"batch_id": outcome.batch_id, "epoch": outcome.epoch, "action": outcome.action}
    total = outcome.timings.get("total", sum(outcome.timings.values()))
    at = returned - total
    profiling.record("commit.total", at, total, rows=outcome.rows, **attrs)
    for step in _STEPS:
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
