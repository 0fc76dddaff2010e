"""``consumer=file``: one Parquet file per bundle in a directory (the embedded default).

Layout of ``consumer.path``::

    bundle-000000000007.parquet   the items of bundle 7, exactly the sink input's columns
    _last_bundle.json             {"bundle_id": 7, "gt": 7, "file": ..., "rows": ...}
    _staging/...                  parts staged by write tasks (hidden)
    .tmp-*                        files being written (hidden)

Bundle file names sort in delivery order. A bundle file appears by an atomic rename of a
complete file, and the pointer is replaced atomically after it, so readers that skip
``_``/``.`` names (pyarrow, pandas, DuckDB, Spark) see only complete bundles, and
``last_bundle()`` never names a bundle whose file is missing. A bundle staged as a single
part is promoted by renaming that part (no item bytes through the driver); a bundle of
several parts is combined into one file (see :mod:`sink.parquet_concat`). ``gtbarrier
sweep`` lists and deletes the ``.tmp-*`` files a process killed while writing left
(:class:`FileKind`).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

from sink.bundle import Bundle
from sink.consumers.base import POINTER, Ack, BundlePointer, Consumer, LastBundle
from sink.consumers.consumer_kind import ConsumerKind, ConsumerLeftover, ConsumerSettings, SinkView
from sink.faults import FaultInjector
from sink.parquet_concat import concat_parts_to_file
from sink.staging import FileStaging, Staging
from state.errors import DeliveryFailed, StateError
from state.fsync import fsync_dir
from state.option_table import StringOption
from state.options import Options
from state.records.codec import decode
from state.stores import StateStore

TMP_PREFIX = ".tmp-"
"""Files being written (by this consumer, or ``write_atomically``) start with this."""

CONSUMER_PATH = StringOption(
    name="consumer.path",
    required=True,
    doc="An absolute directory (or `file:///...`) for `file`; `s3://bucket/prefix` "
    "(or `s3a://`) for `s3`.",
)
"""Declared here and shared with ``consumer=s3`` (:mod:`sink.consumers.s3`)."""


@dataclass(frozen=True)
class FileSettings(ConsumerSettings):
    """``consumer=file``: the directory bundles go to."""

    path: str
    """Absolute and normalised (a ``file://`` URI given is read as its path)."""


def parse_directory(opts: Options) -> str:
    """``consumer.path`` for ``consumer=file``: an absolute directory or ``file:///...``."""
    path = CONSUMER_PATH.read_required(opts)
    name = CONSUMER_PATH.name
    if path.startswith("file://"):
        parsed = urlparse(path)
        if parsed.netloc not in ("", "localhost"):
            raise opts.error(name, "file:///absolute/path (three slashes)")
        path = parsed.path
    if "://" in path or not os.path.isabs(path):
        raise opts.error(name, "an absolute directory path (or file:///...) for consumer=file")
    return os.path.normpath(path)


def bundle_file_name(epoch: int) -> str:
    return f"bundle-{epoch:012d}.parquet"


def write_atomically(directory: str, name: str, data: bytes) -> None:
    """Write ``directory/name`` so readers see the old or the new content, never a mix."""
    tmp = os.path.join(directory, f"{TMP_PREFIX}{uuid.uuid4().hex}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, os.path.join(directory, name))
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    fsync_dir(directory)


def check_writable(root: str) -> None:
    """Raise :class:`DeliveryFailed` naming ``consumer.path`` unless ``root`` is a writable dir."""
    try:
        os.makedirs(root, exist_ok=True)
        probe = os.path.join(root, f"{TMP_PREFIX}probe-{uuid.uuid4().hex}")
        with open(probe, "wb"):
            pass
        os.unlink(probe)
    except OSError as err:
        raise DeliveryFailed(
            f"barrier: consumer.path {root!r} is not a writable directory: {err}"
        ) from err


class FileConsumer(Consumer):
    name = "file"

    def __init__(self, root: str, staging: FileStaging, faults: FaultInjector) -> None:
        super().__init__(staging, faults)
        self.root = root
        self.file_staging = staging

    def describe(self) -> str:
        return f"file consumer {self.root}"

    def check(self) -> None:
        check_writable(self.root)

    def deliver(self, bundle: Bundle, *, redelivery: bool = False) -> Ack:
        self.check()
        name = bundle_file_name(bundle.epoch)
        target = os.path.join(self.root, name)
        driver_bytes = 0
        if not os.path.exists(target):
            driver_bytes = self._promote(bundle, target)
            fsync_dir(self.root)
        self.faults.at("after_deliver", bundle.bundle_id)
        current = self.last_bundle()
        if current is None or current.bundle_id < bundle.bundle_id:
            write_atomically(self.root, POINTER, BundlePointer.of(bundle, name).to_bytes())
        return Ack(bundle.bundle_id, bundle.rows, driver_bytes)

    def missing_parts(self, bundle: Bundle) -> tuple[str, ...]:
        """None once the bundle file is in place (an attempt renamed or wrote it before it
        could replace the pointer): a delivery then only replaces the pointer."""
        if os.path.exists(os.path.join(self.root, bundle_file_name(bundle.epoch))):
            return ()
        return super().missing_parts(bundle)

    def _promote(self, bundle: Bundle, target: str) -> int:
        paths = [self.file_staging.path(p.location) for p in bundle.parts]
        missing = [p for p in paths if not os.path.exists(p)]
        if missing:
            raise StateError(
                f"{self.describe()}: bundle {bundle.bundle_id} is not in {target} and its staged "
                f"part(s) {missing} are gone; the bundle cannot be delivered"
            )
        if len(paths) == 1:
            os.replace(paths[0], target)  # same file system: an atomic rename
            return 0
        tmp = os.path.join(self.root, f"{TMP_PREFIX}{uuid.uuid4().hex}")
        try:
            moved = concat_parts_to_file(bundle, paths, tmp)
            os.replace(tmp, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        return moved

    def last_bundle(self) -> LastBundle | None:
        path = os.path.join(self.root, POINTER)
        try:
            with open(path, "rb") as f:
                data = f.read()
        except FileNotFoundError:
            return None
        return decode(data, BundlePointer.from_json, path).last_bundle


def temp_files(root: str) -> list[str]:
    """``.tmp-*`` files under ``root`` (paths relative to it), sorted: what a process killed
    while writing left behind."""
    found = []
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            if name.startswith(TMP_PREFIX):
                found.append(os.path.relpath(os.path.join(dirpath, name), root))
    return sorted(found)


class FileKind(ConsumerKind[FileSettings]):
    """``consumer=file``: parts staged under the directory, promoted by a rename."""

    settings_type = FileSettings
    specs = (CONSUMER_PATH,)

    def parse(self, opts: Options) -> FileSettings:
        return FileSettings(path=parse_directory(opts))

    def check_at_start(self, options: SinkView, spark_schema: Any) -> FileSettings:
        settings = self.settings(options)
        check_writable(settings.path)
        return settings

    def open_staging(self, options: SinkView, store: StateStore) -> FileStaging:
        return FileStaging(self.settings(options).path)

    def open_consumer(
        self, options: SinkView, staging: Staging, faults: FaultInjector
    ) -> FileConsumer:
        assert isinstance(staging, FileStaging)
        return FileConsumer(self.settings(options).path, staging, faults)

    def consumer_path(self, options: SinkView) -> str:
        return self.settings(options).path

    def find_leftovers(self, options: SinkView) -> list[ConsumerLeftover]:
        root = self.settings(options).path
        if not os.path.isdir(root):
            return []
        return [ConsumerLeftover("consumer temp file", rel) for rel in temp_files(root)]

    def delete_leftovers(
        self, options: SinkView, leftovers: Sequence[ConsumerLeftover]
    ) -> list[str]:
        root = self.settings(options).path
        deleted = []
        for leftover in leftovers:
            if leftover.kept:
                continue
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(root, leftover.location))
            deleted.append(leftover.location)
        return deleted


FILE = FileKind()
