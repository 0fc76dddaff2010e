"""``az://container/prefix``: a store on Azure Blob Storage (azure-storage-blob).

Key ``k`` is the block blob ``<prefix>/k`` in the container; a value's version is the
blob's ETag. The account is ``azure.accountName``, reached at ``azure.endpoint`` (default
``https://<account>.blob.core.windows.net``).

* ``create`` is a Put Blob with ``If-None-Match: *`` and ``compare_and_swap`` one with
  ``If-Match: <etag>``: the service decides, so two writers can never both win.
  ``409 BlobAlreadyExists`` and ``412 ConditionNotMet`` (also a 404 for a blob that is gone)
  become :class:`KeyExists` / :class:`ConcurrentModification` and are never retried.
* Every write carries a random token in its metadata (``gtbwrite``: Azure's metadata names
  are C# identifiers), and a conditional write whose answer was lost is resolved by reading
  it back (:mod:`state.stores.conditional_write`).
* Retries: the SDK's are switched off (``retry_total=0``); every call runs under one
  :class:`~state.retry.Retry` that retries 429, 5xx, connection failures and timeouts,
  within ``azure.retryDeadline``, then raises :class:`StoreUnavailable`. azure-core tells a
  request that was never sent (``ServiceRequestError``) from one whose answer was lost
  (``ServiceResponseError``); only the latter makes a write's outcome unknown.
* Errors: a key the service does not accept (``AuthenticationFailed``) is fatal, naming
  ``azure.accountKey`` / ``azure.sasToken``; a refused permission names the operation, the
  key and the data action it needs; a container that does not exist is a
  :class:`StoreConfigError` naming ``state.uri``.
* ``delete_many`` (staging cleanup, pruning) sends one Blob Batch request per 256 keys,
  not one Delete Blob per key, unless the account refuses batches (a hierarchical
  namespace): then one per key.
* Credentials: ``azure.accountKey`` (shared key) or ``azure.sasToken``, exactly one, each
  best given as a secret reference, resolved where the client is made and hidden from
  this process's log records (:mod:`state.secrets`).

The client is made on first use in a process (and again in a forked child), and dropped
when the store is pickled.
"""

from __future__ import annotations

import logging
import os
import re
import threading
import uuid
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
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
from state.secrets import resolve_secret
from state.stores.conditional_write import (
    PreconditionNotMet,
    ReadBack,
    WriteFailed,
    conditional_write,
)
from state.stores.state_store import StateStore, StoreConfig, Versioned, check_key, validate_uri

if TYPE_CHECKING:
    from azure.storage.blob import ContainerClient

DEFAULT_RETRY_DEADLINE = 30.0
DEFAULT_MAX_ATTEMPTS = 10
CONNECT_TIMEOUT = 5
READ_TIMEOUT = 20
TOKEN_METADATA = "gtbwrite"

_CONTAINER = re.compile(r"[a-z0-9](?!.*--)[a-z0-9-]{1,61}[a-z0-9]")
_ACCOUNT = re.compile(r"[a-z0-9]{3,24}")
log = logging.getLogger(__name__)

_DATA_ACTION = "Microsoft.Storage/storageAccounts/blobServices/containers/blobs"
#: Deletes per Blob Batch request: the service's limit.
BATCH_DELETES = 256
#: A batch's sub-answers that mean the blob is gone: 202 deleted, 404 absent already.
_DELETED = frozenset({202, 404})

_PERMISSION = {
    "get": (f"{_DATA_ACTION}/read", "r"),
    "read back": (f"{_DATA_ACTION}/read", "r"),
    "put": (f"{_DATA_ACTION}/write", "cw"),
    "create": (f"{_DATA_ACTION}/add/action", "ac"),
    "compare-and-swap": (f"{_DATA_ACTION}/write", "w"),
    "delete": (f"{_DATA_ACTION}/delete", "d"),
    "list": (f"{_DATA_ACTION}/read", "l"),
}
_LOST_RACE_CODES = {"BlobAlreadyExists", "ConditionNotMet", "BlobNotFound"}


