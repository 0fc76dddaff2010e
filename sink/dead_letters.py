"""Dead letters: the rows a consumer's target refuses, written once per bundle.

The write tasks validate their rows before anything of the bundle is delivered
(:meth:`sink.consumers.consumer_kind.ConsumerKind.validate`, plus the checks every
consumer shares, :mod:`sink.write_task`). With ``errors.tolerance=all`` a task stages the
rows refused as a *dead-letter part* next to its part, with two columns added:
``_gtb_reason`` and ``_gtb_column``. Before the bundle is recorded in flight (so before
anything of it is delivered) the barrier writes the bundle's dead-letter parts as one
file of ``errors.deadLetter.path`` (``file:///dir`` or ``s3://bucket/prefix``)::

    bundle-000000000007.parquet   the rows bundle 7 refused: the sink's input columns as
                                  they were (names and types), then _gtb_bundle (long),
                                  _gtb_reason (string) and _gtb_column (string, null
                                  when the row as a whole was refused)

**Exactly once.** The file is named by the bundle id and only ever *created*: ``os.link``
of a complete temporary file on a file system (it fails when the name exists), a
conditional ``If-None-Match`` put on S3 (:mod:`state.stores`). A replay of the bundle's
epoch or a redelivery of the bundle in flight finds the file and writes nothing: its rows
are the same ones, because validation is a pure function of the rows and the query is
deterministic. The file's Parquet metadata names its pipeline and bundle
(``gtbarrier.pipeline``, ``gtbarrier.bundle``); a file of another pipeline under the same
name is an error, never taken as this bundle's.

Readers see only complete files (temporary files start with ``.``); ``pandas.read_parquet``
or Spark read the directory as one table. ``gtbarrier deadletters`` lists and reads them.

**The topic** (``errors.deadLetter.topic``, optional): after the file, each refused row is
also sent to a Kafka topic, as Kafka Connect's dead letter queue does, with its context in
headers (:data:`CONTEXT_HEADERS`): the row's ``key`` and ``value`` columns as they were
when the input has them (binary or string), else the row as a JSON object. The messages
are a bundle of :class:`~sink.consumers.kafka.kafka_consumer.KafkaTopicConsumer`
(``gtb.bundle``, ``gtb.index``, ``gtb.count`` headers), so they are exactly once the same
way: a bundle the topic holds completely is not sent again, one it holds in part is
completed from its first missing index. The topic belongs to one pipeline, as the
directory does. Its producer's settings, ``errors.deadLetter.kafka.*``, are the kafka
consumer's kind (:func:`sink.consumers.kafka.kafka_options.producer_settings`): checked
when parsed (TLS and SASL included), kept as given (a secret reference unresolved),
resolved where the producer and its tail scan's reader are made.
"""

from __future__ import annotations

import base64
import contextlib
import datetime as dt
import decimal
import json
import os
import re
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq

from sink.bundle import Bundle
from sink.consumers.consumer_kind import RowRejection
from sink.faults import FaultInjector
from sink.staging import Staging
from state.errors import KeyExists, KeyNotFound, StateError
from state.records.gt import GT_COLUMN
from state.records.inflight_bundle import StagedPart
from state.stores import S3Settings, StateStore, StoreConfig, open_store

Tolerance = Literal["none", "all"]
TOLERANCES: tuple[Tolerance, ...] = ("none", "all")
KAFKA_PREFIX = "errors.deadLetter.kafka."
"""The options of the dead-letter topic's producer."""

BUNDLE_COLUMN = "_gtb_bundle"
REASON_COLUMN = "_gtb_reason"
COLUMN_COLUMN = "_gtb_column"
ADDED_COLUMNS = (BUNDLE_COLUMN, REASON_COLUMN, COLUMN_COLUMN)
"""The columns a dead-letter file adds to the sink's input columns, in this order."""

PIPELINE_KEY = b"gtbarrier.pipeline"
BUNDLE_KEY = b"gtbarrier.bundle"
_FILE = re.compile(r"^bundle-(\d{12})\.parquet$")
_TMP_PREFIX = ".tmp-"


