"""``gs://bucket/prefix``: a store on Google Cloud Storage (google-cloud-storage).

Key ``k`` is the object ``<prefix>/k``; a value's version is the object's *generation*
(a number GCS gives every write of an object, never reused for that name).

* ``create`` is an upload with ``ifGenerationMatch=0`` (only if no live object) and
  ``compare_and_swap`` one with ``ifGenerationMatch=<generation>``: GCS decides, so two
  writers can never both win. ``412 Precondition Failed`` becomes :class:`KeyExists` /
  :class:`ConcurrentModification` and is never retried; a version that is not a
  generation cannot match, and loses at once.
* Every write carries a random token in its metadata (``gtb-write``), and a conditional
  write whose answer was lost is resolved by reading it back
  (:mod:`state.stores.conditional_write`).
* Retries: the SDK's are switched off (``retry=None``); every call runs under one
  :class:`~state.retry.Retry` that retries 429, 5xx, connection failures and timeouts,
  within ``gcs.retryDeadline``, then raises :class:`StoreUnavailable`.
* Errors: 401/403 are fatal :class:`StateError` naming the operation, the key and the IAM
  permission the credentials likely lack (``storage.objects.create`` ...); a bucket that
  does not exist is a :class:`StoreConfigError` naming ``state.uri``; an unreadable or
  malformed ``gcs.credentialsFile`` one naming that option.
* Credentials: ``gcs.anonymous`` (none: an emulator), ``gcs.credentialsFile`` (a service
  account key file), else Application Default Credentials. The endpoint is
  ``gcs.endpoint``, else ``STORAGE_EMULATOR_HOST``, else Google's.

The client is made on first use in a process (and again in a forked child), and dropped
when the store is pickled.
"""

from __future__ import annotations

import os
import re
import threading
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from state.errors import (
    GtBarrierError,
    KeyNotFound,
    StateError,
    StoreConfigError,
    StoreUnavailable,
)
from state.retry import Retry
from state.stores.conditional_write import (
    PreconditionNotMet,
    ReadBack,
    WriteFailed,
    conditional_write,
)
from state.stores.state_store import StateStore, StoreConfig, Versioned, check_key, validate_uri

if TYPE_CHECKING:
    from google.cloud.storage import Bucket, Client

DEFAULT_RETRY_DEADLINE = 30.0
DEFAULT_MAX_ATTEMPTS = 10
CONNECT_TIMEOUT = 5.0
READ_TIMEOUT = 20.0
TOKEN_METADATA = "gtb-write"

_BUCKET = re.compile(r"[a-z0-9][a-z0-9._-]{1,220}[a-z0-9]")
_PERMISSION = {
    "get": "storage.objects.get",
    "read back": "storage.objects.get",
    "put": "storage.objects.create and storage.objects.delete",
    "create": "storage.objects.create",
    "compare-and-swap": "storage.objects.create and storage.objects.delete",
    "delete": "storage.objects.delete",
    "list": "storage.objects.list",
}


