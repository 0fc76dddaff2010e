"""``consumer=postgres``'s validation against a real PostgreSQL server (``postgres`` fixture).

For each rule, a table made with the rule's column types and constraints, the settings the
real start check records, and rows at and past the rule's boundaries. The server must
agree with validation both ways (:func:`agree`):

* the rows validation accepts, delivered as one bundle through the consumer, are stored,
  and read back equal (the boundary values included);
* every row validation rejects, put back among the accepted ones, makes the server refuse
  the bundle: no rejection is needless.

Two rejections are deliberate where the server would accept the row but store something
else (a ``varchar(n)`` value whose excess is spaces, cut silently; a NULL upsert key,
which never matches and is inserted again each time): their tests show what the server
does instead.
"""

from __future__ import annotations

import decimal
import math
import uuid
from collections.abc import Collection, Sequence
from typing import Any

import pyarrow as pa
import pytest

from harness.postgres import PostgresSchema
from sink.bundle import Bundle
from sink.consumers.consumer_kind import RowRejection
from sink.consumers.postgres.postgres_consumer import PostgresConsumer
from sink.consumers.postgres.postgres_kind import POSTGRES
from sink.consumers.postgres.postgres_options import PostgresSettings
from sink.faults import FaultInjector
from sink.options import SinkOptions
from sink.staging import StoreStaging
from state.errors import GtBarrierError
from state.records.inflight_bundle import StagedPart
from state.stores import open_store

pytestmark = pytest.mark.timeout(240)

D = decimal.Decimal
MIN_TS_US = -210_866_803_200_000_000  # 4714-11-24 00:00:00 BC: PostgreSQL's first instant
INT64_MAX = 2**63 - 1
FIRST_DAY, LAST_DAY = -2_440_588, 2_145_042_905  # 4714-11-24 BC and 5874897-12-31


def started(
    postgres: PostgresSchema, table: str, schema: pa.Schema, **options: str
) -> PostgresSettings:
    """The settings the start check completes for an input of ``schema`` into ``table``."""
    from pyspark.sql.pandas.types import from_arrow_schema

    raw = {
        "pipeline.id": "p1",
        "state.uri": "memory://validate",
        "consumer": "postgres",
        "consumer.postgres.dsn": postgres.dsn,
        "consumer.postgres.table": postgres.table(table),
        "consumer.postgres.createTable": "false",
        **options,
    }
    settings = SinkOptions.parse(raw).check_at_start(from_arrow_schema(schema)).settings
    assert isinstance(settings, PostgresSettings)
    return settings


def deliver(
    settings: PostgresSettings, table: pa.Table, *, exactly_once: bool = False
) -> str | None:
    """Deliver ``table`` as one bundle through the consumer; None if it was stored, else
    the error (the transaction rolled back)."""
    store = open_store(f"memory://pg-validate-{uuid.uuid4().hex}")
    staging = StoreStaging(store)
    location = "parts/part-0.parquet"
    size = staging.write_part(location, table)
    bundle = Bundle(
        pipeline_id="p1",
        epoch=1,
        query_id="q",
        batch_id=0,
        parts=(StagedPart(location, table.num_rows, size),),
        has_gt=False,
        ordered=True,
    )
    consumer = PostgresConsumer(
        settings, staging, FaultInjector(), pipeline_id="p1", exactly_once=exactly_once
    )
    try:
        consumer.deliver(bundle)
    except GtBarrierError as err:
        return str(err)
    finally:
        consumer.close()
    return None


def agree(
    settings: PostgresSettings, table: pa.Table, *, stored_otherwise: Collection[int] = ()
) -> dict[int, RowRejection]:
    """Validate ``table``; check that the server refuses exactly the rejected rows (but
    ``stored_otherwise``, whose tests show what the server does) and stores the rest."""
    out = {r.row: r for r in POSTGRES.validate(settings, table)}
    accepted = [i for i in range(table.num_rows) if i not in out]
    for row, why in out.items():
        if row in stored_otherwise:
            continue
        error = deliver(settings, table.take(sorted([*accepted, row])))
        assert error is not None, f"row {row} was rejected ({why.reason}) but the server takes it"
    error = deliver(settings, table.take(accepted))
    assert error is None, f"the rows validation accepts were refused: {error}"
    return out


