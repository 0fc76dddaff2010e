"""What one write task does, without Spark: check its rows, stage them as one part, report where.

:func:`stage_task` is the whole of a write task's work; :mod:`sink.writer` calls it from
Spark's ``write()`` and the protocol simulator calls it directly. No row is dropped as a
replay here: whether output is a replay is decided for the whole bundle by the batch's
epoch at commit, never by a row's ``gt`` (stateful output carries the ``gt`` of older
records: windows closed late, outer-join rows, keyed state).

Before anything is staged the task checks its rows against what the consumer's target
accepts (:class:`RowChecks`): the checks every consumer shares (a row without a ``gt``
when the input has the column cannot be ordered or named) and the consumer kind's
:meth:`~sink.consumers.consumer_kind.ConsumerKind.validate`. Both are pure functions of
the rows and the settings, so a replay with the same settings refuses the same rows (the
settings may change between attempts: the barrier reconciles a replay with the bundle's
first dead-letter file, :mod:`sink.barrier`). With
``errors.tolerance=none`` a refused row fails the task (:class:`~state.errors.RowsRefused`)
and nothing of the task is staged; with ``all`` the task stages the rows it accepts as its
part and the rows refused as its *dead-letter part* (:mod:`sink.dead_letters`), which the
barrier writes to the dead-letter destination before the bundle is delivered.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pyarrow as pa
import pyarrow.compute as pc

from sink.bundle import BarrierCommitMessage
from sink.consumers.consumer_kind import ConsumerKind, ConsumerSettings, RowRejection
from sink.dead_letters.dead_letter_format import first_rejections, rejected_rows
from sink.dead_letters.dead_letter_settings import Tolerance
from sink.gt_column import check_arrow_schema, gt_bounds, sort_by_gt
from sink.staging import Staging, dead_letter_part_name
from state.errors import RowsRefused
from state.records.gt import GT_COLUMN, GT_FIELDS, GlobalTime
from state.records.inflight_bundle import StagedPart
from state.spark_task import StreamingTask

if TYPE_CHECKING:
    from sink.options import SinkOptions

NULL_GT = "no gt (null), so the row cannot be ordered or replayed by its global time"
"""The reason of the check every consumer shares."""


@dataclass(frozen=True)
class RowChecks:
    """What a write task checks of its rows, and what it does with the rows refused.

    Without a ``kind`` only the checks every consumer shares run. Small and picklable.
    """

    consumer: str = "consumer"
    """The ``consumer`` option, for messages."""
    kind: ConsumerKind[Any] | None = None
    settings: ConsumerSettings | None = None
    tolerance: Tolerance = "none"

    @classmethod
    def of(cls, options: SinkOptions) -> RowChecks:
        return cls(options.consumer, options.kind, options.settings, options.errors.tolerance)

    def validate(self, table: pa.Table) -> list[RowRejection]:
        """The consumer kind's rejections of ``table`` (rows in staged order)."""
        if self.kind is None or self.settings is None or table.num_rows == 0:
            return []
        return self.kind.validate(self.settings, table)


@dataclass(frozen=True)
class CheckedRows:
    """A task's rows after the checks: those to stage (in ``gt`` order when the input
    has it) and those refused (as a dead-letter table, or None)."""

    accepted: pa.Table
    refused: pa.Table | None
    rejections: tuple[RowRejection, ...]
    """The refused rows' rejections (the first of each row), indices into ``table``."""
    table: pa.Table
    """The rows the rejections index: the task's rows, the null-``gt`` ones first."""


def check_rows(table: pa.Table, checks: RowChecks, *, has_gt: bool) -> CheckedRows:
    """Split ``table`` into the rows the target accepts and those it refuses.

    Rows without a ``gt`` are refused by the shared check; the rest are sorted by ``gt``
    (when the input has it) and given to the kind's ``validate``. The rejections index
    ``CheckedRows.table``: the null-``gt`` rows in their input order, then the others in
    staged order.
    """
    shared: list[RowRejection] = []
    if has_gt:
        missing = _null_gt(table)
        if missing is not None and pc.any(missing).as_py():
            nulls = table.filter(missing)
            rest = table.filter(pc.invert(missing))
            shared = [RowRejection(i, GT_COLUMN, NULL_GT) for i in range(nulls.num_rows)]
            ordered = sort_by_gt(rest)
            table = pa.concat_tables([nulls, ordered])
            offset = nulls.num_rows
        else:
            table = ordered = sort_by_gt(table)
            offset = 0
    else:
        ordered, offset = table, 0
    kinds = [RowRejection(r.row + offset, r.column, r.reason) for r in checks.validate(ordered)]
    rejections = first_rejections([*shared, *kinds])
    if not rejections:
        return CheckedRows(table, None, (), table)
    refused = {r.row for r in rejections}
    keep = pa.array([i not in refused for i in range(table.num_rows)], pa.bool_())
    accepted = table.filter(keep)
    return CheckedRows(accepted, rejected_rows(table, rejections), tuple(rejections), table)


