"""``consumer=postgres``: each bundle's rows and its id in one PostgreSQL transaction.

A delivery is one transaction on a connection kept per process
(:mod:`sink.consumers.postgres.postgres_connections`)::

    SELECT ... FROM gtbarrier_bundles WHERE pipeline = $1 AND bundle_id = $2   -- stored?
    COPY <table> (<columns>) FROM STDIN (FORMAT csv)                           -- the rows
    INSERT INTO gtbarrier_bundles VALUES ($pipeline, $bundle_id, $gt, $rows, clock_timestamp())
    DELETE FROM gtbarrier_bundles WHERE pipeline = $1 AND bundle_id <= $2 - $retained
    COMMIT

so the rows are in the table exactly when the bundle's row is in ``gtbarrier_bundles``, and
:meth:`PostgresConsumer.last_bundle` reads the newest of those back: exactly once across
any crash. Only that newest row is ever read back, so each transaction also deletes the
pipeline's rows older than the last ``consumer.postgres.bundlesRetained``: the table stays
bounded however long the pipeline runs. With ``consumer.postgres.mode=upsert`` the rows
are COPYed into a temporary table and merged with ``INSERT ... SELECT DISTINCT ON
(<keys>) ... ON CONFLICT (<keys>) DO UPDATE`` (the last row of a key in gt order wins).
``delivery=at-least-once`` writes the rows only.

The bookkeeping table, in the target table's schema (created when missing)::

    gtbarrier_bundles(
        pipeline     text        -- the sink's pipeline.id
        bundle_id    bigint      -- the bundle (= the source epoch)
        gt           bigint      -- the bundle's global time (= its id)
        rows         bigint      -- rows the bundle carried
        committed_at timestamptz -- when its transaction wrote the row
        PRIMARY KEY (pipeline, bundle_id))

A connection lost while ``COMMIT`` is under way leaves the outcome unknown: the consumer
reads ``gtbarrier_bundles`` on a new connection and acknowledges the bundle if its row is
there, fails the attempt (it is retried) if not, and raises
:class:`~state.errors.CommitStateUnknown` if the table cannot be read (the in-flight
record resolves it on restart). Types: :mod:`sink.consumers.postgres.postgres_columns`.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from typing import Any, TypeVar

import psycopg
import pyarrow as pa
from psycopg import sql

from sink.bundle import Bundle
from sink.consumers.base import Ack, Consumer, LastBundle
from sink.consumers.postgres import postgres_connections as pgc
from sink.consumers.postgres.postgres_catalog import CatalogColumn, Target, read_target
from sink.consumers.postgres.postgres_columns import (
    SEQ_COLUMN,
    InputColumn,
    PgColumn,
    columns_for,
    columns_for_spark,
    encode_csv,
    input_columns_spark,
)
from sink.consumers.postgres.postgres_options import (
    CREATE_TABLE,
    DSN,
    KEY_COLUMNS,
    TABLE,
    PostgresSettings,
)
from sink.consumers.postgres.postgres_target import incompatibility
from sink.faults import FaultInjector
from sink.staging import Staging
from state.errors import (
    CommitFailed,
    CommitStateUnknown,
    ConfigError,
    DeliveryFailed,
    GtBarrierError,
)
from state.retry import store_requests

log = logging.getLogger(__name__)
T = TypeVar("T")
Cursor = psycopg.Cursor[Any]

BOOKKEEPING = "gtbarrier_bundles"
STAGE = "gtbarrier_stage"
WHERE = "barrier"


def bookkeeping_row(pipeline_id: str, bundle: Bundle) -> tuple[str, int, int, int]:
    """A delivered bundle's row in ``gtbarrier_bundles``: ``(pipeline, bundle_id, gt, rows)``
    (``committed_at`` is the server's ``clock_timestamp()``); golden in
    ``tests/golden/consumers/`` with the table's definition."""
    return (pipeline_id, bundle.bundle_id, bundle.gt, bundle.rows)


class Sql:
    """The SQL of one target: quoted names and statements."""

    def __init__(self, target: PostgresSettings) -> None:
        self.target = target
        names = (target.schema,) if target.schema else ()
        self.table = sql.Identifier(*names, target.table)
        self.bookkeeping = sql.Identifier(*names, BOOKKEEPING)

    def create_bookkeeping(self) -> sql.Composed:
        return sql.SQL(
            "CREATE TABLE IF NOT EXISTS {} (pipeline text NOT NULL, bundle_id bigint NOT NULL, "
            "gt bigint NOT NULL, rows bigint NOT NULL, committed_at timestamptz NOT NULL "
            "DEFAULT clock_timestamp(), PRIMARY KEY (pipeline, bundle_id))"
        ).format(self.bookkeeping)

    def insert_bookkeeping(self) -> sql.Composed:
        """The INSERT of a bundle's row (:func:`bookkeeping_row`) in ``gtbarrier_bundles``."""
        return sql.SQL(
            "INSERT INTO {} (pipeline, bundle_id, gt, rows) VALUES (%s, %s, %s, %s)"
        ).format(self.bookkeeping)

    def prune_bookkeeping(self) -> sql.Composed:
        """The DELETE of a pipeline's rows up to a bundle id: ``(pipeline, bundle_id)``."""
        return sql.SQL("DELETE FROM {} WHERE pipeline = %s AND bundle_id <= %s").format(
            self.bookkeeping
        )

    def create_table(self, columns: Sequence[PgColumn]) -> sql.Composed:
        parts = [
            sql.SQL("{} {}").format(sql.Identifier(c.name), sql.SQL(c.sql_type)) for c in columns
        ]
        if self.target.key_columns:
            keys = sql.SQL(", ").join(map(sql.Identifier, self.target.key_columns))
            parts.append(sql.SQL("PRIMARY KEY ({})").format(keys))
        return sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
            self.table, sql.SQL(", ").join(parts)
        )

    def create_schema(self) -> sql.Composed | None:
        if not self.target.schema:
            return None
        return sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.target.schema))