def text_array(values: Sequence[bytes | None]) -> pa.Array:
    """Strings given as bytes (Spark strings may hold any bytes, invalid UTF-8 too)."""
    return pa.array(values, pa.binary()).view(pa.string())


def one_element_lists(values: pa.Array) -> pa.Array:
    offsets = pa.array(range(len(values) + 1), pa.int32())
    return pa.ListArray.from_arrays(offsets, values)


def test_nul_and_invalid_utf8_in_text(postgres: PostgresSchema) -> None:
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
    postgres.execute('CREATE TABLE "{schema}".texts (i int, s text, v varchar(10), tags text[])')
    table = pa.table(
        {
            "i": pa.array(range(len(values)), pa.int32()),
            "s": text_array(values),
            "v": text_array(values),
            "tags": one_element_lists(text_array(values)),
        }
    )
    out = agree(started(postgres, "texts", table.schema), table)
    assert sorted(out) == [1, 2, 4, 5, 7]
    stored = postgres.rows('SELECT i, s, v, tags FROM "{schema}".texts ORDER BY i')
    expected = [
        (i, v.decode() if v is not None else None) for i, v in enumerate(values) if i not in out
    ]
    assert [(r[0], r[1]) for r in stored] == expected
    assert all(r[1] == r[2] and r[3] == [r[1]] for r in stored)


def test_integer_overflow(postgres: PostgresSchema) -> None:
    postgres.execute(
        'CREATE TABLE "{schema}".ints '
        "(i int, a smallint, b integer, c bigint, d numeric(5,2), xs smallint[])"
    )
    rows: list[tuple[Any, ...]] = [
        (32767, 2147483647, D(INT64_MAX), 999, [32767, -32768]),
        (-32768, -2147483648, D(-(2**63)), -999, []),
        (32768, None, None, None, None),
        (-32769, None, None, None, None),
        (None, 2147483648, None, None, None),
        (None, -2147483649, None, None, None),
        (None, None, D(INT64_MAX + 1), None, None),
        (None, None, None, 1000, None),
        (None, None, None, None, [1, 32768]),
        (None, None, None, None, None),
    ]
    cols = list(zip(*rows, strict=True))
    table = pa.table(
        {
            "i": pa.array(range(len(rows)), pa.int32()),
            "a": pa.array(cols[0], pa.int64()),
            "b": pa.array(cols[1], pa.int64()),
            "c": pa.array(cols[2], pa.decimal128(20, 0)),
            "d": pa.array(cols[3], pa.int64()),
            "xs": pa.array(cols[4], pa.list_(pa.int32())),
        }
    )
    out = agree(started(postgres, "ints", table.schema), table)
    assert sorted(out) == [2, 3, 4, 5, 6, 7, 8]
    assert [out[r].column for r in sorted(out)] == ["a", "a", "b", "b", "c", "d", "xs"]
    stored = postgres.rows('SELECT a, b, c, d, xs FROM "{schema}".ints ORDER BY i')
    assert stored[0] == (32767, 2147483647, INT64_MAX, D("999.00"), [32767, -32768])
    assert stored[1] == (-32768, -2147483648, -(2**63), D("-999.00"), [])


def test_numeric_precision(postgres: PostgresSchema) -> None:
    postgres.execute(
        'CREATE TABLE "{schema}".nums (i int, n numeric(6,2), f numeric(4,4), u numeric)'
    )
    rows: list[tuple[Any, ...]] = [
        (D("9999.99"), D("0.9999"), D("9" * 28 + ".0000000001")),
        (D("-9999.99"), D("-0.9999"), D("-1E-10")),
        (D("10000.00"), None, None),
        (D("-10000.00"), None, None),
        (None, D("1.0000"), None),
        (D("0.01"), D("0.0001"), D("0")),
    ]
    cols = list(zip(*rows, strict=True))
    table = pa.table(
        {
            "i": pa.array(range(len(rows)), pa.int32()),
            "n": pa.array(cols[0], pa.decimal128(10, 2)),
            "f": pa.array(cols[1], pa.decimal128(6, 4)),
            "u": pa.array(cols[2], pa.decimal128(38, 10)),
        }
    )
    out = agree(started(postgres, "nums", table.schema), table)
    assert sorted(out) == [2, 3, 4]
    stored = postgres.rows('SELECT n, f, u FROM "{schema}".nums ORDER BY i')
    assert stored == [r for i, r in enumerate(rows) if i not in out]


