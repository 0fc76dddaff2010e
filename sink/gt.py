"""The ``gt`` column: its expected type, the replay filter and delivery order.

gtkafka gives every row ``gt: struct<epoch long, topic string, partition int, offset long>``
(docs/PROTOCOL.md). Ascending ``gt`` is delivery order. The sink treats the column as the
global time of the *input record that produced the row*: in a stateless query that is
exact; a stateful query that emits rows carrying an older record's ``gt`` (a stream-stream
join, say) must drop or rename the column, because rows at or below ``GT_last`` are dropped.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from state.errors import ConfigError

GT_COLUMN = "gt"
GT_FIELDS = ("epoch", "topic", "partition", "offset")
EXPECTED_TYPE_TEXT = "struct<epoch: bigint, topic: string, partition: int, offset: bigint>"

GtTuple = tuple[int, str, int, int]

_ARROW_FIELD_TYPES: dict[str, tuple[pa.DataType, ...]] = {
    "epoch": (pa.int64(),),
    "topic": (pa.string(), pa.large_string()),
    "partition": (pa.int32(),),
    "offset": (pa.int64(),),
}
_SPARK_FIELD_TYPES = {
    "epoch": "LongType",
    "topic": "StringType",
    "partition": "IntegerType",
    "offset": "LongType",
}


def gt_type_error(actual: object) -> ConfigError:
    return ConfigError(
        "gt",
        str(actual),
        f"the sink input's 'gt' column to be {EXPECTED_TYPE_TEXT} (gtkafka's global time); "
        "rename or drop the column if it is something else",
        where="barrier",
    )


def check_spark_schema(schema: Any) -> bool:
    """Whether the Spark ``StructType`` has a ``gt`` column; raise if it has the wrong type."""
    names = [f.name for f in schema.fields]
    if GT_COLUMN not in names:
        return False
    dtype = schema[GT_COLUMN].dataType
    fields = getattr(dtype, "fields", None)
    if fields is None or tuple(f.name for f in fields) != GT_FIELDS:
        raise gt_type_error(dtype.simpleString())
    for f in fields:
        if type(f.dataType).__name__ != _SPARK_FIELD_TYPES[f.name]:
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
    names = tuple(dtype.field(i).name for i in range(dtype.num_fields))
    if names != GT_FIELDS:
        raise gt_type_error(dtype)
    for i in range(dtype.num_fields):
        f = dtype.field(i)
        if f.type not in _ARROW_FIELD_TYPES[f.name]:
            raise gt_type_error(dtype)
    return True


def gt_columns(table: pa.Table | pa.RecordBatch) -> list[pa.Array | pa.ChunkedArray]:
    """The four ``gt`` fields as separate arrays (epoch, topic, partition, offset)."""
    col = table.column(GT_COLUMN)
    if col.null_count:
        raise ConfigError(
            "gt", "null", f"a non-null {EXPECTED_TYPE_TEXT} in every row", where="barrier"
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


def gt_bounds(table: pa.Table) -> tuple[GtTuple, GtTuple] | None:
    """The smallest and largest ``gt`` of a table sorted by :func:`sort_by_gt`."""
    if table.num_rows == 0:
        return None
    cols = gt_columns(table)
    n = table.num_rows - 1
    first = (int(cols[0][0].as_py()), str(cols[1][0].as_py()), int(cols[2][0].as_py()),
             int(cols[3][0].as_py()))
    last = (int(cols[0][n].as_py()), str(cols[1][n].as_py()), int(cols[2][n].as_py()),
            int(cols[3][n].as_py()))
    return first, last


def gt_to_dict(gt: GtTuple) -> dict[str, Any]:
    return dict(zip(GT_FIELDS, gt, strict=True))


def gt_from_dict(d: dict[str, Any]) -> GtTuple:
    return (int(d["epoch"]), str(d["topic"]), int(d["partition"]), int(d["offset"]))