class GcsStore(StateStore):
    """A :class:`~state.stores.state_store.StateStore` on GCS; see the module docstring.

    ``retry`` replaces the default policy (tests inject one); it is not pickled.
    """

    def __init__(self, config: StoreConfig, *, retry: Retry | None = None) -> None:
        super().__init__(config)
        validate_uri(config.uri)
        parsed = urlparse(config.uri)
        if parsed.scheme != "gs":
            raise StoreConfigError("state.uri", config.uri, "a gs://bucket[/prefix] URI")
        self.bucket = parsed.netloc
        if not _BUCKET.fullmatch(self.bucket) or ".." in self.bucket:
            raise StoreConfigError(
                "state.uri",
                config.uri,
                "gs://bucket[/prefix] with a valid bucket name (3-222 characters of a-z, 0-9, "
                f"'.', '_', '-'), not {self.bucket!r}",
            )
        self.prefix = parsed.path.strip("/")
        gcs = config.gcs
        if gcs.anonymous and gcs.credentials_file is not None:
            raise StoreConfigError(
                "gcs.anonymous", "true", "gcs.anonymous or gcs.credentialsFile, not both"
            )
        self._custom_retry = retry
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._lock = threading.Lock()
        self._client: Client | None = None
        self._pid = os.getpid()
        self.retry = self._custom_retry or Retry(
            max_attempts=DEFAULT_MAX_ATTEMPTS,
            base_delay=0.1,
            max_delay=2.0,
            deadline=self.config.gcs.retry_deadline or DEFAULT_RETRY_DEADLINE,
        )

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in ("_lock", "_client", "_pid", "retry", "_custom_retry", "shared"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._custom_retry = None
        self._init_runtime()

    # --- client --------------------------------------------------------------------

    @property
    def client(self) -> Client:
        """The google-cloud-storage client, made on first use in this process."""
        with self._lock:
            if self._client is None or self._pid != os.getpid():
                self._client = self._make_client()
                self._pid = os.getpid()
            return self._client

    def _make_client(self) -> Client:
        try:
            # The full module path: a "from google.cloud import" would find an attribute of
            # the google.cloud namespace even where the module cannot be imported.
            import google.cloud.storage
        except ImportError as err:
            raise StoreConfigError(
                "state.uri",
                self.uri,
                "a store whose SDK is installed: gs:// needs google-cloud-storage, "
                "pip install 'gtbarrier[gcs]'",
            ) from err

        gcs = self.config.gcs
        credentials: Any = None
        project = gcs.project
        if gcs.anonymous:
            from google.auth.credentials import AnonymousCredentials

            credentials = AnonymousCredentials()  # type: ignore[no-untyped-call]
            project = project or "<none>"  # no project to infer without credentials
        elif gcs.credentials_file is not None:
            credentials = self._credentials_from_file(gcs.credentials_file)
        options = {"api_endpoint": gcs.endpoint} if gcs.endpoint else None
        try:
            return google.cloud.storage.Client(
                project=project, credentials=credentials, client_options=options
            )
        except Exception as err:
            from google.auth.exceptions import DefaultCredentialsError

            if isinstance(err, DefaultCredentialsError):
                raise StoreConfigError(
                    "gcs.credentialsFile",
                    None,
                    f"credentials for {self.uri}: set gcs.credentialsFile (a service account "
                    "key), GOOGLE_APPLICATION_CREDENTIALS, or run where Application Default "
                    f"Credentials are found ({err})",
                ) from err
            raise

    def _credentials_from_file(self, path: str) -> Any:
        from google.oauth2 import service_account

        expected = f"a service account key (JSON) file readable on this host (store {self.uri})"
        if not os.access(path, os.R_OK) or not os.path.isfile(path):
            raise StoreConfigError("gcs.credentialsFile", path, expected)
        try:
            return service_account.Credentials.from_service_account_file(path)  # type: ignore[no-untyped-call]
        except (ValueError, KeyError) as err:
            # The file's content is secret: the error names its path and the problem only.
            raise StoreConfigError(
                "gcs.credentialsFile", path, f"{expected}: {type(err).__name__}"
            ) from None

    def _bucket(self) -> Bucket:
        return self.client.bucket(self.bucket)

    def release(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None and self._pid == os.getpid():
            client.close()

    # --- operations ----------------------------------------------------------------

    def get(self, key: str) -> Versioned:
        name = self._object(key)

        def attempt() -> Versioned:
            blob = self._bucket().blob(name)
            try:
                data = blob.download_as_bytes(retry=None, timeout=_TIMEOUT)
            except Exception as err:
                if _status(err) == 404 and not _bucket_missing(err):
                    raise KeyNotFound(self.uri, key) from None
                raise self.translate_error(err, key, "get") from err
            return Versioned(data, str(blob.generation))

        return self.retry(attempt)

    def put(self, key: str, data: bytes) -> str:
        name = self._object(key)
        token = uuid.uuid4().hex

        def attempt() -> str:
            try:
                return self._upload(name, data, token, None)
            except Exception as err:
                raise self.translate_error(
                    err, key, "put", bucket_missing=_status(err) == 404
                ) from err

        return self.retry(attempt)  # an unconditional write is safe to repeat

    def create(self, key: str, data: bytes) -> str:
        return self._conditional_put(key, data, None)

    def compare_and_swap(self, key: str, data: bytes, expected_version: str) -> str:
        return self._conditional_put(key, data, expected_version)

    def list(self, prefix: str = "") -> list[str]:
        full = self._object_prefix(prefix)
        cut = len(self._object_prefix(""))

        def attempt() -> list[str]:
            try:
                blobs = self.client.list_blobs(
                    self.bucket, prefix=full, retry=None, timeout=_TIMEOUT
                )
                return sorted(blob.name[cut:] for blob in blobs)
            except Exception as err:
                missing = _status(err) == 404  # a listing has no object to miss
                raise self.translate_error(err, prefix, "list", bucket_missing=missing) from err

        return self.retry(attempt)

    def delete(self, key: str) -> None:
        name = self._object(key)

        def attempt() -> None:
            try:
                self._bucket().blob(name).delete(retry=None, timeout=_TIMEOUT)
            except Exception as err:
                if _status(err) == 404 and not _bucket_missing(err):
                    return
                raise self.translate_error(err, key, "delete") from err

        self.retry(attempt)

    # --- conditional writes --------------------------------------------------------

    def _upload(self, name: str, data: bytes, token: str, generation: int | None) -> str:
        blob = self._bucket().blob(name)
        blob.metadata = {TOKEN_METADATA: token}
        blob.upload_from_string(
            data,
            content_type="application/octet-stream",
            if_generation_match=generation,
            retry=None,
            timeout=_TIMEOUT,
        )
        return str(blob.generation)

    def _conditional_put(self, key: str, data: bytes, expected: str | None) -> str:
        name = self._object(key)
        token = uuid.uuid4().hex
        operation = "create" if expected is None else "compare-and-swap"
        if expected is None:
            generation = 0
        elif expected.isdigit() and int(expected) > 0:
            generation = int(expected)
        else:
            generation = -1  # not a generation this store gave out: it cannot match

        return conditional_write(
            uri=self.uri,
            key=key,
            expected=expected,
            retry=self.retry,
            write_once=lambda: self._write_once(
                name, data, token=token, generation=generation, key=key, operation=operation
            ),
            read_back=lambda: self._read_back(name, key),
            token=token,
        )

    def _write_once(  # noqa: PLR0913 - one attempt of _conditional_put
        self, name: str, data: bytes, *, token: str, generation: int, key: str, operation: str
    ) -> str:
        """One attempt of a conditional write (see :func:`conditional_write`)."""
        if generation < 0:
            raise PreconditionNotMet
        try:
            return self._upload(name, data, token, generation)
        except Exception as err:
            status = _status(err)
            if status == 412:
                raise PreconditionNotMet from err
            # An upload answers 412, never 404, for an object that is absent or changed: a
            # 404 means the bucket is missing.
            translated = self.translate_error(err, key, operation, bucket_missing=status == 404)
            translated.__cause__ = err
            raise WriteFailed(translated, maybe_written=_may_have_written(err)) from err

    def _read_back(self, name: str, key: str) -> ReadBack | None:
        try:
            blob = self._bucket().get_blob(name, retry=None, timeout=_TIMEOUT)
        except Exception as err:
            raise self.translate_error(err, key, "read back") from err
        if blob is None:
            return None
        token = (blob.metadata or {}).get(TOKEN_METADATA)
        return ReadBack(token, str(blob.generation))

    # --- helpers -------------------------------------------------------------------

    def _object(self, key: str) -> str:
        check_key(self.uri, key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _object_prefix(self, prefix: str) -> str:
        return f"{self.prefix}/{prefix}" if self.prefix else prefix

    def _where(self) -> str:
        return self.config.gcs.endpoint or os.environ.get("STORAGE_EMULATOR_HOST") or "GCS"

    def translate_error(  # noqa: PLR0911 - one return per error class of the mapping
        self, err: Exception, key: str, operation: str, *, bucket_missing: bool = False
    ) -> GtBarrierError:
        """Map a google-cloud-storage or transport error of ``operation`` on ``key`` (a
        key, or for a listing its prefix) to the error hierarchy: :class:`StoreUnavailable`
        (retriable) for 429, 5xx and transport failures; :class:`StoreConfigError` for a
        missing bucket (``bucket_missing``: the caller knows a 404 means that); a
        fatal :class:`StateError` for refused credentials or permissions and anything else."""
        from google.auth import exceptions as auth_errors

        if isinstance(err, GtBarrierError):
            return err
        status = _status(err)
        cause = f"{type(err).__name__} from {self._where()}: {_message(err)}"
        if bucket_missing or _bucket_missing(err):
            return StoreConfigError(
                "state.uri",
                self.uri,
                f"a bucket that exists: bucket '{self.bucket}' was not found at {self._where()}",
            )
        if isinstance(err, auth_errors.RefreshError) or status == 401:
            return StateError(
                f"{self.uri}: {operation} of key '{key}': the credentials were not accepted: "
                f"{cause}. Check gcs.credentialsFile or the Application Default Credentials"
            )
        if status == 403:
            permission = _PERMISSION.get(operation, "access")
            return StateError(
                f"{self.uri}: {operation} of key '{key}' was refused: {cause}. These "
                f"credentials likely lack {permission} on bucket '{self.bucket}' "
                "(roles/storage.objectUser grants them); see docs/state-stores.md"
            )
        if status is not None and (status == 429 or status >= 500 or status == 408):
            return StoreUnavailable(self.uri, key, cause)
        if status is None and _is_transport(err):
            return StoreUnavailable(self.uri, key, cause)
        return StateError(f"{self.uri}: {operation} of key '{key}': {cause}")


_TIMEOUT = (CONNECT_TIMEOUT, READ_TIMEOUT)


def _status(err: Exception) -> int | None:
    """The HTTP status of a google-api-core error (None for any other error)."""
    code = getattr(err, "code", None)
    from google.api_core.exceptions import GoogleAPICallError

    return int(code) if isinstance(err, GoogleAPICallError) and code is not None else None


def _message(err: Exception) -> str:
    from google.api_core.exceptions import GoogleAPICallError

    return str(err.message) if isinstance(err, GoogleAPICallError) else str(err)


def _bucket_missing(err: Exception) -> bool:
    """GCS answers 404 for a missing object and a missing bucket alike; the message tells."""
    return _status(err) == 404 and "bucket does not exist" in _message(err).lower()


def _is_transport(err: Exception) -> bool:
    import requests
    from google.auth.exceptions import TransportError

    return isinstance(
        err, requests.RequestException | TransportError | ConnectionError | TimeoutError
    )


def _may_have_written(err: Exception) -> bool:
    """False only when the request certainly never reached GCS (no connection was made)."""
    import requests

    if isinstance(err, requests.ConnectTimeout):
        return False
    if isinstance(err, requests.ConnectionError):
        text = repr(err)
        if "NewConnectionError" in text or "Connection refused" in text:
            return False
    return _status(err) not in (429, 503)