def test_varchar_length(postgres: PostgresSchema) -> None:
    postgres.execute('CREATE TABLE "{schema}".chars (i int, v varchar(3), vs varchar(2)[])')
    table = pa.table(
        {
            "i": pa.array(range(5), pa.int32()),
            "v": pa.array(["abc", "abcd", "ééé", None, "ab"]),
            "vs": pa.array([["ab"], None, None, ["ab", "abc"], []], pa.list_(pa.string())),
        }
    )
    out = agree(started(postgres, "chars", table.schema), table)
    assert sorted(out) == [1, 3] and out[3].column == "vs"
    stored = postgres.rows('SELECT v, vs FROM "{schema}".chars ORDER BY i')
    assert stored == [("abc", ["ab"]), ("ééé", None), ("ab", [])]


def test_varchar_excess_of_spaces_is_rejected_where_the_server_cuts_it(
    postgres: PostgresSchema,
) -> None:
    postgres.execute('CREATE TABLE "{schema}".padded (v varchar(3))')
    table = pa.table({"v": pa.array(["abc  ", "ab"])})
    settings = started(postgres, "padded", table.schema)
    out = agree(settings, table, stored_otherwise=[0])
    assert sorted(out) == [0] and "trailing spaces" in out[0].reason
    # what the server does with that row: stores it cut to 3 characters, without a word
    assert deliver(settings, table.take([0])) is None
    assert postgres.rows('SELECT v FROM "{schema}".padded ORDER BY v') == [("ab",), ("abc",)]


def micros(column: str, *, utc: bool = True) -> str:
    """SQL for a timestamp's microseconds since 1970, exact over PostgreSQL's whole range
    (``extract(epoch ...)`` rounds near its end): the interval from 1970 in whole days and
    the rest."""
    epoch = "timestamptz '1970-01-01 00:00:00+00'" if utc else "timestamp '1970-01-01'"
    since = f"({column} - {epoch})"
    days = f"extract(day FROM {since})"
    rest = f"extract(epoch FROM {since} - make_interval(days => {days}::int))"
    return f"({days}::bigint * 86400000000 + ({rest} * 1000000)::bigint)"


def test_dates_and_timestamps_out_of_range(postgres: PostgresSchema) -> None:
    postgres.execute(
        'CREATE TABLE "{schema}".times '
        "(i int, tz timestamptz, ntz timestamp, d date, tzs timestamptz[], ds date[])"
    )
    year_zero = -62_135_596_800_000_001  # 1 BC, 23:59:59.999999 on its last day
    rows: list[tuple[Any, ...]] = [
        (MIN_TS_US, MIN_TS_US, FIRST_DAY, [MIN_TS_US, INT64_MAX], [FIRST_DAY, LAST_DAY]),
        (INT64_MAX, INT64_MAX, LAST_DAY, [], []),
        (year_zero, year_zero, -719_163, [year_zero], [-719_163]),
        (253_402_300_800_000_000, 253_402_300_800_000_000, 2_932_897, None, None),  # 10000 AD
        (0, 0, 0, [0], [0]),
        (MIN_TS_US - 1, None, None, None, None),
        (None, MIN_TS_US - 1, None, None, None),
        (None, None, FIRST_DAY - 1, None, None),
        (None, None, LAST_DAY + 1, None, None),
        (None, None, -(2**31), None, None),
        (None, None, 2**31 - 1, None, None),
        (None, None, None, [0, MIN_TS_US - 1], None),
        (None, None, None, None, [LAST_DAY + 1]),
    ]
    cols = list(zip(*rows, strict=True))
    utc = pa.timestamp("us", tz="UTC")
    table = pa.table(
        {
            "i": pa.array(range(len(rows)), pa.int32()),
            "tz": pa.array(cols[0], utc),
            "ntz": pa.array(cols[1], pa.timestamp("us")),
            "d": pa.array(cols[2], pa.date32()),
            "tzs": pa.array(cols[3], pa.list_(utc)),
            "ds": pa.array(cols[4], pa.list_(pa.date32())),
        }
    )
    out = agree(started(postgres, "times", table.schema), table)
    assert sorted(out) == [5, 6, 7, 8, 9, 10, 11, 12]
    # read back as numbers: Python's datetime ends at year 9999
    stored = postgres.rows(
        f"SELECT {micros('tz')}, {micros('ntz', utc=False)}, d - date '1970-01-01', "
        f"(SELECT array_agg({micros('x')}) FROM unnest(tzs) x), "
        "(SELECT array_agg(x - date '1970-01-01') FROM unnest(ds) x) "
        'FROM "{schema}".times ORDER BY i'
    )
    expected = [
        tuple(None if v == [] else v for v in row) for i, row in enumerate(rows) if i not in out
    ]
    assert stored == expected
    texts = postgres.rows(
        'SELECT tz::text, ntz::text, d::text FROM "{schema}".times WHERE i IN (0, 2) ORDER BY i'
    )
    assert texts == [
        ("4714-11-24 00:00:00+00 BC", "4714-11-24 00:00:00 BC", "4714-11-24 BC"),
        ("0001-12-31 23:59:59.999999+00 BC", "0001-12-31 23:59:59.999999 BC", "0001-12-31 BC"),
    ]


