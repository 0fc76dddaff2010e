"""The options of ``consumer=postgres`` and their parsed form :class:`PostgresSettings`.

psycopg is imported only to check the DSN, and only when ``consumer=postgres``: users of
the other consumers need not install it (``pip install gtbarrier[postgres]``).

The DSN may hold secret references (``password=${env:PGPASSWORD}``, :mod:`state.secrets`).
They stay references here, in the settings that Spark pickles, plans and checkpoints; the
connection resolves them (:func:`~sink.consumers.postgres.postgres_connections.resolved_conninfo`).
Nothing shows a DSN's password: :attr:`PostgresSettings.safe_dsn` masks it and
:func:`redact_text` takes it, and anything quoted from where it stands, out of libpq's
messages, which quote pieces of a DSN they cannot parse.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal
from urllib.parse import quote

from sink.consumers.consumer_kind import ConsumerSettings
from state.errors import ConfigError
from state.option_table import BooleanOption, ChoiceOption, IntegerOption, StringOption
from state.options import Options
from state.secrets import REFERENCE

if TYPE_CHECKING:
    from sink.consumers.postgres.postgres_target import TargetColumn, UniqueIndex

Mode = Literal["append", "upsert"]

# One identifier as written in the option: used verbatim (quoted) in SQL, so its case counts.
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_$]*")

DSN = StringOption(
    name="consumer.postgres.dsn",
    required=True,
    doc="postgres: a libpq connection string (`host=... dbname=...`) or a `postgresql://` URL; "
    "values may be secret references (`password=${env:PGPASSWORD}`, `${file:/path}`), "
    "resolved where the connection is made.",
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

BUNDLES_RETAINED = IntegerOption[int](
    name="consumer.postgres.bundlesRetained",
    default=1000,
    minimum=1,
    doc="postgres: rows of `gtbarrier_bundles` kept per pipeline with `delivery=exactly-once`; "
    "each delivery's transaction deletes the pipeline's older rows, so the table stays "
    "bounded. Only the newest row is ever read back (the bundle in flight, or the last "
    "stored); more are kept for operators' audits.",
)

HIDDEN = "<not shown: it may hold a password>"
SPECS = (DSN, TABLE, CREATE_TABLE, MODE, KEY_COLUMNS, BUNDLES_RETAINED)


@dataclass(frozen=True)
class PostgresSettings(ConsumerSettings):
    """Where and how ``consumer=postgres`` writes: parsed options, small and picklable."""

    dsn: str = field(repr=False)
    """As given (a password inline or a reference); :attr:`safe_dsn` for messages."""
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
    bundles_retained: int = BUNDLES_RETAINED.default
    """Rows of ``gtbarrier_bundles`` kept per pipeline (at least 1)."""

    @property
    def qualified(self) -> str:
        """``schema.table`` or ``table``, as given (for messages)."""
        return f"{self.schema}.{self.table}" if self.schema else self.table

    @property
    def safe_dsn(self) -> str:
        """The DSN without its password (for messages and logs)."""
        return redact_dsn(self.dsn)


_URL = re.compile(r"^postgres(?:ql)?://", re.IGNORECASE)
# Where a password stands in a DSN's text: a key=value pair (quoted or not), a URL's
# userinfo (up to the last @ of the authority), a URL's query parameter.
_KV_PASSWORD = re.compile(r"\bpassword\s*=\s*('(?:[^'\\]|\\.)*'?|\S*)")
_URL_USERINFO = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://[^:@/?#]*:([^/?#]*)@")
_URL_QUERY_PASSWORD = re.compile(r"[?&]password=([^&]*)")
_QUOTED = re.compile(r'"([^"]*)"')
MASK = "***"


def parseable(dsn: str) -> str:
    """``dsn`` as libpq parses it with its secret references kept as values: in a URL each
    reference is percent-encoded (its ``/`` and ``:`` are data, not the URL's syntax) and
    comes back decoded, as the reference; in ``key=value`` form nothing changes."""
    if not _URL.match(dsn):
        return dsn
    return REFERENCE.sub(lambda m: quote(m.group(0), safe=""), dsn)


def redact_dsn(dsn: str) -> str:
    """``dsn`` with any password replaced by ``***``."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    try:
        params = conninfo_to_dict(parseable(dsn))
    except Exception:
        return "<unparseable DSN>"
    if "password" in params:
        params["password"] = MASK
    return make_conninfo("", **params)


def _password_spans(dsn: str, *, parsed: bool) -> list[tuple[int, int]]:
    """Where in ``dsn``'s text a password stands. Unparsed, a ``key=value`` password's end
    is unknown (libpq stopped somewhere in or after it): to the end of the text."""
    spans = []
    if _URL.match(dsn):
        for found in (_URL_USERINFO.match(dsn), *_URL_QUERY_PASSWORD.finditer(dsn)):
            if found is not None:
                spans.append(found.span(1))
        return spans
    for found in _KV_PASSWORD.finditer(dsn):
        start, end = found.span(1)
        spans.append((start, end if parsed else len(dsn)))
    return spans


def _known_passwords(dsn: str) -> set[str]:
    """The DSN's password as written (a URL's still percent-encoded) and as libpq reads it."""
    from psycopg.conninfo import conninfo_to_dict

    out: set[str] = set()
    try:
        password = conninfo_to_dict(parseable(dsn)).get("password")
    except Exception:
        password = None
    if password:
        out.add(str(password))
    for start, end in _password_spans(dsn, parsed=password is not None):
        raw = dsn[start:end]
        if raw and password is not None:
            out.add(raw)
    return out


def redact_text(text: str, dsn: str, secrets: Iterable[str] = ()) -> str:
    """``text`` (a message of libpq or psycopg about ``dsn``) without ``dsn``'s password
    and without any of ``secrets`` (the values its references resolved to): each is
    replaced by ``***``; when libpq cannot parse ``dsn``, so is every double-quoted piece
    of ``text`` that may come from where a password stands in it (a parse error quotes the
    token it stopped at, or a whole URL)."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        conninfo_to_dict(parseable(dsn))
        parsed = True
    except Exception:
        parsed = False
    spans = _password_spans(dsn, parsed=parsed)

    def from_a_password(match: re.Match[str]) -> str:
        piece = match.group(1)
        at = dsn.find(piece) if piece else -1
        while at >= 0:
            if any(at < end and start < at + len(piece) for start, end in spans):
                return f'"{MASK}"'
            at = dsn.find(piece, at + 1)
        return match.group(0)

    # Only a DSN libpq cannot parse has pieces quoted in messages: its parse error's. A
    # parsed one's password is known, and masked wherever it stands below.
    out = text if parsed else _QUOTED.sub(from_a_password, text)
    # Longest first: a secret that holds another is masked whole.
    for secret in sorted({*secrets, *_known_passwords(dsn)}, key=len, reverse=True):
        if secret:
            out = out.replace(secret, MASK)
    return out


def parse_settings(opts: Options) -> PostgresSettings:
    """The ``consumer.postgres.*`` options, checked; errors name option, value, expectation."""
    # the column mapping (pyarrow.csv) comes with the consumer chosen, not with the sink
    from sink.consumers.postgres.postgres_columns import identifier_too_long

    dsn = DSN.read_required(opts)
    try:
        from psycopg.conninfo import conninfo_to_dict
    except ImportError as err:
        expected = "psycopg 3 installed: pip install 'gtbarrier[postgres]'"
        raise ConfigError(DSN.name, HIDDEN, expected, where=opts.where) from err
    try:
        conninfo_to_dict(parseable(dsn))
    except Exception as err:
        # libpq quotes the token it stopped at, which may be a piece of the password
        said = redact_text(str(err).strip(), dsn)
        raise ConfigError(
            DSN.name,
            HIDDEN,
            f"a libpq connection string or postgresql:// URL ({said})",
            where=opts.where,
        ) from None
    raw_table = TABLE.read_required(opts)
    names = raw_table.split(".")
    for name in names:
        if (too_long := identifier_too_long(name)) is not None:
            raise opts.error(TABLE.name, too_long)
    if len(names) > 2 or not all(_IDENTIFIER.fullmatch(n) for n in names):
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
        if not all(_IDENTIFIER.fullmatch(k) for k in keys) or len(set(keys)) != len(keys):
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
        bundles_retained=BUNDLES_RETAINED.read(opts),
    )
