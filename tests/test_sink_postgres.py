"""``consumer=postgres`` without a server: its options, type mapping, CSV encoding and
error translation."""

from __future__ import annotations

import datetime
import decimal
import pickle
import re
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest
from psycopg import errors as pgerrors
from psycopg.pq import TransactionStatus

from sink.consumers.postgres.postgres_columns import (
    PgColumn,
    columns_for,
    columns_for_spark,
    encode_csv,
)
from sink.consumers.postgres.postgres_connections import CONNECTIONS, translate
from sink.consumers.postgres.postgres_kind import POSTGRES
from sink.consumers.postgres.postgres_options import PostgresSettings, redact_dsn
from sink.consumers.producer_pool import MAX_IDLE_S
from sink.options import SinkOptions
from state.errors import CommitFailed, ConfigError, DeliveryFailed
from tests.sink_helpers import gt_batch

BASE = {
    "pipeline.id": "p",
    "state.uri": "memory://pg",
    "consumer": "postgres",
    "consumer.postgres.dsn": "host=db user=u password=s3cret dbname=x",
    "consumer.postgres.table": "out.events",
}


def parse(**extra: str) -> SinkOptions:
    return SinkOptions.parse({**BASE, **extra})


def settings(**extra: str) -> PostgresSettings:
    parsed = parse(**extra).settings
    assert isinstance(parsed, PostgresSettings)
    return parsed


def test_defaults_and_settings() -> None:
    o = parse()
    assert o.kind is POSTGRES
    s = settings()
    assert s == PostgresSettings(dsn=BASE["consumer.postgres.dsn"], table="events", schema="out")
    assert s.create_table and s.mode == "append"
    assert "s3cret" not in s.safe_dsn and "password=***" in s.safe_dsn
    assert pickle.loads(pickle.dumps(o)) == o and hash(s) == hash(s)


def test_upsert_url_and_unqualified_table() -> None:
    s = settings(
        **{
            "consumer.postgres.dsn": "postgresql://u:pw@h:5432/db",
            "consumer.postgres.table": "Events",
            "consumer.postgres.mode": "UPSERT",
            "consumer.postgres.keyColumns": "id, region",
            "consumer.postgres.createTable": "false",
        }
    )
    assert (s.schema, s.table, s.qualified) == (None, "Events", "Events")
    assert s.mode == "upsert" and s.key_columns == ("id", "region")
    assert not s.create_table


