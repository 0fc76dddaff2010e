"""Dead letters: what a dead-letter file holds.

A bundle's file holds the rows the consumer's target refused, as they were (the sink's
input columns, names and types, every field nullable), then ``_gtb_bundle``,
``_gtb_reason`` and ``_gtb_column`` (:data:`ADDED_COLUMNS`); its name is the bundle's
(:func:`dead_letter_name`) and its Parquet metadata names the pipeline and the bundle
(:data:`PIPELINE_KEY`, :data:`BUNDLE_KEY`). Here: those names, the rows a task stages as
its dead-letter part (:func:`rejected_rows`), the table a file holds
(:func:`dead_letter_table`), and rows as JSON (:func:`json_rows`: the topic's values
without a value column, ``gtbarrier deadletters``).
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import re
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

import pyarrow as pa

from sink.consumers.consumer_kind import RowRejection
from state.records.gt import GT_COLUMN

BUNDLE_COLUMN = "_gtb_bundle"
REASON_COLUMN = "_gtb_reason"
COLUMN_COLUMN = "_gtb_column"
ADDED_COLUMNS = (BUNDLE_COLUMN, REASON_COLUMN, COLUMN_COLUMN)
"""The columns a dead-letter file adds to the sink's input columns, in this order."""

PIPELINE_KEY = b"gtbarrier.pipeline"
BUNDLE_KEY = b"gtbarrier.bundle"
CREATED_KEY = b"gtbarrier.created"
"""When the file was written (Unix seconds): the age ``errors.deadLetter.retention`` counts."""
_FILE = re.compile(r"bundle-(\d{12})\.parquet")


def dead_letter_name(bundle_id: int) -> str:
    """The file of bundle ``bundle_id``'s dead letters: ``bundle-000000000007.parquet``."""
    return f"bundle-{bundle_id:012d}.parquet"


def bundle_of_name(name: str) -> int | None:
    """The bundle id in a dead-letter file's name (None if it is not one)."""
    m = _FILE.fullmatch(name)
    return int(m.group(1)) if m else None


# --- the rows ----------------------------------------------------------------------------


def first_rejections(rejections: Sequence[RowRejection]) -> list[RowRejection]:
    """One rejection per row (the first found), in row order."""
    first: dict[int, RowRejection] = {}
    for rejection in rejections:
        first.setdefault(rejection.row, rejection)
    return [first[row] for row in sorted(first)]


def rejected_rows(table: pa.Table, rejections: Sequence[RowRejection]) -> pa.Table:
    """The rows of ``table`` that ``rejections`` name, once each in row order, as they
    were, with ``_gtb_reason`` and ``_gtb_column`` (the first rejection of each row).

    Every field is made nullable, nested ones too (the names and types stay): a refused
    row may hold a null where the input's schema says there is none (Spark gives a null
    ``gt`` struct with null fields that its type declares not nullable), which Parquet
    would refuse to write.
    """
    first = first_rejections(rejections)
    rows = table.take(pa.array([r.row for r in first], pa.int64()))
    rows = rows.cast(nullable_schema(rows.schema))
    rows = rows.append_column(REASON_COLUMN, pa.array([r.reason for r in first], pa.string()))
    return rows.append_column(COLUMN_COLUMN, pa.array([r.column for r in first], pa.string()))


def nullable_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every field nullable, in structs, lists and maps too."""
    return pa.schema([_nullable(f) for f in schema], metadata=schema.metadata)


def _nullable(field: pa.Field) -> pa.Field:
    t = field.type
    if pa.types.is_struct(t):
        t = pa.struct([_nullable(t.field(i)) for i in range(t.num_fields)])
    elif pa.types.is_large_list(t):
        t = pa.large_list(_nullable(t.value_field))
    elif pa.types.is_list(t):
        t = pa.list_(_nullable(t.value_field))
    elif pa.types.is_map(t):
        t = pa.map_(t.key_field.type, _nullable(t.item_field))
    return field.with_type(t).with_nullable(True)


def dead_letter_table(staged: pa.Table, bundle_id: int) -> pa.Table:
    """A bundle's staged dead-letter rows as its file holds them: the input columns, then
    ``_gtb_bundle``, ``_gtb_reason``, ``_gtb_column``."""
    inputs = [n for n in staged.column_names if n not in ADDED_COLUMNS]
    bundle = pa.array([bundle_id] * staged.num_rows, pa.int64())
    return pa.Table.from_arrays(
        [
            *(staged.column(n) for n in inputs),
            bundle,
            staged.column(REASON_COLUMN),
            staged.column(COLUMN_COLUMN),
        ],
        names=[*inputs, *ADDED_COLUMNS],
    )


# --- the same rows in two attempts of a bundle ------------------------------------------------

NO_GT = ("no gt",)
"""The ``gt`` key of a row whose ``gt`` is null (every consumer refuses such a row)."""

Identity = tuple[Hashable, Hashable | None]
"""A row's identity across attempts of its bundle: its values (every column, strings as
their bytes, floats by their bit patterns) and its ``gt`` (None without a ``gt`` column;
:data:`NO_GT` when null)."""


def input_columns(table: pa.Table) -> list[str]:
    """The sink's input columns of a dead-letter table (staged part or file)."""
    return [n for n in table.column_names if n not in ADDED_COLUMNS]