@dataclass(frozen=True)
class DeadLetterSettings:
    """``errors.*``: what happens to rows the target refuses, and where they go."""

    tolerance: Tolerance = "none"
    path: str | None = None
    """``file:///dir`` or ``s3://bucket/prefix``; set exactly when ``tolerance`` is all."""
    topic: str | None = None
    bootstrap: str | None = None
    """``errors.deadLetter.kafka.bootstrap.servers``: set exactly when ``topic`` is."""
    kafka: tuple[tuple[str, str], ...] = ()
    """The other ``errors.deadLetter.kafka.*`` producer settings (names lower-cased), sorted,
    as given: a secret reference unresolved, a secret a
    :class:`~state.kafka_settings.Secret` (its ``repr`` a fingerprint)."""

    @property
    def tolerant(self) -> bool:
        """Refused rows go to dead letters (``all``) rather than failing the bundle."""
        return self.tolerance == "all"


def dead_letter_name(bundle_id: int) -> str:
    """The file of bundle ``bundle_id``'s dead letters: ``bundle-000000000007.parquet``."""
    return f"bundle-{bundle_id:012d}.parquet"


def bundle_of_name(name: str) -> int | None:
    """The bundle id in a dead-letter file's name (None if it is not one)."""
    m = _FILE.match(name)
    return int(m.group(1)) if m else None


# --- the rows ----------------------------------------------------------------------------


def first_rejections(rejections: Sequence[RowRejection]) -> list[RowRejection]:
    """One rejection per row (the first found), in row order."""
    first: dict[int, RowRejection] = {}
    for rejection in rejections:
        first.setdefault(rejection.row, rejection)
    return [first[row] for row in sorted(first)]


def rejected_rows(table: pa.Table, rejections: Sequence[RowRejection]) -> pa.Table:
    """The rows of ``table`` that ``rejections`` name, once each in row order, as they
    were, with ``_gtb_reason`` and ``_gtb_column`` (the first rejection of each row).

    Every field is made nullable, nested ones too (the names and types stay): a refused
    row may hold a null where the input's schema says there is none (Spark gives a null
    ``gt`` struct with null fields that its type declares not nullable), which Parquet
    would refuse to write.
    """
    first = first_rejections(rejections)
    rows = table.take(pa.array([r.row for r in first], pa.int64()))
    rows = rows.cast(nullable_schema(rows.schema))
    rows = rows.append_column(REASON_COLUMN, pa.array([r.reason for r in first], pa.string()))
    return rows.append_column(COLUMN_COLUMN, pa.array([r.column for r in first], pa.string()))


def nullable_schema(schema: pa.Schema) -> pa.Schema:
    """``schema`` with every field nullable, in structs, lists and maps too."""
    return pa.schema([_nullable(f) for f in schema], metadata=schema.metadata)


def _nullable(field: pa.Field) -> pa.Field:
    t = field.type
    if pa.types.is_struct(t):
        t = pa.struct([_nullable(t.field(i)) for i in range(t.num_fields)])
    elif pa.types.is_large_list(t):
        t = pa.large_list(_nullable(t.value_field))
    elif pa.types.is_list(t):
        t = pa.list_(_nullable(t.value_field))
    elif pa.types.is_map(t):
        t = pa.map_(t.key_field.type, _nullable(t.item_field))
    return field.with_type(t).with_nullable(True)


def dead_letter_table(staged: pa.Table, bundle_id: int) -> pa.Table:
    """A bundle's staged dead-letter rows as its file holds them: the input columns, then
    ``_gtb_bundle``, ``_gtb_reason``, ``_gtb_column``."""
    inputs = [n for n in staged.column_names if n not in ADDED_COLUMNS]
    bundle = pa.array([bundle_id] * staged.num_rows, pa.int64())
    return pa.Table.from_arrays(
        [
            *(staged.column(n) for n in inputs),
            bundle,
            staged.column(REASON_COLUMN),
            staged.column(COLUMN_COLUMN),
        ],
        names=[*inputs, *ADDED_COLUMNS],
    )


