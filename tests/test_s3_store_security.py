"""``s3://`` refusals and TLS without a server: what a missing permission, bad credentials,
an untrusted certificate and ``s3.caBundle`` look like to the caller.

Each refusal is fatal (never retried) and names the operation, the key and the permission
likely missing, in AWS's terms and SeaweedFS's; the real servers are in
``integration_tests/test_s3_roles.py`` and ``integration_tests/test_s3_tls.py``.
"""

from __future__ import annotations

import ssl
from collections.abc import Callable
from pathlib import Path
from typing import Any

import botocore.exceptions as bce
import pytest

from state.errors import StateError, StoreConfigError, StoreUnavailable
from state.stores import STORE_OPTIONS, S3Settings, StoreConfig
from state.stores.s3_store import S3Store
from tests.test_s3_store import URI, FakeClient, Step, client_error, make

ARN = "arn:aws:s3:::bucket-a/pre/fix"


class ListingClient(FakeClient):
    """The fake client, with listings and batched deletes."""

    def delete_objects(self, **kw: Any) -> Any:
        return self._answer("delete_objects", kw)

    def get_paginator(self, name: str) -> Any:
        client = self

        class Paginator:
            def paginate(self, **kw: Any) -> Any:
                return [client._answer(name, kw)]

        return Paginator()


def denied(op: str) -> Exception:
    return client_error("AccessDenied", 403, op)


CASES: list[tuple[str, str, Callable[[S3Store], object], str, str]] = [
    ("get_object", "get", lambda s: s.get("p1/a.json"), "s3:GetObject", "Read"),
    ("put_object", "put", lambda s: s.put("p1/a.json", b"x"), "s3:PutObject", "Write"),
    ("put_object", "create", lambda s: s.create("p1/a.json", b"x"), "s3:PutObject", "Write"),
    (
        "put_object",
        "compare-and-swap",
        lambda s: s.compare_and_swap("p1/a.json", b"x", '"v1"'),
        "s3:PutObject",
        "Write",
    ),
    ("delete_object", "delete", lambda s: s.delete("p1/a.json"), "s3:DeleteObject", "Write"),
]


@pytest.mark.parametrize(("op", "operation", "call", "permission", "weed"), CASES)
def test_access_denied_names_the_operation_the_key_and_the_permission(
    op: str, operation: str, call: Callable[[S3Store], object], permission: str, weed: str
) -> None:
    steps: list[Step] = [denied(op)]
    fake = ListingClient(**{op: steps})
    store, sleeps = make(fake)
    with pytest.raises(StateError) as info:
        call(store)
    message = str(info.value)
    assert f"{operation} of key 'p1/a.json'" in message and "AccessDenied" in message
    assert f"{permission} on {ARN}/p1/a.json" in message
    assert f"SeaweedFS: {weed}:bucket-a/pre/fix/p1/a.json" in message
    assert not info.value.retriable and len(fake.calls) == 1 and not sleeps.sleeps
    if operation == "get":  # AWS refuses a GET of a missing key without s3:ListBucket
        assert "s3:ListBucket" in message


def test_a_refused_listing_names_the_prefix_and_s3_list_bucket() -> None:
    fake = ListingClient(list_objects_v2=[denied("ListObjectsV2")])
    store, _ = make(fake)
    with pytest.raises(StateError) as info:
        store.list("p1/epochs/")
    message = str(info.value)
    assert "list of keys under 'p1/epochs/'" in message
    assert "s3:ListBucket on arn:aws:s3:::bucket-a with s3:prefix 'pre/fix/p1/epochs/'" in message
    assert "SeaweedFS: List:bucket-a/pre/fix/p1/epochs/" in message
    assert not info.value.retriable and len(fake.calls) == 1


