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
by :func:`storage_options`, where delta-rs is handed them (on the driver, and in the write
tasks that stage parts under the table), and every value resolved or given inline for a
key that names a secret is hidden from that process's log records.
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
        return replace(settings, not_null=(), stage_in_table=settings.mode == "append")
    not_null = check_compatible(table, types, settings)
    return replace(
        settings, not_null=not_null, stage_in_table=stages_in_table(table, settings, arrow)
    )


def parts_in_table(settings: DeltaSettings) -> bool:
    """:attr:`DeltaSettings.stage_in_table` as the start check recorded it; without the
    start check (``gtbarrier sweep``), decided from the table as it is now (a table still
    to be created is one delta-rs creates without partitions or constraints)."""
    if settings.stage_in_table is not None:
        return settings.stage_in_table
    table = open_table(settings)
    return settings.mode == "append" if table is None else stages_in_table(table, settings)


def stages_in_table(
    table: DeltaTable, settings: DeltaSettings, input_schema: pa.Schema | None = None
) -> bool:
    """Whether the write tasks' parts can become the table's data files as they are: in
    ``mode=append`` only (a merge reads rows), and only into a table whose writes delta-rs
    would not rewrite or check (:func:`rows_must_be_rewritten`), among them a nested
    ``NOT NULL`` field the input (``input_schema``, when known) may leave null: delta-rs
    checks those row by row, and the write tasks check only top-level columns."""
    if settings.mode != "append":
        return False
    reason = rows_must_be_rewritten(
        table.metadata().partition_columns,
        table.metadata().configuration,
        {f.name: f.metadata for f in table.schema().fields},
    )
    if reason is None and input_schema is not None:
        unchecked = sorted(
            required_inside(pa.schema(table.schema().to_arrow())) - required_inside(input_schema)
        )
        if unchecked:
            reason = f"its nested field {unchecked[0]} is NOT NULL and the input's may be null"
    if reason is not None:
        log.info("%s: the bundles' rows pass through the driver, as %s", settings.uri, reason)
        return False
    return True


def required_inside(schema: pa.Schema) -> set[str]:
    """The paths (``a.b``, ``a.element``, ``a.value``) of the fields nested in ``schema``'s
    columns that may not be null: a struct's fields, a list's elements, a map's values."""
    found: set[str] = set()

    def walk(kind: pa.DataType, path: str) -> None:
        # a list's and a map's children by Delta's names (Arrow writers name them freely)
        children: list[tuple[str, pa.Field]] = []
        if pa.types.is_struct(kind):
            children = [(child.name, child) for child in kind]
        elif pa.types.is_list(kind) or pa.types.is_large_list(kind):
            children = [("element", kind.value_field)]
        elif pa.types.is_map(kind):
            children = [("key", kind.key_field), ("value", kind.item_field)]
        for child_name, child in children:
            name = f"{path}.{child_name}"
            if not child.nullable:
                found.add(name)
            walk(child.type, name)

    for field in schema:
        walk(field.type, field.name)
    return found


def rows_must_be_rewritten(
    partition_columns: list[str],
    configuration: dict[str, str],
    field_metadata: dict[str, dict[str, object]],
) -> str | None:
    """Why a staged part could not be committed as a data file of a table with these
    partition columns, configuration and top-level field metadata (None: it can).

    A partitioned table splits rows by partition; column mapping names a file's columns by
    physical names; constraints, invariants, generated and identity columns are checked
    or computed row by row by the writer (delta-rs): those tables take rows, not files."""
    if partition_columns:
        return f"the table is partitioned by {partition_columns}"
    mapping = configuration.get("delta.columnMapping.mode", "none")
    if mapping != "none":
        return f"the table maps column names (delta.columnMapping.mode={mapping})"
    constraints = sorted(k for k in configuration if k.startswith("delta.constraints."))
    if constraints:
        return f"the table has CHECK constraints ({', '.join(constraints)})"
    for name, metadata in field_metadata.items():
        for key in metadata:
            if key in ("delta.invariants", "delta.generationExpression") or key.startswith(
                "delta.identity."
            ):
                return f"column {name!r} has {key}"
    return None


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