# --- the destination ----------------------------------------------------------------------


@dataclass(frozen=True)
class DeadLetterFile:
    """One bundle's dead-letter file: where it is, its rows and size, its pipeline."""

    bundle_id: int
    location: str
    rows: int
    size: int
    pipeline_id: str | None


@dataclass(frozen=True)
class DeadLetterWrite:
    """What :meth:`DeadLetters.write` did: ``written`` False means the file was there
    already (a replay or a redelivery), with ``rows`` rows. ``table``: the rows written
    (None when the file was there)."""

    bundle_id: int
    rows: int
    written: bool
    location: str
    table: pa.Table | None = field(default=None, compare=False, repr=False)


class DeadLetters(ABC):
    """The dead-letter files of ``errors.deadLetter.path``: create once, list, read."""

    def __init__(self, uri: str) -> None:
        self.uri = uri.rstrip("/")

    def describe(self) -> str:
        return f"dead letters {self.uri}"

    def location(self, bundle_id: int) -> str:
        """The full URI of bundle ``bundle_id``'s file."""
        return f"{self.uri}/{dead_letter_name(bundle_id)}"

    def write(
        self, pipeline_id: str, bundle_id: int, staged: Callable[[], pa.Table]
    ) -> DeadLetterWrite:
        """Create bundle ``bundle_id``'s file from its staged dead-letter rows (``staged``
        is called only when the file is not there yet); a file already there is left as
        it is. A file of the same name from another pipeline is a :class:`StateError`."""
        name = dead_letter_name(bundle_id)
        found = self._check(name, pipeline_id, bundle_id)
        if found is not None:
            return DeadLetterWrite(bundle_id, found.rows, False, self.location(bundle_id))
        table = dead_letter_table(staged(), bundle_id)
        metadata = {
            **(table.schema.metadata or {}),
            PIPELINE_KEY: pipeline_id.encode(),
            BUNDLE_KEY: str(bundle_id).encode(),
        }
        data = _parquet_bytes(table.replace_schema_metadata(metadata))
        if not self._create(name, data):  # another attempt created it meanwhile
            found = self._check(name, pipeline_id, bundle_id)
            rows = table.num_rows if found is None else found.rows
            return DeadLetterWrite(bundle_id, rows, False, self.location(bundle_id))
        return DeadLetterWrite(bundle_id, table.num_rows, True, self.location(bundle_id), table)

    def files(self) -> list[DeadLetterFile]:
        """Every dead-letter file, by bundle id."""
        found = []
        for name in sorted(self._names()):
            bundle_id = bundle_of_name(name)
            if bundle_id is None:
                continue
            info = self._file(name, bundle_id)
            if info is not None:
                found.append(info)
        return found

    def read(self, bundle_id: int) -> pa.Table:
        """Bundle ``bundle_id``'s dead letters; :class:`KeyNotFound` if it has none."""
        return self._read(dead_letter_name(bundle_id))

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release clients."""

    def _check(self, name: str, pipeline_id: str, bundle_id: int) -> DeadLetterFile | None:
        found = self._file(name, bundle_id)
        if found is not None and found.pipeline_id not in (None, pipeline_id):
            raise StateError(
                f"barrier: pipeline {pipeline_id!r}: {self.location(bundle_id)} holds the dead "
                f"letters of bundle {bundle_id} of pipeline {found.pipeline_id!r}: "
                "errors.deadLetter.path is shared by two pipelines; give each its own"
            )
        return found

    def _file(self, name: str, bundle_id: int) -> DeadLetterFile | None:
        footer = self._footer(name)
        if footer is None:
            return None
        meta, size = footer
        kv = meta.metadata or {}
        pipeline = kv.get(PIPELINE_KEY)
        return DeadLetterFile(
            bundle_id,
            self.location(bundle_id),
            meta.num_rows,
            size,
            None if pipeline is None else pipeline.decode(),
        )

    @abstractmethod
    def _create(self, name: str, data: bytes) -> bool:
        """Create ``name`` with ``data`` unless it exists; whether this call created it."""

    @abstractmethod
    def _footer(self, name: str) -> tuple[pq.FileMetaData, int] | None:
        """The Parquet metadata and size of ``name``; None if there is no such file."""

    @abstractmethod
    def _names(self) -> list[str]:
        """The names directly under the destination."""

    @abstractmethod
    def _read(self, name: str) -> pa.Table: ...


class FileDeadLetters(DeadLetters):
    """Dead letters in a local directory (``file:///dir``): plain Parquet files."""

    def __init__(self, directory: str) -> None:
        super().__init__(f"file://{directory}")
        self.directory = directory

    def check(self) -> None:
        """:class:`StateError` unless the directory exists or can be made, and is writable."""
        try:
            os.makedirs(self.directory, exist_ok=True)
            probe = os.path.join(self.directory, f"{_TMP_PREFIX}probe-{uuid.uuid4().hex}")
            with open(probe, "wb"):
                pass
            os.unlink(probe)
        except OSError as err:
            raise StateError(
                f"barrier: errors.deadLetter.path {self.uri!r} is not a writable directory: {err}"
            ) from err

    def _create(self, name: str, data: bytes) -> bool:
        os.makedirs(self.directory, exist_ok=True)
        tmp = os.path.join(self.directory, f"{_TMP_PREFIX}{uuid.uuid4().hex}")
        try:
            with open(tmp, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            try:
                os.link(tmp, os.path.join(self.directory, name))  # fails if the name exists
            except FileExistsError:
                return False
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        fd = os.open(self.directory, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        return True

    def _footer(self, name: str) -> tuple[pq.FileMetaData, int] | None:
        path = os.path.join(self.directory, name)
        try:
            return pq.read_metadata(path), os.path.getsize(path)
        except FileNotFoundError:
            return None

    def _names(self) -> list[str]:
        try:
            return os.listdir(self.directory)
        except FileNotFoundError:
            return []

    def _read(self, name: str) -> pa.Table:
        path = os.path.join(self.directory, name)
        if not os.path.exists(path):
            raise KeyNotFound(self.uri, name)
        return pq.read_table(path)


class StoreDeadLetters(DeadLetters):
    """Dead letters as objects of a state store (``s3://bucket/prefix``), created with
    the store's create-if-absent."""

    def __init__(self, store: StateStore) -> None:
        super().__init__(store.uri)
        self.store = store

    def check(self) -> None:
        """Fails (naming the store) unless the destination can be listed."""
        self.store.list("")

    def _create(self, name: str, data: bytes) -> bool:
        try:
            self.store.create(name, data)
        except KeyExists:
            return False
        return True

    def _footer(self, name: str) -> tuple[pq.FileMetaData, int] | None:
        hit = self.store.get_or_none(name)
        if hit is None:
            return None
        return pq.read_metadata(pa.BufferReader(hit.data)), len(hit.data)

    def _names(self) -> list[str]:
        return [key for key in self.store.list("") if "/" not in key]

    def _read(self, name: str) -> pa.Table:
        return pq.read_table(pa.BufferReader(self.store.get(name).data))

    def close(self) -> None:
        self.store.close()


def open_dead_letters(uri: str, s3: S3Settings | None = None) -> FileDeadLetters | StoreDeadLetters:
    """The destination ``uri`` names: a directory for ``file:///dir``, else a store
    (``s3://bucket/prefix`` with the sink's ``s3.*`` settings; ``memory://`` in tests)."""
    parsed = urlparse(uri)
    if parsed.scheme == "file":
        return FileDeadLetters(os.path.normpath(parsed.path))
    config = StoreConfig(uri.rstrip("/"), s3 if s3 is not None else S3Settings())
    return StoreDeadLetters(open_store(config))


# --- rows as JSON (the topic's values without a value column, gtbarrier deadletters) ------


def json_rows(table: pa.Table) -> list[dict[str, Any]]:
    """The rows of ``table`` as JSON-ready dicts: binary values base64, strings whose bytes
    are not UTF-8 with ``\\x..`` escapes (as they were, but readable), timestamps ISO-8601,
    decimals as text."""
    columns = {name: _json_column(table.column(name)) for name in table.column_names}
    return [{name: values[i] for name, values in columns.items()} for i in range(table.num_rows)]


def _json_column(column: pa.ChunkedArray) -> list[Any]:
    dtype = column.type
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        raw = column.cast(pa.large_binary() if pa.types.is_large_string(dtype) else pa.binary())
        return [
            None if v is None else v.decode("utf-8", "backslashreplace") for v in raw.to_pylist()
        ]
    try:
        return [_json_value(v) for v in column.to_pylist()]
    except UnicodeDecodeError:  # a nested string that is not UTF-8
        return [str(column[i]) if column[i].is_valid else None for i in range(len(column))]


def _json_value(value: Any) -> Any:  # noqa: PLR0911 - one return per type
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    if isinstance(value, dict):
        return {k: _json_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_json_value(v) for v in value]
    if isinstance(value, tuple):  # a map's (key, value) pairs
        return [_json_value(v) for v in value]
    return value


# --- the topic ------------------------------------------------------------------------------

H_PIPELINE = "gtb.errors.pipeline"
H_BUNDLE = "gtb.errors.bundle"
H_REASON = "gtb.errors.reason"
H_COLUMN = "gtb.errors.column"
H_TOPIC = "gtb.errors.topic"
H_PARTITION = "gtb.errors.partition"
H_OFFSET = "gtb.errors.offset"
H_EPOCH = "gtb.errors.epoch"
CONTEXT_HEADERS = (
    H_PIPELINE,
    H_BUNDLE,
    H_REASON,
    H_COLUMN,
    H_TOPIC,
    H_PARTITION,
    H_OFFSET,
    H_EPOCH,
)
"""The headers of a dead-letter message, after the row's own ``headers`` (if any):
pipeline, bundle, reason, column (absent when the row as a whole was refused) and, when the
row has a ``gt``, the Kafka record it came from (topic, partition, offset) and its epoch."""

_HEADER_TYPE = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
_TEXT = (pa.binary(), pa.large_binary(), pa.string(), pa.large_string())


def topic_messages(table: pa.Table, pipeline_id: str) -> pa.Table:
    """A bundle's dead-letter rows (as its file holds them) as messages: ``key``, ``value``
    and ``headers`` columns, as
    :class:`~sink.consumers.kafka.kafka_consumer.KafkaTopicConsumer` sends them (no
    ``partition`` column: the producer picks one by key)."""
    names = table.column_names
    inputs = table.select([n for n in names if n not in ADDED_COLUMNS])

    def raw(name: str) -> list[bytes | None] | None:
        if name not in names or table.schema.field(name).type not in _TEXT:
            return None
        column = table.column(name)
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            column = column.cast(pa.binary())
        values: list[bytes | None] = column.to_pylist()
        return values

    keys = raw("key") or [None] * table.num_rows
    values = raw("value")
    if values is None:
        values = [json.dumps(row, separators=(",", ":")).encode() for row in json_rows(inputs)]
    own = (
        table.column("headers").to_pylist()
        if "headers" in names and table.schema.field("headers").type == _HEADER_TYPE
        else [None] * table.num_rows
    )
    gts = table.column(GT_COLUMN).to_pylist() if GT_COLUMN in names else [None] * table.num_rows
    reasons = table.column(REASON_COLUMN).to_pylist()
    columns = table.column(COLUMN_COLUMN).to_pylist()
    bundles = table.column(BUNDLE_COLUMN).to_pylist()
    headers = []
    for i in range(table.num_rows):
        context = [
            (H_PIPELINE, pipeline_id.encode()),
            (H_BUNDLE, str(bundles[i]).encode()),
            (H_REASON, str(reasons[i]).encode()),
        ]
        if columns[i] is not None:
            context.append((H_COLUMN, str(columns[i]).encode()))
        gt = gts[i]
        if gt is not None and None not in gt.values():
            context += [
                (H_TOPIC, str(gt["topic"]).encode()),
                (H_PARTITION, str(gt["partition"]).encode()),
                (H_OFFSET, str(gt["offset"]).encode()),
                (H_EPOCH, str(gt["epoch"]).encode()),
            ]
        headers.append([*(own[i] or []), *({"key": k, "value": v} for k, v in context)])
    return pa.table(
        {
            "key": pa.array(keys, pa.binary()),
            "value": pa.array(values, pa.binary()),
            "headers": pa.array(headers, _HEADER_TYPE),
        }
    )


class _OneTable(Staging):
    """A staging area of one table, the messages of one dead-letter bundle, made when
    first read (a topic that holds them already never needs them)."""

    def __init__(self, table: Callable[[], pa.Table]) -> None:
        self._make = table
        self._table: pa.Table | None = None

    @property
    def root_prefix(self) -> str:
        return "dead-letters/"

    def write_part(self, location: str, table: pa.Table) -> int:
        raise NotImplementedError("the dead-letter messages are made, never staged")

    def read_part(self, location: str) -> pa.Table:
        if self._table is None:
            self._table = self._make()
        return self._table

    def list(self, prefix: str) -> list[str]:
        return []

    def delete(self, location: str) -> None:
        """Nothing to delete: the table is in memory."""


def dead_letter_transactional_id(pipeline_id: str) -> str:
    """The ``transactional.id`` of the dead-letter topic's producers: the pipeline's own,
    but not that of its kafka consumer (``gtbarrier.<pipeline>``), which it would fence."""
    return f"gtbarrier.{pipeline_id}.dead-letters"


@dataclass(frozen=True)
class DeadLetterTopic:
    """``errors.deadLetter.topic`` on ``bootstrap``, with producer settings ``config``
    (``errors.deadLetter.kafka.*`` as parsed: references resolved only in :meth:`ensure`,
    where the clients are made)."""

    bootstrap: str
    topic: str
    config: tuple[tuple[str, str], ...] = ()
    ack_timeout: float = 30.0

    def describe(self) -> str:
        return f"dead-letter topic {self.topic}@{self.bootstrap}"

    def ensure(self, pipeline_id: str, bundle_id: int, rows: Callable[[], pa.Table]) -> bool:
        """Send bundle ``bundle_id``'s dead letters (``rows``, as the file holds them; read
        only if needed) unless the topic holds them all; whether anything was sent.

        Through :class:`~sink.consumers.kafka.kafka_consumer.KafkaTopicConsumer`, whose
        producer is transactional and whose tail scan first fences older producers of the
        same ``transactional.id``: a bundle the topic holds completely is not sent again, one
        it holds in part is completed from its first missing index."""
        from sink.consumers.kafka.kafka_consumer import KafkaTopicConsumer
        from sink.consumers.kafka.kafka_options import KafkaTopicSettings

        config = dict(self.config)
        config.setdefault("transactional.id", dead_letter_transactional_id(pipeline_id))
        settings = KafkaTopicSettings(
            bootstrap=self.bootstrap,
            topic=self.topic,
            config=tuple(sorted(config.items())),
            option_prefix=KAFKA_PREFIX,
        )
        staged = _OneTable(lambda: topic_messages(rows(), pipeline_id))
        sender = KafkaTopicConsumer(
            settings,
            staged,
            FaultInjector(),  # the barrier's faults name the bundle's own steps, not these
            ack_timeout=self.ack_timeout,
            pipeline_id=pipeline_id,
        )
        try:
            last = sender.last_bundle()
            if last is not None and last.bundle_id >= bundle_id:
                return False
            count = staged.read_part("dead-letters").num_rows
            bundle = Bundle(
                pipeline_id=pipeline_id,
                epoch=bundle_id,
                query_id="",
                batch_id=0,
                parts=(StagedPart("dead-letters", count, 0),),
                has_gt=False,
                ordered=True,
            )
            sender.deliver(bundle, redelivery=True)
        finally:
            sender.close()
        return True


def _parquet_bytes(table: pa.Table) -> bytes:
    out = pa.BufferOutputStream()
    pq.write_table(table, out)
    return bytes(out.getvalue().to_pybytes())
