"""``s3://bucket/prefix``: a store on S3 or any S3-compatible server (boto3).

Key ``k`` is the object ``<prefix>/k``; a value's version is the object's ETag.

* ``create`` is a ``PutObject`` with ``If-None-Match: *`` and ``compare_and_swap`` a
  ``PutObject`` with ``If-Match: <etag>``: the server decides, so two writers on any
  number of machines can never both win. ``412 Precondition Failed`` and
  ``409 ConditionalRequestConflict`` become :class:`KeyExists` /
  :class:`ConcurrentModification` and are never retried.
* S3's ETag of a simple upload is the MD5 of the body, so a rewrite of identical
  bytes keeps the version: on S3, compare-and-swap succeeds exactly when the object
  still holds the bytes the caller read.
* Configuration: explicit :class:`~state.stores.base.S3Settings` win; anything left unset
  comes from the standard AWS chain (``AWS_ENDPOINT_URL_S3`` / ``AWS_ENDPOINT_URL``,
  ``AWS_ACCESS_KEY_ID``..., ``AWS_PROFILE``, ``~/.aws/config``). Path-style addressing
  is the default whenever a custom endpoint is configured (MinIO, SeaweedFS, Ceph, moto...).
* Retries: botocore's own retries are switched off; every call runs under one
  :class:`~state.retry.Retry` (bounded, jittered, with a deadline) that retries
  throttling (429/503 SlowDown), 5xx, connection failures and timeouts. When it gives
  up it raises :class:`StoreUnavailable` naming the URI, the key and the cause.
* Unknown outcomes: if a conditional write's connection fails after the request was
  sent, the write may have happened. The retry then gets ``412`` for our *own* write.
  Every write carries a random token in its metadata (``x-amz-meta-gtb-write``); on a
  412/409 after such an ambiguous attempt the store reads the object's metadata: our
  token means we won (the new ETag is returned); another token means the key holds
  someone else's write now, and the loss is reported (our write either never happened
  or was already superseded by a writer who read it). If the store stays unreachable,
  :class:`StoreWriteUnknown` (a :class:`StoreUnavailable`) says the outcome is unknown.

* Refusals: an ``AccessDenied`` is fatal (never retried): a :class:`StateError` naming the
  operation (get, put, create, compare-and-swap, list, delete), the key (or the listed
  prefix) and the permission the credentials likely lack, as AWS names it with the
  resource ARN (``s3:PutObject on arn:aws:s3:::bucket/prefix/key``) and as a SeaweedFS
  identity action (``Write:bucket/prefix/key``); docs/security.md has each role's
  policy. Credentials the server does not accept (``InvalidAccessKeyId``...) are told
  apart from a missing permission.
* TLS: an ``https://`` endpoint's certificate is checked against ``s3.caBundle`` (a PEM
  file), else ``AWS_CA_BUNDLE``, else botocore's bundle. A certificate that does not
  verify is a fatal :class:`StoreConfigError` naming ``s3.caBundle``, the endpoint and
  the reason, at the first request: retrying cannot make it trusted. Other TLS failures
  (a handshake cut short) are transport failures and retried.

The boto3 client is created on first use and dropped when the store is pickled. Clients
come from one boto3 session per process (and ``AWS_*`` environment), which loads the S3
service model once: the first client of a process costs 0.1-0.5 s, later ones a few
milliseconds. boto3 itself is imported with the first client. A store used in a process
forked after its client was made builds a new client there (connections are not
fork-safe).
"""

from __future__ import annotations

import os
import re
import ssl
import threading
import uuid
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

import botocore.exceptions as bce
import urllib3.exceptions
from botocore.config import Config as BotoConfig

from state.errors import (
    ConcurrentModification,
    GtBarrierError,
    KeyExists,
    KeyNotFound,
    StateError,
    StoreConfigError,
    StoreUnavailable,
    StoreWriteUnknown,
)
from state.process_cache import ProcessCache
from state.retry import Retry
from state.secrets import resolve_secret
from state.stores.base import (
    StateStore,
    StoreConfig,
    Versioned,
    aws_environment,
    check_key,
    validate_uri,
)

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