def refusal(
    checked: CheckedRows, task: StreamingTask, checks: RowChecks, bundle: int | None
) -> RowsRefused:
    """The error of a task whose rows the target refuses under ``errors.tolerance=none``:
    the bundle, the first refused row's ``gt``, its column and the reason."""
    first = checked.rejections[0]
    gt = _gt_of(checked.table, first.row)
    column = "the row as a whole" if first.column is None else f"column {first.column!r}"
    which = (
        f"bundle {bundle} (epoch {bundle}, batch {task.batch_id} of query {task.query_id})"
        if bundle is not None
        else f"the bundle of batch {task.batch_id} of query {task.query_id}"
    )
    more = len(checked.rejections) - 1
    others = f" (and {more} more row(s) of this task)" if more else ""
    return RowsRefused(
        f"barrier: {which} was not stored: consumer={checks.consumer} refuses the row with "
        f"gt {gt}{others}, {column}: {first.reason}. With errors.tolerance=none (the "
        "default) nothing of the bundle is delivered, and every restart refuses it the same "
        "way; to deliver the rest and write refused rows to dead letters, restart on the same "
        "checkpoint with errors.tolerance=all and errors.deadLetter.path (docs/sink.md, "
        '"Bad rows and dead letters")'
    )


def stage_task(  # noqa: PLR0913 - the rows, where they go, and how they are checked
    batches: Iterable[pa.RecordBatch],
    task: StreamingTask,
    staging: Staging,
    *,
    has_gt: bool,
    checks: RowChecks | None = None,
    bundle_of: Callable[[], int | None] = lambda: None,
) -> BarrierCommitMessage:
    """Check the task's rows, then stage those the target accepts as one Parquet part
    (sorted by ``gt`` when the input has it) under the batch's prefix of ``staging``;
    the message for the commit. A task without rows stages nothing.

    Refused rows (``checks``; by default only the shared checks) fail the task with
    :class:`~state.errors.RowsRefused` before anything is staged under
    ``errors.tolerance=none`` (``bundle_of`` names the batch's epoch for the message);
    under ``all`` they are staged as the task's dead-letter part.
    """
    checks = checks if checks is not None else RowChecks()
    kept: list[pa.RecordBatch] = []
    schema: pa.Schema | None = None
    for batch in batches:
        if schema is None:
            schema = batch.schema
            check_arrow_schema(schema)
        if batch.num_rows:
            kept.append(batch)
    part: StagedPart | None = None
    dead: StagedPart | None = None
    if kept:
        checked = check_rows(pa.Table.from_batches(kept), checks, has_gt=has_gt)
        if checked.refused is not None and checks.tolerance != "all":
            raise refusal(checked, task, checks, bundle_of())
        table = checked.accepted
        if table.num_rows:
            bounds = gt_bounds(table) if has_gt else None
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
        if checked.refused is not None:
            location = staging.batch_prefix(task.query_id, task.batch_id) + dead_letter_part_name(
                task.partition, task.task_attempt, task.run_id
            )
            size = staging.write_dead_letter_part(location, checked.refused)
            dead = StagedPart(location=location, rows=checked.refused.num_rows, size=size)
    return BarrierCommitMessage(
        query_id=task.query_id,
        batch_id=task.batch_id,
        run_id=task.run_id,
        partition=task.partition,
        task_attempt=task.task_attempt,
        has_gt=has_gt,
        part=part,
        dead_letters=dead,
    )


def _null_gt(table: pa.Table) -> pa.ChunkedArray | None:
    """Per row, whether its ``gt`` is null or has a null field (None: no row has)."""
    col = table.column(GT_COLUMN)
    missing = pc.is_null(col)
    for i in range(len(GT_FIELDS)):
        missing = pc.or_(missing, pc.is_null(pc.struct_field(col, [i])))
    return missing if pc.any(missing).as_py() else None


def _gt_of(table: pa.Table, row: int) -> str:
    """Row ``row``'s ``gt`` as messages show it (``null`` when it has none)."""
    if GT_COLUMN not in table.column_names:
        return "- (the input has no gt column)"
    value = table.column(GT_COLUMN)[row].as_py()
    if value is None or any(value.get(name) is None for name in GT_FIELDS):
        return "null"
    return f"({GlobalTime.from_tuple(tuple(value[name] for name in GT_FIELDS))})"
