"""``file:///abs/path``: a store on a local file system, safe across processes.

Each key is a file under the root directory (``a/b.json`` is ``<root>/a/b.json``).
A file holds a one-line header with the value's *version* followed by the value::

    GTB1 3f2c9a0e6b1d4c8f9e7a5b3c1d2e4f60\\n<value bytes>

The version is a random token written with the value, so it changes on every write
(even of identical bytes) and is read atomically with it.

Guarantees (on a local POSIX file system; not NFS):

* **Atomic writes.** A value is written to a temp file in the key's directory,
  flushed and fsync'ed, then moved into place with ``os.replace`` (``put``,
  ``compare_and_swap``) or ``os.link`` (``create``), and the directory is fsync'ed.
  Readers see the old or the new value, never a mix; after a crash the key holds
  one of them.
* **Conditional writes across processes.** Every write and delete of a key holds an
  exclusive ``flock`` on one of a fixed set of lock files (``<root>/.gtb-locks/``,
  chosen by a hash of the key). ``compare_and_swap`` reads the current version and
  replaces the file under that lock; ``create`` uses ``os.link``, which fails if the
  name exists, so two processes can never both win. A process that dies releases its
  locks (the kernel drops them with its file descriptors).

Temp files (``.gtb-tmp-*``) and lock files live under names starting with ``.gtb-``;
``list`` never shows them and keys may not use such segments. A key cannot be both a
value and a prefix of other keys (``a`` and ``a/b``): that is a file system, not S3.
Empty directories are left behind by ``delete``; they are harmless.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import tempfile
import uuid
import zlib
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import unquote, urlparse

from state.errors import (
    ConcurrentModification,
    KeyExists,
    KeyNotFound,
    RetriableError,
    StateError,
    StoreConfigError,
    StoreUnavailable,
)
from state.fsync import fsync_dir
from state.retry import Retry
from state.stores.state_store import StateStore, StoreConfig, Versioned, check_key, validate_uri

MAGIC = b"GTB1 "
_HEADER_LEN = len(MAGIC) + 32 + 1  # magic, 32 hex digits, newline
RESERVED = ".gtb-"
LOCK_STRIPES = 64
DEFAULT_LOCK_TIMEOUT = 60.0


class _LockBusyError(RetriableError):
    """Internal: the stripe lock is held by someone else (polled until the timeout)."""


class FileStore(StateStore):
    """A :class:`~state.stores.state_store.StateStore` over a directory (module docstring)."""

    def __init__(self, config: StoreConfig, *, lock_timeout: float = DEFAULT_LOCK_TIMEOUT) -> None:
        super().__init__(config)
        validate_uri(config.uri)
        parsed = urlparse(config.uri)
        if parsed.scheme != "file":
            raise StoreConfigError("state.uri", config.uri, "a file:///absolute/path URI")
        self.root = Path(unquote(parsed.path))
        self.lock_timeout = lock_timeout

    # --- reads ---------------------------------------------------------------------

    def get(self, key: str) -> Versioned:
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                raw = f.read()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            raise KeyNotFound(self.uri, key) from None
        except OSError as err:
            raise self._os_error("read", key, err) from err
        return decode(raw)

    def list(self, prefix: str = "") -> list[str]:
        head, _, _ = prefix.rpartition("/")
        if prefix.startswith("/") or (head and any(p in ("", ".", "..") for p in head.split("/"))):
            raise StoreConfigError("prefix", prefix, f"a relative key prefix (store {self.uri})")
        base = self.root / head if head else self.root
        keys: list[str] = []
        try:
            for dirpath, dirnames, filenames in os.walk(base, onerror=_raise):
                dirnames[:] = [d for d in dirnames if not d.startswith(RESERVED)]
                rel_dir = os.path.relpath(dirpath, self.root)
                for name in filenames:
                    if name.startswith(RESERVED):
                        continue
                    rel = name if rel_dir == "." else f"{rel_dir}/{name}"
                    key = rel.replace(os.sep, "/")
                    if key.startswith(prefix):
                        keys.append(key)
        except (FileNotFoundError, NotADirectoryError):
            return []
        except OSError as err:
            raise self._os_error("list", prefix, err) from err
        return sorted(keys)

    # --- writes --------------------------------------------------------------------

    def put(self, key: str, data: bytes) -> str:
        path = self._path(key)
        with self._locked(key):
            return self._write(key, path, data, create=False)

    def create(self, key: str, data: bytes) -> str:
        path = self._path(key)
        with self._locked(key):
            return self._write(key, path, data, create=True)

    def compare_and_swap(self, key: str, data: bytes, expected_version: str) -> str:
        path = self._path(key)
        with self._locked(key):
            try:
                current = self.get(key).version
            except KeyNotFound:
                raise ConcurrentModification(self.uri, key, expected_version, None) from None
            if current != expected_version:
                raise ConcurrentModification(self.uri, key, expected_version, current)
            return self._write(key, path, data, create=False)

    def delete(self, key: str) -> None:
        path = self._path(key)
        with self._locked(key):
            try:
                os.unlink(path)
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                return
            except OSError as err:
                raise self._os_error("delete", key, err) from err
            self._fsync_dir(path.parent, key)

    # --- internals -----------------------------------------------------------------

    def _path(self, key: str) -> Path:
        check_key(self.uri, key)
        if any(part.startswith(RESERVED) for part in key.split("/")):
            raise StoreConfigError(
                "key", key, f"a key without segments starting with {RESERVED!r} (store {self.uri})"
            )
        return self.root / key

    def _write(self, key: str, path: Path, data: bytes, *, create: bool) -> str:
        version = uuid.uuid4().hex
        self._ensure_dir(path.parent, key)
        try:
            fd, tmp = tempfile.mkstemp(prefix=RESERVED + "tmp-", dir=path.parent)
        except OSError as err:
            raise self._os_error("write", key, err) from err
        try:
            with os.fdopen(fd, "wb") as f:
                os.fchmod(f.fileno(), 0o644)
                f.write(MAGIC + version.encode() + b"\n")
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            if create:
                try:
                    os.link(tmp, path)
                except FileExistsError as err:
                    if path.is_dir():
                        raise self._conflict(key, err) from None
                    raise KeyExists(self.uri, key) from None
            else:
                os.replace(tmp, path)
        except IsADirectoryError as err:  # replace onto a directory
            raise self._conflict(key, err) from err
        except OSError as err:
            raise self._os_error("write", key, err) from err
        finally:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
        self._fsync_dir(path.parent, key)
        return version

    def _ensure_dir(self, directory: Path, key: str) -> None:
        if directory.is_dir():
            return
        missing: list[Path] = []
        d = directory
        while not d.exists():
            missing.append(d)
            d = d.parent
        if not d.is_dir():
            if self.root.is_relative_to(d):  # the root itself cannot be a directory
                raise self._bad_root(f"{d} is a file")
            raise self._conflict(key, NotADirectoryError(str(d)))
        for m in reversed(missing):
            try:
                os.mkdir(m, 0o755)
            except FileExistsError:
                if not m.is_dir():
                    raise self._conflict(key, FileExistsError(str(m))) from None
            except OSError as err:
                if self.root.is_relative_to(m):
                    raise self._bad_root(f"creating {m} failed: {err.strerror}") from err
                raise self._os_error("create directory for", key, err) from err
            self._fsync_dir(m.parent, key)

    def _fsync_dir(self, directory: Path, key: str) -> None:
        try:
            fsync_dir(directory)
        except OSError as err:
            raise self._os_error("fsync the directory of", key, err) from err

    @contextlib.contextmanager
    def _locked(self, key: str) -> Iterator[None]:
        """Hold the exclusive ``flock`` of ``key``'s lock stripe (waits up to ``lock_timeout``)."""
        lock_dir = self.root / (RESERVED + "locks")
        self._ensure_dir(lock_dir, key)
        stripe = zlib.crc32(key.encode()) % LOCK_STRIPES
        lock_path = lock_dir / f"{stripe:02d}.lock"
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as err:
            raise self._os_error("open the lock file of", key, err) from err
        try:

            def try_lock() -> None:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    raise _LockBusyError(f"lock {lock_path} is busy") from None

            wait = Retry(
                max_attempts=1_000_000,
                base_delay=0.0005,
                max_delay=0.02,
                deadline=self.lock_timeout,
                jitter=0.5,
            )
            try:
                wait(try_lock)
            except _LockBusyError:
                raise StoreUnavailable(
                    self.uri,
                    key,
                    f"lock file {lock_path} held by another process for over {self.lock_timeout}s",
                ) from None
            yield
        finally:
            os.close(fd)  # releases the flock

    def _conflict(self, key: str, err: OSError) -> StateError:
        return StateError(
            f"{self.uri}: cannot write key '{key}': a path component is a value or a value's "
            f"path is a prefix of other keys ({err})"
        )

    def _bad_root(self, why: str) -> StoreConfigError:
        return StoreConfigError(
            "state.uri", self.uri, f"a directory that can be created and written ({why})"
        )

    def _os_error(self, op: str, key: str, err: OSError) -> StateError:
        return StateError(f"{self.uri}: {op} key '{key}' failed: {err}")


def decode(raw: bytes) -> Versioned:
    """Split a stored file into value and version.

    A file without the header (written by another tool) is read whole; its version is
    a hash of its content, so compare-and-swap still detects any change to it.
    """
    framed = len(raw) >= _HEADER_LEN and raw[_HEADER_LEN - 1 : _HEADER_LEN] == b"\n"
    if framed and raw.startswith(MAGIC):
        return Versioned(raw[_HEADER_LEN:], raw[len(MAGIC) : _HEADER_LEN - 1].decode("ascii"))
    return Versioned(raw, "sha256-" + hashlib.sha256(raw).hexdigest())


def _raise(err: OSError) -> None:
    raise err