DEFAULT_CONNECT_TIMEOUT = 5.0
DEFAULT_READ_TIMEOUT = 20.0
DEFAULT_RETRY_DEADLINE = 30.0
DEFAULT_MAX_ATTEMPTS = 10
TOKEN_METADATA = "gtb-write"

_BUCKET = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")
_THROTTLING = {
    "SlowDown",
    "Throttling",
    "ThrottlingException",
    "RequestLimitExceeded",
    "TooManyRequestsException",
    "ServiceUnavailable",
    "RequestThrottled",
}
_TRANSIENT = {"InternalError", "RequestTimeout", "OperationAborted", "BadGateway"}
_PRECONDITION = {"PreconditionFailed", "ConditionalRequestConflict"}
# A permission the credentials lack (or a policy that denies): fatal, names the permission.
_DENIED = {"AccessDenied", "AllAccessDisabled"}
# Credentials the server does not accept at all: fatal, names the credential options.
_BAD_CREDENTIALS = {
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "AuthorizationHeaderMalformed",
}
# The S3 permission (AWS) and SeaweedFS identity action each store operation needs.
_PERMISSION = {
    "get": ("s3:GetObject", "Read"),
    "read back": ("s3:GetObject", "Read"),  # HeadObject after an ambiguous write
    "put": ("s3:PutObject", "Write"),
    "create": ("s3:PutObject", "Write"),
    "compare-and-swap": ("s3:PutObject", "Write"),
    "delete": ("s3:DeleteObject", "Write"),
}
LIST_OPERATION = "list"

# Failures where the request never reached the server: a write cannot have happened.
_UNSENT = (bce.EndpointConnectionError, bce.ConnectTimeoutError, bce.ProxyConnectionError)
# Failures of the transport, after which the outcome of a write is unknown.
_TRANSPORT = (
    bce.HTTPClientError,  # ReadTimeoutError, ConnectionClosedError, ResponseStreamingError
    bce.ConnectionError,
    bce.IncompleteReadError,
    urllib3.exceptions.HTTPError,
    ConnectionError,
    TimeoutError,
)


