"""``consumer=postgres``'s start check of an existing table's column types, against a real
PostgreSQL server (and, once, a real Spark query).

A column that would change the input's values on the way in (round a decimal, narrow a
double to ``real``, store binary as its hex text, drop or invent a time zone, pad text) or
refuse every row (a type the input cannot be read as) is refused when the query starts,
before any data moves, with a ``ConfigError`` naming the column, the Spark type and the
PostgreSQL type. Narrower columns whose refusals are per row (an integer or numeric range,
a ``varchar`` length) are accepted: validation finds those rows
(test_sink_postgres_validate.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import types as st

from harness.postgres import PostgresSchema
from integration_tests.test_sink_pipeline import produce_numbered, query_failure, source
from sink.options import SinkOptions
from state.errors import ConfigError

pytestmark = pytest.mark.timeout(240)


def start(postgres: PostgresSchema, table: str, schema: st.StructType, **options: str) -> Any:
    raw = {
        "pipeline.id": "p1",
        "state.uri": "memory://types",
        "consumer": "postgres",
        "consumer.postgres.dsn": postgres.dsn,
        "consumer.postgres.table": postgres.table(table),
        "consumer.postgres.createTable": "false",
        **options,
    }
    return SinkOptions.parse(raw).check_at_start(schema)


def one(name: str, dtype: st.DataType) -> st.StructType:
    return st.StructType([st.StructField(name, dtype)])


# (Spark type, PostgreSQL column type as created, as PostgreSQL writes it, words of the why)
REFUSED: list[tuple[st.DataType, str, str, str]] = [
    (st.DecimalType(12, 4), "numeric(10,2)", "numeric(10,2)", "round"),
    (st.DecimalType(12, 4), "real", "real", "decimal"),
    (st.DecimalType(10, 2), "double precision", "double precision", "decimal"),
    (st.DecimalType(10, 2), "integer", "integer", "round"),
    (st.DoubleType(), "real", "real", "real"),
    (st.DoubleType(), "numeric", "numeric", "double"),
    (st.FloatType(), "numeric(10,4)", "numeric(10,4)", "float"),
    (st.LongType(), "double precision", "double precision", "2^53"),
    (st.IntegerType(), "real", "real", "2^24"),
    (st.BinaryType(), "text", "text", "hex"),
    (st.BinaryType(), "varchar(100)", "character varying(100)", "hex"),
    (st.StringType(), "bytea", "bytea", "string"),
    (st.StringType(), "char(3)", "character(3)", "pad"),
    (st.StringType(), "integer", "integer", "string"),
    (st.StringType(), "jsonb", "jsonb", "string"),
    (st.TimestampType(), "timestamp", "timestamp without time zone", "time zone"),
    (st.TimestampNTZType(), "timestamptz", "timestamp with time zone", "time zone"),
    (st.TimestampType(), "timestamptz(0)", "timestamp(0) with time zone", "round"),
    (st.TimestampType(), "date", "date", "time"),
    (st.DateType(), "timestamp", "timestamp without time zone", "date"),
    (st.BooleanType(), "integer", "integer", "boolean"),
    (st.LongType(), "text", "text", "bigint"),
    (st.ArrayType(st.IntegerType()), "integer", "integer", "array"),
    (st.IntegerType(), "integer[]", "integer[]", "array"),
    (st.ArrayType(st.DoubleType()), "real[]", "real[]", "real"),
]


@pytest.mark.parametrize(
    ("spark", "ddl", "shown", "why"),
    REFUSED,
    ids=[f"{s.simpleString()}-into-{d}" for s, d, _, _ in REFUSED],
)
def test_a_lossy_or_impossible_column_type_is_refused_at_start(
    postgres: PostgresSchema, spark: st.DataType, ddl: str, shown: str, why: str
) -> None:
    postgres.execute(f'CREATE TABLE "{{schema}}".t (extra text, price {ddl})')
    with pytest.raises(ConfigError) as info:
        start(postgres, "t", one("price", spark))
    message = str(info.value)
    assert info.value.option == "price", message
    assert spark.simpleString() in message and shown in message, message
    assert why in message, message
    assert postgres.rows('SELECT count(*) FROM "{schema}".t') == [(0,)]


# Spark types and the columns that keep their values (the narrower ones checked per row)
ACCEPTED: list[tuple[str, st.DataType, str]] = [
    ("b", st.BooleanType(), "boolean"),
    ("i8", st.ByteType(), "real"),
    ("i16", st.ShortType(), "smallint"),
    ("i32", st.IntegerType(), "double precision"),
    ("i64", st.LongType(), "integer"),
    ("n64", st.LongType(), "numeric(30,2)"),
    ("wide", st.LongType(), "numeric"),
    ("f32", st.FloatType(), "double precision"),
    ("f64", st.DoubleType(), "double precision"),
    ("d", st.DecimalType(10, 2), "numeric(12,4)"),
    ("dn", st.DecimalType(10, 2), "numeric(6,2)"),
    ("d0", st.DecimalType(18, 0), "bigint"),
    ("s", st.StringType(), "varchar(5)"),
    ("sv", st.StringType(), "character varying"),
    ("bin", st.BinaryType(), "bytea"),
    ("day", st.DateType(), "date"),
    ("ts", st.TimestampType(), "timestamptz(6)"),
    ("ntz", st.TimestampNTZType(), "timestamp"),
    ("xs", st.ArrayType(st.LongType()), "smallint[]"),
    ("ss", st.ArrayType(st.StringType()), "varchar(3)[]"),
]


def test_columns_that_keep_the_values_are_accepted(postgres: PostgresSchema) -> None:
    columns = ", ".join(f"{name} {ddl}" for name, _, ddl in ACCEPTED)
    postgres.execute(
        f'CREATE TABLE "{{schema}}".ok ({columns}, '
        "id bigint GENERATED ALWAYS AS IDENTITY, at timestamptz NOT NULL DEFAULT now(), "
        "note text)"
    )
    schema = st.StructType([st.StructField(name, dtype) for name, dtype, _ in ACCEPTED])
    settings = start(postgres, "ok", schema).settings
    assert [c.name for c in settings.columns] == [name for name, _, _ in ACCEPTED]


def test_gt_columns_are_checked_too(postgres: PostgresSchema) -> None:
    from state.records.gt import spark_type

    postgres.execute(
        'CREATE TABLE "{schema}".g (value bytea, gt_epoch bigint, gt_topic bytea, '
        "gt_partition integer, gt_offset bigint)"
    )
    schema = st.StructType(
        [st.StructField("value", st.BinaryType()), st.StructField("gt", spark_type())]
    )
    with pytest.raises(ConfigError) as info:
        start(postgres, "g", schema)
    assert info.value.option == "gt_topic" and "bytea" in str(info.value)


def test_a_not_null_column_the_input_lacks_and_without_a_default_is_refused(
    postgres: PostgresSchema,
) -> None:
    postgres.execute('CREATE TABLE "{schema}".nn (price bigint, owner text NOT NULL)')
    with pytest.raises(ConfigError) as info:
        start(postgres, "nn", one("price", st.LongType()))
    assert info.value.option == "owner" and "NOT NULL" in str(info.value)


def test_a_generated_column_cannot_be_written(postgres: PostgresSchema) -> None:
    postgres.execute(
        'CREATE TABLE "{schema}".gen (price bigint, twice bigint GENERATED ALWAYS AS '
        "(price * 2) STORED)"
    )
    schema = st.StructType(
        [st.StructField("price", st.LongType()), st.StructField("twice", st.LongType())]
    )
    with pytest.raises(ConfigError) as info:
        start(postgres, "gen", schema)
    assert info.value.option == "twice" and "generated" in str(info.value)


def test_a_domain_is_refused_naming_its_base_type(postgres: PostgresSchema) -> None:
    postgres.execute(
        'CREATE DOMAIN "{schema}".positive AS bigint CHECK (VALUE > 0); '
        'CREATE TABLE "{schema}".dom (price "{schema}".positive)'
    )
    with pytest.raises(ConfigError) as info:
        start(postgres, "dom", one("price", st.LongType()))
    assert info.value.option == "price" and "domain" in str(info.value)


def test_an_upsert_key_needs_a_unique_index_on_every_row(postgres: PostgresSchema) -> None:
    postgres.execute(
        'CREATE TABLE "{schema}".part (k text, v bigint); '
        'CREATE UNIQUE INDEX part_k ON "{schema}".part (k) WHERE v > 0'
    )
    schema = st.StructType(
        [st.StructField("k", st.StringType()), st.StructField("v", st.LongType())]
    )
    upsert = {"consumer.postgres.mode": "upsert", "consumer.postgres.keyColumns": "k"}
    with pytest.raises(ConfigError) as info:
        start(postgres, "part", schema, **upsert)
    assert info.value.option == "consumer.postgres.keyColumns"


def test_a_spark_query_into_a_rounding_column_fails_before_data_moves(
    spark: Any, kafka: Any, postgres: PostgresSchema, tmp_path: Path
) -> None:
    from pyspark.sql import functions as sf

    topic = kafka.create_topic(partitions=1)
    produce_numbered(kafka, topic, 50, 1)
    postgres.execute('CREATE TABLE "{schema}".prices (value bytea, price numeric(10,2))')
    state = f"file://{tmp_path}/state"
    df = source(spark, kafka, topic, "pg-types", state)
    query = df.select("value", sf.col("offset").cast("decimal(12,4)").alias("price"))
    text = query_failure(
        query,
        {
            "pipeline.id": "pg-types",
            "state.uri": state,
            "consumer": "postgres",
            "consumer.postgres.dsn": postgres.dsn,
            "consumer.postgres.table": postgres.table("prices"),
        },
        tmp_path / "cp",
    )
    assert "option 'price'" in text and "decimal(12,4)" in text and "numeric(10,2)" in text
    assert postgres.rows('SELECT count(*) FROM "{schema}".prices') == [(0,)]
    assert not list((tmp_path / "state").rglob("*.parquet"))  # nothing staged


def test_identifiers_over_63_bytes_are_refused_before_the_server_cuts_them(
    postgres: PostgresSchema,
) -> None:
    """PostgreSQL cuts longer names to 63 bytes, with a NOTICE only: a column would be
    created and copied under another name, and two long names alike in their first 63 bytes
    would be one column. Refused at start, before the table is created."""
    long_name = "measurement_" + "x" * 52  # 64 bytes
    with pytest.raises(ConfigError) as info:
        start(
            postgres,
            "cut",
            one(long_name, st.LongType()),
            **{"consumer.postgres.createTable": "true"},
        )
    assert info.value.option == long_name and "64 bytes" in str(info.value)
    assert postgres.rows(
        "SELECT count(*) FROM pg_tables WHERE schemaname = %s", (postgres.schema,)
    ) == [(0,)]
    kept = "é" * 31 + "x"  # 63 bytes: the server keeps it whole
    start(postgres, "kept", one(kept, st.LongType()), **{"consumer.postgres.createTable": "true"})
    names = postgres.rows(
        "SELECT column_name FROM information_schema.columns WHERE table_schema = %s "
        "AND table_name = 'kept'",
        (postgres.schema,),
    )
    assert names == [(kept,)]
