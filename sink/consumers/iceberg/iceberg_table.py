"""``consumer=iceberg``: the catalog, the table and the mapping of the sink's input schema.

pyiceberg is imported inside these functions, so users of the other consumers need not
install it (``pip install gtbarrier[iceberg]``). Catalogs are cached per process (one per
distinct :class:`~sink.consumers.iceberg.iceberg_options.IcebergSettings`): the commit
process and every write task's Python worker open the catalog once, not once per commit or
task.

:func:`with_table` runs on the driver while Spark plans the query's first micro-batch
(the kind's start check, from ``BarrierSink.streamWriter``), before any data moves: it
loads the catalog, creates the namespace and the table from the input schema
(``consumer.iceberg.createTable``) or checks that the existing table can take the input's
columns, and records the table's location in the settings the write tasks receive. Every
problem is a :class:`~state.errors.ConfigError` naming the option, the value and what was
expected.

The table's columns are the input's, all optional (nullable): a data file whose column is
required is still compatible with an optional table column, never the other way round.
An existing table may require a column: the input's column (nullable, as Spark's columns
are) is taken for it, because the write tasks refuse the rows with a null there
(:meth:`~sink.consumers.iceberg.iceberg_kind.IcebergKind.validate`) and stage the others in
parts that mark the column required. The required columns are recorded in the settings
the tasks receive (the schema as the query started: validation never asks the catalog).
Required fields nested in structs are not relaxed: such a table is refused at start unless
the input's fields are not nullable.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

import pyarrow as pa

from sink.consumers.iceberg.iceberg_options import CATALOG, TABLE, IcebergSettings
from state.errors import ConfigError
from state.process_cache import ProcessCache
from state.secrets import has_reference, hide_in_logs, redact, resolve

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog
    from pyiceberg.table import Table

log = logging.getLogger(__name__)

WHERE = "barrier"
TABLE_OPTION = TABLE.name
CATALOG_OPTION = CATALOG.name + "*"
_SECRET_WORDS = ("secret", "password", "token", "credential", "session")
# A password in a property's text: a URL's user info (a SQL catalog's uri), a parameter.
_URL_PASSWORD = re.compile(r"(://[^/\s:@]*:)([^@/\s]+)(@)")
_PARAM_PASSWORD = re.compile(r"(?i)((?:^|[?&;\s])(?:password|passwd|pwd)=)([^&;\s]+)")
MASK = "***"
# Catalog properties only the catalog uses (where it is and how it logs in): pyiceberg hands
# every catalog property to the table's FileIO, but the write tasks need only FileIO's own.
_CATALOG_ONLY = frozenset(
    {
        "type",
        "uri",
        "warehouse",
        "credential",
        "token",
        "py-catalog-impl",
        "echo",
        "pool_pre_ping",
        "init_catalog_tables",
        "oauth2-server-uri",
        "scope",
        "audience",
        "resource",
        "prefix",
    }
)
_CATALOG_ONLY_PREFIXES = ("rest.", "header.", "jdbc.")


def resolved_properties(properties: Mapping[str, str]) -> dict[str, str]:
    """Catalog or FileIO properties with their secret references (:mod:`state.secrets`)
    resolved: only where pyiceberg's catalog or file system is made. Every secret among
    them, resolved or given inline (a property named for one, a URL's password), is hidden
    from this process's log records from then on."""
    out = {}
    for key, value in properties.items():
        out[key] = resolve(value, option=f"{CATALOG.name}{key}", where=WHERE)
        if any(w in key for w in _SECRET_WORDS):
            hide_in_logs(out[key])
        for pattern in (_URL_PASSWORD, _PARAM_PASSWORD):
            for match in pattern.finditer(out[key]):
                hide_in_logs(unquote(match.group(2)))
                hide_in_logs(match.group(2))
    return out


def task_io_properties(
    io_properties: Mapping[str, str], settings: IcebergSettings
) -> dict[str, str]:
    """The table's FileIO properties to record for the write tasks: without the catalog's
    own (its uri, its credentials: the tasks never open the catalog), and with every secret
    that a catalog property gave by reference put back as that reference: the settings
    travel to the executors, and the tasks resolve only what they use."""
    references = {
        resolve(v, option=f"{CATALOG.name}{k}", where=WHERE): v
        for k, v in settings.catalog
        if has_reference(v)
    }
    return {
        k: references.get(v, v)
        for k, v in io_properties.items()
        if k not in _CATALOG_ONLY and not k.startswith(_CATALOG_ONLY_PREFIXES)
    }


def masked(text: str) -> str:
    """``text`` without a password it shows: a URL's, a ``password=`` parameter's (a secret
    reference in their place is kept: it says where the secret is) and every secret hidden
    in this process (:func:`state.secrets.redact`)."""

    def mask(match: re.Match[str]) -> str:
        if has_reference(match.group(2)):
            return match.group(0)
        after = match.group(3) if match.re.groups == 3 else ""
        return match.group(1) + MASK + after

    return redact(_PARAM_PASSWORD.sub(mask, _URL_PASSWORD.sub(mask, text)))


def shown_properties(settings: IcebergSettings) -> dict[str, str]:
    """The catalog properties for an error message, secrets masked."""
    return {
        k: (MASK if any(w in k for w in _SECRET_WORDS) else masked(v)) for k, v in settings.catalog
    }


def said(err: BaseException) -> str:
    """``type: message`` of a catalog's error, for a message: its passwords masked."""
    return masked(f"{type(err).__name__}: {err}")


def shows_a_secret(err: BaseException) -> bool:
    """Whether a traceback of ``err`` (its causes and contexts) would show a password: then
    it is left off the chain of the error raised for it."""
    seen: BaseException | None = err
    while seen is not None:
        text = f"{seen} {seen!r}"
        if masked(text) != text:
            return True
        seen = seen.__cause__ or seen.__context__
    return False


#: The catalogs of this process, by settings (a forked worker opens its own).
_CATALOGS: ProcessCache[IcebergSettings, Catalog] = ProcessCache("iceberg catalogs", capacity=8)
#: The tables' locations and FileIO properties, by settings.
_LOCATIONS: ProcessCache[IcebergSettings, tuple[str, tuple[tuple[str, str], ...]]] = ProcessCache(
    "iceberg table locations", capacity=8
)


def open_catalog(settings: IcebergSettings) -> Catalog:
    """The pyiceberg catalog of ``settings`` (cached per process); ConfigError if it cannot
    be loaded (and nothing is cached)."""
    return _CATALOGS.get_or_create(settings, lambda: _load_catalog(settings))


def _load_catalog(settings: IcebergSettings) -> Catalog:
    from pyiceberg.catalog import load_catalog

    uri = settings.properties.get("uri", "")
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:///:memory:"):
        # SQLite creates the database file, not its directory
        os.makedirs(os.path.dirname(uri[len("sqlite:///") :].split("?")[0]) or ".", exist_ok=True)
    try:
        return load_catalog(settings.catalog_name, **resolved_properties(settings.properties))
    except Exception as err:
        raise ConfigError(
            CATALOG_OPTION,
            shown_properties(settings),
            f"properties pyiceberg can load a catalog {settings.catalog_name!r} from ({said(err)})",
            where=WHERE,
        ) from (None if shows_a_secret(err) else err)


def load_table(settings: IcebergSettings) -> Table:
    """The table, freshly loaded from the catalog (its current metadata)."""
    return open_catalog(settings).load_table(settings.identifier)


def table_location(settings: IcebergSettings) -> tuple[str, tuple[tuple[str, str], ...]]:
    """``(location, FileIO properties)`` of the table from the catalog, cached per process
    (when ``settings`` do not carry them)."""

    def locate() -> tuple[str, tuple[tuple[str, str], ...]]:
        table = load_table(settings)
        return table.location().rstrip("/"), tuple(sorted(table.io.properties.items()))

    return _LOCATIONS.get_or_create(settings, locate)


def arrow_input_schema(spark_schema: Any) -> pa.Schema:
    """The sink's input schema as Arrow, every field nullable (the table's columns)."""
    from pyspark.sql.pandas.types import to_arrow_schema

    schema = to_arrow_schema(spark_schema, timezone="UTC")
    return pa.schema([_nullable(f) for f in schema])


def _nullable(field: pa.Field) -> pa.Field:
    t = field.type
    if pa.types.is_struct(t):
        t = pa.struct([_nullable(t.field(i)) for i in range(t.num_fields)])
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        t = pa.list_(_nullable(t.value_field))
    elif pa.types.is_map(t):
        t = pa.map_(t.key_type, _nullable(t.item_field).type)
    return field.with_type(t).with_nullable(True)


def iceberg_schema_of(arrow: pa.Schema, settings: IcebergSettings) -> Any:
    """The Iceberg schema for ``arrow``; a ConfigError names the first column Iceberg
    cannot store (e.g. intervals, unsigned integers)."""
    from pyiceberg.catalog import Catalog

    for field in arrow:
        try:
            Catalog._convert_schema_if_needed(pa.schema([field]))
        except Exception as err:
            raise ConfigError(
                TABLE_OPTION,
                settings.identifier,
                f"a table for the sink's input, but column {field.name!r} of Arrow type "
                f"{field.type} has no Iceberg type ({err}); cast or drop it before the sink",
                where=WHERE,
            ) from err
    return Catalog._convert_schema_if_needed(arrow)


def with_table(settings: IcebergSettings, spark_schema: Any) -> IcebergSettings:
    """:func:`prepare_table`, and ``settings`` with the table's location and FileIO
    properties recorded, for the write tasks (they need neither the catalog nor access
    to it: a SQLite file on the driver, a REST catalog's credentials)."""
    table = prepare_table(settings, spark_schema)
    location, io_properties = table.location().rstrip("/"), table.io.properties
    return replace(
        settings,
        location=location,
        io_properties=tuple(sorted(task_io_properties(io_properties, settings).items())),
        required=required_columns(table, arrow_input_schema(spark_schema).names),
    )


def required_columns(table: Table, names: list[str]) -> tuple[str, ...]:
    """Those of the input's columns ``names`` that ``table`` requires (``NOT NULL``)."""
    schema = table.schema()
    return tuple(f.name for f in schema.fields if f.required and f.name in names)


def with_required(arrow: pa.Schema, required: tuple[str, ...] | list[str]) -> pa.Schema:
    """``arrow`` with the columns ``required`` marked not nullable."""
    wanted = set(required)
    return pa.schema(
        [f.with_nullable(False) if f.name in wanted else f for f in arrow],
        metadata=arrow.metadata,
    )


def prepare_table(settings: IcebergSettings, spark_schema: Any) -> Table:
    """Load (or create) the table and check that it takes the input's columns."""
    from pyiceberg.exceptions import NoSuchTableError

    arrow = arrow_input_schema(spark_schema)
    schema = iceberg_schema_of(arrow, settings)
    catalog = open_catalog(settings)
    try:
        table = catalog.load_table(settings.identifier)
    except NoSuchTableError:
        if not settings.create_table:
            raise ConfigError(
                TABLE_OPTION,
                settings.identifier,
                "an existing table (consumer.iceberg.createTable=false), not found in catalog "
                f"{settings.catalog_name!r} {shown_properties(settings)}",
                where=WHERE,
            ) from None
        table = _create(catalog, settings, schema)
    except Exception as err:
        raise ConfigError(
            TABLE_OPTION,
            settings.identifier,
            f"a table readable through catalog {shown_properties(settings)} ({said(err)})",
            where=WHERE,
        ) from (None if shows_a_secret(err) else err)
    check_compatible(table, arrow, settings)
    return table


def _create(catalog: Catalog, settings: IcebergSettings, schema: Any) -> Table:
    try:
        catalog.create_namespace_if_not_exists(settings.namespace)
        table = catalog.create_table_if_not_exists(settings.identifier, schema=schema)
    except Exception as err:
        raise ConfigError(
            TABLE_OPTION,
            settings.identifier,
            f"a table that can be created in catalog {shown_properties(settings)} ({said(err)})",
            where=WHERE,
        ) from (None if shows_a_secret(err) else err)
    log.info("created Iceberg table %s at %s", settings.identifier, table.location())
    return table


def check_compatible(table: Table, arrow: pa.Schema, settings: IcebergSettings) -> None:
    """ConfigError unless data files with the input's columns can be added to ``table``
    (with the columns the table requires marked required, as the write tasks stage them)."""
    from pyiceberg.io.pyarrow import _check_pyarrow_schema_compatible

    staged = with_required(arrow, required_columns(table, arrow.names))
    try:
        _check_pyarrow_schema_compatible(
            table.schema(), staged, format_version=table.metadata.format_version
        )
    except Exception as err:
        raise ConfigError(
            TABLE_OPTION,
            settings.identifier,
            f"a table whose schema takes the sink's input columns {arrow.names}: {err}",
            where=WHERE,
        ) from err
