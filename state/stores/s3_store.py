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
* Configuration: explicit :class:`~state.stores.state_store.S3Settings` win; anything left unset
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
* Every write sends ``Content-MD5``, so a server refuses a request whose body did not
  arrive whole. An empty object that a writer of an earlier release left (its request's
  head stored without its body) is completed by the next ``create`` of its key
  (:meth:`S3Store._complete_cut_off`).

* Errors (:mod:`state.stores.s3_errors`): an ``AccessDenied`` is fatal, naming the
  operation, the key and the permission the credentials likely lack; credentials the
  server does not accept are told apart; a TLS certificate that does not verify is a fatal
  :class:`StoreConfigError` naming ``s3.caBundle``.
* TLS: an ``https://`` endpoint's certificate is checked against ``s3.caBundle`` (a PEM
  file), else ``AWS_CA_BUNDLE``, else botocore's bundle.

The boto3 client is created on first use and dropped when the store is pickled. Clients
come from one boto3 session per process (and ``AWS_*`` environment), which loads the S3
service model once: the first client of a process costs 0.1-0.5 s, later ones a few
milliseconds. boto3 itself is imported with the first client. A store used in a process
forked after its client was made builds a new client there (connections are not
fork-safe).
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import threading
import uuid
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from botocore.config import Config as BotoConfig