def test_keys_a_batched_delete_refused_are_named_with_the_permission() -> None:
    errors = {
        "Errors": [
            {"Key": "pre/fix/p1/staging/b", "Code": "AccessDenied", "Message": "Access Denied."}
        ]
    }
    fake = ListingClient(delete_objects=[lambda kw: errors])
    store, _ = make(fake)
    with pytest.raises(StateError) as info:
        store.delete_many(["p1/staging/a", "p1/staging/b"])
    message = str(info.value)
    assert "delete of 1 of 2 key(s)" in message and "'p1/staging/b'" in message
    assert f"s3:DeleteObject on {ARN}/p1/staging/b" in message
    assert not info.value.retriable


def test_bad_credentials_are_not_a_missing_permission() -> None:
    fake = ListingClient(get_object=[client_error("InvalidAccessKeyId", 403, "GetObject")])
    store, _ = make(fake)
    with pytest.raises(StateError) as info:
        store.get("p1/a.json")
    message = str(info.value)
    assert "InvalidAccessKeyId" in message and "s3.accessKeyId" in message
    assert "s3:GetObject" not in message and not info.value.retriable


def untrusted(endpoint: str) -> Exception:
    reason = ssl.SSLCertVerificationError(
        1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed: self-signed certificate"
    )
    return bce.SSLError(endpoint_url=endpoint, error=reason)


def test_an_untrusted_certificate_is_fatal_and_names_the_endpoint_and_the_ca_option() -> None:
    fake = ListingClient(get_object=[untrusted("https://s3.test:9443/bucket-a/pre/fix/p1/a")])
    store, sleeps = make(fake)
    with pytest.raises(StoreConfigError) as info:
        store.get("p1/a.json")
    message = str(info.value)
    assert info.value.option == "s3.caBundle" and not info.value.retriable
    assert "https://s3.test:9443" in message and "not trusted" in message
    assert "AWS_CA_BUNDLE" in message and "CERTIFICATE_VERIFY_FAILED" in message
    assert len(fake.calls) == 1 and not sleeps.sleeps  # not retried: it would never pass


def test_other_tls_failures_stay_retriable() -> None:
    eof = bce.SSLError(endpoint_url="https://s3.test", error=ssl.SSLEOFError(8, "EOF occurred"))
    fake = ListingClient(get_object=[eof, lambda kw: {"Body": _Body(b"v"), "ETag": '"e"'}])
    store, sleeps = make(fake)
    assert store.get("p1/a.json").data == b"v"
    assert len(sleeps.sleeps) == 1
    fake = ListingClient(put_object=[eof] * 4)
    store, _ = make(fake)
    with pytest.raises(StoreUnavailable):
        store.put("p1/a.json", b"x")


class _Body:
    def __init__(self, data: bytes) -> None:
        self.data = data

    def read(self) -> bytes:
        return self.data


def test_ca_bundle_is_an_option_given_to_the_client(tmp_path: Path) -> None:
    assert "s3.caBundle" in STORE_OPTIONS.names()
    pem = tmp_path / "ca.pem"
    pem.write_text("-----BEGIN CERTIFICATE-----\n")
    config = StoreConfig.from_options({"state.uri": URI, "s3.caBundle": str(pem)})
    assert config.s3.ca_bundle == str(pem)
    settings = S3Settings(endpoint="https://127.0.0.1:9", region="us-east-1", ca_bundle=str(pem))
    assert S3Store(StoreConfig(URI, settings)).ca_bundle() == str(pem)
    plain = S3Store(StoreConfig(URI, S3Settings(endpoint="https://127.0.0.1:9")))
    assert plain.ca_bundle() is None  # boto3 then takes AWS_CA_BUNDLE, else its default


def test_a_ca_bundle_that_is_not_a_file_is_a_config_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-ca.pem"
    store = S3Store(
        StoreConfig(URI, S3Settings(endpoint="https://127.0.0.1:9", ca_bundle=str(missing)))
    )
    with pytest.raises(StoreConfigError) as info:
        store.get("p1/a.json")
    assert info.value.option == "s3.caBundle" and str(missing) in str(info.value)
