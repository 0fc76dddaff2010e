"""Spark/Arrow types as PostgreSQL columns, and a bundle's rows as ``COPY ... (FORMAT csv)``.

| Spark (Arrow) | PostgreSQL |
|---|---|
| boolean | `boolean` |
| tinyint, smallint (int8, int16) | `smallint` |
| int (int32) | `integer` |
| bigint (int64) | `bigint` |
| float (float32) | `real` |
| double (float64) | `double precision` |
| decimal(p, s) | `numeric(p, s)` |
| string (string, large_string) | `text` |
| binary (binary, large_binary) | `bytea` |
| date (date32) | `date` |
| timestamp (timestamp with a time zone) | `timestamptz` |
| timestamp_ntz (timestamp without one) | `timestamp` |
| array of any type above except binary | that type's array, e.g. `bigint[]` |
| `gt` (gtkafka's global time) | `gt_epoch bigint`, `gt_topic text`, `gt_partition integer`, |
| | `gt_offset bigint` (four columns) |

Anything else (maps, structs other than ``gt``, intervals, void, nested arrays) is refused
when the query starts, by a :class:`~state.errors.ConfigError` naming the column: cast it
(``to_json(col)`` gives a ``text`` column). ``gt`` becomes four plain columns, not a
composite or ``jsonb``: readers sort and filter with ``ORDER BY gt_epoch, gt_topic,
gt_partition, gt_offset`` and index them without knowing a custom type.

The rows are encoded as CSV by pyarrow's CSV writer (vectorised); only ``bytea`` values
(hex, ``\\x...``, vectorised with numpy) and arrays (array literals, per row) are
converted first.
"""

from __future__ import annotations

import datetime
import decimal
import io
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv

from state.errors import ConfigError
from state.records.gt import GT_COLUMN, GT_STRUCT

GT_SQL = {"bigint": "bigint", "string": "text", "int": "integer"}
GT_COLUMNS: tuple[tuple[str, str], ...] = tuple(
    (f"{GT_COLUMN}_{name}", GT_SQL[sql]) for name, sql in GT_STRUCT
)
SEQ_COLUMN = "gtbarrier_seq"
"""The extra column of the upsert staging table: a row's position in the bundle."""


@dataclass(frozen=True)
class PgColumn:
    """One column of the target table: its name and SQL type."""

    name: str
    sql_type: str


def _scalar_sql(dtype: pa.DataType) -> str | None:  # noqa: PLR0911 - one answer per type
    """The SQL type of a non-nested Arrow type, or None if it has none here."""
    t = pa.types
    if t.is_boolean(dtype):
        return "boolean"
    if t.is_int8(dtype) or t.is_int16(dtype) or t.is_uint8(dtype):
        return "smallint"
    if t.is_int32(dtype) or t.is_uint16(dtype):
        return "integer"
    if t.is_int64(dtype) or t.is_uint32(dtype):
        return "bigint"
    if t.is_float16(dtype) or t.is_float32(dtype):
        return "real"
    if t.is_float64(dtype):
        return "double precision"
    if t.is_decimal(dtype):
        return f"numeric({dtype.precision}, {dtype.scale})"
    if t.is_string(dtype) or t.is_large_string(dtype):
        return "text"
    if t.is_binary(dtype) or t.is_large_binary(dtype):
        return "bytea"
    if t.is_date(dtype):
        return "date"
    if t.is_timestamp(dtype):
        return "timestamptz" if dtype.tz is not None else "timestamp"
    return None


def _is_list(dtype: pa.DataType) -> bool:
    return bool(pa.types.is_list(dtype) or pa.types.is_large_list(dtype))


def _is_binary(dtype: pa.DataType) -> bool:
    return bool(pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype))


def refused(column: str, dtype: object, why: str = "") -> ConfigError:
    return ConfigError(
        column,
        str(dtype),
        "a column type consumer=postgres can store (boolean, integers, float, double, "
        "decimal, string, binary, date, timestamp, arrays of those but binary, gtkafka's "
        f"gt); cast it, e.g. to_json(col) for a map or struct{why}",
        where="barrier",
    )


def columns_for(schema: pa.Schema) -> tuple[PgColumn, ...]:
    """The target table's columns for a sink input of ``schema``; raise naming a column
    whose type has no PostgreSQL column here."""
    out: list[PgColumn] = []
    for f in schema:
        if f.name == GT_COLUMN and pa.types.is_struct(f.type):
            out.extend(PgColumn(name, sql) for name, sql in GT_COLUMNS)
            continue
        if _is_list(f.type):
            element = f.type.value_type
            sql = None if _is_binary(element) else _scalar_sql(element)
            if sql is None:
                raise refused(f.name, f.type, " (arrays of binary or of nested types are not)")
            out.append(PgColumn(f.name, sql + "[]"))
            continue
        sql = _scalar_sql(f.type)
        if sql is None:
            raise refused(f.name, f.type)
        out.append(PgColumn(f.name, sql))
    seen: set[str] = set()
    for c in out:
        if c.name in seen:
            raise ConfigError(
                c.name,
                c.name,
                "distinct column names (the gt column becomes gt_epoch, gt_topic, "
                "gt_partition and gt_offset)",
                where="barrier",
            )
        seen.add(c.name)
    return tuple(out)


