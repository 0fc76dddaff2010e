"""``consumer=postgres``'s validation over pure tables: which rows the target table would
refuse, from the facts the start check records in the settings (no server here; the
server's agreement is integration_tests/test_sink_postgres_validate.py)."""

from __future__ import annotations

import datetime
import decimal
import pickle
from collections.abc import Sequence
from typing import Any

import pyarrow as pa
import pytest

from sink.consumers.consumer_kind import RowRejection
from sink.consumers.postgres.postgres_kind import POSTGRES
from sink.consumers.postgres.postgres_options import PostgresSettings
from sink.consumers.postgres.postgres_target import TargetColumn, UniqueIndex
from state.records.gt import arrow_array as gt_array

DSN = "host=db dbname=x"
MIN_TS_US = -210_866_803_200_000_000  # 4714-11-24 00:00:00 BC, PostgreSQL's first instant
INT64_MAX = 2**63 - 1


def settings(
    *columns: TargetColumn,
    unique: Sequence[UniqueIndex] = (),
    keys: Sequence[str] = (),
) -> PostgresSettings:
    return PostgresSettings(
        dsn=DSN,
        table="t",
        mode="upsert" if keys else "append",
        key_columns=tuple(keys),
        columns=columns,
        unique_indexes=tuple(unique),
    )


def col(name: str, type_name: str, **kw: Any) -> TargetColumn:
    return TargetColumn(name, type_name, **kw)


def rejected(s: PostgresSettings, table: pa.Table) -> dict[int, RowRejection]:
    out = POSTGRES.validate(s, table)
    rows = [r.row for r in out]
    assert rows == sorted(set(rows)), f"one rejection per row, in row order: {out}"
    assert POSTGRES.validate(s, table) == out  # a pure function: the same answer again
    return {r.row: r for r in out}


def only(target: PostgresSettings, /, **arrays: pa.Array) -> dict[int, RowRejection]:
    return rejected(target, pa.table(arrays))


# --- text ------------------------------------------------------------------------------


def text_array(values: Sequence[bytes | None], *, large: bool = False) -> pa.Array:
    """Strings given as bytes (invalid UTF-8 included: Spark strings may hold any bytes)."""
    if large:
        return pa.array(values, pa.large_binary()).view(pa.large_string())
    return pa.array(values, pa.binary()).view(pa.string())


def test_nul_and_invalid_utf8_in_text() -> None:
    values = [
        b"plain",
        b"a\x00b",  # NUL
        b"\xff",  # never valid
        "é€𝄞".encode(),  # 2, 3 and 4 bytes
        b"\xed\xa0\x80",  # a surrogate, encoded
        b"\xc0\x80",  # an overlong NUL
        b"\xf4\x8f\xbf\xbf",  # U+10FFFF, the last code point
        b"\xf4\x90\x80\x80",  # past U+10FFFF
        None,
        b"",
    ]
    s = settings(col("s", "text"), col("l", "text"))
    out = only(s, s=text_array(values), l=text_array(values, large=True))
    assert sorted(out) == [1, 2, 4, 5, 7]
    assert out[1].column == "s" and "NUL character (0x00)" in out[1].reason
    for row in (2, 4, 5, 7):
        assert "invalid UTF-8" in out[row].reason, out[row]
    assert "byte 0" in out[2].reason


def test_text_rules_hold_for_array_elements_and_gt_topic() -> None:
    tags = pa.array([["a", "b"], ["ok", "x\x00"], None, []], pa.list_(pa.string()))
    gt = gt_array(
        pa.array([1] * 4, pa.int64()),
        pa.array(["t", "t", "t", "bad\x00topic"]),
        pa.array([0] * 4, pa.int32()),
        pa.array([0, 1, 2, 3], pa.int64()),
    )
    s = settings(
        col("tags", "text", is_array=True),
        col("gt_epoch", "int8"),
        col("gt_topic", "text"),
        col("gt_partition", "int4"),
        col("gt_offset", "int8"),
    )
    out = only(s, tags=tags, gt=gt)
    assert sorted(out) == [1, 3]
    assert (out[1].column, out[3].column) == ("tags", "gt_topic")


def test_varchar_length_in_characters() -> None:
    s = settings(col("v", "varchar", sql_type="character varying(3)", length=3))
    out = only(s, v=pa.array(["abc", "abcd", "ééé", "ab", "abc ", "abcd  ", None, ""]))
    assert sorted(out) == [1, 4, 5]
    assert "4 characters" in out[1].reason and "character varying(3)" in out[1].reason
    # the server would cut trailing spaces silently: refused as a loss, not stored cut
    assert "trailing spaces" in out[4].reason
    # a length limit applies to every element of an array column
    s = settings(col("v", "varchar", is_array=True, length=2))
    assert sorted(only(s, v=pa.array([["ab"], ["ab", "abc"]], pa.list_(pa.string())))) == [1]


