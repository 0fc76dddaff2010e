"""The options of ``consumer=postgres`` and their parsed form :class:`PostgresSettings`.

psycopg is imported only to check the DSN, and only when ``consumer=postgres``: users of
the other consumers need not install it (``pip install gtbarrier[postgres]``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

from sink.consumers.consumer_kind import ConsumerSettings
from sink.consumers.postgres.postgres_columns import identifier_too_long
from sink.consumers.postgres.postgres_target import TargetColumn, UniqueIndex
from state.errors import ConfigError
from state.option_table import BooleanOption, ChoiceOption, StringOption
from state.options import Options

Mode = Literal["append", "upsert"]

# One identifier as written in the option: used verbatim (quoted) in SQL, so its case counts.
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_$]*$")

DSN = StringOption(
    name="consumer.postgres.dsn",
    required=True,
    doc="postgres: a libpq connection string (`host=... dbname=...`) or a `postgresql://` URL.",
)
TABLE = StringOption(
    name="consumer.postgres.table",
    required=True,
    doc="postgres: the target table, `schema.table` or `table` (names used as written, "
    "case-sensitive); the bookkeeping table `gtbarrier_bundles` lives in the same schema.",
)
CREATE_TABLE = BooleanOption(
    name="consumer.postgres.createTable",
    default=True,
    doc="postgres: create the table (and its schema) from the sink's input schema if it is "
    "missing; `false`: a missing table stops the query at start.",
)
MODE = ChoiceOption[Mode](
    name="consumer.postgres.mode",
    choices=("append", "upsert"),
    default="append",
    doc="postgres: `append` (COPY every row) or `upsert` (COPY into a temporary table, then "
    "`INSERT ... ON CONFLICT (keyColumns) DO UPDATE`; within a bundle the last row in gt "
    "order wins).",
)
KEY_COLUMNS = StringOption(
    name="consumer.postgres.keyColumns",
    default_doc="required for upsert",
    doc="postgres: comma-separated key columns for `mode=upsert` (a primary key or unique "
    "index on exactly these columns; `createTable` makes it the primary key).",
)

HIDDEN = "<not shown: it may hold a password>"
SPECS = (DSN, TABLE, CREATE_TABLE, MODE, KEY_COLUMNS)


@dataclass(frozen=True)
class PostgresSettings(ConsumerSettings):
    """Where and how ``consumer=postgres`` writes: parsed options, small and picklable."""

    dsn: str
    table: str
    schema: str | None = None
    create_table: bool = True
    mode: Mode = "append"
    key_columns: tuple[str, ...] = ()
    columns: tuple[TargetColumn, ...] = ()
    """The target table's columns, recorded by the start check on the driver (empty until
    it ran): what validation checks rows against in the write tasks."""
    unique_indexes: tuple[UniqueIndex, ...] = ()
    """The target table's unique indexes that validation can check (start check)."""

    @property
    def qualified(self) -> str:
        """``schema.table`` or ``table``, as given (for messages)."""
        return f"{self.schema}.{self.table}" if self.schema else self.table

    @property
    def safe_dsn(self) -> str:
        """The DSN without its password (for messages and logs)."""
        return redact_dsn(self.dsn)


def redact_dsn(dsn: str) -> str:
    """``dsn`` with any password replaced by ``***``."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        params = conninfo_to_dict(dsn)
    except Exception:
        return "<unparseable DSN>"
    if "password" in params:
        params["password"] = "***"
    return make_conninfo("", **params)


def parse_settings(opts: Options) -> PostgresSettings:
    """The ``consumer.postgres.*`` options, checked; errors name option, value, expectation."""
    dsn = DSN.read_required(opts)
    try:
        from psycopg.conninfo import conninfo_to_dict
    except ImportError as err:
        expected = "psycopg 3 installed: pip install 'gtbarrier[postgres]'"
        raise ConfigError(DSN.name, HIDDEN, expected, where=opts.where) from err
    try:
        conninfo_to_dict(dsn)
    except Exception as err:
        raise ConfigError(
            DSN.name,
            HIDDEN,
            f"a libpq connection string or postgresql:// URL ({err})",
            where=opts.where,
        ) from None
    raw_table = TABLE.read_required(opts)
    names = raw_table.split(".")
    for name in names:
        if (too_long := identifier_too_long(name)) is not None:
            raise opts.error(TABLE.name, too_long)
    if len(names) > 2 or not all(_IDENTIFIER.match(n) for n in names):
        raise opts.error(
            TABLE.name, "'schema.table' or 'table', each a letter or _ then letters, digits, _, $"
        )
    schema, table = (names[0], names[1]) if len(names) == 2 else (None, names[0])
    mode = MODE.read(opts)
    raw_keys = KEY_COLUMNS.read(opts)
    keys: tuple[str, ...] = ()
    if raw_keys is not None:
        keys = tuple(k.strip() for k in raw_keys.split(","))
        for key in keys:
            if (too_long := identifier_too_long(key)) is not None:
                raise opts.error(KEY_COLUMNS.name, too_long)
        if not all(_IDENTIFIER.match(k) for k in keys) or len(set(keys)) != len(keys):
            raise opts.error(KEY_COLUMNS.name, "distinct column names separated by commas")
    if mode == "upsert" and not keys:
        raise opts.error(KEY_COLUMNS.name, "the key columns of consumer.postgres.mode=upsert")
    if mode == "append" and keys:
        raise opts.error(KEY_COLUMNS.name, "not to be set with consumer.postgres.mode=append")
    return PostgresSettings(
        dsn=dsn,
        table=table,
        schema=schema,
        create_table=CREATE_TABLE.read(opts),
        mode=mode,
        key_columns=keys,
    )