def test_nan_and_infinity_are_accepted_where_floats_go(postgres: PostgresSchema) -> None:
    postgres.execute(
        'CREATE TABLE "{schema}".floats '
        "(i int, d double precision, r real, ds double precision[], rs real[])"
    )
    specials = [float("nan"), float("inf"), float("-inf"), -0.0, 5e-324, 1.5, None]
    small = [float("nan"), float("inf"), float("-inf"), -0.0, 1e-45, 3.4e38, None]
    table = pa.table(
        {
            "i": pa.array(range(len(specials)), pa.int32()),
            "d": pa.array(specials, pa.float64()),
            "r": pa.array(small, pa.float32()),
            "ds": pa.array([[x] for x in specials], pa.list_(pa.float64())),
            "rs": pa.array([[x] for x in small], pa.list_(pa.float32())),
        }
    )
    assert agree(started(postgres, "floats", table.schema), table) == {}
    stored = postgres.rows('SELECT d, r, ds, rs FROM "{schema}".floats ORDER BY i')
    assert math.isnan(stored[0][0]) and math.isnan(stored[0][1]) and math.isnan(stored[0][2][0])
    assert [r[0] for r in stored[1:]] == specials[1:]
    assert math.copysign(1.0, stored[3][0]) == -1.0 and stored[4][0] == 5e-324
    # real values come back as text of their float32 value: compare them as float32
    as_real = pa.array(small[1:], pa.float32())
    assert pa.array([r[1] for r in stored[1:]], pa.float32()).equals(as_real)
    assert pa.array([r[3][0] for r in stored[1:]], pa.float32()).equals(as_real)


def test_null_in_not_null_columns(postgres: PostgresSchema) -> None:
    postgres.execute(
        'CREATE TABLE "{schema}".required (a bigint NOT NULL, b text, xs bigint[] NOT NULL)'
    )
    table = pa.table(
        {
            "a": pa.array([1, None, 3, 4], pa.int64()),
            "b": pa.array([None, "x", None, ""]),
            "xs": pa.array([[1], [2], None, [None]], pa.list_(pa.int64())),
        }
    )
    out = agree(started(postgres, "required", table.schema), table)
    assert sorted(out) == [1, 2]
    stored = postgres.rows('SELECT a, b, xs FROM "{schema}".required ORDER BY a')
    assert stored == [(1, None, [1]), (4, "", [None])]


def keyed(keys: Sequence[str | None], values: Sequence[int]) -> pa.Table:
    return pa.table({"k": pa.array(keys, pa.string()), "v": pa.array(values, pa.int64())})


UPSERT = {"consumer.postgres.mode": "upsert", "consumer.postgres.keyColumns": "k"}


def test_null_upsert_key_is_refused_by_a_primary_key(postgres: PostgresSchema) -> None:
    postgres.execute('CREATE TABLE "{schema}".pk (k text PRIMARY KEY, v bigint)')
    table = keyed(["a", None, "b"], [1, 2, 3])
    out = agree(started(postgres, "pk", table.schema, **UPSERT), table)
    assert sorted(out) == [1] and "consumer.postgres.keyColumns" in out[1].reason
    assert postgres.rows('SELECT k, v FROM "{schema}".pk ORDER BY k') == [("a", 1), ("b", 3)]


