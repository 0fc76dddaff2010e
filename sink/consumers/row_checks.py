"""Row checks that several consumer kinds' ``validate`` share: pure functions of Arrow tables.

Each returns :class:`~sink.consumers.consumer_kind.RowRejection` s by row index. They look
at a column as a whole first (one pass in Arrow's C++), and only when that finds something
do they find the rows one by one, so a table without bad rows costs one scan per column.

* :func:`invalid_utf8`: string values whose bytes are not UTF-8 (Spark's ``StringType``
  holds whatever bytes a ``cast(binary as string)`` gave it; JSON, Iceberg and PostgreSQL
  text need UTF-8), top-level or nested in structs, lists and maps;
* :func:`nulls_where_required`: nulls in the columns (or struct fields, ``a.b``) a target
  requires.
"""

from __future__ import annotations

from collections.abc import Iterable

import pyarrow as pa
import pyarrow.compute as pc

from sink.consumers.consumer_kind import RowRejection


def _has_string(dtype: pa.DataType) -> bool:
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return True
    if pa.types.is_string_view(dtype):
        return True
    if pa.types.is_struct(dtype):
        return any(_has_string(dtype.field(i).type) for i in range(dtype.num_fields))
    if pa.types.is_map(dtype):
        return _has_string(dtype.key_type) or _has_string(dtype.item_type)
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return _has_string(dtype.value_type)
    return False


def _valid(array: pa.Array) -> bool:
    try:
        array.validate(full=True)
    except pa.ArrowInvalid:
        return False
    return True


def invalid_utf8_rows(column: pa.ChunkedArray | pa.Array) -> list[int]:
    """Indices of the values of ``column`` (any type holding strings) with bytes that are
    not UTF-8 somewhere in them."""
    chunks = column.chunks if isinstance(column, pa.ChunkedArray) else [column]
    rows: list[int] = []
    start = 0
    for chunk in chunks:
        if not _valid(chunk):
            # a slice shares its children whole; a row taken out has only its own values
            rows.extend(
                start + i
                for i in range(len(chunk))
                if not _valid(chunk.take(pa.array([i], pa.int64())))
            )
        start += len(chunk)
    return rows


def invalid_utf8(
    table: pa.Table, reason: str, columns: Iterable[str] | None = None
) -> list[RowRejection]:
    """A rejection (with ``reason``) for every row whose value in one of ``columns`` (by
    default every column holding strings) is not valid UTF-8, in column order."""
    names = list(columns) if columns is not None else table.column_names
    found: list[RowRejection] = []
    for name in names:
        column = table.column(name)
        if not _has_string(column.type):
            continue
        found.extend(RowRejection(row, name, reason) for row in invalid_utf8_rows(column))
    return found


def nulls_where_required(
    table: pa.Table, required: Iterable[str], reason: str
) -> list[RowRejection]:
    """A rejection for every row with a null in a required column or struct field.

    ``required`` holds column names and dotted paths of struct fields (``address.city``);
    a field counts only where its struct is not null (a null optional struct has no fields
    to require; a required struct is listed itself).
    """
    found: list[RowRejection] = []
    for path in required:
        names = path.split(".")
        if names[0] not in table.column_names:
            continue
        column: pa.ChunkedArray = table.column(names[0])
        parent_null: pa.ChunkedArray | None = None
        for name in names[1:]:
            if not pa.types.is_struct(column.type) or column.type.get_field_index(name) < 0:
                break
            parent_null = (
                pc.is_null(column)
                if parent_null is None
                else pc.or_(parent_null, pc.is_null(column))
            )
            column = pc.struct_field(column, [column.type.get_field_index(name)])
        else:
            nulls = pc.is_null(column)
            if parent_null is not None:
                nulls = pc.and_(nulls, pc.invert(parent_null))
            if pc.any(nulls).as_py():
                rows = pc.indices_nonzero(nulls).to_pylist()
                found.extend(RowRejection(row, path, reason) for row in rows)
    return found
