"""The barrier's stream writer: ``write`` on executors, ``commit``/``abort`` on the driver.

Spark 4.3 creates the writer for every micro-batch, pickles it to the executors for
``write()`` and creates it once more in a driver-side Python worker for each ``commit`` or
``abort`` (a worker Spark reuses from batch to batch), from the data source it pickled at
the run's first commit, whose start generation it carries (:mod:`sink.data_source`): the
instance that commits never wrote, so the protocol lives in the state store
(:mod:`sink.barrier`). Clients are opened inside these calls and never pickled; stores
come from ``open_store``, which shares them per worker process, so their ``close()`` here
releases nothing a later call could reuse.
This module is the Spark adapter only: a task's work is :func:`sink.write_task.stage_task`,
a commit's is :class:`sink.barrier.Barrier`, their timing spans :mod:`sink.timing`.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamArrowWriter

from sink import timing
from sink.barrier import Barrier
from sink.bundle import BarrierCommitMessage
from sink.commit_outcome import CommitOutcome
from sink.consumers import open_consumer, open_staging
from sink.faults import FaultInjector
from sink.options import SinkOptions
from sink.session import check_session
from sink.write_task import RowChecks, stage_task
from state import profiling
from state.errors import GtBarrierError
from state.layout import PipelineLayout
from state.protocol.epoch_log import epoch_of_batch
from state.spark_task import StreamingTask, local_property
from state.stores import open_store


def current_task() -> StreamingTask:
    """The running write task; an error outside a streaming micro-batch, or in a session
    that lets Spark run no-data micro-batches (:func:`sink.session.check_session`)."""
    task = StreamingTask.current()
    if task is None:
        raise GtBarrierError(
            "barrier: write() must run in a task of a streaming micro-batch (the barrier sink "
            "is for writeStream micro-batch queries)"
        )
    check_session(local_property)
    return task


class BarrierStreamWriter(DataSourceStreamArrowWriter):
    """``write`` stages a task's rows; ``commit``/``abort`` run the barrier protocol.

    Holds only the parsed options, whether the input has a ``gt`` column and, in the commit
    process, the generation the run started at (None in the tasks, which do not claim): it
    is pickled to every task.
    """

    def __init__(
        self, options: SinkOptions, has_gt: bool, start_generation: int | None = None
    ) -> None:
        self.options = options
        self.has_gt = has_gt
        self.start_generation = start_generation

    # --- executors --------------------------------------------------------------------

    def write(self, iterator: Iterator[pa.RecordBatch]) -> BarrierCommitMessage:
        task = current_task()
        if not profiling.enabled():
            return self.write_task(iterator, task)
        return timing.timed_write(iterator, task, lambda rows: self.write_task(rows, task))

    def write_task(
        self, iterator: Iterator[pa.RecordBatch], task: StreamingTask
    ) -> BarrierCommitMessage:
        """Check the task's rows against the consumer's target, then stage them as one
        Parquet part sorted by ``gt`` (:func:`~sink.write_task.stage_task`) where the
        consumer's staging keeps them."""
        faults = FaultInjector.from_environment()
        store = open_store(self.options.store)
        try:
            staging = open_staging(self.options, store)
            layout = PipelineLayout(self.options.pipeline_id)

            def bundle_of() -> int | None:
                """The batch's epoch, for the message of rows refused (one read)."""
                try:
                    return epoch_of_batch(store, layout, task.query_id, task.batch_id)
                except GtBarrierError:
                    return None

            try:
                message = stage_task(
                    iterator,
                    task,
                    staging,
                    has_gt=self.has_gt,
                    checks=RowChecks.of(self.options),
                    bundle_of=bundle_of,
                )
            finally:
                staging.close()
            if task.attempt_number == 0:
                faults.at("write_fail", task.batch_id)
            return message
        finally:
            store.close()

    # --- driver -----------------------------------------------------------------------

    def commit(self, messages: Sequence[Any], batchId: int) -> None:
        self.commit_batch(messages, batchId)

    def commit_batch(self, messages: Sequence[Any], batchId: int) -> CommitOutcome:
        timing.process_start(time.time(), batchId)
        with profiling.span("commit.call", batch_id=batchId), self._barrier() as barrier:
            outcome = barrier.commit(messages, batchId)
            returned = time.time()
        timing.commit_steps(outcome, returned)
        return outcome

    def abort(self, messages: Sequence[Any], batchId: int) -> None:
        timing.process_start(time.time(), batchId)
        with profiling.span("commit.abort", batch_id=batchId), self._barrier() as barrier:
            barrier.abort(messages, batchId)

    def _barrier(self) -> _OpenBarrier:
        return _OpenBarrier(self.options, self.start_generation)


class _OpenBarrier:
    """A :class:`Barrier` with its store and consumer, closed on exit."""

    def __init__(self, options: SinkOptions, start_generation: int | None) -> None:
        self.options = options
        self.start_generation = start_generation

    def __enter__(self) -> Barrier:
        faults = FaultInjector.from_environment()
        with profiling.span("commit.open"):
            self.store = open_store(self.options.store)
            self.consumer = open_consumer(self.options, self.store, faults)
        return Barrier(
            self.options,
            self.store,
            self.consumer,
            self.consumer.staging,
            faults,
            start_generation=self.start_generation,
        )

    def __exit__(self, *exc: object) -> None:
        with profiling.span("commit.close"):
            try:
                self.consumer.close()
            finally:
                self.store.close()
