"""The rows of a write task that the target table would refuse: ``consumer=postgres``'s
:meth:`~sink.consumers.consumer_kind.ConsumerKind.validate`.

A pure function of the rows and the settings: the table's columns and unique indexes come
from the start check (:mod:`sink.consumers.postgres.postgres_target`), so every replay
classifies the same rows the same way. Each rule is what the server does when the rows
are copied (``COPY``, and for ``upsert`` the ``INSERT ... ON CONFLICT`` after it):

* text (``text``, ``varchar``, and their arrays): a NUL character (0x00), bytes that are
  not UTF-8, more characters than ``varchar(n)`` holds (counted in characters; an excess of
  spaces, which the server would cut silently, is refused too);
* integers into ``smallint``, ``integer``, ``bigint`` and ``numeric(p, s)``, decimals into
  ``numeric(p, s)`` and integer columns: a value out of the column's range (for
  ``numeric(p, s)``: an absolute value of ``10^(p-s)`` or more);
* dates and timestamps outside PostgreSQL's range (4714-11-24 BC to 5874897-12-31 for
  ``date``, to 294276-12-31 for timestamps);
* NaN and infinities: none (``real`` and ``double precision``, the only columns a float
  goes to, store them);
* NULL in a ``NOT NULL`` column, and NULL in an upsert key column (a NULL key matches no
  row, so each delivery would insert it again; unless the key's index is
  ``NULLS NOT DISTINCT``);
* a row that duplicates an earlier row of the same task on a unique index the start check
  recorded, where the insert would fail: in ``append`` mode any two rows; in ``upsert``
  mode the rows that remain once each key's last row has won (``DISTINCT ON``), on the
  indexes other than the key's.

What cannot be checked without I/O, and is left to the server (its refusal fails the
delivery, naming the row's key, see ``PostgresConsumer.deliver``): a duplicate of a row
already in the table, or of a row in another write task's part of the same bundle;
partial and expression indexes, and those on a column with a nondeterministic collation
or one the input does not fill; CHECK and foreign-key constraints, triggers; characters a
database in an encoding other than UTF8 cannot represent.

Each row gets one rejection: the first column at fault in the input's column order, then
duplicates. Rows rejected are left out when duplicates are looked for (they will not be
stored).
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from sink.consumers.consumer_kind import RowRejection
from sink.consumers.postgres.postgres_columns import (
    USECS_PER_DAY,
    date_text,
    is_large,
    is_temporal,
    is_text,
    list_parts,
    temporal_ints,
    timestamp_text,
)
from sink.consumers.postgres.postgres_options import KEY_COLUMNS, PostgresSettings
from sink.consumers.postgres.postgres_target import TargetColumn, UniqueIndex, created_table
from state.records.gt import GT_COLUMN

# PostgreSQL's ranges: dates from Julian day 0 (4714-11-24 BC) to 5874897-12-31, timestamps
# from the same day to the end of 294276 (datatype/timestamp.h), here from 1970-01-01.
FIRST_DAY = -2_440_588
LAST_DAY = 2_145_042_905
FIRST_US = FIRST_DAY * USECS_PER_DAY
END_US = 9_224_318_016_000_000_000  # 294277-01-01 00:00: the first instant past the range
INTEGER_RANGES = {
    "int2": (-(2**15), 2**15 - 1),
    "int4": (-(2**31), 2**31 - 1),
    "int8": (-(2**63), 2**63 - 1),
}
_UNIT_US = {"s": 1_000_000, "ms": 1_000, "us": 1}
_SHOWN = 40  # characters of a value shown in a reason

Faults = Iterator[tuple[int, str]]
"""(index, reason) of the values at fault, in index order."""


def validate(settings: PostgresSettings, table: pa.Table) -> list[RowRejection]:
    """The rows of ``table`` the target table would refuse (see the module docstring),
    one :class:`RowRejection` per row, in row order."""
    if table.num_rows == 0:
        return []
    columns, indexes = target_of(settings, table.schema)
    by_name = {c.name: c for c in columns}
    inputs = input_columns(table)
    null_keys_match = any(
        not ix.nulls_distinct and set(ix.columns) == set(settings.key_columns) for ix in indexes
    )
    found: dict[int, RowRejection] = {}
    for name, arr in inputs:
        target = by_name.get(name)
        if target is None:  # the start check refuses inputs the table lacks
            continue
        key = settings.mode == "upsert" and name in settings.key_columns and not null_keys_match
        for row, reason in column_faults(arr, target, upsert_key=key):
            if row not in found:
                found[row] = RowRejection(row, name, reason)
    values = dict(inputs)
    for row, rejection in duplicates(settings, indexes, values, set(found)):
        found[row] = rejection
    return [found[row] for row in sorted(found)]


def target_of(
    settings: PostgresSettings, schema: pa.Schema
) -> tuple[tuple[TargetColumn, ...], tuple[UniqueIndex, ...]]:
    """The table's columns and unique indexes: as the start check recorded them, or, for
    settings it did not complete, those of the table ``createTable`` makes."""
    if settings.columns:
        return settings.columns, settings.unique_indexes
    return created_table(schema, settings.key_columns)


def input_columns(table: pa.Table) -> list[tuple[str, pa.Array]]:
    """The input's columns as the table's: each one whole, ``gt`` as its four columns."""
    out: list[tuple[str, pa.Array]] = []
    for field, column in zip(table.schema, table.columns, strict=True):
        arr = column.combine_chunks()
        if field.name == GT_COLUMN and pa.types.is_struct(field.type):
            for i in range(field.type.num_fields):
                out.append((f"{GT_COLUMN}_{field.type.field(i).name}", arr.field(i)))
            continue
        out.append((field.name, arr))
    return out


# --- one column ---------------------------------------------------------------------------


def column_faults(arr: pa.Array, target: TargetColumn, *, upsert_key: bool = False) -> Faults:
    """The rows whose value in ``arr`` the column ``target`` refuses, first fault first."""
    faults: dict[int, str] = {}
    if (upsert_key or target.not_null) and arr.null_count:
        reason = (
            f"NULL in key column {target.name} ({KEY_COLUMNS.name}): a NULL key matches no "
            "row, so the upsert would insert it again on every delivery"
            if upsert_key
            else "NULL in a NOT NULL column"
        )
        for null in np.flatnonzero(arr.is_null().to_numpy(zero_copy_only=False)):
            faults[int(null)] = reason
    if pa.types.is_list(arr.type) or pa.types.is_large_list(arr.type):
        values, offsets = list_parts(arr)
        if len(values):
            valid = arr.is_valid().to_numpy(zero_copy_only=False)
            rows = np.repeat(np.arange(len(arr)), np.diff(offsets))
            for index, reason in value_faults(values, target):
                row = int(rows[index])
                if valid[row]:
                    faults.setdefault(row, f"array element {index - offsets[row] + 1}: {reason}")
    else:
        for row, reason in value_faults(arr, target):
            faults.setdefault(row, reason)
    for row in sorted(faults):
        yield row, faults[row]


def value_faults(values: pa.Array, target: TargetColumn) -> Faults:
    """The values (scalars: a column's, or an array column's elements) ``target`` refuses."""
    dtype = values.type
    check: Callable[[pa.Array, TargetColumn], Faults] | None = None
    if is_text(dtype):
        check = _text_faults
    elif pa.types.is_integer(dtype):
        check = _integer_faults
    elif pa.types.is_decimal(dtype):
        check = _decimal_faults
    elif is_temporal(dtype):
        check = _temporal_faults
    if check is None or len(values) == 0:
        return iter(())
    return check(values, target)


def _shown(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= _SHOWN else text[: _SHOWN - 1] + "…"


def _text_faults(values: pa.Array, target: TargetColumn) -> Faults:
    raw = values.view(pa.large_binary() if is_large(values.type) else pa.binary())
    nul = pc.fill_null(pc.match_substring(raw, "\x00"), False)
    bad: dict[int, str] = {
        int(i): "NUL character (0x00) in text"
        for i in np.flatnonzero(nul.to_numpy(zero_copy_only=False))
    }
    try:
        values.validate(full=True)
    except pa.ArrowInvalid:
        for i, value in enumerate(raw.to_pylist()):
            if value is None or i in bad:
                continue
            try:
                value.decode("utf-8")
            except UnicodeDecodeError as err:
                bad[i] = (
                    f"invalid UTF-8: byte 0x{value[err.start]:02x} at byte {err.start} "
                    f"({err.reason})"
                )
    if target.type_name == "varchar" and target.length is not None:
        too_long = pc.fill_null(pc.greater(pc.utf8_length(values), target.length), False)
        for long in np.flatnonzero(too_long.to_numpy(zero_copy_only=False)):
            if int(long) in bad:
                continue
            text = values[int(long)].as_py()
            reason = f"{len(text)} characters, more than {target.shown} holds"
            if set(text[target.length :]) == {" "}:
                reason += " (the excess is trailing spaces, which PostgreSQL would cut silently)"
            bad[int(long)] = reason
    for i in sorted(bad):
        yield i, bad[i]


def _out_of_range(values: pa.Array, low: Any, high: Any) -> np.ndarray:
    """Indices of the values below ``low`` or above ``high`` (pyarrow scalars, or None for
    no bound on that side)."""
    masks = []
    if low is not None:
        masks.append(pc.less(values, low))
    if high is not None:
        masks.append(pc.greater(values, high))
    if not masks:
        return np.array([], dtype=np.int64)
    mask = masks[0] if len(masks) == 1 else pc.or_(masks[0], masks[1])
    return np.flatnonzero(pc.fill_null(mask, False).to_numpy(zero_copy_only=False))


def _bounds(target: TargetColumn) -> tuple[int | decimal.Decimal, int | decimal.Decimal] | None:
    """The closed range of values ``target`` takes (integers, numeric(p, s)), or None."""
    if target.type_name in INTEGER_RANGES:
        return INTEGER_RANGES[target.type_name]
    if target.type_name == "numeric" and target.precision is not None:
        # below 10^(p-s) in absolute value, in steps of 10^-s: the largest is 10^(p-s) - 10^-s
        scale = target.scale or 0
        step = decimal.Decimal(1).scaleb(-scale)
        top = decimal.Decimal(10) ** (target.precision - scale) - step
        return -top, top
    return None


def _range_text(target: TargetColumn) -> str:
    if target.type_name == "numeric":
        digits = (target.precision or 0) - (target.scale or 0)
        return f"absolute values below 10^{digits}"
    low, high = INTEGER_RANGES[target.type_name]
    return f"{low} to {high}"


def _integer_faults(values: pa.Array, target: TargetColumn) -> Faults:
    bounds = _bounds(target)
    if bounds is None:
        return
    low, high = bounds
    signed = pa.types.is_signed_integer(values.type)
    wide = values.cast(pa.int64() if signed else pa.uint64())
    kind_low, kind_high = (-(2**63), 2**63 - 1) if signed else (0, 2**64 - 1)
    # bounds outside what the input type holds can never be passed: no comparison needed
    lo = math.ceil(low)
    hi = math.floor(high)
    low_scalar = pa.scalar(lo, wide.type) if lo > kind_low else None
    high_scalar = pa.scalar(hi, wide.type) if hi < kind_high else None
    for i in _out_of_range(wide, low_scalar, high_scalar):
        value = wide[int(i)].as_py()
        yield int(i), f"{value} is out of range for {target.shown} ({_range_text(target)})"


def _decimal_faults(values: pa.Array, target: TargetColumn) -> Faults:
    bounds = _bounds(target)
    if bounds is None:
        return
    low, high = bounds
    dtype = values.type
    biggest = decimal.Decimal(10) ** (dtype.precision - dtype.scale)  # exclusive, in the input

    def scalar(bound: int | decimal.Decimal) -> Any:
        # a bound at or past what the input type holds is never passed
        if abs(bound) >= biggest:
            return None
        exact = decimal.Decimal(bound).quantize(decimal.Decimal(1).scaleb(-dtype.scale))
        return pa.scalar(exact, dtype)

    for i in _out_of_range(values, scalar(low), scalar(high)):
        value = values[int(i)].as_py()
        yield int(i), f"{value} is out of range for {target.shown} ({_range_text(target)})"


def _temporal_faults(values: pa.Array, target: TargetColumn) -> Faults:
    ints, unit = temporal_ints(values)
    if unit == "d":
        for i in _out_of_range(ints, pa.scalar(FIRST_DAY), pa.scalar(LAST_DAY)):
            day = ints[int(i)].as_py()
            yield (
                int(i),
                f"{date_text(day)} is out of range for {target.shown} "
                f"({date_text(FIRST_DAY)} to {date_text(LAST_DAY)})",
            )
        return
    if unit == "ns":
        return  # int64 nanoseconds span 1677 to 2262
    scale = _UNIT_US[unit]
    low = -(-FIRST_US // scale)  # the first value in this unit at or after FIRST_US
    high = (END_US - 1) // scale
    int64_max = 2**63 - 1
    high_scalar = pa.scalar(high) if high < int64_max else None
    for i in _out_of_range(ints, pa.scalar(low), high_scalar):
        micros = ints[int(i)].as_py() * scale
        yield (
            int(i),
            f"{timestamp_text(micros)} is out of range for {target.shown} "
            f"({timestamp_text(FIRST_US)} to {timestamp_text(END_US - 1)})",
        )


# --- duplicates on unique indexes -------------------------------------------------------


_NAN = ("NaN",)  # PostgreSQL's NaN equals NaN; a stand-in that does too


def comparable(arr: pa.Array) -> list[Any]:
    """Each value of ``arr`` as a hashable value equal to another exactly when PostgreSQL
    finds the two equal (deterministic collations: text by bytes; -0 = 0, NaN = NaN;
    arrays element by element, NULL elements equal). None for NULL."""
    dtype = arr.type
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        values, offsets = list_parts(arr)
        elements = comparable(values)
        valid = arr.is_valid().to_pylist()
        return [
            tuple(elements[offsets[i] : offsets[i + 1]]) if ok else None
            for i, ok in enumerate(valid)
        ]
    if is_text(dtype) or pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
        raw: list[Any] = arr.view(pa.large_binary() if is_large(dtype) else pa.binary()).to_pylist()
        return raw
    if is_temporal(dtype):
        ints, _unit = temporal_ints(arr)
        return list(ints.to_pylist())
    if pa.types.is_floating(dtype):
        return [
            None if v is None else _NAN if math.isnan(v) else (0.0 if v == 0 else v)
            for v in arr.to_pylist()
        ]
    return list(arr.to_pylist())


def duplicates(
    settings: PostgresSettings,
    indexes: Sequence[UniqueIndex],
    values: dict[str, pa.Array],
    refused: set[int],
) -> Iterator[tuple[int, RowRejection]]:
    """The rows (not in ``refused``) that would fail the insert on a unique index."""
    upsert = settings.mode == "upsert"
    key_set = set(settings.key_columns)
    arbiters = [ix for ix in indexes if upsert and set(ix.columns) == key_set]
    checked = [
        ix
        for ix in indexes
        if ix not in arbiters and ix.columns and all(c in values for c in ix.columns)
    ]
    if not checked:
        return
    cache: dict[str, list[Any]] = {}

    def column(name: str) -> list[Any]:
        if name not in cache:
            cache[name] = comparable(values[name])
        return cache[name]

    keys = [_index_keys(ix, [column(c) for c in ix.columns]) for ix in checked]
    n = len(next(iter(values.values())))
    live = [row for row in range(n) if row not in refused]
    if not upsert:
        yield from _collisions(checked, keys, live)
        return
    # upsert: each key's last live row is the one inserted; a collision among those is
    # refused, which makes the key's previous row the one inserted: again until none
    upsert_key = list(zip(*(column(c) for c in settings.key_columns), strict=True))
    while True:
        last: dict[Any, int] = {}
        for row in live:
            last[upsert_key[row]] = row
        survivors = sorted(last.values())
        found = list(_collisions(checked, keys, survivors))
        if not found:
            return
        yield from found
        gone = {row for row, _ in found}
        live = [row for row in live if row not in gone]


def _index_keys(ix: UniqueIndex, columns: list[list[Any]]) -> list[Any]:
    """Each row's key on ``ix``; None where a NULL makes it collide with nothing."""
    out: list[Any] = []
    for key in zip(*columns, strict=True):
        out.append(None if ix.nulls_distinct and any(v is None for v in key) else key)
    return out