# --- numbers ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("type_name", "lo", "hi"),
    [("int2", -(2**15), 2**15 - 1), ("int4", -(2**31), 2**31 - 1)],
)
def test_integer_overflow(type_name: str, lo: int, hi: int) -> None:
    s = settings(col("n", type_name))
    values = [0, lo, hi, lo - 1, hi + 1, None, INT64_MAX]
    out = only(s, n=pa.array(values, pa.int64()))
    assert sorted(out) == [3, 4, 6]
    assert f"{hi + 1} is out of range for" in out[4].reason and type_name in out[4].reason


def test_bigint_from_unsigned_and_from_decimal() -> None:
    s = settings(col("n", "int8"))
    assert sorted(only(s, n=pa.array([0, INT64_MAX, INT64_MAX + 1], pa.uint64()))) == [2]
    big = [decimal.Decimal(INT64_MAX), decimal.Decimal(INT64_MAX + 1), decimal.Decimal(-(2**63))]
    assert sorted(only(s, n=pa.array(big, pa.decimal128(20, 0)))) == [1]


def test_integers_into_arrays_are_checked_per_element() -> None:
    s = settings(col("xs", "int2", is_array=True))
    xs = pa.array([[1, 2], [1, 40_000], None, [None]], pa.list_(pa.int32()))
    assert sorted(only(s, xs=xs)) == [1]


def test_numeric_precision() -> None:
    d = decimal.Decimal
    # numeric(6, 2) holds absolute values below 10^4
    s = settings(col("n", "numeric", sql_type="numeric(6,2)", precision=6, scale=2))
    values = [d("9999.99"), d("-9999.99"), d("10000.00"), d("-10000.00"), d("0.01"), None]
    out = only(s, n=pa.array(values, pa.decimal128(10, 2)))
    assert sorted(out) == [2, 3]
    assert "numeric(6,2)" in out[2].reason and "10^4" in out[2].reason
    # integers into numeric(4, 1): below 10^3
    ints = only(settings(col("n", "numeric", precision=4, scale=1)), n=pa.array([999, 1000]))
    assert sorted(ints) == [1]
    # numeric(3, 3): below 1; unconstrained numeric: anything a decimal holds
    frac = settings(col("n", "numeric", precision=3, scale=3))
    assert sorted(only(frac, n=pa.array([d("0.999"), d("1.000")], pa.decimal128(4, 3)))) == [1]
    wide = [d("9" * 28 + ".0000000000"), d("-1E-10")]
    assert only(settings(col("n", "numeric")), n=pa.array(wide, pa.decimal128(38, 10))) == {}


def test_nan_and_infinity_are_refused_nowhere_a_float_may_go() -> None:
    specials = [float("nan"), float("inf"), float("-inf"), -0.0, 5e-324, None]
    s = settings(col("d", "float8"), col("r", "float4"), col("ds", "float8", is_array=True))
    out = only(
        s,
        d=pa.array(specials, pa.float64()),
        r=pa.array([*specials[:4], 1e-45, None], pa.float32()),
        ds=pa.array([[x] for x in specials], pa.list_(pa.float64())),
    )
    assert out == {}


# --- dates and timestamps -------------------------------------------------------------


def test_timestamps_out_of_range() -> None:
    s = settings(col("tz", "timestamptz"), col("ntz", "timestamp"))
    values = [MIN_TS_US, MIN_TS_US - 1, INT64_MAX, 0, -62_135_596_800_000_001, None]
    out = only(
        s,
        tz=pa.array(values, pa.timestamp("us", tz="UTC")),
        ntz=pa.array(values, pa.timestamp("us")),
    )
    assert sorted(out) == [1]
    assert out[1].column == "tz" and "out of range" in out[1].reason
    assert "4714-11-23 23:59:59.999999 BC" in out[1].reason  # the value, as PostgreSQL writes it
    ntz_only = only(settings(col("ntz", "timestamp")), ntz=pa.array(values, pa.timestamp("us")))
    assert sorted(ntz_only) == [1]


