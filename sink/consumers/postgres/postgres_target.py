"""The target table as the start check found it: what validation needs of it, with no I/O.

The start check (:func:`sink.consumers.postgres.postgres_consumer.check_at_start`) reads
the table's columns and unique indexes from the catalog once, on the driver, and records
them in :class:`~sink.consumers.postgres.postgres_options.PostgresSettings`; write tasks
then validate rows against these facts without asking the server
(:mod:`sink.consumers.postgres.postgres_validate`). Everything here is small, frozen and
picklable, and imports neither psycopg nor Spark.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from sink.consumers.postgres.postgres_columns import PgColumn, columns_for

# The type names (pg_type.typname) of the columns createTable makes, by the SQL it writes.
_TYPNAMES = {
    "boolean": "bool",
    "smallint": "int2",
    "integer": "int4",
    "bigint": "int8",
    "real": "float4",
    "double precision": "float8",
    "text": "text",
    "bytea": "bytea",
    "date": "date",
    "timestamptz": "timestamptz",
    "timestamp": "timestamp",
}


@dataclass(frozen=True)
class TargetColumn:
    """One column of the target table.

    ``type_name`` is PostgreSQL's name of the column's type (``pg_type.typname``: ``int4``,
    ``varchar``, ``numeric``, ``timestamptz``...), of its elements for an array column
    (``is_array``). The type modifier is split out: ``length`` of ``varchar(n)``,
    ``precision`` and ``scale`` of ``numeric(p, s)``, ``precision`` of ``timestamp(p)``;
    None where the column has none. ``sql_type`` is the type as PostgreSQL writes it
    (``character varying(3)[]``), for messages."""

    name: str
    type_name: str
    sql_type: str = ""
    is_array: bool = False
    not_null: bool = False
    length: int | None = None
    precision: int | None = None
    scale: int | None = None

    @property
    def shown(self) -> str:
        """The column's type for messages."""
        if self.sql_type:
            return self.sql_type
        return self.type_name + ("[]" if self.is_array else "")


@dataclass(frozen=True)
class UniqueIndex:
    """A unique index (or primary key, or unique constraint) of the target table that
    validation can check without I/O: on plain columns, every row, equality as bytes and
    numbers compare (no partial, expression or nondeterministic-collation index).
    ``nulls_distinct`` False: ``NULLS NOT DISTINCT`` (two NULLs collide)."""

    name: str
    columns: tuple[str, ...]
    nulls_distinct: bool = True


def created_column(column: PgColumn, *, not_null: bool = False) -> TargetColumn:
    """The column ``createTable`` makes for ``column`` (from :func:`columns_for`)."""
    sql = column.sql_type
    is_array = sql.endswith("[]")
    scalar = sql.removesuffix("[]")
    if scalar.startswith("numeric("):
        precision, scale = (int(p) for p in scalar[len("numeric(") : -1].split(","))
        return TargetColumn(
            column.name, "numeric", sql, is_array, not_null, precision=precision, scale=scale
        )
    return TargetColumn(column.name, _TYPNAMES[scalar], sql, is_array, not_null)


def created_table(
    schema: pa.Schema, key_columns: tuple[str, ...]
) -> tuple[tuple[TargetColumn, ...], tuple[UniqueIndex, ...]]:
    """The columns and unique indexes of the table ``createTable`` makes for an input of
    ``schema``: nullable columns, the upsert key (if any) its primary key."""
    columns = tuple(created_column(c, not_null=c.name in key_columns) for c in columns_for(schema))
    indexes = (UniqueIndex("primary key", key_columns),) if key_columns else ()
    return columns, indexes
