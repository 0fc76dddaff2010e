"""``consumer=delta``: storage options, opening and creating the table, the start check.

``deltalake`` is imported inside these functions, so users of the other consumers need not
install it (``pip install gtbarrier[delta]``).

:func:`with_table` runs on the driver while Spark plans the query's first micro-batch (the
kind's start check), before any data moves: it opens the table, or creates it from the
input's columns (all nullable) when ``consumer.delta.createTable`` allows, and checks that
an existing table takes every input column with the same Delta type, that the columns the
input lacks are nullable, and that merge's key columns are input columns. Every refusal is
a :class:`~state.errors.ConfigError` naming the option, the column and what was expected.
The table's ``NOT NULL`` columns are recorded in the settings the write tasks receive:
they refuse rows with a null there (dead letters) without opening the table.

Storage options may hold secret references (:mod:`state.secrets`); they are resolved only
here, where delta-rs is handed them, and every value resolved or given inline for a key
that names a secret is hidden from this process's log records.
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from sink.consumers.delta.delta_options import KEY_COLUMNS, STORAGE, URI, DeltaSettings
from state.errors import ConfigError
from state.secrets import hide_in_logs, redact, resolve

if TYPE_CHECKING:
    from deltalake import DeltaTable

log = logging.getLogger(__name__)

WHERE = "barrier"
_SECRET_WORDS = ("SECRET", "PASSWORD", "TOKEN", "KEY", "CREDENTIAL", "SESSION", "SAS")


def storage_options(settings: DeltaSettings) -> dict[str, str]:
    """The delta-rs storage options of ``settings``, secret references resolved; the value
    of every option whose name speaks of a secret is hidden from log records."""
    out = {}
    for name, value in settings.storage:
        out[name] = resolve(value, option=STORAGE.name + name, where=WHERE)
        if any(word in name for word in _SECRET_WORDS) and out[name]:
            hide_in_logs(out[name])
    return out


def said(err: BaseException) -> str:
    """``type: first line`` of a delta-rs error (its Rust backtrace left off), secrets
    hidden."""
    first = (str(err).strip().splitlines() or [""])[0]
    return redact(f"{type(err).__name__}: {first}")


def open_table(settings: DeltaSettings) -> DeltaTable | None:
    """The table at its newest version, or None if there is no Delta table at the uri."""
    from deltalake import DeltaTable
    from deltalake.exceptions import TableNotFoundError

    try:
        return DeltaTable(settings.uri, storage_options=storage_options(settings))
    except TableNotFoundError:
        return None


def arrow_input_schema(spark_schema: Any) -> pa.Schema:
    """The sink's input schema as Arrow, every top-level column nullable (Spark's rows say
    nothing else; the table's ``NOT NULL`` columns are enforced by validation)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(spark_schema, timezone="UTC")
    return pa.schema([f.with_nullable(True) for f in schema])


def delta_types(arrow: pa.Schema, settings: DeltaSettings) -> dict[str, str]:
    """Each input column's Delta type (its JSON, nested nullability ignored); a ConfigError
    names the first column Delta cannot store (an interval, say)."""
    from deltalake import Schema

    types = {}
    for field in arrow:
        try:
            converted = Schema.from_arrow(pa.schema([field])).fields[0]
        except Exception as err:
            raise ConfigError(
                URI.name,
                settings.uri,
                f"a table for the sink's input, but column {field.name!r} of Arrow type "
                f"{field.type} has no Delta type ({said(err)}); cast or drop it before the sink",
                where=WHERE,
            ) from None
        types[field.name] = _type_of(json.loads(converted.to_json()))
    return types


def _type_of(field_json: dict[str, Any]) -> str:
    return json.dumps(_loose(field_json["type"]), sort_keys=True)


def _loose(node: Any) -> Any:
    """A Delta type's JSON without nullability and metadata (a nested field's nullability
    is the writer's concern: delta-rs checks it per row)."""
    if isinstance(node, dict):
        return {
            k: _loose(v)
            for k, v in node.items()
            if k not in ("nullable", "metadata", "containsNull", "valueContainsNull")
        }
    if isinstance(node, list):
        return [_loose(v) for v in node]
    return node


def with_table(settings: DeltaSettings, spark_schema: Any) -> DeltaSettings:
    """The table opened (or created) and checked against the input; ``settings`` with the
    table's ``NOT NULL`` input columns recorded for the write tasks."""
    arrow = arrow_input_schema(spark_schema)
    types = delta_types(arrow, settings)
    missing_keys = [k for k in settings.key_columns if k not in types]
    if missing_keys:
        raise ConfigError(
            KEY_COLUMNS.name,
            ",".join(settings.key_columns),
            f"columns of the sink's input {arrow.names}; {missing_keys[0]!r} is not one",
            where=WHERE,
        )
    try:
        table = open_table(settings)
    except Exception as err:
        raise ConfigError(
            URI.name, settings.uri, f"a Delta table that can be read ({said(err)})", where=WHERE
        ) from None
    if table is None:
        if not settings.create_table:
            raise ConfigError(
                URI.name,
                settings.uri,
                "an existing Delta table (consumer.delta.createTable=false), none found there",
                where=WHERE,
            )
        _create(settings, arrow)
        return replace(settings, not_null=())
    return replace(settings, not_null=check_compatible(table, types, settings))


def _create(settings: DeltaSettings, arrow: pa.Schema) -> None:
    from deltalake import DeltaTable

    if settings.uri.startswith("file://"):
        os.makedirs(settings.uri[len("file://") :], exist_ok=True)
    try:
        DeltaTable.create(
            settings.uri, arrow, mode="ignore", storage_options=storage_options(settings)
        )
    except Exception as err:
        raise ConfigError(
            URI.name, settings.uri, f"a Delta table that can be created ({said(err)})", where=WHERE
        ) from None
    log.info("created Delta table %s", settings.uri)


def check_compatible(
    table: DeltaTable, types: dict[str, str], settings: DeltaSettings
) -> tuple[str, ...]:
    """ConfigError unless ``table`` takes the input's columns (``types``, from
    :func:`delta_types`); the table's ``NOT NULL`` columns among them."""
    fields = {f.name: f for f in table.schema().fields}
    for name, wanted in types.items():
        found = fields.get(name)
        if found is None:
            raise ConfigError(
                URI.name,
                settings.uri,
                f"a table that takes the sink's input, but input column {name!r} is not in "
                f"the table (its columns: {list(fields)}); add it or drop it before the sink",
                where=WHERE,
            )
        has = _type_of(json.loads(found.to_json()))
        if has != wanted:
            raise ConfigError(
                URI.name,
                settings.uri,
                f"a table that takes the sink's input, but column {name!r} is "
                f"{json.loads(has)} in the table and {json.loads(wanted)} in the input; cast it "
                "before the sink",
                where=WHERE,
            )
    for name, found in fields.items():
        if name not in types and not found.nullable:
            raise ConfigError(
                URI.name,
                settings.uri,
                f"a table that takes the sink's input, but its column {name!r} is NOT NULL "
                "and not in the input: every row would be refused",
                where=WHERE,
            )
    return tuple(name for name in types if not fields[name].nullable)