def test_timestamps_of_other_units() -> None:
    s = settings(col("t", "timestamp"))
    secs = [MIN_TS_US // 10**6, MIN_TS_US // 10**6 - 1, 2**62]
    assert sorted(only(s, t=pa.array(secs, pa.timestamp("s")))) == [1, 2]


def test_dates_out_of_range() -> None:
    first, last = -2_440_588, 2_145_042_905  # 4714-11-24 BC, 5874897-12-31
    s = settings(col("d", "date"), col("ds", "date", is_array=True))
    days = [first, first - 1, last, last + 1, -(2**31), 2**31 - 1, 0, None]
    out = only(
        s,
        d=pa.array(days, pa.date32()),
        ds=pa.array([[0]] * 7 + [[last + 1]], pa.list_(pa.date32())),
    )
    assert sorted(out) == [1, 3, 4, 5, 7]
    assert "5874898-01-01" in out[3].reason and out[7].column == "ds"


# --- NULL ------------------------------------------------------------------------------


def test_null_in_not_null_columns() -> None:
    s = settings(
        col("a", "int8", not_null=True),
        col("b", "text"),
        col("xs", "int8", is_array=True, not_null=True),
    )
    out = only(
        s,
        a=pa.array([1, None, 3, 4], pa.int64()),
        b=pa.array([None, "x", None, None]),
        xs=pa.array([[1], [2], None, [None]], pa.list_(pa.int64())),
    )
    assert sorted(out) == [1, 2]  # a NULL element is not a NULL array
    assert (out[1].column, out[2].column) == ("a", "xs")
    assert "NULL in a NOT NULL column" in out[1].reason


def test_null_in_upsert_key_columns() -> None:
    cols = (col("k", "text"), col("r", "int4"), col("v", "int8"))
    table = pa.table(
        {
            "k": pa.array(["a", None, "b", None]),
            "r": pa.array([1, 1, None, None], pa.int32()),
            "v": pa.array([1, 2, 3, 4], pa.int64()),
        }
    )
    s = settings(*cols, keys=("k", "r"), unique=[UniqueIndex("t_k_r", ("k", "r"))])
    out = rejected(s, table)
    assert sorted(out) == [1, 2, 3]
    assert out[1].column == "k" and "consumer.postgres.keyColumns" in out[1].reason
    assert out[2].column == "r"
    # an index with NULLS NOT DISTINCT matches NULL keys: they upsert like any other
    nnd = settings(*cols, keys=("k", "r"), unique=[UniqueIndex("t_k_r", ("k", "r"), False)])
    assert rejected(nnd, table) == {}


# --- duplicates ------------------------------------------------------------------------


def users(ids: Sequence[int | None], emails: Sequence[str | None]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "email": pa.array(emails)})


USERS = (col("id", "int8"), col("email", "text"))


def test_duplicates_on_a_unique_index_in_append_mode() -> None:
    s = settings(*USERS, unique=[UniqueIndex("users_email_key", ("email",))])
    out = rejected(s, users([1, 2, 3, 4, 5, 6], ["a", "b", "a", None, None, "a"]))
    assert sorted(out) == [2, 5]  # the later copies; NULLs are distinct
    assert out[2].column == "email"
    assert "duplicate of row 0" in out[2].reason and "users_email_key" in out[2].reason
    nnd = settings(*USERS, unique=[UniqueIndex("users_email_key", ("email",), False)])
    assert sorted(rejected(nnd, users([1, 2, 3, 4], ["a", None, None, "a"]))) == [2, 3]


def test_duplicates_on_a_composite_index() -> None:
    s = settings(col("a", "int4"), col("b", "text"), unique=[UniqueIndex("ab", ("a", "b"))])
    table = pa.table(
        {
            "a": pa.array([1, 1, 1, None, None, 1], pa.int32()),
            "b": pa.array(["x", "y", "x", "x", "x", None]),
        }
    )
    out = rejected(s, table)
    assert sorted(out) == [2]
    assert out[2].column is None and "(a, b)" in out[2].reason


def test_rows_refused_for_another_reason_are_not_duplicates() -> None:
    s = settings(
        col("id", "int8", not_null=True),
        col("email", "text"),
        unique=[UniqueIndex("users_email_key", ("email",))],
    )
    table = pa.table({"id": pa.array([None, 2], pa.int64()), "email": pa.array(["a", "a"])})
    out = rejected(s, table)
    assert sorted(out) == [0]  # row 0 is not stored, so row 1 duplicates nothing
    assert "NOT NULL" in out[0].reason


