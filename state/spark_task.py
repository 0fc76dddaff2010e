"""The Spark task a hook runs in: Spark's local properties, read here and nowhere else.

Spark hands a streaming micro-batch's identity to its tasks as ``TaskContext`` local
properties: ``sql.streaming.queryId``, ``streaming.sql.batchId``, and the run id inside
``spark.job.description`` (``"... runId = <uuid> ..."``). The source's read tasks need the
first two to write the batch record, the sink's write tasks all three to name their parts.
pyspark is imported only when a task is asked about.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

QUERY_ID_PROPERTY = "sql.streaming.queryId"
BATCH_ID_PROPERTY = "streaming.sql.batchId"
JOB_DESCRIPTION_PROPERTY = "spark.job.description"

_RUN_ID = re.compile(r"runId\s*=\s*([0-9A-Za-z-]+)")


def run_id_from_description(description: str | None) -> str | None:
    """The streaming run id in Spark's job description (``"... runId = <uuid> ..."``)."""
    if not description:
        return None
    m = _RUN_ID.search(description)
    return m.group(1) if m else None


@dataclass(frozen=True)
class StreamingTask:
    """A task of a streaming micro-batch: its query, batch and run, and which task it is."""

    query_id: str
    batch_id: int
    run_id: str | None = None
    partition: int = 0
    task_attempt: int = 0
    attempt_number: int = 0

    @classmethod
    def current(cls) -> StreamingTask | None:
        """The running task, or None outside a task or a streaming micro-batch."""
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is None:
            return None
        query_id = ctx.getLocalProperty(QUERY_ID_PROPERTY)
        batch_id = ctx.getLocalProperty(BATCH_ID_PROPERTY)
        if not query_id or batch_id is None:
            return None
        return cls(
            query_id=query_id,
            batch_id=int(batch_id),
            run_id=run_id_from_description(ctx.getLocalProperty(JOB_DESCRIPTION_PROPERTY)),
            partition=ctx.partitionId(),
            task_attempt=ctx.taskAttemptId(),
            attempt_number=ctx.attemptNumber(),
        )


def local_property(name: str) -> str | None:
    """A local property of the running task (None outside a task, or if it is unset)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    return None if ctx is None else ctx.getLocalProperty(name)
