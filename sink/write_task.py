"""What one write task does, without Spark: stage its rows as one part, report where.

:func:`stage_task` is the whole of a write task's work; :mod:`sink.writer` calls it from
Spark's ``write()`` and the protocol simulator calls it directly. No row is dropped here:
whether output is a replay is decided for the whole bundle by the batch's epoch at commit,
never by a row's ``gt`` (stateful output carries the ``gt`` of older records: windows
closed late, outer-join rows, keyed state).
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa

from sink.bundle import BarrierCommitMessage
from sink.gt_column import check_arrow_schema, gt_bounds, sort_by_gt
from sink.staging import Staging
from state.records.inflight_bundle import StagedPart
from state.spark_task import StreamingTask


def stage_task(
    batches: Iterable[pa.RecordBatch], task: StreamingTask, staging: Staging, *, has_gt: bool
) -> BarrierCommitMessage:
    """Stage the task's rows as one Parquet part (sorted by ``gt`` when the input has it)
    under the batch's prefix of ``staging``; the message for the commit. A task without
    rows stages nothing."""
    kept: list[pa.RecordBatch] = []
    schema: pa.Schema | None = None
    for batch in batches:
        if schema is None:
            schema = batch.schema
            check_arrow_schema(schema)
        if batch.num_rows:
            kept.append(batch)
    part: StagedPart | None = None
    if kept:
        table = pa.Table.from_batches(kept)
        bounds = None
        if has_gt:
            table = sort_by_gt(table)
            bounds = gt_bounds(table)
        location = staging.part_location(
            task.query_id, task.batch_id, task.partition, task.task_attempt, task.run_id
        )
        size = staging.write_part(location, table)
        part = StagedPart(
            location=location,
            rows=table.num_rows,
            size=size,
            min_gt=bounds[0] if bounds else None,
            max_gt=bounds[1] if bounds else None,
        )
    return BarrierCommitMessage(
        query_id=task.query_id,
        batch_id=task.batch_id,
        run_id=task.run_id,
        partition=task.partition,
        task_attempt=task.task_attempt,
        has_gt=has_gt,
        part=part,
    )