@pytest.mark.parametrize(
    ("extra", "option", "expected"),
    [
        ({"consumer.postgres.dsn": ""}, "consumer.postgres.dsn", "non-empty"),
        ({"consumer.postgres.table": ""}, "consumer.postgres.table", "non-empty"),
        ({"consumer.postgres.table": "a.b.c"}, "consumer.postgres.table", "'schema.table'"),
        ({"consumer.postgres.table": "my table"}, "consumer.postgres.table", "'schema.table'"),
        ({"consumer.postgres.mode": "merge"}, "consumer.postgres.mode", "upsert"),
        ({"consumer.postgres.mode": "upsert"}, "consumer.postgres.keyColumns", "key columns"),
        ({"consumer.postgres.keyColumns": "id"}, "consumer.postgres.keyColumns", "not to be set"),
        (
            {"consumer.postgres.mode": "upsert", "consumer.postgres.keyColumns": "id,id"},
            "consumer.postgres.keyColumns",
            "distinct column names",
        ),
        ({"consumer.postgres.createTable": "maybe"}, "consumer.postgres.createTable", "true"),
    ],
)
def test_bad_options_name_option_and_expectation(
    extra: dict[str, str], option: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse(**extra)
    assert info.value.option == option
    assert expected in str(info.value)


def test_unparseable_dsn_is_refused_without_showing_it() -> None:
    with pytest.raises(ConfigError, match=re.escape("consumer.postgres.dsn")) as info:
        parse(**{"consumer.postgres.dsn": "password=s3cret nonsense"})
    assert "s3cret" not in str(info.value)
    assert "libpq connection string" in str(info.value)


def test_postgres_options_only_with_consumer_postgres() -> None:
    raw = {**BASE, "consumer": "file", "consumer.path": "/data"}
    with pytest.raises(ConfigError, match=re.escape("not to be set with consumer=file")):
        SinkOptions.parse(raw)


def test_redact_dsn() -> None:
    assert "pw" not in redact_dsn("postgresql://u:pw@h/db")
    assert redact_dsn("host=h") == "host=h"


# --- types ---------------------------------------------------------------------------


def test_type_mapping() -> None:
    schema = pa.schema(
        [
            ("b", pa.bool_()),
            ("i8", pa.int8()),
            ("i16", pa.int16()),
            ("i32", pa.int32()),
            ("i64", pa.int64()),
            ("f32", pa.float32()),
            ("f64", pa.float64()),
            ("d", pa.decimal128(12, 3)),
            ("s", pa.string()),
            ("ls", pa.large_string()),
            ("bin", pa.binary()),
            ("day", pa.date32()),
            ("ts", pa.timestamp("us", tz="UTC")),
            ("ntz", pa.timestamp("us")),
            ("arr", pa.list_(pa.int64())),
            ("tags", pa.large_list(pa.string())),
        ]
    )
    assert [c.sql_type for c in columns_for(schema)] == [
        "boolean",
        "smallint",
        "smallint",
        "integer",
        "bigint",
        "real",
        "double precision",
        "numeric(12, 3)",
        "text",
        "text",
        "bytea",
        "date",
        "timestamptz",
        "timestamp",
        "bigint[]",
        "text[]",
    ]


def test_gt_becomes_four_columns() -> None:
    schema = pa.Table.from_batches([gt_batch(1, 0, [0])]).schema
    assert columns_for(schema) == (
        PgColumn("value", "bytea"),
        PgColumn("gt_epoch", "bigint"),
        PgColumn("gt_topic", "text"),
        PgColumn("gt_partition", "integer"),
        PgColumn("gt_offset", "bigint"),
    )
    clash = schema.append(pa.field("gt_epoch", pa.int64()))
    with pytest.raises(ConfigError, match="distinct column names"):
        columns_for(clash)


@pytest.mark.parametrize(
    "dtype",
    [
        pa.map_(pa.string(), pa.int32()),
        pa.struct([("a", pa.int32())]),
        pa.list_(pa.binary()),
        pa.list_(pa.list_(pa.int32())),
        pa.null(),
        pa.duration("us"),
    ],
)
def test_unsupported_type_is_refused_naming_the_column(dtype: pa.DataType) -> None:
    with pytest.raises(ConfigError) as info:
        columns_for(pa.schema([("ok", pa.int32()), ("bad_col", dtype)]))
    assert info.value.option == "bad_col"
    assert "consumer=postgres" in str(info.value)


def test_spark_schema_is_mapped_and_checked() -> None:
    from pyspark.sql import types as st

    ok = st.StructType(
        [
            st.StructField("k", st.BinaryType()),
            st.StructField("n", st.LongType()),
            st.StructField("at", st.TimestampType()),
            st.StructField("xs", st.ArrayType(st.DoubleType())),
        ]
    )
    assert [c.sql_type for c in columns_for_spark(ok)] == [
        "bytea",
        "bigint",
        "timestamptz",
        "double precision[]",
    ]
    bad = st.StructType([st.StructField("m", st.MapType(st.StringType(), st.LongType()))])
    with pytest.raises(ConfigError) as info:
        columns_for_spark(bad)
    assert info.value.option == "m"


def test_csv_encoding() -> None:
    table = pa.table(
        {
            "bin": pa.array([b"\x00\xff", None, b""], pa.binary()),
            "s": pa.array(['a"b', None, ""]),
            "xs": pa.array([[1, None], [], None], pa.list_(pa.int64())),
            "ws": pa.array([['q"\\', None], None, ["x y"]], pa.list_(pa.string())),
            "f": pa.array([float("nan"), float("inf"), 1.5]),
            "d": pa.array([decimal.Decimal("1.50"), None, decimal.Decimal("-2.00")]),
            "ts": pa.array(
                [datetime.datetime(2024, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)] * 3,
                pa.timestamp("us", tz="UTC"),
            ),
        }
    )
    lines = encode_csv(table, seq_start=10).decode().splitlines()
    assert lines[0].startswith('"\\x00ff","a""b","{1,NULL}","{""q\\""\\\\"",NULL}",nan,1.50,')
    assert lines[0].endswith(",10")
    assert lines[1].startswith(',,"{}",,inf,,')
    assert lines[2].startswith('"\\x","",,"{""x y""}",1.5,-2.00,')
    assert lines[2].endswith(",12")


def test_csv_of_a_sliced_binary_column() -> None:
    arr = pa.array([b"ab", None, b"c"], pa.binary()).slice(1)
    assert encode_csv(pa.table({"b": arr})).decode().splitlines() == ["", '"\\x63"']


# --- errors --------------------------------------------------------------------------


def test_errors_are_translated_retriable_or_fatal() -> None:
    lost = psycopg.OperationalError("server closed the connection unexpectedly")
    assert isinstance(translate(lost, "x"), DeliveryFailed)
    assert isinstance(translate(pgerrors.AdminShutdown("terminating"), "x"), DeliveryFailed)
    assert isinstance(translate(pgerrors.SerializationFailure("s"), "x"), DeliveryFailed)
    refused = translate(pgerrors.UndefinedColumn('column "x" does not exist'), "copy")
    assert isinstance(refused, CommitFailed) and "SQLSTATE 42703" in str(refused)
    assert isinstance(translate(pgerrors.InvalidTextRepresentation("bad"), "x"), CommitFailed)


# --- connections kept per process -----------------------------------------------------------


class FakeConnection:
    """A psycopg connection as the pool sees it: idle outside a transaction, closable."""

    class info:  # noqa: N801 - psycopg's attribute
        transaction_status = TransactionStatus.IDLE

    def __init__(self) -> None:
        self.closed = False

    def close(self) -> None:
        self.closed = True


def test_connections_are_kept_between_commits_and_closed_when_idle(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The pool is the process's cache of lent values: one idle connection per DSN, one
    found broken dropped, every idle one closed when the cache is cleared (at exit)."""
    from sink.consumers.postgres import postgres_connections as pgc

    made: list[Any] = []

    def connect(dsn: str) -> Any:
        made.append(FakeConnection())
        return made[-1]

    monkeypatch.setattr(pgc, "connect", connect)
    CONNECTIONS.clear()
    try:
        first = pgc.take("dsn-a")
        pgc.give_back("dsn-a", first)
        assert pgc.take("dsn-a") is first and len(made) == 1
        assert pgc.take("dsn-b") is not first  # another DSN: a new connection
        pgc.give_back("dsn-a", first)
        made[0].closed = True  # the server ended the first one while it was idle
        fresh = pgc.take("dsn-a")
        assert fresh is made[-1] and fresh is not first
        pgc.give_back("dsn-a", fresh)
        extra: Any = FakeConnection()
        CONNECTIONS.give_back("dsn-a", extra)  # one idle connection per DSN: closed instead
        assert extra.closed and len(CONNECTIONS) == 1
        assert CONNECTIONS.max_idle == MAX_IDLE_S
    finally:
        CONNECTIONS.clear()
    assert fresh.closed and len(CONNECTIONS) == 0


# --- an existing table's column types ------------------------------------------------


def test_type_compatibility_keeps_values_or_says_why_not() -> None:
    from sink.consumers.postgres.postgres_target import TargetColumn, incompatibility

    def column(type_name: str, **kw: Any) -> TargetColumn:
        return TargetColumn("c", type_name, **kw)

    keeps = [
        (pa.int64(), column("int2")),
        (pa.int64(), column("numeric", precision=5, scale=2)),
        (pa.int16(), column("float4")),
        (pa.int32(), column("float8")),
        (pa.float32(), column("float8")),
        (pa.decimal128(10, 2), column("numeric", precision=6, scale=4)),
        (pa.decimal128(18, 0), column("int8")),
        (pa.string(), column("varchar", length=1)),
        (pa.large_string(), column("text")),
        (pa.binary(), column("bytea")),
        (pa.date32(), column("date")),
        (pa.timestamp("us", tz="UTC"), column("timestamptz", precision=6)),
        (pa.timestamp("us"), column("timestamp")),
        (pa.list_(pa.int64()), column("int4", is_array=True)),
    ]
    for dtype, target in keeps:
        assert incompatibility(dtype, target) is None, (dtype, target)
    changes = [
        (pa.decimal128(12, 4), column("numeric", precision=10, scale=2), "round"),
        (pa.float64(), column("float4"), "real"),
        (pa.int64(), column("float8"), "2^53"),
        (pa.binary(), column("text"), "hex"),
        (pa.timestamp("us", tz="UTC"), column("timestamp"), "time zone"),
        (pa.timestamp("us"), column("timestamptz"), "time zone"),
        (pa.timestamp("us", tz="UTC"), column("timestamptz", precision=3), "round"),
        (pa.string(), column("bpchar", length=3), "pad"),
        (pa.list_(pa.int64()), column("int8"), "array"),
        (pa.int64(), column("int8", is_array=True), "array"),
    ]
    for dtype, target, why in changes:
        reason = incompatibility(dtype, target)
        assert reason is not None and why in reason, (dtype, target, reason)


# --- identifiers PostgreSQL would cut -------------------------------------------------


@pytest.mark.parametrize(
    ("option", "value", "name"),
    [
        ("consumer.postgres.table", "t" * 64, "t" * 64),
        ("consumer.postgres.table", "s" * 70 + ".events", "s" * 70),
        ("consumer.postgres.table", "out." + "e" * 64, "e" * 64),
    ],
)
def test_table_and_schema_names_over_63_bytes_are_refused(
    option: str, value: str, name: str
) -> None:
    with pytest.raises(ConfigError) as info:
        parse(**{option: value})
    message = str(info.value)
    assert info.value.option == option
    assert name in message and f"{len(name)} bytes" in message and "63" in message, message


def test_key_columns_over_63_bytes_are_refused() -> None:
    long_key = "k" * 64
    with pytest.raises(ConfigError) as info:
        parse(
            **{
                "consumer.postgres.mode": "upsert",
                "consumer.postgres.keyColumns": f"id, {long_key}",
            }
        )
    assert info.value.option == "consumer.postgres.keyColumns"
    assert long_key in str(info.value) and "64 bytes" in str(info.value)


def test_names_of_63_bytes_are_kept() -> None:
    s = settings(**{"consumer.postgres.table": "s" * 63 + "." + "t" * 63})
    assert (s.schema, s.table) == ("s" * 63, "t" * 63)
    columns = columns_for(pa.schema([("c" * 63, pa.int64()), ("é" * 31 + "x", pa.int64())]))
    assert [len(c.name.encode()) for c in columns] == [63, 63]


@pytest.mark.parametrize("name", ["c" * 64, "é" * 32, "列" * 22], ids=["ascii", "2-byte", "3-byte"])
def test_column_names_over_63_bytes_are_refused(name: str) -> None:
    with pytest.raises(ConfigError) as info:
        columns_for(pa.schema([("ok", pa.int64()), (name, pa.int64())]))
    assert info.value.option == name
    size = len(name.encode())
    assert f"{size} bytes" in str(info.value) and "63" in str(info.value)


# --- secrets: references in the DSN, never a password in a message -------------------------


def test_a_password_reference_stays_a_reference_in_the_settings() -> None:
    for dsn in (
        "host=db user=u password=${env:PGPASS} sslmode=verify-full sslrootcert=/ca.pem dbname=x",
        "postgresql://u:${file:/run/secrets/pg}@db/x?sslmode=verify-full",
    ):
        options = parse(**{"consumer.postgres.dsn": dsn})
        s = options.settings
        assert isinstance(s, PostgresSettings) and s.dsn == dsn
        assert "${" not in s.safe_dsn and "password=***" in s.safe_dsn
        assert pickle.loads(pickle.dumps(options)) == options


@pytest.mark.parametrize(
    ("dsn", "secret"),
    [
        ("host=h password=hunter two dbname=x", "two"),
        ("postgresql://u:hunter2@[::1/db", "hunter2"),
        ("postgresql://u:hun%zzter@h/db", "hun%zzter"),
    ],
)
def test_an_unparseable_dsn_is_refused_without_any_part_of_its_password(
    dsn: str, secret: str
) -> None:
    """libpq's parse errors quote pieces of the DSN, the password's too: scrubbed."""
    with pytest.raises(ConfigError) as info:
        parse(**{"consumer.postgres.dsn": dsn})
    assert secret not in str(info.value) and info.value.option == "consumer.postgres.dsn"
    assert "libpq connection string" in str(info.value)


def test_a_misspelt_keyword_is_still_named() -> None:
    with pytest.raises(ConfigError, match='invalid connection option "hots"'):
        parse(**{"consumer.postgres.dsn": "hots=db password=s3cret"})


def test_references_are_resolved_per_parameter_where_the_connection_is_made(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any
) -> None:
    """A resolved secret is one parameter's value whatever it holds (spaces, quotes), and is
    returned apart so that messages can be scrubbed of it."""
    from psycopg.conninfo import conninfo_to_dict

    from sink.consumers.postgres.postgres_connections import resolved_conninfo

    secret = "a b 'c\" d\\"
    monkeypatch.setenv("PGPASS_TEST", secret)
    conninfo, secrets = resolved_conninfo("host=db user=u password=${env:PGPASS_TEST} dbname=x")
    params = conninfo_to_dict(conninfo)
    assert params["password"] == secret and params["host"] == "db"
    assert params["client_encoding"] == "UTF8" and secret in secrets
    (tmp_path / "pw").write_text("from-a-file\n")
    conninfo, _ = resolved_conninfo(f"postgresql://u:${{file:{tmp_path}/pw}}@db/x")
    assert conninfo_to_dict(conninfo)["password"] == "from-a-file"


def test_an_unresolvable_reference_names_the_option_and_the_reference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from sink.consumers.postgres.postgres_connections import resolved_conninfo
    from state.errors import SecretReferenceError

    monkeypatch.delenv("PGPASS_UNSET", raising=False)
    with pytest.raises(SecretReferenceError) as info:
        resolved_conninfo("host=db password=${env:PGPASS_UNSET}")
    assert info.value.option == "consumer.postgres.dsn"
    assert "${env:PGPASS_UNSET}" in str(info.value)


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ('failed: FATAL:  password authentication failed for user "u"', "credentials"),
        ("failed: fe_sendauth: no password supplied", "credentials"),
        (
            'failed: FATAL:  no pg_hba.conf entry for host "1.2.3.4", user "u", database "d", '
            "no encryption",
            "credentials",
        ),
        ("failed: SSL error: certificate verify failed", "sslrootcert"),
        ('failed: server certificate for "db" does not match host name "other"', "sslrootcert"),
        (
            f'failed: root certificate file "{Path.home() / ".postgresql" / "root.crt"}" '
            "does not exist",
            "sslrootcert",
        ),
        ("failed: server does not support SSL, but SSL was required", "TLS"),
        ('failed: FATAL:  database "nope" does not exist', "database"),
        ("failed: Connection refused\n\tIs the server running on that host", None),
        ("failed: FATAL:  the database system is starting up", None),
        ("server closed the connection unexpectedly", None),
    ],
)
def test_refusals_no_retry_can_cure(text: str, kind: str | None) -> None:
    from sink.consumers.postgres.postgres_connections import connection_refusal

    found = connection_refusal(text)
    if kind is None:
        assert found is None
    else:
        assert found is not None and kind in found


def test_messages_are_scrubbed_of_the_password_and_resolved_secrets() -> None:
    from sink.consumers.postgres.postgres_options import redact_text

    dsn = "host=db user=u password='pw with space' dbname=x"
    said = 'missing "=" after "with" near "pw with space"; and "resolved-secret"'
    clean = redact_text(said, dsn, ("resolved-secret",))
    assert "pw with space" not in clean and "resolved-secret" not in clean
    url = "postgresql://u:p%40ss@db/x"
    assert "p%40ss" not in redact_text(f'bad URI "{url}"', url)
    assert "p@ss" not in redact_text("said p@ss", url)