def row_identities(table: pa.Table, columns: Sequence[str]) -> list[Identity]:
    """Per row of ``table``, its :data:`Identity` over ``columns``.

    Two attempts of a bundle compute the same rows when the query is deterministic, but
    their split among write tasks, and so their order, may differ: a row is matched first
    by its values (rows equal in every column are interchangeable), then, for a query
    changed between the attempts (an upgrade: other values for the same record), by the
    ``gt`` of the input record that produced it, where that ``gt`` is not shared
    (:func:`pairs`).
    """
    missing = [c for c in columns if c not in table.column_names]
    if missing:
        raise KeyError(f"columns {missing} are not among {table.column_names}")
    selected = table.select(list(columns))
    raw = selected.cast(_bytes_schema(selected.schema))
    values = [_frozen(row) for row in raw.to_pylist()]
    if GT_COLUMN not in columns:
        return [(v, None) for v in values]
    gts = [_gt_key(g) for g in raw.column(GT_COLUMN).to_pylist()]
    return list(zip(values, gts, strict=True))


def pairs(left: Sequence[Identity], right: Sequence[Identity]) -> dict[int, int]:
    """Pair the rows of ``left`` with those of ``right`` (index in ``left`` -> index in
    ``right``): by equal values first (rows equal in every column, ``gt`` included, are
    interchangeable); then, among the rows left, by equal ``gt`` only where exactly one row
    on each side holds it.

    Rows made from one input record (an explode, a flatMap, a join's fan-out) share its
    ``gt``: two such rows left over on one side could each be the other side's row, so the
    ``gt`` pairs neither of them (a wrong pair would keep a row out twice and another
    nowhere). Rows with a null ``gt`` (:data:`NO_GT`) left over pair with each other, one
    for one: the sink refuses every such row, so neither side ever delivers one, and a
    pair of them cannot keep a delivered row out (an upgraded query computes other values
    for its row without a ``gt`` as for any other).
    """
    paired = _equal_values(left, right)
    taken = set(paired.values())
    left_by_gt = _by_gt((i, left[i][1]) for i in range(len(left)) if i not in paired)
    right_by_gt = _by_gt((j, right[j][1]) for j in range(len(right)) if j not in taken)
    for gt, lefts in left_by_gt.items():
        rights = right_by_gt.get(gt, [])
        if len(lefts) == 1 and len(rights) == 1:
            paired[lefts[0]] = rights[0]
    taken = set(paired.values())
    no_gt_left = [i for i in range(len(left)) if i not in paired and left[i][1] == NO_GT]
    no_gt_right = [j for j in range(len(right)) if j not in taken and right[j][1] == NO_GT]
    paired.update(zip(no_gt_left, no_gt_right, strict=False))
    return paired


def _by_gt(rows: Iterable[tuple[int, Hashable | None]]) -> dict[Hashable, list[int]]:
    found: dict[Hashable, list[int]] = {}
    for index, gt in rows:
        if gt is not None and gt != NO_GT:
            found.setdefault(gt, []).append(index)
    return found


def unmatched(left: Sequence[Identity], right: Sequence[Identity]) -> tuple[list[int], list[int]]:
    """The indices of the rows of each side that :func:`pairs` leaves without a pair."""
    paired = pairs(left, right)
    taken = set(paired.values())
    return (
        [i for i in range(len(left)) if i not in paired],
        [j for j in range(len(right)) if j not in taken],
    )


def recorded_against(
    recorded: pa.Table,
    refused: pa.Table | None,
    accepted: Callable[[], Sequence[pa.Table]],
) -> tuple[int, list[Identity]]:
    """A bundle's dead-letter file (``recorded``, written by an earlier attempt) against
    this attempt's rows: ``refused``, its staged dead-letter rows (None: none), and
    ``accepted()``, the rows of its parts (read only when a row of the file is not among
    ``refused``). Returns ``(unrecorded, kept_out)``: how many rows refused now the file
    lacks, and the identities of this attempt's accepted rows that the file holds (to be
    kept out of its delivery).

    The file's rows are paired with this attempt's rows, refused and accepted together
    (:func:`pairs`): pairing them with the refused rows alone would let a shared ``gt``
    pair the file's row with another row of its record that is refused now, while the
    file's row itself is accepted now (delivered and a dead letter, and the other row in
    neither). A row of the file that pairs with nothing stays a dead letter and keeps
    nothing out.
    """
    columns = input_columns(recorded)
    held = row_identities(recorded, columns)
    now = row_identities(refused, columns) if refused is not None else []
    by_value = _equal_values(held, now)
    rest = [i for i in range(len(held)) if i not in by_value]
    if not rest:
        return len(now) - len(by_value), []
    matched_now = set(by_value.values())
    refused_left = [now[j] for j in range(len(now)) if j not in matched_now]
    current = refused_left + [row for table in accepted() for row in row_identities(table, columns)]
    paired = set(pairs([held[i] for i in rest], current).values())
    unrecorded = sum(1 for k in range(len(refused_left)) if k not in paired)
    kept_out = [current[k] for k in sorted(paired) if k >= len(refused_left)]
    return unrecorded, kept_out


