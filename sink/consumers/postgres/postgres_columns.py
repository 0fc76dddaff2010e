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
(hex, ``\\x...``, vectorised with numpy), arrays (array literals, per row) and the rare
date or timestamp column with a value outside years 1 to 9999 (PostgreSQL's text, ``BC``
included, per row) are converted first.
"""

from __future__ import annotations

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


MAX_IDENTIFIER_BYTES = 63
"""PostgreSQL keeps the first 63 bytes of a longer name (NAMEDATALEN - 1), with a NOTICE
only: the name would silently be another, and two long names alike in their first 63 bytes
one."""


def identifier_too_long(name: str) -> str | None:
    """Why ``name`` cannot be a PostgreSQL identifier as it is (None if it can)."""
    size = len(name.encode("utf-8"))
    if size <= MAX_IDENTIFIER_BYTES:
        return None
    return (
        f"names of at most {MAX_IDENTIFIER_BYTES} bytes: {name!r} is {size} bytes in UTF-8, "
        f"and PostgreSQL would cut it to its first {MAX_IDENTIFIER_BYTES}"
    )


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
    for c in out:
        if (too_long := identifier_too_long(c.name)) is not None:
            raise ConfigError(
                c.name,
                c.name,
                f"column {too_long}; rename it in the query (alias)",
                where="barrier",
            )
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


def arrow_schema_of(schema: Any) -> pa.Schema:
    """A Spark ``StructType`` as the Arrow schema its rows reach the sink in; a column
    Arrow has no type for is refused naming it."""
    from pyspark.sql.pandas.types import to_arrow_type

    fields = []
    for f in schema.fields:
        try:
            dtype = to_arrow_type(f.dataType, timezone="UTC")
        except Exception as err:
            raise refused(f.name, f.dataType.simpleString()) from err
        fields.append(pa.field(f.name, dtype))
    return pa.schema(fields)


def columns_for_spark(schema: Any) -> tuple[PgColumn, ...]:
    """:func:`columns_for` of a Spark ``StructType`` (checked when the query starts)."""
    return columns_for(arrow_schema_of(schema))


@dataclass(frozen=True)
class InputColumn:
    """One column the sink's input fills: the table's column name, its Arrow type, and its
    Spark type as Spark writes it (``decimal(12,4)``; ``bigint (gt.epoch)`` for gt's)."""

    name: str
    dtype: pa.DataType
    spark: str


def input_columns_spark(schema: Any) -> list[InputColumn]:
    """The table's columns a Spark ``StructType`` fills, in order (``gt`` as four)."""
    arrow = arrow_schema_of(schema)
    out: list[InputColumn] = []
    for f, field in zip(schema.fields, arrow, strict=True):
        if f.name == GT_COLUMN and pa.types.is_struct(field.type):
            for sub, sub_arrow in zip(f.dataType.fields, field.type, strict=True):
                spark = f"{sub.dataType.simpleString()} ({GT_COLUMN}.{sub.name})"
                out.append(InputColumn(f"{GT_COLUMN}_{sub.name}", sub_arrow.type, spark))
            continue
        out.append(InputColumn(f.name, field.type, f.dataType.simpleString()))
    return out


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


def _element(value: Any) -> str:
    """A boolean or number as an array element."""
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
    return str(value)


def _quoted(text: bytes) -> bytes:
    return b'"' + text.replace(b"\\", b"\\\\").replace(b'"', b'\\"') + b'"'


def _element_texts(values: pa.Array) -> list[bytes]:
    """Each of ``values`` (an array's elements) as it is written in an array literal."""
    if is_text(values.type):
        raw = values.view(pa.large_binary() if is_large(values.type) else pa.binary())
        return [b"NULL" if v is None else _quoted(v) for v in raw.to_pylist()]
    if is_temporal(values.type):
        return [b"NULL" if v is None else _quoted(v.encode()) for v in temporal_texts(values)]
    return [_element(v).encode() for v in values.to_pylist()]


def list_parts(arr: pa.Array) -> tuple[pa.Array, np.ndarray]:
    """The elements of the list array ``arr`` and its offsets into them (``n + 1`` of
    them): row ``i`` holds elements ``offsets[i]`` to ``offsets[i + 1]``. Elements under a
    null row are included (and belong to no value)."""
    offsets = np.asarray(arr.offsets.to_numpy(zero_copy_only=False), dtype=np.int64)
    start, end = int(offsets[0]), int(offsets[-1])
    return arr.values.slice(start, end - start), offsets - start


def array_literals(arr: pa.Array) -> pa.Array:
    """List values as PostgreSQL array literals (``{1,2,NULL}``); nulls kept.

    Built as bytes: a string element's bytes go to the server as they are (bytes that are
    not UTF-8 are the server's to refuse, and validation's to find first; decoding them
    here would fail the whole delivery instead)."""
    values, offsets = list_parts(arr)
    texts = _element_texts(values)
    valid = arr.is_valid().to_pylist()
    literals = [
        b"{" + b",".join(texts[offsets[i] : offsets[i + 1]]) + b"}" if ok else None
        for i, ok in enumerate(valid)
    ]
    return pa.array(literals, pa.large_binary()).view(pa.large_string())


# --- dates and timestamps ---------------------------------------------------------------

USECS_PER_DAY = 86_400_000_000
_UNIT_US = {"s": 1_000_000, "ms": 1_000, "us": 1}
# pyarrow's CSV writer formats dates and times of years 1 to 9999 as PostgreSQL reads them;
# outside (BC years, years past 9999) they are formatted here, one by one.
_SAFE_DAYS = (-719_162, 2_932_896)  # 0001-01-01 and 9999-12-31
_SAFE_US = (_SAFE_DAYS[0] * USECS_PER_DAY, (_SAFE_DAYS[1] + 1) * USECS_PER_DAY - 1)


def is_text(dtype: pa.DataType) -> bool:
    return bool(pa.types.is_string(dtype) or pa.types.is_large_string(dtype))


def is_large(dtype: pa.DataType) -> bool:
    return bool(pa.types.is_large_string(dtype) or pa.types.is_large_binary(dtype))


def is_temporal(dtype: pa.DataType) -> bool:
    return bool(pa.types.is_date(dtype) or pa.types.is_timestamp(dtype))


def civil_date(days: int) -> tuple[int, int, int]:
    """(year, month, day) of ``days`` after 1970-01-01 in the proleptic Gregorian calendar,
    years counted astronomically (0 is 1 BC), as Arrow and PostgreSQL both count dates."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1_460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    return yoe + era * 400 + (month <= 2), month, day


def date_text(days: int) -> str:
    """A date as PostgreSQL writes and reads it (``4714-11-24 BC``, ``10000-01-01``)."""
    year, month, day = civil_date(days)
    shown = year if year > 0 else 1 - year
    return f"{shown:04d}-{month:02d}-{day:02d}" + ("" if year > 0 else " BC")


def timestamp_text(micros: int, *, utc: bool = False) -> str:
    """Microseconds since 1970-01-01 00:00 as PostgreSQL writes and reads a timestamp
    (``+00`` with ``utc``): ``4714-11-24 00:00:00.000000 BC``."""
    days, rest = divmod(micros, USECS_PER_DAY)
    seconds, fraction = divmod(rest, 1_000_000)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    date = date_text(days)
    day, bc = (date[:-3], " BC") if date.endswith(" BC") else (date, "")
    zone = "+00" if utc else ""
    return f"{day} {hours:02d}:{minutes:02d}:{secs:02d}.{fraction:06d}{zone}{bc}"


def temporal_ints(arr: pa.Array) -> tuple[pa.Array, str]:
    """A date or timestamp array as integers and their unit: days (``"d"``) for dates,
    else the timestamp's own unit (``"s"``, ``"ms"``, ``"us"``, ``"ns"``)."""
    if pa.types.is_date32(arr.type):
        return arr.cast(pa.int32()).cast(pa.int64()), "d"
    if pa.types.is_date64(arr.type):  # whole days in milliseconds
        return arr.cast(pa.date32(), safe=False).cast(pa.int32()).cast(pa.int64()), "d"
    return arr.cast(pa.int64()), arr.type.unit


def temporal_texts(arr: pa.Array) -> list[str | None]:
    """Each date or timestamp of ``arr`` as PostgreSQL reads it, whatever its year."""
    ints, unit = temporal_ints(arr)
    if unit == "d":
        return [None if v is None else date_text(v) for v in ints.to_pylist()]
    utc = arr.type.tz is not None
    if unit == "ns":
        return [None if v is None else timestamp_text(v // 1000, utc=utc) for v in ints.to_pylist()]
    scale = _UNIT_US[unit]
    return [None if v is None else timestamp_text(v * scale, utc=utc) for v in ints.to_pylist()]


def _outside_safe_years(arr: pa.Array) -> bool:
    ints, unit = temporal_ints(arr)
    low, high = pc.min_max(ints).values()
    if low.as_py() is None:
        return False
    if unit == "d":
        lo, hi = _SAFE_DAYS
        return bool(low.as_py() < lo or high.as_py() > hi)
    if unit == "ns":
        return False  # int64 nanoseconds span 1677 to 2262
    scale = _UNIT_US[unit]
    return bool(low.as_py() * scale < _SAFE_US[0] or high.as_py() * scale > _SAFE_US[1])


def temporal_column(arr: pa.Array) -> pa.Array:
    """A date or timestamp column for the CSV writer: as it is when every value lies in
    years 1 to 9999 (pyarrow formats those), else as PostgreSQL's text of each value
    (pyarrow writes year 0 and earlier with a minus sign and wraps years past 32767)."""
    if not _outside_safe_years(arr):
        return arr
    return pa.array(temporal_texts(arr), pa.large_string())


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
        elif is_temporal(f.type):
            arrays.append(temporal_column(col.combine_chunks()))
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
