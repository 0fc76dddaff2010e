"""The target table's facts, read from PostgreSQL's catalog when the query starts.

:func:`read_target` runs on the driver, inside the start check's transaction, and returns
what validation needs (:mod:`sink.consumers.postgres.postgres_target`): every column with
its type, type modifier and nullability, and the unique indexes validation can check.
Unique indexes it cannot check without I/O (partial, on expressions, on a column with a
nondeterministic collation) are returned apart, by name, for the log.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import psycopg

from sink.consumers.postgres.postgres_target import TargetColumn, UniqueIndex

Cursor = psycopg.Cursor[Any]
VARHDRSZ = 4  # a type modifier of varchar(n) and numeric(p, s) counts this header


@dataclass(frozen=True)
class CatalogColumn:
    """A column as the catalog has it, with what only the start check needs."""

    column: TargetColumn
    has_default: bool
    """A default, an identity or a generated value fills it when the input does not."""
    generated: bool
    """A generated column (``GENERATED ALWAYS AS (...) STORED``): it cannot be written."""
    domain: bool
    """Its type is a domain (over ``column.type_name``)."""


@dataclass(frozen=True)
class Target:
    """The target table's columns (in their order) and unique indexes."""

    columns: tuple[CatalogColumn, ...]
    unique_indexes: tuple[UniqueIndex, ...]
    unchecked_indexes: tuple[str, ...]
    """Unique indexes validation cannot check (partial, expressions, collations)."""
    index_columns: tuple[tuple[str, tuple[str, ...], bool, bool], ...] = ()
    """Every unique index: name, key columns (empty if on an expression), partial or not,
    NULLS NOT DISTINCT or not (for the upsert key's check)."""


def _modifiers(type_name: str, typmod: int) -> dict[str, int | None]:
    """``length``, ``precision``, ``scale`` of a type modifier (PostgreSQL's encoding)."""
    if typmod < 0:
        return {}
    if type_name in ("varchar", "bpchar"):
        return {"length": typmod - VARHDRSZ}
    if type_name == "numeric":
        packed = typmod - VARHDRSZ
        scale = ((packed & 0x7FF) ^ 1024) - 1024  # 11 bits, signed since PostgreSQL 15
        return {"precision": (packed >> 16) & 0xFFFF, "scale": scale}
    if type_name in ("timestamp", "timestamptz", "time", "timetz", "interval"):
        return {"precision": typmod & 0xFFFF}
    return {}


def read_target(cur: Cursor, oid: int) -> Target:
    """The facts of the table ``oid`` (see the module docstring)."""
    cur.execute(
        "SELECT a.attname, a.attnotnull, a.atthasdef OR a.attidentity <> '' "
        "OR a.attgenerated <> '', a.attgenerated <> '', format_type(a.atttypid, a.atttypmod), "
        "a.atttypmod, t.typtype = 'd', "
        # a domain's base type; an array's element type
        "b.typname, b.typcategory = 'A', e.typname, "
        "CASE WHEN t.typtype = 'd' THEN t.typtypmod ELSE a.atttypmod END, "
        "t.typtype = 'd' AND t.typnotnull "
        "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
        "JOIN pg_type b ON b.oid = CASE WHEN t.typtype = 'd' THEN t.typbasetype ELSE t.oid END "
        "LEFT JOIN pg_type e ON e.oid = b.typelem AND b.typcategory = 'A' "
        "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum",
        (oid,),
    )
    columns = []
    for (
        name,
        not_null,
        has_default,
        generated,
        sql_type,
        _typmod,
        domain,
        base,
        is_array,
        element,
        base_typmod,
        domain_not_null,
    ) in cur.fetchall():
        type_name = element if is_array else base
        column = TargetColumn(
            name,
            type_name,
            sql_type,
            bool(is_array),
            bool(not_null or domain_not_null),
            **_modifiers(type_name, base_typmod),
        )
        columns.append(CatalogColumn(column, bool(has_default), bool(generated), bool(domain)))
    cur.execute("SELECT current_setting('server_version_num')::int")
    row = cur.fetchone()
    version = int(row[0]) if row else 0
    nulls_not_distinct = "i.indnullsnotdistinct" if version >= 150000 else "false"
    cur.execute(
        "SELECT c.relname, i.indpred IS NOT NULL, "
        f"{nulls_not_distinct}, "
        # the key columns in index order; NULL for an expression; whether each column's
        # collation is deterministic (true where the column has none)
        "(SELECT array_agg(a.attname::text ORDER BY k.n) "
        " FROM unnest(i.indkey[0:i.indnkeyatts - 1]) WITH ORDINALITY k(attnum, n) "
        " LEFT JOIN pg_attribute a "
        " ON a.attrelid = i.indrelid AND a.attnum = k.attnum AND k.attnum > 0), "
        "(SELECT bool_and(k.attnum > 0) FROM unnest(i.indkey[0:i.indnkeyatts - 1]) k(attnum)), "
        "(SELECT coalesce(bool_and(coalesce(col.collisdeterministic, true)), true) "
        " FROM unnest(i.indcollation) ic(oid) LEFT JOIN pg_collation col ON col.oid = ic.oid) "
        "FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
        "WHERE i.indrelid = %s AND i.indisunique ORDER BY c.relname",
        (oid,),
    )
    checked: list[UniqueIndex] = []
    unchecked: list[str] = []
    every: list[tuple[str, tuple[str, ...], bool, bool]] = []
    for name, partial, nnd, key_names, plain, deterministic in cur.fetchall():
        keys = tuple(key_names) if plain and key_names else ()
        every.append((name, keys, bool(partial), bool(nnd)))
        if keys and not partial and deterministic:
            checked.append(UniqueIndex(name, keys, nulls_distinct=not nnd))
        else:
            unchecked.append(name)
    return Target(tuple(columns), tuple(checked), tuple(unchecked), tuple(every))