def _collisions(
    indexes: Sequence[UniqueIndex], keys: Sequence[list[Any]], rows: Sequence[int]
) -> Iterator[tuple[int, RowRejection]]:
    """Rows (in ``rows`` order) whose key on an index equals an earlier stored row's."""
    seen: list[dict[Any, int]] = [{} for _ in indexes]
    for row in rows:
        hit = next(
            (
                (ix, seen[j][keys[j][row]], keys[j][row])
                for j, ix in enumerate(indexes)
                if keys[j][row] is not None and keys[j][row] in seen[j]
            ),
            None,
        )
        if hit is None:
            for j in range(len(indexes)):
                if keys[j][row] is not None:
                    seen[j][keys[j][row]] = row
            continue
        ix, first, key = hit
        column = ix.columns[0] if len(ix.columns) == 1 else None
        shown = ", ".join(_shown(_plain(v)) for v in key)
        yield (
            row,
            RowRejection(
                row,
                column,
                f"duplicate of row {first} on unique index {ix.name}: "
                f"key ({', '.join(ix.columns)})=({shown})",
            ),
        )


def _plain(value: Any) -> Any:
    """A comparable value as a user wrote it (bytes of text decoded, NaN)."""
    if value is _NAN:
        return float("nan")
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return value
    return value