class S3Store(StateStore):
    """A :class:`~state.stores.base.StateStore` on S3; see the module docstring.

    ``retry`` replaces the default policy (tests inject one with a short deadline and
    a recording sleep); it is not pickled.
    """

    def __init__(self, config: StoreConfig, *, retry: Retry | None = None) -> None:
        super().__init__(config)
        validate_uri(config.uri)
        parsed = urlparse(config.uri)
        if parsed.scheme != "s3":
            raise StoreConfigError("state.uri", config.uri, "an s3://bucket[/prefix] URI")
        self.bucket = parsed.netloc
        if not _BUCKET.match(self.bucket) or ".." in self.bucket:
            raise StoreConfigError(
                "state.uri",
                config.uri,
                "s3://bucket[/prefix] with a valid bucket name (3-63 characters of a-z, 0-9, "
                f"'.', '-'), not {self.bucket!r}",
            )
        self.prefix = parsed.path.strip("/")
        s3 = config.s3
        if (s3.access_key_id is None) != (s3.secret_access_key is None):
            missing = "s3.secretAccessKey" if s3.secret_access_key is None else "s3.accessKeyId"
            raise StoreConfigError(
                missing, None, "both s3.accessKeyId and s3.secretAccessKey, or neither"
            )
        self.connect_timeout = s3.connect_timeout or DEFAULT_CONNECT_TIMEOUT
        self.read_timeout = s3.read_timeout or DEFAULT_READ_TIMEOUT
        self._custom_retry = retry
        self._init_runtime()

    def _init_runtime(self) -> None:
        self._lock = threading.Lock()
        self._s3: S3Client | None = None
        self._s3_pid = os.getpid()
        self.retry = self._custom_retry or Retry(
            max_attempts=DEFAULT_MAX_ATTEMPTS,
            base_delay=0.1,
            max_delay=2.0,
            deadline=self.config.s3.retry_deadline or DEFAULT_RETRY_DEADLINE,
        )

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in ("_lock", "_s3", "_s3_pid", "retry", "_custom_retry", "shared"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._custom_retry = None
        self._init_runtime()

    # --- client --------------------------------------------------------------------

    @property
    def client(self) -> S3Client:
        """The boto3 client, created on first use in this process (thread-safe)."""
        with self._lock:
            if self._s3 is None or self._s3_pid != os.getpid():
                self._s3 = self._make_client()  # a forked child never uses the parent's
                self._s3_pid = os.getpid()
            return self._s3

    def _make_client(self) -> S3Client:
        s3 = self.config.s3
        endpoint = (
            s3.endpoint
            or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL")
        )
        path_style = s3.path_style if s3.path_style is not None else bool(endpoint)
        config = BotoConfig(
            connect_timeout=self.connect_timeout,
            read_timeout=self.read_timeout,
            retries={"total_max_attempts": 1, "mode": "standard"},  # ours is the one policy
            s3={"addressing_style": "path" if path_style else "auto"},
            # S3-compatible servers differ in their support of the newer checksums.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            max_pool_connections=16,
        )
        verify = self.ca_bundle()
        shared = _sessions.get_or_create(aws_environment(), _Session)
        with shared.lock:
            return shared.session.client(
                "s3",
                endpoint_url=s3.endpoint,  # None: the AWS chain (AWS_ENDPOINT_URL_S3...) decides
                region_name=s3.region,
                aws_access_key_id=_secret(s3.access_key_id, "s3.accessKeyId"),
                aws_secret_access_key=_secret(s3.secret_access_key, "s3.secretAccessKey"),
                verify=verify,  # None: AWS_CA_BUNDLE, else botocore's bundle
                config=config,
            )

    def ca_bundle(self) -> str | None:
        """``s3.caBundle``, checked to be a readable file on this host (executors read
        their own copy); None if not given. :class:`StoreConfigError` naming the option
        otherwise (botocore would fail each request with a less telling error)."""
        path = self.config.s3.ca_bundle
        if path is None:
            return None
        if not os.access(path, os.R_OK) or not Path(path).is_file():
            raise StoreConfigError(
                "s3.caBundle",
                path,
                f"a readable PEM file of CA certificates on this host (store {self.uri})",
            )
        return path

    def release(self) -> None:
        with self._lock:
            client, self._s3 = self._s3, None
        if client is not None and self._s3_pid == os.getpid():
            client.close()

    @property
    def endpoint(self) -> str:
        return str(self.client.meta.endpoint_url)

    # --- operations ----------------------------------------------------------------

    def get(self, key: str) -> Versioned:
        name = self._object(key)

        def attempt() -> Versioned:
            try:
                resp = self.client.get_object(Bucket=self.bucket, Key=name)
                data = resp["Body"].read()
            except Exception as err:
                if _code(err) in ("NoSuchKey", "404"):
                    raise KeyNotFound(self.uri, key) from None
                raise self.translate_error(err, key, "get") from err
            return Versioned(data, resp["ETag"])

        return self.retry(attempt)

    def put(self, key: str, data: bytes) -> str:
        name = self._object(key)
        token = uuid.uuid4().hex

        def attempt() -> str:
            try:
                resp = self.client.put_object(
                    Bucket=self.bucket, Key=name, Body=data, Metadata={TOKEN_METADATA: token}
                )
            except Exception as err:
                raise self.translate_error(err, key, "put") from err
            return resp["ETag"]

        return self.retry(attempt)  # an unconditional put is safe to repeat

    def create(self, key: str, data: bytes) -> str:
        return self._conditional_put(key, data, None)

    def compare_and_swap(self, key: str, data: bytes, expected_version: str) -> str:
        return self._conditional_put(key, data, expected_version)

    def list(self, prefix: str = "") -> list[str]:
        full = self._object_prefix(prefix)
        cut = len(self._object_prefix(""))

        def attempt() -> list[str]:
            keys: list[str] = []
            try:
                pages = self.client.get_paginator("list_objects_v2").paginate(
                    Bucket=self.bucket, Prefix=full
                )
                for page in pages:
                    keys.extend(obj["Key"][cut:] for obj in page.get("Contents", []))
            except Exception as err:
                raise self.translate_error(err, prefix, LIST_OPERATION) from err
            return sorted(keys)

        return self.retry(attempt)

    def delete(self, key: str) -> None:
        name = self._object(key)

        def attempt() -> None:
            try:
                self.client.delete_object(Bucket=self.bucket, Key=name)
            except Exception as err:
                if _code(err) in ("NoSuchKey", "404"):
                    return
                raise self.translate_error(err, key, "delete") from err

        self.retry(attempt)

    def delete_many(self, keys: Iterable[str]) -> None:
        """Remove ``keys`` with one ``DeleteObjects`` request per 1000 keys."""
        wanted = list(keys)
        for start in range(0, len(wanted), 1000):
            batch = wanted[start : start + 1000]
            if len(batch) == 1:
                self.delete(batch[0])
                continue

            def attempt(batch: list[str] = batch) -> None:
                try:
                    resp = self.client.delete_objects(
                        Bucket=self.bucket,
                        Delete={
                            "Objects": [{"Key": self._object(k)} for k in batch],
                            "Quiet": True,
                        },
                    )
                except Exception as err:
                    raise self.translate_error(err, batch[0], "delete") from err
                failed = [e for e in resp.get("Errors", []) if e.get("Code") != "NoSuchKey"]
                if failed:
                    raise self._delete_failed(failed, len(batch))

            self.retry(attempt)

    # --- conditional writes --------------------------------------------------------

    def _conditional_put(self, key: str, data: bytes, expected: str | None) -> str:
        """``create`` (``expected`` None) or compare-and-swap; see "Unknown outcomes"."""
        name = self._object(key)
        token = uuid.uuid4().hex
        ambiguous = False  # an earlier attempt may have written

        def lost(actual: str | None, note: str = "") -> GtBarrierError:
            err: GtBarrierError = (
                KeyExists(self.uri, key)
                if expected is None
                else ConcurrentModification(self.uri, key, expected, actual)
            )
            if note:
                err.add_note(note)
            return err

        def resolve(first: Exception) -> str:
            """After a 412/409/404 that followed an ambiguous attempt: did we win?"""
            try:
                head = self.client.head_object(Bucket=self.bucket, Key=name)
            except Exception as err:
                if _code(err) in ("NoSuchKey", "404"):
                    raise lost(None, _SUPERSEDED) from first
                raise self.translate_error(err, key, "read back") from err
            if head.get("Metadata", {}).get(TOKEN_METADATA) == token:
                return head["ETag"]  # our earlier attempt did write
            raise lost(head["ETag"], _SUPERSEDED) from first

        def attempt() -> str:
            nonlocal ambiguous
            meta = {TOKEN_METADATA: token}
            try:
                if expected is None:
                    resp = self.client.put_object(
                        Bucket=self.bucket, Key=name, Body=data, Metadata=meta, IfNoneMatch="*"
                    )
                else:
                    resp = self.client.put_object(
                        Bucket=self.bucket, Key=name, Body=data, Metadata=meta, IfMatch=expected
                    )
            except Exception as err:
                code = _code(err)
                if (
                    code in _PRECONDITION
                    or _status(err) == 412
                    or (expected is not None and code in ("NoSuchKey", "404"))
                ):
                    if ambiguous:
                        return resolve(err)
                    raise lost(None) from None
                translated = self.translate_error(
                    err, key, "create" if expected is None else "compare-and-swap"
                )
                if translated.retriable and _may_have_written(err):
                    ambiguous = True
                raise translated from err
            return resp["ETag"]

        try:
            return self.retry(attempt)
        except StoreUnavailable as err:
            if not ambiguous:
                raise
            unknown = StoreWriteUnknown(
                self.uri,
                key,
                f"{'create' if expected is None else 'compare-and-swap'} may or may not have "
                f"taken effect: the connection failed after the request was sent, then {err}",
            )
            raise unknown from err

    # --- helpers -------------------------------------------------------------------

    def _object(self, key: str) -> str:
        check_key(self.uri, key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _object_prefix(self, prefix: str) -> str:
        return f"{self.prefix}/{prefix}" if self.prefix else prefix

    def translate_error(  # noqa: PLR0911 - one return per error class of the mapping
        self, err: Exception, key: str, operation: str | None = None
    ) -> GtBarrierError:
        """Map a boto3/transport error of ``operation`` (``"get"``, ``"put"``,
        ``"create"``, ``"compare-and-swap"``, ``"list"``, ``"delete"``, ``"read back"``;
        None: unknown) on ``key`` (a key, or for a listing its prefix) to the error
        hierarchy: :class:`StoreUnavailable` (retriable) for throttling, 5xx and transport
        failures; :class:`StoreConfigError` for a missing bucket or credentials, or a TLS
        certificate not trusted; :class:`StateError` for a refusal (naming the permission
        likely missing) and anything else. Code that calls :attr:`client` directly (the
        s3 consumer) raises what this returns, so both report failures alike."""
        code = _code(err)
        status = _status(err)
        if code == "NoSuchBucket":
            return StoreConfigError(
                "state.uri",
                self.uri,
                f"a bucket that exists: bucket '{self.bucket}' was not found at {self._where()}",
            )
        if isinstance(err, bce.NoCredentialsError | bce.PartialCredentialsError):
            return StoreConfigError(
                "s3.accessKeyId",
                None,
                f"credentials for {self.uri}: set s3.accessKeyId and s3.secretAccessKey or the "
                "AWS configuration chain (AWS_ACCESS_KEY_ID, AWS_PROFILE, ...)",
            )
        if isinstance(err, bce.ParamValidationError):
            return StoreConfigError("key", key, f"a key S3 accepts (store {self.uri}): {err}")
        untrusted = _certificate_not_trusted(err)
        if untrusted is not None:
            endpoint = _endpoint_of(err) or self._where()
            return StoreConfigError(
                "s3.caBundle",
                self.config.s3.ca_bundle,
                f"the CA that signed the TLS certificate of {endpoint}: that certificate was not "
                f"trusted ({untrusted}). Set s3.caBundle, or AWS_CA_BUNDLE, to a PEM file "
                "holding the CA that signed it",
                where=self.uri,
            )
        if isinstance(err, _UNSENT + _TRANSPORT):
            return StoreUnavailable(
                self.uri, key, f"{type(err).__name__} talking to {self._where()}: {err}"
            )
        if isinstance(err, bce.ClientError):
            message = err.response.get("Error", {}).get("Message", "")
            cause = f"{code} (HTTP {status}) from {self._where()}: {message}".rstrip(": ")
            if (
                code in _THROTTLING
                or code in _TRANSIENT
                or status == 429
                or (status is not None and status >= 500)
            ):
                return StoreUnavailable(self.uri, key, cause)
            if code in _DENIED:
                return StateError(self._refusal(operation, key, cause))
            if code in _BAD_CREDENTIALS:
                return StateError(
                    f"{self.uri}: {operation or 'access'} of key '{key}': the credentials were "
                    f"not accepted: {cause}. Check s3.accessKeyId and s3.secretAccessKey, or the "
                    "AWS configuration chain (AWS_ACCESS_KEY_ID, AWS_PROFILE, ...)"
                )
            return StateError(f"{self.uri}: key '{key}': {cause}")
        if isinstance(err, GtBarrierError):
            return err
        return StateError(f"{self.uri}: key '{key}': {type(err).__name__}: {err}")

    def _refusal(self, operation: str | None, key: str, cause: str) -> str:
        """What an ``AccessDenied`` of ``operation`` on ``key`` tells the operator."""
        if operation == LIST_OPERATION:
            prefix = self._object_prefix(key)
            return (
                f"{self.uri}: list of keys under '{key}' was refused: {cause.rstrip('.')}. "
                f"These credentials likely lack s3:ListBucket on arn:aws:s3:::{self.bucket} "
                f"with s3:prefix '{prefix}' (SeaweedFS: List:{self.bucket}/{prefix}); "
                "see docs/security.md"
            )
        if operation not in _PERMISSION:
            return f"{self.uri}: key '{key}': access refused: {cause}"
        permission, action = _PERMISSION[operation]
        name = f"{self.bucket}/{self._object(key)}"
        text = (
            f"{self.uri}: {operation} of key '{key}' was refused: {cause.rstrip('.')}. "
            f"These credentials likely lack {permission} on arn:aws:s3:::{name} "
            f"(SeaweedFS: {action}:{name})"
        )
        if permission == "s3:GetObject":
            text += (
                f"; on AWS a key that does not exist is refused the same way without "
                f"s3:ListBucket on arn:aws:s3:::{self.bucket}"
            )
        return text + "; see docs/security.md"

    def _delete_failed(self, failed: Sequence[Mapping[str, Any]], asked: int) -> StateError:
        """The error of a ``DeleteObjects`` whose answer lists keys it did not delete."""
        first = failed[0]
        name = str(first.get("Key", ""))
        key = name.removeprefix(self._object_prefix(""))
        cause = f"{first.get('Code')} {first.get('Message')}".rstrip(".")
        if first.get("Code") in _DENIED:
            return StateError(
                f"{self.uri}: delete of {len(failed)} of {asked} key(s) was refused, e.g. "
                f"'{key}': {cause}. These credentials likely lack s3:DeleteObject on "
                f"arn:aws:s3:::{self.bucket}/{name} (SeaweedFS: Write:{self.bucket}/{name}); "
                "see docs/security.md"
            )
        return StateError(
            f"{self.uri}: delete of {len(failed)} of {asked} key(s) failed, e.g. '{key}': {cause}"
        )

    def _where(self) -> str:
        s3 = self._s3
        return str(s3.meta.endpoint_url) if s3 is not None else "the S3 endpoint"


def _secret(value: str | None, option: str) -> str | None:
    """An explicit credential with its secret references (:mod:`state.secrets`) resolved
    here, where the client is made, so the options that travel and get logged keep the
    reference, never the secret; hidden from this process's log records, reference or
    not: botocore logs every request it signs at DEBUG, with an ``Authorization`` header
    that names the access key id."""
    return None if value is None else resolve_secret(value, option=option, where="state store")


class _Session:
    """A boto3 session and the lock its client creation needs (a session is not safe for
    concurrent client creation)."""

    def __init__(self) -> None:
        import boto3  # the first S3 client of the process pays for the import

        self.session = boto3.session.Session()
        self.lock = threading.Lock()


#: One boto3 session per process and ``AWS_*`` environment: a session caches the service
#: models, so every client after the first is cheap.
_sessions: ProcessCache[tuple[tuple[str, str], ...], _Session] = ProcessCache("boto3 sessions")


_SUPERSEDED = (
    "an earlier attempt of this write failed after it was sent; the key does not hold "
    "that write now (it never took effect, or another writer has replaced it since)"
)


def _code(err: Exception) -> str | None:
    if isinstance(err, bce.ClientError):
        return str(err.response.get("Error", {}).get("Code", "")) or None
    return None


def _status(err: Exception) -> int | None:
    if isinstance(err, bce.ClientError):
        status = err.response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        return int(status) if status is not None else None
    return None


def _certificate_not_trusted(err: Exception) -> str | None:
    """The reason a TLS certificate did not verify, if that is what ``err`` is: botocore's
    ``SSLError`` wraps urllib3's, which wraps :class:`ssl.SSLCertVerificationError`."""
    if not isinstance(err, bce.SSLError | urllib3.exceptions.SSLError | ssl.SSLError):
        return None
    seen: set[int] = set()
    stack: list[object] = [err]
    while stack:
        e = stack.pop()
        if not isinstance(e, BaseException) or id(e) in seen:
            continue
        seen.add(id(e))
        if isinstance(e, ssl.SSLCertVerificationError):
            return str(e)
        kwargs = getattr(e, "kwargs", None)
        nested = kwargs.get("error") if isinstance(kwargs, dict) else None
        stack.extend([e.__cause__, e.__context__, nested, *e.args])
    text = str(err)
    if "CERTIFICATE_VERIFY_FAILED" in text:
        return text[text.index("CERTIFICATE_VERIFY_FAILED") :]
    return None


def _endpoint_of(err: Exception) -> str | None:
    """``scheme://host:port`` of the URL a botocore error names, if it names one."""
    kwargs = getattr(err, "kwargs", None)
    url = kwargs.get("endpoint_url") if isinstance(kwargs, dict) else None
    if not isinstance(url, str):
        return None
    parsed = urlparse(url)
    return f"{parsed.scheme}://{parsed.netloc}" if parsed.netloc else None


def _may_have_written(err: Exception) -> bool:
    """False only when the request certainly never took effect."""
    if isinstance(err, _UNSENT):
        return False
    code = _code(err)
    return not (code in _THROTTLING or _status(err) in (429, 503))
