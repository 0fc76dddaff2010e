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
several parts is combined into one file (see :mod:`sink.parquet_concat`).
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid

from sink.bundle import Bundle
from sink.consumers.base import POINTER, Ack, Consumer, LastBundle
from sink.faults import FaultInjector
from sink.parquet_concat import concat_parts_to_file
from sink.staging import FileStaging
from state.errors import DeliveryFailed, StateError


def bundle_file_name(epoch: int) -> str:
    return f"bundle-{epoch:012d}.parquet"


def fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_atomically(directory: str, name: str, data: bytes) -> None:
    """Write ``directory/name`` so readers see the old or the new content, never a mix."""
    tmp = os.path.join(directory, f".tmp-{uuid.uuid4().hex}")
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
        probe = os.path.join(root, f".tmp-probe-{uuid.uuid4().hex}")
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
            pointer = {
                "bundle_id": bundle.bundle_id,
                "gt": bundle.gt,
                "file": name,
                "rows": bundle.rows,
                "pipeline_id": bundle.pipeline_id,
            }
            write_atomically(self.root, POINTER, json.dumps(pointer, sort_keys=True).encode())
        return Ack(bundle.bundle_id, bundle.rows, driver_bytes)

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
        tmp = os.path.join(self.root, f".tmp-{uuid.uuid4().hex}")
        try:
            moved = concat_parts_to_file(bundle, paths, tmp)
            os.replace(tmp, target)
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        return moved

    def last_bundle(self) -> LastBundle | None:
        try:
            with open(os.path.join(self.root, POINTER), "rb") as f:
                rec = json.loads(f.read())
        except FileNotFoundError:
            return None
        return LastBundle(int(rec["bundle_id"]), int(rec["gt"]))