def test_duplicates_follow_postgres_equality() -> None:
    s = settings(col("x", "float8"), unique=[UniqueIndex("x_key", ("x",))])
    nan = float("nan")
    out = only(s, x=pa.array([0.0, -0.0, nan, nan, 1.0], pa.float64()))
    assert sorted(out) == [1, 3]  # -0 = 0 and NaN = NaN in PostgreSQL
    d = decimal.Decimal
    s = settings(col("n", "numeric"), unique=[UniqueIndex("n_key", ("n",))])
    assert sorted(only(s, n=pa.array([d("1.50"), d("1.5")], pa.decimal128(5, 2)))) == [1]
    s = settings(col("t", "timestamptz"), unique=[UniqueIndex("t_key", ("t",))])
    far = pa.array([INT64_MAX, INT64_MAX, 0], pa.timestamp("us", tz="UTC"))
    assert sorted(only(s, t=far)) == [1]
    s = settings(col("xs", "int4", is_array=True), unique=[UniqueIndex("xs_key", ("xs",))])
    xs = pa.array([[1, 2], [1, 2], [2, 1], [1, None], [1, None]], pa.list_(pa.int32()))
    assert sorted(only(s, xs=xs)) == [1, 4]  # arrays compare element by element, NULLs equal


def test_duplicates_in_upsert_mode_are_among_the_rows_that_survive() -> None:
    """Within a bundle the last row of a key wins (``DISTINCT ON``); another unique index
    sees only those rows, and a duplicate among them would fail the INSERT."""
    unique = [UniqueIndex("users_pkey", ("id",)), UniqueIndex("users_email_key", ("email",))]
    s = settings(*USERS, keys=("id",), unique=unique)
    # the key itself is never a duplicate: later rows of a key replace earlier ones
    assert rejected(s, users([1, 1, 1], ["a", "b", "a"])) == {}
    # (1, a) is replaced by (1, b): (2, a) duplicates nothing
    assert rejected(s, users([1, 1, 2], ["a", "b", "a"])) == {}
    # two keys' last rows share an email: the later one is refused
    out = rejected(s, users([1, 2, 2], ["a", "b", "a"]))
    assert sorted(out) == [2] and "users_email_key" in out[2].reason
    # ... and then (2, b) is key 2's last row, which duplicates nothing


def test_upsert_survivors_are_found_again_after_a_refusal() -> None:
    unique = [UniqueIndex("users_pkey", ("id",)), UniqueIndex("users_email_key", ("email",))]
    s = settings(*USERS, keys=("id",), unique=unique)
    # key 2's last row (2, a) duplicates (1, a): refused; key 2's row before it, (2, b),
    # then survives, and (3, b), which comes after it, duplicates it: refused in its turn
    out = rejected(s, users([1, 2, 2, 3], ["a", "b", "a", "b"]))
    assert sorted(out) == [2, 3]
    assert "duplicate of row 0" in out[2].reason and "duplicate of row 1" in out[3].reason


# --- the contract ----------------------------------------------------------------------


def test_without_start_facts_the_table_is_the_one_create_table_makes() -> None:
    """Settings that no start check completed (a consumer created by hand): the columns
    are those ``createTable`` makes from the input, nullable, the upsert key the primary
    key (so NOT NULL)."""
    bare = PostgresSettings(dsn=DSN, table="t")
    table = pa.table(
        {
            "s": pa.array(["ok", "x\x00"]),
            "t": pa.array([MIN_TS_US - 1, 0], pa.timestamp("us", tz="UTC")),
            "n": pa.array([None, 1], pa.int64()),
        }
    )
    out = rejected(bare, table)
    assert sorted(out) == [0, 1] and out[0].column == "t" and out[1].column == "s"
    keyed = PostgresSettings(dsn=DSN, table="t", mode="upsert", key_columns=("n",))
    out = rejected(keyed, table.select(["n"]))
    assert sorted(out) == [0] and "consumer.postgres.keyColumns" in out[0].reason


def test_settings_with_start_facts_stay_small_and_picklable() -> None:
    s = settings(
        col("v", "varchar", length=3, not_null=True),
        unique=[UniqueIndex("v_key", ("v",))],
    )
    assert pickle.loads(pickle.dumps(s)) == s and hash(s) == hash(s)


def test_one_rejection_per_row_the_first_column_at_fault() -> None:
    s = settings(col("a", "int2"), col("b", "text", not_null=True))
    out = only(s, a=pa.array([70_000, 1], pa.int32()), b=pa.array([None, "x"]))
    assert list(out) == [0] and out[0].column == "a"


def test_empty_table_and_table_of_many_chunks() -> None:
    s = settings(col("s", "text"), col("d", "date"))
    empty = pa.table({"s": pa.array([], pa.string()), "d": pa.array([], pa.date32())})
    assert POSTGRES.validate(s, empty) == []
    chunk = pa.table({"s": pa.array(["a", "b\x00"]), "d": pa.array([0, 1], pa.date32())})
    many = pa.concat_tables([chunk, chunk, chunk])
    assert sorted(rejected(s, many)) == [1, 3, 5]
    at = datetime.date(2024, 1, 1)
    dated = pa.table({"s": pa.array(["x"]), "d": pa.array([at], pa.date32())})
    assert rejected(s, dated) == {}
