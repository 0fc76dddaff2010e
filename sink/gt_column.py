"""The sink's use of the ``gt`` column: its type check, its bounds and delivery order.

gtkafka gives every row ``gt`` (:mod:`state.records.gt`, docs/PROTOCOL.md). Ascending ``gt``
is delivery order within a bundle. A row's ``gt`` never decides whether it is a replay:
that is decided for the whole bundle by the batch's epoch, because stateful output carries
the ``gt`` of older records (windows closed late, outer-join rows, keyed state).
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from state.errors import ConfigError
from state.records.gt import (
    GT_COLUMN,
    GT_FIELDS,
    GT_TYPE_TEXT,
    GlobalTime,
    arrow_accepts,
    spark_type,
)


def gt_type_error(actual: object) -> ConfigError:
    return ConfigError(
        GT_COLUMN,
        str(actual),
        f"the sink input's 'gt' column to be {GT_TYPE_TEXT} (gtkafka's global time); "
        "rename or drop the column if it is something else",
        where="barrier",
    )


def check_spark_schema(schema: Any) -> bool:
    """Whether the Spark ``StructType`` has a ``gt`` column; raise if it has the wrong type."""
    if GT_COLUMN not in [f.name for f in schema.fields]:
        return False
    dtype = schema[GT_COLUMN].dataType
    fields = getattr(dtype, "fields", None)
    expected = spark_type().fields
    if fields is None or [(f.name, type(f.dataType)) for f in fields] != [
        (f.name, type(f.dataType)) for f in expected
    ]:
        raise gt_type_error(dtype.simpleString())
    return True


def check_arrow_schema(schema: pa.Schema) -> bool:
    """Whether the Arrow schema has a ``gt`` column; raise if it has the wrong type."""
    idx = schema.get_field_index(GT_COLUMN)
    if idx < 0:
        return False
    dtype = schema.field(idx).type
    if not pa.types.is_struct(dtype):
        raise gt_type_error(dtype)
    fields = [dtype.field(i) for i in range(dtype.num_fields)]
    if tuple(f.name for f in fields) != GT_FIELDS or not all(
        arrow_accepts(f.name, f.type) for f in fields
    ):
        raise gt_type_error(dtype)
    return True


def gt_columns(table: pa.Table | pa.RecordBatch) -> list[pa.Array | pa.ChunkedArray]:
    """The four ``gt`` fields as separate arrays (epoch, topic, partition, offset)."""
    col = table.column(GT_COLUMN)
    if col.null_count:
        raise ConfigError(
            GT_COLUMN, "null", f"a non-null {GT_TYPE_TEXT} in every row", where="barrier"
        )
    return [pc.struct_field(col, [i]) for i in range(len(GT_FIELDS))]


def sort_by_gt(table: pa.Table) -> pa.Table:
    """``table`` in ascending ``gt`` order (a no-op copy-free return when already sorted)."""
    if table.num_rows <= 1:
        return table
    keys = pa.table(dict(zip(GT_FIELDS, gt_columns(table), strict=True)))
    order = pc.sort_indices(keys, sort_keys=[(name, "ascending") for name in GT_FIELDS])
    if pc.all(pc.equal(order, pa.array(range(len(order)), pa.uint64()))).as_py():
        return table
    return table.take(order)


def gt_bounds(table: pa.Table) -> tuple[GlobalTime, GlobalTime] | None:
    """The smallest and largest ``gt`` of a table sorted by :func:`sort_by_gt`."""
    if table.num_rows == 0:
        return None
    cols = gt_columns(table)
    last = table.num_rows - 1
    return (
        GlobalTime.from_tuple(tuple(c[0].as_py() for c in cols)),
        GlobalTime.from_tuple(tuple(c[last].as_py() for c in cols)),
    )
