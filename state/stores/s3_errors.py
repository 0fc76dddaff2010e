"""The S3 store's errors: what botocore and the transport raise, as gtbarrier's errors.

Pure functions of the error, of what the store knows of where its request went
(:class:`S3Target`: the store's URI, bucket, key prefix, endpoint and ``s3.caBundle``) and
of the operation and the key that failed. :class:`~state.stores.s3_store.S3Store` raises
what :func:`translate_error` returns, and so does the s3 consumer, which calls the store's
client directly (through ``S3Store.translate_error``): both report failures alike.

* Retriable (:class:`StoreUnavailable`): throttling (429/503 SlowDown), 5xx, connection
  failures and timeouts; the store's retry policy retries them until its deadline.
  :func:`may_have_written` tells a failure after which a write may have happened.
* Refusals: an ``AccessDenied`` is fatal (never retried): a :class:`StateError` naming the
  operation (get, put, create, compare-and-swap, list, delete), the key (or the listed
  prefix) and the permission the credentials likely lack, as AWS names it with the
  resource ARN (``s3:PutObject on arn:aws:s3:::bucket/prefix/key``) and as a SeaweedFS
  identity action (``Write:bucket/prefix/key``); docs/security.md has each role's
  policy. Credentials the server does not accept (``InvalidAccessKeyId``...) are told
  apart from a missing permission.
* TLS: a certificate that does not verify is a fatal :class:`StoreConfigError` naming
  ``s3.caBundle``, the endpoint and the reason: retrying cannot make it trusted. Other
  TLS failures (a handshake cut short) are transport failures and retried.
* Configuration: a bucket that does not exist, no credentials, a key S3 does not accept:
  a :class:`StoreConfigError` naming the option.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import botocore.exceptions as bce
import urllib3.exceptions

from state.errors import GtBarrierError, StateError, StoreConfigError, StoreUnavailable

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
PRECONDITION = {"PreconditionFailed", "ConditionalRequestConflict"}
"""The codes of a conditional write whose condition did not hold (a lost race)."""
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


@dataclass(frozen=True)
class S3Target:
    """What the store knows of where a failed request went."""

    uri: str
    bucket: str
    key_prefix: str
    """What the store puts before a key to name its object (``<prefix>/``, or empty)."""
    endpoint: str
    """The client's endpoint URL (or ``the S3 endpoint`` before a client was made)."""
    ca_bundle: str | None
    """``s3.caBundle``."""


def translate_error(  # noqa: PLR0911 - one return per error class of the mapping
    err: Exception, target: S3Target, key: str, operation: str | None = None
) -> GtBarrierError:
    """Map a boto3/transport error of ``operation`` (``"get"``, ``"put"``,
    ``"create"``, ``"compare-and-swap"``, ``"list"``, ``"delete"``, ``"read back"``;
    None: unknown) on ``key`` (a key, or for a listing its prefix) to the error
    hierarchy: :class:`StoreUnavailable` (retriable) for throttling, 5xx and transport
    failures; :class:`StoreConfigError` for a missing bucket or credentials, or a TLS
    certificate not trusted; :class:`StateError` for a refusal (naming the permission
    likely missing) and anything else."""
    code = error_code(err)
    status = http_status(err)
    if code == "NoSuchBucket":
        return StoreConfigError(
            "state.uri",
            target.uri,
            f"a bucket that exists: bucket '{target.bucket}' was not found at {target.endpoint}",
        )
    if isinstance(err, bce.NoCredentialsError | bce.PartialCredentialsError):
        return StoreConfigError(
            "s3.accessKeyId",
            None,
            f"credentials for {target.uri}: set s3.accessKeyId and s3.secretAccessKey or the "
            "AWS configuration chain (AWS_ACCESS_KEY_ID, AWS_PROFILE, ...)",
        )
    if isinstance(err, bce.ParamValidationError):
        return StoreConfigError("key", key, f"a key S3 accepts (store {target.uri}): {err}")
    untrusted = _certificate_not_trusted(err)
    if untrusted is not None:
        endpoint = _endpoint_of(err) or target.endpoint
        return StoreConfigError(
            "s3.caBundle",
            target.ca_bundle,
            f"the CA that signed the TLS certificate of {endpoint}: that certificate was not "
            f"trusted ({untrusted}). Set s3.caBundle, or AWS_CA_BUNDLE, to a PEM file "
            "holding the CA that signed it",
            where=target.uri,
        )
    if isinstance(err, _UNSENT + _TRANSPORT):
        return StoreUnavailable(
            target.uri, key, f"{type(err).__name__} talking to {target.endpoint}: {err}"
        )
    if isinstance(err, bce.ClientError):
        message = err.response.get("Error", {}).get("Message", "")
        cause = f"{code} (HTTP {status}) from {target.endpoint}: {message}".rstrip(": ")
        if (
            code in _THROTTLING
            or code in _TRANSIENT
            or status == 429
            or (status is not None and status >= 500)
        ):
            return StoreUnavailable(target.uri, key, cause)
        if code in _DENIED:
            return StateError(_refusal(target, operation, key, cause))
        if code in _BAD_CREDENTIALS:
            return StateError(
                f"{target.uri}: {operation or 'access'} of key '{key}': the credentials were "
                f"not accepted: {cause}. Check s3.accessKeyId and s3.secretAccessKey, or the "
                "AWS configuration chain (AWS_ACCESS_KEY_ID, AWS_PROFILE, ...)"
            )
        return StateError(f"{target.uri}: key '{key}': {cause}")
    if isinstance(err, GtBarrierError):
        return err
    return StateError(f"{target.uri}: key '{key}': {type(err).__name__}: {err}")