def _equal_values(left: Sequence[Identity], right: Sequence[Identity]) -> dict[int, int]:
    """:func:`pairs` by equal values alone."""
    by_value: dict[Hashable, list[int]] = {}
    for j, (value, _) in enumerate(right):
        by_value.setdefault(value, []).append(j)
    paired: dict[int, int] = {}
    for i, (value, _) in enumerate(left):
        candidates = by_value.get(value)
        if candidates:
            paired[i] = candidates.pop()
    return paired


def without_rows(
    tables: Sequence[pa.Table], columns: Sequence[str], out: Sequence[Identity]
) -> list[pa.Table]:
    """``tables`` (a bundle's parts) without one row for each identity of ``out``, paired
    across all of them (:func:`pairs`); an identity no row pairs with takes nothing out."""
    ids = [row_identities(t, columns) for t in tables]
    flat = [(k, i) for k, rows in enumerate(ids) for i in range(len(rows))]
    _, kept = unmatched(out, [row for rows in ids for row in rows])
    keep_at = {flat[j] for j in kept}
    return [
        t.filter(pa.array([(k, i) in keep_at for i in range(t.num_rows)], pa.bool_()))
        for k, t in enumerate(tables)
    ]


def _gt_key(gt: Any) -> Hashable:
    if gt is None or any(v is None for v in gt.values()):
        return NO_GT
    return _frozen(gt)


def _bytes_schema(schema: pa.Schema) -> pa.Schema:
    return pa.schema([f.with_type(_bytes_type(f.type)) for f in schema])


def _bytes_type(t: pa.DataType) -> pa.DataType:  # noqa: PLR0911 - one return per type
    if pa.types.is_string(t):
        return pa.binary()
    if pa.types.is_large_string(t):
        return pa.large_binary()
    if pa.types.is_struct(t):
        return pa.struct(
            [t.field(i).with_type(_bytes_type(t.field(i).type)) for i in range(t.num_fields)]
        )
    if pa.types.is_large_list(t):
        return pa.large_list(t.value_field.with_type(_bytes_type(t.value_type)))
    if pa.types.is_list(t):
        return pa.list_(t.value_field.with_type(_bytes_type(t.value_type)))
    if pa.types.is_map(t):
        return pa.map_(_bytes_type(t.key_type), t.item_field.with_type(_bytes_type(t.item_type)))
    return t


def _frozen(value: Any) -> Hashable:
    if isinstance(value, dict):
        return tuple((k, _frozen(v)) for k, v in value.items())
    if isinstance(value, list | tuple):
        return tuple(_frozen(v) for v in value)
    if isinstance(value, float):
        return ("float", value.hex())
    return value  # type: ignore[no-any-return]


# --- rows as JSON (the topic's values without a value column, gtbarrier deadletters) ------


def json_rows(table: pa.Table) -> list[dict[str, Any]]:
    """The rows of ``table`` as JSON-ready dicts: binary values base64, strings whose bytes
    are not UTF-8 with ``\\x..`` escapes (as they were, but readable), timestamps ISO-8601,
    decimals as text."""
    columns = {name: _json_column(table.column(name)) for name in table.column_names}
    return [{name: values[i] for name, values in columns.items()} for i in range(table.num_rows)]


def _json_column(column: pa.ChunkedArray) -> list[Any]:
    dtype = column.type
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        raw = column.cast(pa.large_binary() if pa.types.is_large_string(dtype) else pa.binary())
        return [
            None if v is None else v.decode("utf-8", "backslashreplace") for v in raw.to_pylist()
        ]
    try:
        return [_json_value(v) for v in column.to_pylist()]
    except UnicodeDecodeError:  # a nested string that is not UTF-8
        return [str(column[i]) if column[i].is_valid else None for i in range(len(column))]


def _json_value(value: Any) -> Any:  # noqa: PLR0911 - one return per type
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    if isinstance(value, tuple):  # a map's (key, value) pairs
        return [_json_value(v) for v in value]
    return value