def _names(names: Sequence[str]) -> sql.Composed:
    return sql.SQL(", ").join(map(sql.Identifier, names))


class PostgresConsumer(Consumer):
    name = "postgres"

    def __init__(
        self,
        settings: PostgresSettings,
        staging: Staging,
        faults: FaultInjector,
        *,
        pipeline_id: str,
        exactly_once: bool,
    ) -> None:
        super().__init__(staging, faults)
        self.target = settings
        self.sql = Sql(self.target)
        self.pipeline_id = pipeline_id
        self.exactly_once = exactly_once
        self._conn: psycopg.Connection[Any] | None = None

    def describe(self) -> str:
        return f"postgres consumer {self.target.qualified} ({self.target.safe_dsn})"

    # --- connections ------------------------------------------------------------------

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            try:
                self._conn = pgc.take(self.target.dsn)
            except DeliveryFailed as err:
                # retriable; a refusal for good is a ConfigError naming the DSN, raised as is
                raise DeliveryFailed(f"{self.describe()}: {err}") from err
        return self._conn

    def _drop(self) -> None:
        """Close the connection after an error (the server rolls its transaction back)."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()

    def close(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            pgc.give_back(self.target.dsn, conn)

    def _read(self, what: str, fn: Callable[[Cursor], T]) -> T:
        """Run the read-only ``fn`` in a transaction of its own, retrying lost connections
        (the ``store_requests`` policy: an idempotent read, like a store's own request)."""

        def attempt() -> T:
            conn = self._connection()
            try:
                with conn.cursor() as cur:
                    result = fn(cur)
                conn.rollback()
                return result
            except psycopg.Error as err:
                self._drop()
                raise pgc.translate(err, f"{self.describe()}: {what}") from err

        return store_requests()(attempt)

    # --- the contract -----------------------------------------------------------------

    def last_bundle(self) -> LastBundle | None:
        def read(cur: Cursor) -> LastBundle | None:
            if not self._exists(cur, self.sql.bookkeeping):
                return None
            cur.execute(
                sql.SQL(
                    "SELECT bundle_id, gt FROM {} WHERE pipeline = %s "
                    "ORDER BY bundle_id DESC LIMIT 1"
                ).format(self.sql.bookkeeping),
                (self.pipeline_id,),
            )
            row = cur.fetchone()
            return None if row is None else LastBundle(int(row[0]), int(row[1]))

        return self._read(f"reading {BOOKKEEPING}", read)

    def deliver(self, bundle: Bundle, *, redelivery: bool = False) -> Ack:
        conn = self._connection()
        ack = Ack(bundle.bundle_id, bundle.rows, bundle.size)
        try:
            with conn.cursor() as cur:
                if self.exactly_once:
                    self._ensure_bookkeeping(cur)
                    if self._stored(cur, bundle.bundle_id):
                        conn.rollback()
                        return Ack(bundle.bundle_id, bundle.rows)
                self._load(cur, bundle)
                if self.exactly_once:
                    cur.execute(
                        self.sql.insert_bookkeeping(), bookkeeping_row(self.pipeline_id, bundle)
                    )
                    # the bundle's own row stays (bundlesRetained >= 1): restart reads it
                    oldest_kept = bundle.bundle_id - self.target.bundles_retained + 1
                    cur.execute(self.sql.prune_bookkeeping(), (self.pipeline_id, oldest_kept - 1))
            self.faults.at("after_deliver", bundle.bundle_id)
        except psycopg.Error as err:
            self._drop()
            if pgc.sqlstate(err) == pgc.UNIQUE_VIOLATION:
                return self._unique_violation(bundle, err)
            raise pgc.translate(
                err, f"{self.describe()}: bundle {bundle.bundle_id} was not stored"
            ) from err
        except BaseException:
            self._drop()
            raise
        try:
            conn.commit()
        except psycopg.Error as err:
            self._drop()
            if pgc.sqlstate(err) is None or pgc.is_retriable(err):
                return self._resolve(bundle, err)
            raise pgc.translate(
                err, f"{self.describe()}: COMMIT of bundle {bundle.bundle_id} refused"
            ) from err
        self.faults.at("after_consumer_commit", bundle.bundle_id)
        return ack

    def _is_bookkeeping(self, err: psycopg.Error) -> bool:
        """Whether ``err`` is about ``gtbarrier_bundles`` (in the target's schema)."""
        diag = err.diag
        if diag.table_name != BOOKKEEPING:
            return False
        return self.target.schema is None or diag.schema_name == self.target.schema

    def _unique_violation(self, bundle: Bundle, err: psycopg.Error) -> Ack:
        """A unique violation before ``COMMIT``.

        On the bundle's own row in ``gtbarrier_bundles``: another attempt at the bundle
        stored it meanwhile; the table says so (:meth:`_resolve`). On an index of the
        user's table: a row of the bundle the table refuses, a *poison row* (a duplicate of
        a row already in the table, or of another write task's row of the bundle, neither
        of which validation can see), unless another attempt stored this very bundle
        meanwhile, its rows being what collided. A poison row is
        :class:`~state.errors.CommitFailed`, naming the index, the bundle and the key: the
        same bundle would fail again."""
        if self.exactly_once and self._is_bookkeeping(err):
            return self._resolve(bundle, err)  # another attempt stored it meanwhile
        if self.exactly_once and self._read(
            f"reading {BOOKKEEPING}", lambda cur: self._stored(cur, bundle.bundle_id)
        ):
            log.info(
                "%s: bundle %d was stored by another attempt (%s)",
                self.describe(),
                bundle.bundle_id,
                str(err).strip(),
            )
            return Ack(bundle.bundle_id, bundle.rows)
        diag = err.diag
        key = (diag.message_detail or "").strip() or "(the server named no key)"
        raise CommitFailed(
            f"{self.describe()}: bundle {bundle.bundle_id} has a row {self.target.qualified} "
            f"refuses, a poison row: unique index {diag.constraint_name}: {key} The row "
            "duplicates a row already in the table or a row of another write task of the "
            "bundle, which validation cannot see; the same bundle fails again until one of "
            f"the two rows is changed [SQLSTATE {pgc.UNIQUE_VIOLATION}]"
        ) from err

    def _resolve(self, bundle: Bundle, err: BaseException) -> Ack:
        """The outcome of a COMMIT whose answer was lost, from ``gtbarrier_bundles``."""
        cause = f"{type(err).__name__}: {str(err).strip()}"
        try:
            stored = self._read(
                f"reading {BOOKKEEPING}", lambda cur: self._stored(cur, bundle.bundle_id)
            )
        except GtBarrierError as read_err:
            raise CommitStateUnknown(
                f"{self.describe()}: the connection was lost while bundle {bundle.bundle_id} "
                f"was committed ({cause}) and {BOOKKEEPING} cannot be read ({read_err}); "
                "restarting the query resolves it"
            ) from err
        if stored:
            log.info("%s: bundle %d was committed (%s)", self.describe(), bundle.bundle_id, cause)
            return Ack(bundle.bundle_id, bundle.rows, bundle.size)
        raise DeliveryFailed(
            f"{self.describe()}: bundle {bundle.bundle_id} was not committed ({cause})"
        ) from err

    # --- one delivery's statements ----------------------------------------------------

    def _exists(self, cur: Cursor, ident: sql.Identifier) -> bool:
        cur.execute("SELECT to_regclass(%s) IS NOT NULL", (ident.as_string(cur.connection),))
        row = cur.fetchone()
        return bool(row and row[0])

    def _ensure_bookkeeping(self, cur: Cursor) -> None:
        if self._exists(cur, self.sql.bookkeeping):
            return
        if (schema := self.sql.create_schema()) is not None:
            cur.execute(schema)
        cur.execute(self.sql.create_bookkeeping())

    def _stored(self, cur: Cursor, bundle_id: int) -> bool:
        if not self._exists(cur, self.sql.bookkeeping):
            return False
        cur.execute(
            sql.SQL("SELECT 1 FROM {} WHERE pipeline = %s AND bundle_id = %s").format(
                self.sql.bookkeeping
            ),
            (self.pipeline_id, bundle_id),
        )
        return cur.fetchone() is not None

    def _ensure_table(self, cur: Cursor, columns: Sequence[PgColumn]) -> None:
        if self._exists(cur, self.sql.table):
            return
        if not self.target.create_table:
            raise missing_table(self.target)
        check_keys(self.target, columns)
        if (schema := self.sql.create_schema()) is not None:
            cur.execute(schema)
        cur.execute(self.sql.create_table(columns))

    def _load(self, cur: Cursor, bundle: Bundle) -> None:
        tables: Iterator[pa.Table] = bundle.tables(self.staging)
        first = next(tables, None)
        if first is None:
            return
        columns = columns_for(first.schema)
        self._ensure_table(cur, columns)
        names = [c.name for c in columns]
        everything = itertools.chain([first], tables)
        if self.target.mode == "append":
            copy_sql = sql.SQL("COPY {} ({}) FROM STDIN (FORMAT csv)").format(
                self.sql.table, _names(names)
            )
            with cur.copy(copy_sql) as copy:
                for table in everything:
                    copy.write(encode_csv(table))
            return
        check_keys(self.target, columns)
        stage = sql.Identifier(STAGE)
        cur.execute(
            sql.SQL("CREATE TEMP TABLE {} (LIKE {} INCLUDING DEFAULTS) ON COMMIT DROP").format(
                stage, self.sql.table
            )
        )
        cur.execute(sql.SQL("ALTER TABLE {} ADD COLUMN {} bigint").format(stage, _seq()))
        copy_sql = sql.SQL("COPY {} ({}, {}) FROM STDIN (FORMAT csv)").format(
            stage, _names(names), _seq()
        )
        seq = 0
        with cur.copy(copy_sql) as copy:
            for table in everything:
                copy.write(encode_csv(table, seq_start=seq))
                seq += table.num_rows
        keys = _names(self.target.key_columns)
        rest = [n for n in names if n not in self.target.key_columns]
        action = (
            sql.SQL("DO UPDATE SET {}").format(
                sql.SQL(", ").join(
                    sql.SQL("{} = EXCLUDED.{}").format(sql.Identifier(n), sql.Identifier(n))
                    for n in rest
                )
            )
            if rest
            else sql.SQL("DO NOTHING")
        )
        cur.execute(
            sql.SQL(
                "INSERT INTO {table} ({cols}) SELECT DISTINCT ON ({keys}) {cols} FROM {stage} "
                "ORDER BY {keys}, {seq} DESC ON CONFLICT ({keys}) {action}"
            ).format(
                table=self.sql.table,
                cols=_names(names),
                keys=keys,
                stage=stage,
                seq=_seq(),
                action=action,
            )
        )


def _seq() -> sql.Identifier:
    return sql.Identifier(SEQ_COLUMN)


def missing_table(target: PostgresSettings) -> ConfigError:
    return ConfigError(
        TABLE.name,
        target.qualified,
        f"an existing table when {CREATE_TABLE.name}=false (or {CREATE_TABLE.name}=true to "
        "create it from the sink's input schema)",
        where=WHERE,
    )


def check_keys(target: PostgresSettings, columns: Sequence[PgColumn]) -> None:
    """With ``mode=upsert`` every key column must be a column of the sink's input."""
    names = {c.name for c in columns}
    missing = [k for k in target.key_columns if k not in names]
    if missing:
        raise ConfigError(
            KEY_COLUMNS.name,
            ",".join(target.key_columns),
            f"columns of the sink's input ({', '.join(sorted(names))}); not found: "
            f"{', '.join(missing)}",
            where=WHERE,
        )


# --- the check when the query starts -----------------------------------------------------


def check_at_start(
    target: PostgresSettings, spark_schema: Any, *, exactly_once: bool
) -> PostgresSettings:
    """Called when the query plans its first micro-batch, before any data moves: the input
    types map to PostgreSQL, the server answers, the table exists (or is created with
    ``createTable``) with the input's columns, each of a type that stores the input's values
    as they are (no rounding, no time zone dropped or invented, no hex text of binary), and
    none of its other columns NOT NULL without a default; for ``upsert``, a unique key on
    ``keyColumns``; with ``exactly_once`` the bookkeeping table exists too. Each error names
    the option or column, the value (for a column: the Spark type and the PostgreSQL type)
    and the expectation.

    Returns ``target`` with the table's facts that validation needs (the input's columns
    as the table has them, the unique indexes it can check), for the write tasks."""
    columns = columns_for_spark(spark_schema)
    inputs = input_columns_spark(spark_schema)
    check_keys(target, columns)
    statements = Sql(target)
    try:
        conn = pgc.connect(target.dsn)
    except DeliveryFailed as err:
        # at start nothing is retried: a server that cannot be reached stops the query
        raise ConfigError(
            DSN.name,
            target.safe_dsn,
            f"a PostgreSQL server that accepts the connection ({err})",
            where=WHERE,
        ) from err
    try:
        with conn.cursor() as cur:
            oid = _table_oid(cur, statements)
            if oid is None:
                if not target.create_table:
                    raise missing_table(target)
                if (schema := statements.create_schema()) is not None:
                    cur.execute(schema)
                cur.execute(statements.create_table(columns))
                oid = _table_oid(cur, statements)
                if oid is None:
                    raise missing_table(target)
            facts = read_target(cur, oid)
            _check_existing(target, facts, inputs)
            if exactly_once:
                cur.execute(statements.create_bookkeeping())
        conn.commit()
    except psycopg.Error as err:
        raise pgc.translate(err, f"barrier: consumer=postgres {target.qualified}") from err
    finally:
        conn.close()
    if facts.unchecked_indexes:
        log.info(
            "%s: unique index(es) %s are partial, on expressions or on a nondeterministic "
            "collation: validation cannot find their duplicates, the server will",
            target.qualified,
            ", ".join(facts.unchecked_indexes),
        )
    names = {c.name for c in columns}
    return replace(
        target,
        columns=tuple(c.column for c in facts.columns if c.column.name in names),
        unique_indexes=facts.unique_indexes,
    )


def _table_oid(cur: Cursor, statements: Sql) -> int | None:
    cur.execute("SELECT to_regclass(%s)::oid", (statements.table.as_string(cur.connection),))
    row = cur.fetchone()
    return None if row is None or row[0] is None else int(row[0])


def _refusal(found: CatalogColumn, column: InputColumn) -> str | None:
    """Why ``found`` cannot take the input ``column``, or None."""
    if found.generated:
        return "it is a generated column, which cannot be written: leave it out of the input"
    if found.domain:
        return (
            f"its type is a domain over {found.column.type_name}, whose constraints cannot "
            "be checked before delivery: use the base type"
        )
    return incompatibility(column.dtype, found.column)


def _check_existing(target: PostgresSettings, facts: Target, inputs: Sequence[InputColumn]) -> None:
    """The table has every input column, each of a type that keeps the input's values
    (:func:`~sink.consumers.postgres.postgres_target.incompatibility`), none generated or of
    a domain; a column the input lacks can be left to its default or NULL; an upsert key
    has a unique index."""
    present = {c.column.name: c for c in facts.columns}
    for column in inputs:
        found = present.get(column.name)
        if found is None:
            raise ConfigError(
                column.name,
                column.spark,
                f"a column of {target.qualified} (it has {', '.join(sorted(present))}); "
                f"add it, or drop the table and let {CREATE_TABLE.name}=true create it",
                where=WHERE,
            )
        why = _refusal(found, column)
        if why is not None:
            raise ConfigError(
                column.name,
                f"{column.spark} into {found.column.shown}",
                f"a column of {target.qualified} that stores {column.spark} values as they "
                f"are, but {why}; alter the column, or cast the input in the query",
                where=WHERE,
            )
    filled = {c.name for c in inputs}
    for c in facts.columns:
        if c.column.name not in filled and c.column.not_null and not c.has_default:
            raise ConfigError(
                c.column.name,
                c.column.shown,
                f"a column of the sink's input, a default or NULL allowed: "
                f"{target.qualified}.{c.column.name} is NOT NULL without a default and the "
                "input does not fill it, so every row would be refused",
                where=WHERE,
            )
    if target.mode != "upsert":
        return
    # ON CONFLICT (keys) is answered only by a unique index on exactly those columns that
    # covers every row (not partial, not on expressions)
    keys = set(target.key_columns)
    if not any(set(cols) == keys and not partial for _, cols, partial, _ in facts.index_columns):
        raise ConfigError(
            KEY_COLUMNS.name,
            ",".join(target.key_columns),
            f"the columns of a primary key or unique index of {target.qualified} "
            "(INSERT ... ON CONFLICT needs one)",
            where=WHERE,
        )
