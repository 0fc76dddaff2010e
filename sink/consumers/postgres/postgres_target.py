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
        modifier = ""
        if self.length is not None:
            modifier = f"({self.length})"
        elif self.precision is not None:
            scale = "" if self.scale is None else f",{self.scale}"
            modifier = f"({self.precision}{scale})"
        return self.type_name + modifier + ("[]" if self.is_array else "")


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


# --- which column types keep the input's values ----------------------------------------

INTEGER_TYPES = ("int2", "int4", "int8")
_FLOAT_MANTISSA = {"float4": 24, "float8": 53}  # integers up to 2^bits are exact


def _integer_bits(dtype: pa.DataType) -> int:
    """The bits of magnitude an integer type's values may need."""
    width = int(dtype.bit_width)
    return width - 1 if pa.types.is_signed_integer(dtype) else width


def incompatibility(dtype: pa.DataType, column: TargetColumn) -> str | None:
    """None if ``column`` keeps every value of Arrow type ``dtype`` as it is, or refuses
    only some rows (a range, a length: validation finds those); else why not, in words.

    | input (Spark) | columns that keep it |
    |---|---|
    | boolean | boolean |
    | tinyint, smallint, int, bigint | smallint, integer, bigint, numeric (ranges checked per row); real up to smallint, double precision up to int (exact there) |
    | float | real, double precision |
    | double | double precision |
    | decimal(p, s) | numeric, numeric(P, S) with S >= s (precision checked per row); smallint, integer, bigint if s = 0 |
    | string | text, varchar, varchar(n) (length checked per row) |
    | binary | bytea |
    | date | date |
    | timestamp | timestamptz, timestamptz(6) |
    | timestamp_ntz | timestamp, timestamp(6) |
    | array of T | an array of a column that keeps T |
    """  # noqa: E501 - a table
    is_list = pa.types.is_list(dtype) or pa.types.is_large_list(dtype)
    if is_list and not column.is_array:
        return f"an array column holds arrays; {column.shown} is not an array"
    if column.is_array and not is_list:
        return f"{column.shown} is an array column; the input's values are not arrays"
    return _scalar_incompatibility(dtype.value_type if is_list else dtype, column)


def _scalar_incompatibility(  # noqa: PLR0911, PLR0912 - one answer per pair of types
    dtype: pa.DataType, column: TargetColumn
) -> str | None:
    t = pa.types
    name, shown = column.type_name, column.shown
    if t.is_boolean(dtype):
        return None if name == "bool" else "booleans go only into boolean"
    if t.is_integer(dtype):
        if name in INTEGER_TYPES or name == "numeric":
            return None
        if name in _FLOAT_MANTISSA:
            bits = _FLOAT_MANTISSA[name]
            if _integer_bits(dtype) <= bits:
                return None
            return (
                f"{shown} holds integers exactly only up to 2^{bits}: larger ones would be rounded"
            )
        return "integers go into smallint, integer, bigint or numeric"
    if t.is_floating(dtype):
        if name == "float8" or (name == "float4" and dtype.bit_width <= 32):
            return None
        if name == "float4":
            return "real keeps 24 bits of a double's 53: double values would be rounded"
        if name == "numeric":
            return (
                "a float's binary value has no exact decimal: it would be rounded to decimal digits"
            )
        return "floats go into real or double precision"
    if t.is_decimal(dtype):
        if name == "numeric":
            if column.precision is None or (column.scale or 0) >= dtype.scale:
                return None
            return f"{shown} rounds to {column.scale} decimal places, the input has {dtype.scale}"
        if name in INTEGER_TYPES:
            if dtype.scale <= 0:
                return None
            return f"{shown} would round away the input's {dtype.scale} decimal places"
        if name in _FLOAT_MANTISSA:
            return f"{shown} is binary floating point: decimal values would be rounded"
        return "decimals go into numeric (with at least their scale) or, with scale 0, integers"
    if t.is_string(dtype) or t.is_large_string(dtype):
        if name in ("text", "varchar"):
            return None
        if name == "bpchar":
            return (
                "character(n) pads shorter strings with spaces and ignores trailing spaces: "
                "use varchar(n) or text"
            )
        return (
            f"strings go into text or varchar; {shown} would parse them, refusing any it "
            "cannot read"
        )
    if t.is_binary(dtype) or t.is_large_binary(dtype):
        if name == "bytea":
            return None
        if name in ("text", "varchar", "bpchar"):
            return "binary values would be stored as the text of their hex digits (\\x...)"
        return "binary values go only into bytea"
    if t.is_date(dtype):
        return None if name == "date" else "dates go only into date"
    if t.is_timestamp(dtype):
        zoned = dtype.tz is not None
        wanted = "timestamptz" if zoned else "timestamp"
        if name == wanted:
            if column.precision is None or column.precision >= 6:
                return None
            return (
                f"{shown} rounds to {column.precision} fractional digits of a second, "
                "the input has 6"
            )
        if name == "date":
            return "date drops the time of day"
        if zoned and name == "timestamp":
            return (
                "timestamp without time zone drops the time zone: the UTC instants would be "
                "stored as wall-clock times of no zone (use timestamptz, or timestamp_ntz in Spark)"
            )
        if not zoned and name == "timestamptz":
            return (
                "timestamp with time zone would read the values in the session's time zone "
                "(use timestamp, or a timestamp in Spark)"
            )
        return f"timestamps go only into {wanted}"
    return f"{dtype} has no PostgreSQL column here"
