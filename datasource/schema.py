"""The columns of ``gtkafka``, as a Spark schema and as the matching Arrow schema.

``key`` binary, ``value`` binary, ``topic`` string, ``partition`` int, ``offset`` long,
``timestamp`` timestamp, ``timestampType`` int, ``headers`` (only with
``includeHeaders=true``) and ``gt``: ``struct<epoch long, topic string, partition int,
offset long>``, the record's global time (defined once in :mod:`state.records.gt`).
Ascending ``gt`` is delivery order and is the same on every replay (the epoch comes from
the epoch log, the rest from Kafka).

A user-specified schema (``readStream.schema(...)``) may name any of these columns, in any
order: the read tasks build only those, so a query that reads two columns does not pay for
the Arrow conversion of nine (a Python data source gets no column pruning from Spark).
"""

from __future__ import annotations

from typing import Any, NoReturn

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from datasource.subscription import WHERE
from state.errors import ConfigError
from state.records.gt import GT_COLUMN
from state.records.gt import spark_type as gt_spark_type

GT_TYPE = gt_spark_type()

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType(), True), StructField("value", BinaryType(), True)]),
    True,
)


def source_schema(include_headers: bool) -> StructType:
    fields: list[tuple[str, DataType, bool]] = [
        ("key", BinaryType(), True),
        ("value", BinaryType(), True),
        ("topic", StringType(), True),
        ("partition", IntegerType(), True),
        ("offset", LongType(), True),
        ("timestamp", TimestampType(), True),
        ("timestampType", IntegerType(), True),
    ]
    if include_headers:
        fields.append(("headers", HEADERS_TYPE, True))
    fields.append((GT_COLUMN, GT_TYPE, True))
    return StructType([StructField(n, t, nullable) for n, t, nullable in fields])


def check_user_schema(schema: StructType, full: StructType) -> None:
    """Raise :class:`ConfigError` unless ``schema`` names at least one column of ``full``
    (the source's schema for its options), each once and with its type and nullability."""

    def refuse(problem: str) -> NoReturn:
        raise ConfigError(
            "schema",
            _ddl(schema),
            f"{problem}: some of the columns {_ddl(full)}, in any order",
            where=WHERE,
        )

    if not schema.fields:
        refuse("at least one column")
    names = schema.fieldNames()
    for field in schema.fields:
        if names.count(field.name) > 1:
            refuse(f"column {field.name!r} named twice")
        if field.name not in full.fieldNames():
            if field.name == "headers":
                refuse("'headers' is a column only with includeHeaders=true")
            refuse(f"{field.name!r} is not a column")
        if field != full[field.name]:
            refuse(f"column {field.name!r} as {_ddl(StructType([full[field.name]]))}")


def _ddl(schema: StructType) -> str:
    """``schema`` as ``name type, ...`` (Spark's type names, ``not null`` where so)."""
    return ", ".join(
        f"{f.name} {f.dataType.simpleString()}{'' if f.nullable else ' not null'}"
        for f in schema.fields
    )


def arrow_schema(schema: StructType) -> Any:
    """The Arrow schema Spark expects from ``read()`` for ``schema`` (UTC timestamps)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")