def _refusal(target: S3Target, operation: str | None, key: str, cause: str) -> str:
    """What an ``AccessDenied`` of ``operation`` on ``key`` tells the operator."""
    if operation == LIST_OPERATION:
        prefix = target.key_prefix + key
        return (
            f"{target.uri}: list of keys under '{key}' was refused: {cause.rstrip('.')}. "
            f"These credentials likely lack s3:ListBucket on arn:aws:s3:::{target.bucket} "
            f"with s3:prefix '{prefix}' (SeaweedFS: List:{target.bucket}/{prefix}); "
            "see docs/security.md"
        )
    if operation not in _PERMISSION:
        return f"{target.uri}: key '{key}': access refused: {cause}"
    permission, action = _PERMISSION[operation]
    name = f"{target.bucket}/{target.key_prefix}{key}"
    text = (
        f"{target.uri}: {operation} of key '{key}' was refused: {cause.rstrip('.')}. "
        f"These credentials likely lack {permission} on arn:aws:s3:::{name} "
        f"(SeaweedFS: {action}:{name})"
    )
    if permission == "s3:GetObject":
        text += (
            f"; on AWS a key that does not exist is refused the same way without "
            f"s3:ListBucket on arn:aws:s3:::{target.bucket}"
        )
    return text + "; see docs/security.md"


def delete_failed(target: S3Target, failed: Sequence[Mapping[str, Any]], asked: int) -> StateError:
    """The error of a ``DeleteObjects`` of ``asked`` keys whose answer lists ``failed``, the
    keys it did not delete."""
    first = failed[0]
    name = str(first.get("Key", ""))
    key = name.removeprefix(target.key_prefix)
    cause = f"{first.get('Code')} {first.get('Message')}".rstrip(".")
    if first.get("Code") in _DENIED:
        return StateError(
            f"{target.uri}: delete of {len(failed)} of {asked} key(s) was refused, e.g. "
            f"'{key}': {cause}. These credentials likely lack s3:DeleteObject on "
            f"arn:aws:s3:::{target.bucket}/{name} (SeaweedFS: Write:{target.bucket}/{name}); "
            "see docs/security.md"
        )
    return StateError(
        f"{target.uri}: delete of {len(failed)} of {asked} key(s) failed, e.g. '{key}': {cause}"
    )


def error_code(err: Exception) -> str | None:
    """The S3 error code of a botocore ``ClientError`` (None for any other error)."""
    if isinstance(err, bce.ClientError):
        return str(err.response.get("Error", {}).get("Code", "")) or None
    return None


def http_status(err: Exception) -> int | None:
    """The HTTP status of a botocore ``ClientError`` (None for any other error)."""
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


def may_have_written(err: Exception) -> bool:
    """False only when the request certainly never took effect."""
    if isinstance(err, _UNSENT):
        return False
    code = error_code(err)
    return not (code in _THROTTLING or http_status(err) in (429, 503))
