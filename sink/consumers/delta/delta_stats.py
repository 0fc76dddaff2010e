"""``consumer=delta``: a data file's Delta statistics, from its Parquet footer only.

A Delta ``add`` action may carry ``stats``: ``{"numRecords": n, "minValues": {...},
"maxValues": {...}, "nullCount": {...}}``, nested like the table's structs. Readers skip
files by them, so every value given must be a true bound: a column whose bound the footer
cannot give exactly is left out (a missing statistic only means "unknown").

:func:`delta_stats` is a pure function of the footer (:class:`pyarrow.parquet.FileMetaData`)
and the file's Arrow schema; it never reads a row. What it records:

* ``numRecords``: the footer's row count;
* ``nullCount``: for every leaf column that is not inside a list or a map (a leaf inside
  a struct counts the rows where it or its struct is null, as Delta's ``a.b`` does);
* ``minValues`` / ``maxValues``: for integers, booleans, dates, strings (a minimum longer
  than :data:`STRING_PREFIX` characters is cut to that prefix, still a lower bound; such
  a maximum is left out) and timestamps with a time zone (written in milliseconds as
  delta-rs writes them: the minimum rounded down, the maximum up). Floating point values
  (NaN is not ordered), decimals, binary, timestamps without a time zone and anything
  inside a list or map are left out.
"""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

STRING_PREFIX = 32
"""Characters of a string statistic kept (Delta's own writers keep 32)."""

_MS = dt.timedelta(milliseconds=1)


def delta_stats(metadata: pq.FileMetaData, schema: pa.Schema) -> str:
    """The ``stats`` JSON of a Delta ``add`` action for the Parquet file whose footer is
    ``metadata`` and whose Arrow schema is ``schema``."""
    found = _Stats(metadata)
    leaf = 0
    for field in schema:
        leaf = found.collect(field, leaf, (field.name,))
    stats = {
        "numRecords": metadata.num_rows,
        "minValues": found.mins,
        "maxValues": found.maxs,
        "nullCount": found.nulls,
    }
    return json.dumps(stats, separators=(",", ":"))


class _Stats:
    """The statistics gathered from one footer, nested by column path."""

    def __init__(self, metadata: pq.FileMetaData) -> None:
        self.metadata = metadata
        self.mins: dict[str, Any] = {}
        self.maxs: dict[str, Any] = {}
        self.nulls: dict[str, Any] = {}

    def collect(self, field: pa.Field, leaf: int, path: tuple[str, ...]) -> int:
        """Record the statistics of ``field`` (whose first Parquet leaf column is
        ``leaf``, its path ``path``); the index of the leaf after it."""
        kind = field.type
        if pa.types.is_struct(kind):
            for child in kind:
                leaf = self.collect(child, leaf, (*path, child.name))
            return leaf
        if not _is_primitive(kind):
            return leaf + _leaf_count(kind)
        count, low, high = _column_stats(self.metadata, leaf)
        if count is not None:
            _put(self.nulls, path, count)
        lower = None if low is None else _lower(kind, low)
        if lower is not None:
            _put(self.mins, path, lower)
        upper = None if high is None else _upper(kind, high)
        if upper is not None:
            _put(self.maxs, path, upper)
        return leaf + 1


def _is_primitive(kind: pa.DataType) -> bool:
    return not (
        pa.types.is_list(kind)
        or pa.types.is_large_list(kind)
        or pa.types.is_fixed_size_list(kind)
        or pa.types.is_map(kind)
        or pa.types.is_struct(kind)
    )


def _leaf_count(kind: pa.DataType) -> int:
    """How many Parquet leaf columns a (nested) Arrow type is written as."""
    if pa.types.is_struct(kind):
        return sum(_leaf_count(child.type) for child in kind)
    if pa.types.is_map(kind):
        return _leaf_count(kind.key_type) + _leaf_count(kind.item_type)
    if pa.types.is_list(kind) or pa.types.is_large_list(kind) or pa.types.is_fixed_size_list(kind):
        return _leaf_count(kind.value_type)
    return 1


def _column_stats(metadata: pq.FileMetaData, leaf: int) -> tuple[int | None, Any, Any]:
    """Null count, minimum and maximum of leaf column ``leaf`` over every row group; None
    where a row group does not say (a row group of nulls only has no bounds, and needs
    none)."""
    count = 0
    low: Any = None
    high: Any = None
    bounded = True
    for i in range(metadata.num_row_groups):
        stats = metadata.row_group(i).column(leaf).statistics
        if stats is None or not stats.has_null_count:
            return None, None, None
        count += stats.null_count
        if not stats.has_min_max:
            bounded = bounded and stats.null_count == metadata.row_group(i).num_rows
            continue
        low = stats.min if low is None else min(low, stats.min)
        high = stats.max if high is None else max(high, stats.max)
    if not bounded:
        return count, None, None
    return count, low, high


def _lower(kind: pa.DataType, value: Any) -> Any:
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return value[:STRING_PREFIX]
    if pa.types.is_timestamp(kind):
        return _timestamp(kind, value, up=False)
    return _plain(kind, value)


def _upper(kind: pa.DataType, value: Any) -> Any:
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        return value if len(value) <= STRING_PREFIX else None
    if pa.types.is_timestamp(kind):
        return _timestamp(kind, value, up=True)
    return _plain(kind, value)


def _plain(kind: pa.DataType, value: Any) -> Any:
    if pa.types.is_integer(kind) or pa.types.is_boolean(kind):
        return value
    if pa.types.is_date32(kind):
        return value.isoformat()
    return None


def _timestamp(kind: pa.TimestampType, value: Any, *, up: bool) -> str | None:
    """A UTC timestamp in milliseconds, ``2024-01-01T01:02:03.456Z``, rounded up for a
    maximum (a bound must hold every value of the file); None without a time zone."""
    if kind.tz is None or not isinstance(value, dt.datetime) or value.tzinfo is None:
        return None
    utc = value.astimezone(dt.UTC)
    ms = utc.replace(microsecond=utc.microsecond // 1000 * 1000)
    if up and ms != utc:
        ms += _MS
    return ms.strftime("%Y-%m-%dT%H:%M:%S.") + f"{ms.microsecond // 1000:03d}Z"


def _put(target: dict[str, Any], path: tuple[str, ...], value: Any) -> None:
    for name in path[:-1]:
        target = target.setdefault(name, {})
    target[path[-1]] = value