def columns_for_spark(schema: Any) -> tuple[PgColumn, ...]:
    """:func:`columns_for` of a Spark ``StructType`` (checked when the query starts)."""
    from pyspark.sql.pandas.types import to_arrow_type

    fields = []
    for f in schema.fields:
        try:
            dtype = to_arrow_type(f.dataType, timezone="UTC")
        except Exception as err:
            raise refused(f.name, f.dataType.simpleString()) from err
        fields.append(pa.field(f.name, dtype))
    return columns_for(pa.schema(fields))


# --- encoding ---------------------------------------------------------------------------


def hex_bytea(arr: pa.Array) -> pa.Array:
    """Binary values as PostgreSQL's hex ``bytea`` input (``\\x0a1b``); nulls kept.

    The values' bytes are contiguous, so their hex digits are too: one ``bytes.hex()`` of
    the data buffer and doubled offsets make the digits, and pyarrow prepends ``\\x``."""
    arr = arr.cast(pa.large_binary())
    n = len(arr)
    offsets = np.frombuffer(arr.buffers()[1], np.int64, count=n + 1, offset=arr.offset * 8)
    data_buf = arr.buffers()[2]
    first, last = int(offsets[0]), int(offsets[-1])
    digits = b"" if data_buf is None else memoryview(data_buf)[first:last].hex().encode()
    hexed = pa.Array.from_buffers(
        pa.large_string(), n, [None, pa.py_buffer((offsets - first) * 2), pa.py_buffer(digits)]
    )
    empty = pa.scalar("", pa.large_string())
    out = pc.binary_join_element_wise(pa.scalar("\\x", pa.large_string()), hexed, empty)
    if arr.null_count:
        out = pc.if_else(arr.is_valid(), out, pa.scalar(None, pa.large_string()))
    return out


def _element(value: Any) -> str:  # noqa: PLR0911 - one form per Python type
    if value is None:
        return "NULL"
    if isinstance(value, bool):
        return "t" if value else "f"
    if isinstance(value, float):
        if math.isnan(value):
            return "NaN"
        if math.isinf(value):
            return "Infinity" if value > 0 else "-Infinity"
        return repr(value)
    if isinstance(value, int | decimal.Decimal):
        return str(value)
    if isinstance(value, datetime.datetime | datetime.date):
        return '"' + value.isoformat() + '"'
    text = str(value)
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def array_literals(arr: pa.Array) -> pa.Array:
    """List values as PostgreSQL array literals (``{1,2,NULL}``); nulls kept."""
    values = arr.to_pylist()
    return pa.array(
        [None if v is None else "{" + ",".join(_element(x) for x in v) + "}" for v in values],
        pa.large_string(),
    )


def copy_arrays(table: pa.Table) -> tuple[list[pa.ChunkedArray | pa.Array], list[str]]:
    """The columns to COPY, in :func:`columns_for` order, and their names."""
    arrays: list[pa.ChunkedArray | pa.Array] = []
    names: list[str] = []
    for f, col in zip(table.schema, table.columns, strict=True):
        if f.name == GT_COLUMN and pa.types.is_struct(f.type):
            gt = col.combine_chunks()
            for i, (name, _sql) in enumerate(GT_COLUMNS):
                arrays.append(gt.field(i))
                names.append(name)
            continue
        if _is_binary(f.type):
            arrays.append(hex_bytea(col.combine_chunks()))
        elif _is_list(f.type):
            arrays.append(array_literals(col.combine_chunks()))
        else:
            arrays.append(col)
        names.append(f.name)
    return arrays, names


def encode_csv(table: pa.Table, *, seq_start: int | None = None) -> bytes:
    """``table``'s rows for ``COPY ... FROM STDIN (FORMAT csv)``: no header, NULL as an
    unquoted empty field, every string quoted. With ``seq_start``, a last column numbers
    the rows from it (the upsert staging table's :data:`SEQ_COLUMN`)."""
    arrays, names = copy_arrays(table)
    if seq_start is not None:
        arrays.append(pa.array(np.arange(seq_start, seq_start + table.num_rows, dtype=np.int64)))
        names.append(SEQ_COLUMN)
    out = io.BytesIO()
    pacsv.write_csv(
        pa.table(arrays, names=names),
        out,
        pacsv.WriteOptions(include_header=False, quoting_style="needed"),
    )
    return out.getvalue()


def column_names(columns: Sequence[PgColumn]) -> list[str]:
    return [c.name for c in columns]