def test_null_upsert_key_of_a_nullable_unique_index_would_insert_again(
    postgres: PostgresSchema,
) -> None:
    postgres.execute('CREATE TABLE "{schema}".nullable (k text UNIQUE, v bigint)')
    table = keyed(["a", None], [1, 2])
    settings = started(postgres, "nullable", table.schema, **UPSERT)
    out = agree(settings, table, stored_otherwise=[1])
    assert sorted(out) == [1]
    # what the server does with it: a NULL key matches no row, so every delivery of it is a
    # new row instead of an update
    assert deliver(settings, table.take([1])) is None
    assert deliver(settings, table.take([1])) is None
    assert postgres.rows('SELECT count(*) FROM "{schema}".nullable WHERE k IS NULL') == [(2,)]


def test_null_upsert_key_of_a_nulls_not_distinct_index_upserts(postgres: PostgresSchema) -> None:
    postgres.execute('CREATE TABLE "{schema}".nnd (k text UNIQUE NULLS NOT DISTINCT, v bigint)')
    table = keyed(["a", None], [1, 2])
    settings = started(postgres, "nnd", table.schema, **UPSERT)
    assert agree(settings, table) == {}
    assert deliver(settings, keyed([None], [5])) is None
    assert postgres.rows('SELECT k, v FROM "{schema}".nnd ORDER BY k') == [("a", 1), (None, 5)]


def users(ids: Sequence[int | None], emails: Sequence[str | None]) -> pa.Table:
    return pa.table({"id": pa.array(ids, pa.int64()), "email": pa.array(emails)})


def test_duplicates_on_unique_indexes_in_append_mode(postgres: PostgresSchema) -> None:
    postgres.execute('CREATE TABLE "{schema}".users (id bigint PRIMARY KEY, email text UNIQUE)')
    table = users([1, 2, 3, 4, 5, 6, 2], ["a", "b", "a", None, None, "a", "z"])
    out = agree(started(postgres, "users", table.schema), table)
    assert sorted(out) == [2, 5, 6]
    assert "users_email_key" in out[2].reason and "users_pkey" in out[6].reason
    postgres.execute(
        'CREATE TABLE "{schema}".pairs (a int, b text, UNIQUE NULLS NOT DISTINCT (a, b))'
    )
    pairs = pa.table(
        {
            "a": pa.array([1, 1, 1, None, None, 1, 1], pa.int32()),
            "b": pa.array(["x", "y", "x", "x", "x", None, None]),
        }
    )
    out = agree(started(postgres, "pairs", pairs.schema), pairs)
    assert sorted(out) == [2, 4, 6]


def test_duplicates_follow_postgres_equality(postgres: PostgresSchema) -> None:
    postgres.execute(
        'CREATE TABLE "{schema}".eq (i int, x double precision UNIQUE, xs int[] UNIQUE)'
    )
    nan = float("nan")
    table = pa.table(
        {
            "i": pa.array(range(6), pa.int32()),
            "x": pa.array([0.0, -0.0, nan, nan, 1.0, 2.0], pa.float64()),
            "xs": pa.array([[1, 2], [3], [4], [5], [1, None], [1, None]], pa.list_(pa.int32())),
        }
    )
    out = agree(started(postgres, "eq", table.schema), table)
    assert sorted(out) == [1, 3, 5]


def test_duplicates_in_upsert_mode(postgres: PostgresSchema) -> None:
    postgres.execute('CREATE TABLE "{schema}".accounts (id bigint PRIMARY KEY, email text UNIQUE)')
    settings = started(
        postgres,
        "accounts",
        users([1], ["a"]).schema,
        **{"consumer.postgres.mode": "upsert", "consumer.postgres.keyColumns": "id"},
    )
    assert agree(settings, users([1, 1, 2], ["a", "b", "a"])) == {}  # (1, a) replaced
    postgres.execute('TRUNCATE "{schema}".accounts')
    out = agree(settings, users([1, 2, 2, 3], ["a", "b", "a", "b"]))
    assert sorted(out) == [2, 3]
    stored = postgres.rows('SELECT id, email FROM "{schema}".accounts ORDER BY id')
    assert stored == [(1, "a"), (2, "b")]
