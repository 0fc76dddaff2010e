"""The options of ``consumer=delta`` and their parsed form :class:`DeltaSettings`."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Literal
from urllib.parse import urlparse

from sink.consumers.consumer_kind import ConsumerSettings
from state.option_table import BooleanOption, ChoiceOption, PrefixOption, StringOption
from state.options import Options

Mode = Literal["append", "merge"]

URI = StringOption(
    name="consumer.delta.uri",
    required=True,
    doc="The Delta table: `file:///absolute/path` (or an absolute path) or "
    "`s3://bucket/prefix` (`s3a://` is read as `s3://`).",
)
STORAGE = PrefixOption(
    name="consumer.delta.storage.",
    doc="delta-rs storage options, names as delta-rs spells them (`...storage.AWS_ENDPOINT_URL`, "
    "`AWS_REGION`, `AWS_ACCESS_KEY_ID`, `AWS_SECRET_ACCESS_KEY`, `AWS_ALLOW_HTTP`...); values "
    "may be secret references (`${env:NAME}`, `${file:/path}`). Without them delta-rs reads "
    "the `AWS_*` environment.",
)
MODE = ChoiceOption[Mode](
    name="consumer.delta.mode",
    choices=("append", "merge"),
    default="append",
    doc="`append`: a bundle's rows are appended; `merge`: upserted by "
    "`consumer.delta.keyColumns` (a key's last row in the bundle wins), in one commit.",
)
KEY_COLUMNS = StringOption(
    name="consumer.delta.keyColumns",
    default_doc="required for merge",
    doc="Comma-separated key columns for `consumer.delta.mode=merge`.",
)
CREATE_TABLE = BooleanOption(
    name="consumer.delta.createTable",
    default=True,
    doc="Create the table from the sink's input schema if there is none at the uri.",
)
SPECS = (URI, STORAGE, MODE, KEY_COLUMNS, CREATE_TABLE)

_KEY = re.compile(r"[^\s,`]+")


@dataclass(frozen=True)
class DeltaSettings(ConsumerSettings):
    """``consumer=delta``: the table, how it is written, what the start check found."""

    uri: str
    storage: tuple[tuple[str, str], ...] = field(default=(), repr=False)
    """delta-rs storage options, names upper-cased, sorted (hashable); values as given
    (secret references unresolved: :func:`~sink.consumers.delta.delta_table.storage_options`
    resolves them where the table is opened); out of the repr, as they may hold secrets
    given inline."""
    mode: Mode = "append"
    key_columns: tuple[str, ...] = ()
    create_table: bool = True
    not_null: tuple[str, ...] = ()
    """The table's ``NOT NULL`` columns among the input's, recorded by the start check on
    the driver: the write tasks refuse rows with a null there (dead letters)."""
    stage_in_table: bool | None = None
    """Whether write tasks stage their parts under the table and delivery commits them as
    the data files (``mode=append`` into a table whose files need no rewriting:
    :func:`~sink.consumers.delta.delta_table.rows_must_be_rewritten`), recorded by the
    start check; None before it ran (the table is then opened to decide)."""


def parse_uri(opts: Options) -> str:
    """``consumer.delta.uri``: ``file:///...`` (an absolute path is read as one) or
    ``s3://bucket/prefix`` (``s3a://`` read as ``s3://``), without a trailing slash."""
    raw = URI.read_required(opts)
    expected = "file:///absolute/path, an absolute path or s3://bucket/prefix"
    if "://" not in raw:
        if not os.path.isabs(raw):
            raise opts.error(URI.name, expected)
        return "file://" + os.path.normpath(raw)
    parsed = urlparse(raw)
    if parsed.scheme == "file":
        if parsed.netloc not in ("", "localhost") or not os.path.isabs(parsed.path):
            raise opts.error(URI.name, expected)
        return "file://" + os.path.normpath(parsed.path)
    if parsed.scheme in ("s3", "s3a") and parsed.netloc:
        return f"s3://{parsed.netloc}{parsed.path}".rstrip("/")
    raise opts.error(URI.name, expected)


def parse_settings(opts: Options) -> DeltaSettings:
    """The ``consumer.delta.*`` options, checked; errors name option, value, expectation."""
    uri = parse_uri(opts)
    mode = MODE.read(opts)
    raw_keys = KEY_COLUMNS.read(opts)
    keys: tuple[str, ...] = ()
    if raw_keys is not None:
        keys = tuple(k.strip() for k in raw_keys.split(","))
        if not all(_KEY.fullmatch(k) for k in keys) or len(set(keys)) != len(keys):
            raise opts.error(KEY_COLUMNS.name, "distinct column names separated by commas")
    if mode == "merge" and not keys:
        raise opts.error(KEY_COLUMNS.name, "the key columns of consumer.delta.mode=merge")
    if mode == "append" and keys:
        raise opts.error(KEY_COLUMNS.name, "not to be set with consumer.delta.mode=append")
    storage = {name.upper(): value for name, value in STORAGE.read(opts).items()}
    return DeltaSettings(
        uri=uri,
        storage=tuple(sorted(storage.items())),
        mode=mode,
        key_columns=keys,
        create_table=CREATE_TABLE.read(opts),
    )
