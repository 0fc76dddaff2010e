"""The columns of ``gtkafka``, as a Spark schema and as the matching Arrow schema.

``key`` binary, ``value`` binary, ``topic`` string, ``partition`` int, ``offset`` long,
``timestamp`` timestamp, ``timestampType`` int, ``headers`` (only with
``includeHeaders=true``) and ``gt``: ``struct<epoch long, topic string, partition int,
offset long>``, the record's global time (defined once in :mod:`state.records.gt`).
Ascending ``gt`` is delivery order and is the same on every replay (the epoch comes from
the epoch log, the rest from Kafka).
"""

from __future__ import annotations

from typing import Any

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


def arrow_schema(schema: StructType) -> Any:
    """The Arrow schema Spark expects from ``read()`` for ``schema`` (UTC timestamps)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(schema, timezone="UTC")