from state.errors import (
    ConcurrentModification,
    GtBarrierError,
    KeyExists,
    KeyNotFound,
    StoreConfigError,
    StoreUnavailable,
    StoreWriteUnknown,
)
from state.process_cache import ProcessCache
from state.retry import Retry
from state.secrets import resolve_secret
from state.stores.s3_errors import (
    LIST_OPERATION,
    PRECONDITION,
    S3Target,
    delete_failed,
    error_code,
    http_status,
    may_have_written,
    translate_error,
)
from state.stores.state_store import (
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

_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")


class S3Store(StateStore):
    """A :class:`~state.stores.state_store.StateStore` on S3; see the module docstring.

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
        if not _BUCKET.fullmatch(self.bucket) or ".." in self.bucket:
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
                if error_code(err) in ("NoSuchKey", "404"):
                    raise KeyNotFound(self.uri, key) from None
                raise self.translate_error(err, key, "get") from err
            return Versioned(data, resp["ETag"])

        return self.retry(attempt)

    def put(self, key: str, data: bytes) -> str:
        name = self._object(key)
        token = uuid.uuid4().hex
        digest = content_md5(data)

        def attempt() -> str:
            try:
                etag = self._put_object(name, data, digest, token)
            except Exception as err:
                raise self.translate_error(err, key, "put") from err
            return etag

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
                if error_code(err) in ("NoSuchKey", "404"):
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
                    raise delete_failed(self._target(), failed, len(batch))

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
                if error_code(err) in ("NoSuchKey", "404"):
                    raise lost(None, _SUPERSEDED) from first
                raise self.translate_error(err, key, "read back") from err
            if head.get("Metadata", {}).get(TOKEN_METADATA) == token:
                return head["ETag"]  # our earlier attempt did write
            raise lost(head["ETag"], _SUPERSEDED) from first

        digest = content_md5(data)

        def attempt() -> str:
            nonlocal ambiguous
            try:
                if expected is None:
                    etag = self._put_object(name, data, digest, token, IfNoneMatch="*")
                else:
                    etag = self._put_object(name, data, digest, token, IfMatch=expected)
            except Exception as err:
                code = error_code(err)
                if (
                    code in PRECONDITION
                    or http_status(err) == 412
                    or (expected is not None and code in ("NoSuchKey", "404"))
                ):
                    if ambiguous:
                        return resolve(err)
                    if expected is None and data:
                        completed = self._complete_cut_off(name, key, data, digest, token)
                        if completed is not None:
                            return completed
                    raise lost(None) from None
                translated = self.translate_error(
                    err, key, "create" if expected is None else "compare-and-swap"
                )
                if translated.retriable and may_have_written(err):
                    ambiguous = True
                raise translated from err
            return etag

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

    def _put_object(self, name: str, data: bytes, digest: str, token: str, **condition: str) -> str:
        """One ``PutObject`` of ``data`` under ``condition`` (``IfNoneMatch`` / ``IfMatch``,
        or none), naming its body's MD5 and tagged with the write's token; its ETag."""
        client: Any = self.client  # the conditions are keyword arguments the stubs list apart
        resp = client.put_object(
            Bucket=self.bucket,
            Key=name,
            Body=data,
            ContentMD5=digest,
            Metadata={TOKEN_METADATA: token},
            **condition,
        )
        return str(resp["ETag"])

    def _complete_cut_off(
        self, name: str, key: str, data: bytes, digest: str, token: str
    ) -> str | None:
        """After a create found ``key`` taken: if the object there is empty and tagged as a
        gtbarrier write, replace it with ``data`` (conditioned on its ETag) and return the
        new ETag; otherwise None (the key is taken).

        Such an object holds no record: its writer's request head arrived and its body
        never did, which a server that ignores a missing body stored as empty (SeaweedFS,
        before this store sent ``Content-MD5``). Every record gtbarrier creates is
        non-empty, so no reader can have taken it for one, and completing it is what the
        writer itself would have done; the replay that creates the key again repairs it.
        Losing the swap to another writer leaves that writer's value, and the key taken.
        """

        def read_head() -> dict[str, Any] | None:
            try:
                return dict(self.client.head_object(Bucket=self.bucket, Key=name))
            except Exception as err:
                if error_code(err) in ("NoSuchKey", "404"):
                    return None
                if http_status(err) == 403:
                    # A writer that may create but not read cannot tell; the key stays
                    # taken, as it was before this check, and a read of the record by
                    # the caller fails naming the permission (a HEAD's 403 has no body).
                    return None
                raise self.translate_error(err, key, "read back") from err

        head = self.retry(read_head)
        if head is None:
            return None
        if head.get("ContentLength") != 0 or TOKEN_METADATA not in head.get("Metadata", {}):
            return None
        try:
            etag = self._put_object(name, data, digest, token, IfMatch=head["ETag"])
        except Exception as err:
            code = error_code(err)
            if code in PRECONDITION or http_status(err) == 412 or code in ("NoSuchKey", "404"):
                return None
            raise self.translate_error(err, key, "create") from err
        return etag

    # --- helpers -------------------------------------------------------------------

    def _object(self, key: str) -> str:
        check_key(self.uri, key)
        return f"{self.prefix}/{key}" if self.prefix else key

    def _object_prefix(self, prefix: str) -> str:
        return f"{self.prefix}/{prefix}" if self.prefix else prefix

    def translate_error(
        self, err: Exception, key: str, operation: str | None = None
    ) -> GtBarrierError:
        """Map a boto3/transport error of ``operation`` (``"get"``, ``"put"``,
        ``"create"``, ``"compare-and-swap"``, ``"list"``, ``"delete"``, ``"read back"``;
        None: unknown) on ``key`` (a key, or for a listing its prefix) to the error
        hierarchy: :class:`StoreUnavailable` (retriable) for throttling, 5xx and transport
        failures; :class:`StoreConfigError` for a missing bucket or credentials, or a TLS
        certificate not trusted; :class:`StateError` for a refusal (naming the permission
        likely missing) and anything else (:func:`state.stores.s3_errors.translate_error`).
        Code that calls :attr:`client` directly (the s3 consumer) raises what this returns,
        so both report failures alike."""
        return translate_error(err, self._target(), key, operation)

    def _target(self) -> S3Target:
        """What this store knows of where its requests go, for its errors."""
        return S3Target(
            uri=self.uri,
            bucket=self.bucket,
            key_prefix=self._object_prefix(""),
            endpoint=self._where(),
            ca_bundle=self.config.s3.ca_bundle,
        )

    def _where(self) -> str:
        s3 = self._s3
        return str(s3.meta.endpoint_url) if s3 is not None else "the S3 endpoint"


def content_md5(data: bytes) -> str:
    """``Content-MD5`` for a write of ``data``: a server must refuse a request whose body
    does not match it. Without it, SeaweedFS stores a request cut off after its head (a
    writer killed while its client waited for ``100 Continue``) as an empty object, which
    a conditional write's retry would then take for its own."""
    return base64.b64encode(hashlib.md5(data, usedforsecurity=False).digest()).decode("ascii")


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
