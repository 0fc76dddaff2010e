"""Dead letters: the files of ``errors.deadLetter.path`` (``file:///dir`` or
``s3://bucket/prefix``): one per bundle, created once, listed and read back
(:class:`DeadLetters`, :func:`open_dead_letters`).

**Exactly once.** The file is named by the bundle id and only ever *created*: ``os.link``
of a complete temporary file on a file system (it fails when the name exists), a
conditional ``If-None-Match`` put on S3 (:mod:`state.stores`); when it is created is the
barrier's rule (docs/PROTOCOL.md, "Dead letters"). The file's Parquet metadata names its
pipeline and bundle
(``gtbarrier.pipeline``, ``gtbarrier.bundle``); a file of another pipeline under the same
name is an error, never taken as this bundle's.

Readers see only complete files (temporary files start with ``.``); ``pandas.read_parquet``
or Spark read the directory as one table. ``gtbarrier deadletters`` lists and reads them.
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from urllib.parse import urlparse

import pyarrow as pa
import pyarrow.parquet as pq

from sink.dead_letters.dead_letter_format import (
    BUNDLE_KEY,
    CREATED_KEY,
    PIPELINE_KEY,
    bundle_of_name,
    dead_letter_name,
    dead_letter_table,
)
from state.errors import KeyExists, KeyNotFound, StateError
from state.stores import S3Settings, StateStore, StoreConfig, open_store

_TMP_PREFIX = ".tmp-"


@dataclass(frozen=True)
class DeadLetterFile:
    """One bundle's dead-letter file: where it is, its rows and size, its pipeline."""

    bundle_id: int
    location: str
    rows: int
    size: int
    pipeline_id: str | None
    created: float | None = None
    """When it was written (Unix seconds); None for a file of a release that did not say."""


def expired(
    files: Iterable[DeadLetterFile], *, gt_last: int, now: float, retention: float
) -> list[int]:
    """The bundles whose files ``errors.deadLetter.retention`` deletes: written more than
    ``retention`` seconds before ``now``, of a bundle at or below ``gt_last``. No commit
    reads such a file again (a batch of an epoch at or below ``GT_last`` never looks at the
    dead letters); only a commit paused since it recorded the bundle in flight may create
    it once more, with the same rows. A file without its write time is kept."""
    return sorted(
        f.bundle_id
        for f in files
        if f.bundle_id <= gt_last and f.created is not None and now - f.created > retention
    )


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

    def __init__(self, uri: str, *, clock: Callable[[], float] = time.time) -> None:
        self.uri = uri.rstrip("/")
        self.clock = clock

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
        table, data = _file_bytes(pipeline_id, bundle_id, staged(), self.clock())
        if not self._create(name, data):  # another attempt created it meanwhile
            found = self._check(name, pipeline_id, bundle_id)
            rows = table.num_rows if found is None else found.rows
            return DeadLetterWrite(bundle_id, rows, False, self.location(bundle_id))
        return DeadLetterWrite(bundle_id, table.num_rows, True, self.location(bundle_id), table)

    def find(self, pipeline_id: str, bundle_id: int) -> DeadLetterFile | None:
        """Bundle ``bundle_id``'s file, if there is one (another pipeline's is a
        :class:`StateError`)."""
        return self._check(dead_letter_name(bundle_id), pipeline_id, bundle_id)

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

    def expire(self, gt_last: int, retention: float) -> list[int]:
        """Delete the files :func:`expired` names; the bundles whose files were deleted.
        A file system's error is a :class:`StateError` naming the destination."""
        try:
            doomed = expired(self.files(), gt_last=gt_last, now=self.clock(), retention=retention)
            for bundle_id in doomed:
                self._delete(dead_letter_name(bundle_id))
        except OSError as err:
            raise StateError(f"{self.describe()}: deleting expired files failed: {err}") from err
        return doomed

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
        created = kv.get(CREATED_KEY)
        return DeadLetterFile(
            bundle_id,
            self.location(bundle_id),
            meta.num_rows,
            size,
            None if pipeline is None else pipeline.decode(),
            None if created is None else float(created.decode()),
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

    @abstractmethod
    def _delete(self, name: str) -> None:
        """Delete ``name``; nothing if it is not there."""


class FileDeadLetters(DeadLetters):
    """Dead letters in a local directory (``file:///dir``): plain Parquet files."""

    def __init__(self, directory: str, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__(f"file://{directory}", clock=clock)
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
        return _parquet_table(path)

    def _delete(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(self.directory, name))


class StoreDeadLetters(DeadLetters):
    """Dead letters as objects of a state store (``s3://bucket/prefix``), created with
    the store's create-if-absent."""

    def __init__(self, store: StateStore, *, clock: Callable[[], float] = time.time) -> None:
        super().__init__(store.uri, clock=clock)
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
        return _parquet_table(pa.BufferReader(self.store.get(name).data))

    def _delete(self, name: str) -> None:
        self.store.delete(name)

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


def _file_bytes(
    pipeline_id: str, bundle_id: int, staged: pa.Table, created: float
) -> tuple[pa.Table, bytes]:
    """The file of bundle ``bundle_id`` from its staged dead-letter rows: its table and
    its Parquet bytes, with the metadata naming the pipeline, the bundle and when it was
    written."""
    table = dead_letter_table(staged, bundle_id)
    metadata = {
        **(table.schema.metadata or {}),
        PIPELINE_KEY: pipeline_id.encode(),
        BUNDLE_KEY: str(bundle_id).encode(),
        CREATED_KEY: repr(created).encode(),
    }
    return table, _parquet_bytes(table.replace_schema_metadata(metadata))


def _parquet_table(source: str | pa.BufferReader) -> pa.Table:
    """A dead-letter file's table, read on the calling thread.

    pyarrow's threaded reader leaves pool threads that can abort a short-lived process
    (the CLI) at exit with ``std::terminate``; dead-letter files are small, so the
    threads buy nothing."""
    return pq.read_table(source, use_threads=False, pre_buffer=False)


def _parquet_bytes(table: pa.Table) -> bytes:
    out = pa.BufferOutputStream()
    pq.write_table(table, out)
    return bytes(out.getvalue().to_pybytes())