class AzureStore(StateStore):
    """A :class:`~state.stores.state_store.StateStore` on Azure Blob Storage; see the
    module docstring. ``retry`` replaces the default policy; it is not pickled."""

    def __init__(self, config: StoreConfig, *, retry: Retry | None = None) -> None:
        super().__init__(config)
        validate_uri(config.uri)
        parsed = urlparse(config.uri)
        if parsed.scheme != "az":
            raise StoreConfigError("state.uri", config.uri, "an az://container[/prefix] URI")
        self.container = parsed.netloc
        if not _CONTAINER.fullmatch(self.container):
            raise StoreConfigError(
                "state.uri",
                config.uri,
                "az://container[/prefix] with a valid container name (3-63 characters of a-z, "
                f"0-9 and single '-' between them), not {self.container!r}",
            )
        self.prefix = parsed.path.strip("/")
        az = config.azure
        if az.account_name is None:
            raise StoreConfigError(
                "azure.accountName", None, f"the storage account's name for {config.uri}"
            )
        if not _ACCOUNT.fullmatch(az.account_name):
            raise StoreConfigError(
                "azure.accountName", az.account_name, "3-24 characters of a-z and 0-9"
            )
        if az.account_key is None and az.sas_token is None:
            raise StoreConfigError(
                "azure.accountKey", None, f"azure.accountKey or azure.sasToken for {config.uri}"
            )
        if az.account_key is not None and az.sas_token is not None:
            raise StoreConfigError(
                "azure.sasToken", "<given>", "azure.accountKey or azure.sasToken, not both"
            )
        if az.endpoint is not None and urlparse(az.endpoint).scheme not in ("http", "https"):
            raise StoreConfigError(
                "azure.endpoint", az.endpoint, "an http:// or https:// URL of the blob service"
            )
        self.account_url = (
            az.endpoint.rstrip("/")
            if az.endpoint
            else f"https://{az.account_name}.blob.core.windows.net"
        )
        self._custom_retry = retry
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._lock = threading.Lock()
        self._client: ContainerClient | None = None
        self._pid = os.getpid()
        #: Whether the account takes Blob Batch requests (learnt from its first refusal).
        self._batches = True
        self.retry = self._custom_retry or Retry(
            max_attempts=DEFAULT_MAX_ATTEMPTS,
            base_delay=0.1,
            max_delay=2.0,
            deadline=self.config.azure.retry_deadline or DEFAULT_RETRY_DEADLINE,
        )

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in ("_lock", "_client", "_pid", "_batches", "retry", "_custom_retry", "shared"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._custom_retry = None
        self._init_runtime()

    # --- client --------------------------------------------------------------------

    @property
    def client(self) -> ContainerClient:
        """The container's client, made on first use in this process."""
        with self._lock:
            if self._client is None or self._pid != os.getpid():
                self._client = self._make_client()
                self._pid = os.getpid()
            return self._client

    def _make_client(self) -> ContainerClient:
        try:
            from azure.storage.blob import ContainerClient
        except ImportError as err:
            raise StoreConfigError(
                "state.uri",
                self.uri,
                "a store whose SDK is installed: az:// needs azure-storage-blob, "
                "pip install 'gtbarrier[azure]'",
            ) from err

        az = self.config.azure
        credential: Any
        if az.account_key is not None:
            key = resolve_secret(az.account_key, option="azure.accountKey", where="state store")
            credential = {"account_name": az.account_name, "account_key": key}
        else:
            assert az.sas_token is not None  # checked in __init__
            credential = resolve_secret(
                az.sas_token, option="azure.sasToken", where="state store"
            ).lstrip("?")
        return ContainerClient(
            self.account_url,
            self.container,
            credential=credential,
            retry_total=0,  # ours is the one policy
            connection_timeout=CONNECT_TIMEOUT,
            read_timeout=READ_TIMEOUT,
        )

    def release(self) -> None:
        with self._lock:
            client, self._client = self._client, None
        if client is not None and self._pid == os.getpid():
            client.close()

    # --- operations ----------------------------------------------------------------

    def get(self, key: str) -> Versioned:
        name = self._object(key)

        def attempt() -> Versioned:
            try:
                download = self.client.download_blob(name)
                data = download.readall()
            except Exception as err:
                if _code(err) == "BlobNotFound":
                    raise KeyNotFound(self.uri, key) from None
                raise self.translate_error(err, key, "get") from err
            return Versioned(data, str(download.properties.etag))

        return self.retry(attempt)

    def put(self, key: str, data: bytes) -> str:
        name = self._object(key)
        token = uuid.uuid4().hex

        def attempt() -> str:
            try:
                resp = self.client.get_blob_client(name).upload_blob(
                    data, overwrite=True, metadata={TOKEN_METADATA: token}
                )
            except Exception as err:
                raise self.translate_error(err, key, "put") from err
            return str(resp["etag"])

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
                return sorted(n[cut:] for n in self.client.list_blob_names(name_starts_with=full))
            except Exception as err:
                raise self.translate_error(err, prefix, "list") from err

        return self.retry(attempt)

    def delete(self, key: str) -> None:
        name = self._object(key)

        def attempt() -> None:
            try:
                self.client.delete_blob(name)
            except Exception as err:
                if _code(err) == "BlobNotFound":
                    return
                raise self.translate_error(err, key, "delete") from err

        self.retry(attempt)

    def delete_many(self, keys: Iterable[str]) -> None:
        """Remove ``keys`` with one Blob Batch request per :data:`BATCH_DELETES` keys;
        absent keys are not an error.

        A batch's answers are settled by :func:`settle_batch`: a throttled or failed one
        sends the whole batch again (deleting is idempotent), a refused permission is fatal
        as for one delete, and a key answered otherwise is deleted on its own (whose error,
        if any, says what is wrong). An account that refuses Blob Batch requests altogether
        (one with a hierarchical namespace) gets one delete per key, from then on."""
        wanted = list(keys)
        for start in range(0, len(wanted), BATCH_DELETES):
            batch = wanted[start : start + BATCH_DELETES]
            alone = batch if len(batch) == 1 or not self._batches else self._delete_batch(batch)
            for key in alone:
                self.delete(key)

    def _delete_batch(self, batch: Sequence[str]) -> Sequence[str]:
        """Send ``batch`` as one Blob Batch request (retried as a whole); the keys still to
        delete one by one."""

        def attempt() -> Sequence[str]:
            names = [self._object(k) for k in batch]
            try:
                answers = list(self.client.delete_blobs(*names, raise_on_any_failure=False))
            except Exception as err:
                error = self.translate_error(err, batch[0], "delete")
                if error.retriable or not _batch_refused(err):
                    raise error from err
                self._batches = False
                log.warning(
                    "%s: the account refuses Blob Batch requests (%s); deleting one key per "
                    "request from now on",
                    self.uri,
                    error,
                )
                return batch
            settled = settle_batch(
                [(k, a.status_code) for k, a in zip(batch, answers, strict=True)]
            )
            if settled.failed:
                raise self._batch_failed(settled.failed, len(batch))
            return settled.alone

        return self.retry(attempt)

    def _batch_failed(self, failed: Sequence[tuple[str, int]], asked: int) -> GtBarrierError:
        """The error of a batch of ``asked`` deletes whose answers refused ``failed``
        (key, HTTP status): retriable if any was throttled or a server error."""
        key, status = failed[0]
        cause = (
            f"delete of {len(failed)} of {asked} key(s) failed, e.g. '{key}' with HTTP "
            f"{status} from {self.account_url}"
        )
        if any(_retriable(s) for _, s in failed):
            return StoreUnavailable(self.uri, key, cause)
        action, sas = _PERMISSION["delete"]
        return StateError(
            f"{self.uri}: {cause}. These credentials likely lack {action} on container "
            f"'{self.container}' (a SAS token: permission '{sas}'); see docs/state-stores.md"
        )

    # --- conditional writes --------------------------------------------------------

    def _conditional_put(self, key: str, data: bytes, expected: str | None) -> str:
        name = self._object(key)
        token = uuid.uuid4().hex
        operation = "create" if expected is None else "compare-and-swap"
        return conditional_write(
            uri=self.uri,
            key=key,
            expected=expected,
            retry=self.retry,
            write_once=lambda: self._write_once(
                name, data, token=token, expected=expected, key=key, operation=operation
            ),
            read_back=lambda: self._read_back(name, key),
            token=token,
        )

    def _write_once(  # noqa: PLR0913 - one attempt of _conditional_put
        self, name: str, data: bytes, *, token: str, expected: str | None, key: str, operation: str
    ) -> str:
        """One attempt of a conditional write (see :func:`conditional_write`)."""
        from azure.core import MatchConditions

        meta = {TOKEN_METADATA: token}
        blob = self.client.get_blob_client(name)
        try:
            if expected is None:
                resp = blob.upload_blob(data, overwrite=False, metadata=meta)
            else:
                resp = blob.upload_blob(
                    data,
                    overwrite=True,
                    metadata=meta,
                    etag=expected,
                    match_condition=MatchConditions.IfNotModified,
                )
        except Exception as err:
            if _code(err) in _LOST_RACE_CODES or _status(err) in (409, 412):
                raise PreconditionNotMet from err
            translated = self.translate_error(err, key, operation)
            translated.__cause__ = err
            raise WriteFailed(translated, maybe_written=_may_have_written(err)) from err
        return str(resp["etag"])

    def _read_back(self, name: str, key: str) -> ReadBack | None:
        try:
            props = self.client.get_blob_client(name).get_blob_properties()
        except Exception as err:
            if _code(err) == "BlobNotFound":
                return None
            raise self.translate_error(err, key, "read back") from err
        return ReadBack((props.metadata or {}).get(TOKEN_METADATA), str(props.etag))

    # --- helpers -------------------------------------------------------------------

    def _object(self, key: str) -> str:
        check_key(self.uri, key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _object_prefix(self, prefix: str) -> str:
        return f"{self.prefix}/{prefix}" if self.prefix else prefix

    def translate_error(  # noqa: PLR0911 - one return per error class of the mapping
        self, err: Exception, key: str, operation: str
    ) -> GtBarrierError:
        """Map an azure-core error of ``operation`` on ``key`` (a key, or for a listing its
        prefix) to the error hierarchy: :class:`StoreUnavailable` (retriable) for 429, 5xx
        and transport failures; :class:`StoreConfigError` for a missing container; a fatal
        :class:`StateError` for refused credentials or permissions and anything else."""
        from azure.core.exceptions import (
            ClientAuthenticationError,
            ServiceRequestError,
            ServiceResponseError,
        )

        if isinstance(err, GtBarrierError):
            return err
        code, status = _code(err), _status(err)
        cause = f"{code or type(err).__name__} (HTTP {status}) from {self.account_url}"
        if code == "ContainerNotFound":
            return StoreConfigError(
                "state.uri",
                self.uri,
                f"a container that exists: container '{self.container}' was not found at "
                f"{self.account_url}",
            )
        # Azure answers AuthenticationFailed to a key or signature it does not accept, Azurite
        # AuthorizationFailure (which Azure also gives when network rules refuse the client).
        if code in ("AuthenticationFailed", "AuthorizationFailure") or (
            isinstance(err, ClientAuthenticationError) and code is None
        ):
            option = "azure.accountKey" if self.config.azure.account_key else "azure.sasToken"
            return StateError(
                f"{self.uri}: {operation} of key '{key}': the credentials were not accepted: "
                f"{cause}. Check {option} and azure.accountName (or the account's network "
                "rules)"
            )
        if status == 403:
            action, sas = _PERMISSION.get(operation, ("access", "?"))
            return StateError(
                f"{self.uri}: {operation} of key '{key}' was refused: {cause}. These "
                f"credentials likely lack {action} on container '{self.container}' (a SAS "
                f"token: permission '{sas}'); see docs/state-stores.md"
            )
        if isinstance(err, ServiceRequestError | ServiceResponseError):
            return StoreUnavailable(self.uri, key, f"{type(err).__name__}: {cause}")
        if status is not None and _retriable(status):
            return StoreUnavailable(self.uri, key, cause)
        return StateError(f"{self.uri}: {operation} of key '{key}': {cause}")


@dataclass(frozen=True)
class SettledBatch:
    """What a Blob Batch's answers leave to do: ``failed`` (key, status) to raise for, a
    429 or 5xx among them making it retriable; ``alone``, keys to delete one by one."""

    failed: list[tuple[str, int]]
    alone: list[str]


def settle_batch(answers: Sequence[tuple[str, int]]) -> SettledBatch:
    """Sort a batch's (key, HTTP status) answers: 202 (deleted) and 404 (absent already)
    are done; a 403, or a throttled or failed delete (408, 429, 5xx), fails the batch;
    any other answer leaves its key to a delete of its own."""
    failed = [(k, s) for k, s in answers if s == 403 or _retriable(s)]
    alone = [k for k, s in answers if s not in _DELETED and s != 403 and not _retriable(s)]
    return SettledBatch(failed, alone)


def _retriable(status: int) -> bool:
    """Whether an HTTP status is throttling or a service failure: worth sending again."""
    return status in (408, 429) or status >= 500


def _batch_refused(err: Exception) -> bool:
    """Whether a Blob Batch request was refused as a request (the account does not take
    batches), not for its credentials, its permissions or a missing container."""
    status = _status(err)
    return (
        status is not None
        and 400 <= status < 500
        and status not in (401, 403)
        and _code(err) not in ("ContainerNotFound", "AuthenticationFailed", "AuthorizationFailure")
    )


def _code(err: Exception) -> str | None:
    """The storage error code of an azure-core error (``BlobNotFound``...), if any."""
    code = getattr(err, "error_code", None)
    return None if code is None else str(getattr(code, "value", code))


def _status(err: Exception) -> int | None:
    status = getattr(err, "status_code", None)
    return int(status) if isinstance(status, int) else None


def _may_have_written(err: Exception) -> bool:
    """False only when the request certainly never reached the service."""
    from azure.core.exceptions import ServiceRequestError

    if isinstance(err, ServiceRequestError):
        return False  # azure-core: the request was not sent
    return _status(err) not in (429, 503)
