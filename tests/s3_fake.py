"""An in-memory S3 "server" that answers boto3 calls as AWS or as SeaweedFS does.

It lets the store contract (``tests/store_contract.py``) run through
:class:`~state.stores.s3_store.S3Store` without a server, under both answers to a conditional
``PutObject`` with ``If-Match`` on a missing key: AWS (and moto) say ``404 NoSuchKey``,
SeaweedFS says ``412 PreconditionFailed``. Everything else follows S3: the ETag is the
quoted MD5 of the body, a ``Content-MD5`` that is not the body's is ``400 BadDigest``,
``If-None-Match: *`` fails with 412 on an existing key, a delete
of a missing key succeeds, and ``ListObjectsV2`` pages (with a small page size here, so
that the store's pagination is exercised). Only the calls :class:`S3Store` makes exist.
"""

from __future__ import annotations

import base64
import hashlib
import io
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal

import botocore.exceptions as bce

Flavour = Literal["aws", "seaweedfs"]


def client_error(code: str, status: int, op: str) -> bce.ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": f"{code} (fake S3)"},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return bce.ClientError(response, op)


@dataclass
class FakeS3:
    """The server: buckets of ``key -> (body, etag, metadata)``, one lock for all."""

    flavour: Flavour
    page_size: int = 3
    buckets: dict[str, dict[str, tuple[bytes, str, dict[str, str]]]] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def client(self) -> FakeS3Client:
        return FakeS3Client(self)


class FakeS3Client:
    """What :class:`~state.stores.s3_store.S3Store` calls on a boto3 S3 client."""

    class meta:  # noqa: N801 - mimics boto3's client.meta
        endpoint_url = "http://fake-s3.test"

    def __init__(self, server: FakeS3) -> None:
        self.server = server

    def _bucket(self, name: str, op: str) -> dict[str, tuple[bytes, str, dict[str, str]]]:
        try:
            return self.server.buckets[name]
        except KeyError:
            raise client_error("NoSuchBucket", 404, op) from None

    def put_object(
        self,
        *,
        Bucket: str,
        Key: str,
        Body: bytes,
        ContentMD5: str | None = None,
        Metadata: dict[str, str] | None = None,
        IfNoneMatch: str | None = None,
        IfMatch: str | None = None,
    ) -> dict[str, Any]:
        digest = hashlib.md5(Body).digest()
        if ContentMD5 is not None and base64.b64decode(ContentMD5) != digest:
            raise client_error("BadDigest", 400, "PutObject")
        etag = f'"{digest.hex()}"'
        with self.server.lock:
            objects = self._bucket(Bucket, "PutObject")
            current = objects.get(Key)
            if IfNoneMatch == "*" and current is not None:
                raise client_error("PreconditionFailed", 412, "PutObject")
            if IfMatch is not None:
                if current is None:
                    if self.server.flavour == "aws":
                        raise client_error("NoSuchKey", 404, "PutObject")
                    raise client_error("PreconditionFailed", 412, "PutObject")
                if current[1].strip('"') != IfMatch.strip('"'):
                    raise client_error("PreconditionFailed", 412, "PutObject")
            objects[Key] = (bytes(Body), etag, dict(Metadata or {}))
        return {"ETag": etag}

    def get_object(self, *, Bucket: str, Key: str) -> dict[str, Any]:
        with self.server.lock:
            found = self._bucket(Bucket, "GetObject").get(Key)
        if found is None:
            raise client_error("NoSuchKey", 404, "GetObject")
        return {"Body": io.BytesIO(found[0]), "ETag": found[1], "Metadata": dict(found[2])}

    def head_object(self, *, Bucket: str, Key: str) -> dict[str, Any]:
        with self.server.lock:
            found = self._bucket(Bucket, "HeadObject").get(Key)
        if found is None:
            raise client_error("404", 404, "HeadObject")
        return {"ETag": found[1], "Metadata": dict(found[2])}

    def delete_object(self, *, Bucket: str, Key: str) -> dict[str, Any]:
        with self.server.lock:
            self._bucket(Bucket, "DeleteObject").pop(Key, None)
        return {}

    def delete_objects(self, *, Bucket: str, Delete: dict[str, Any]) -> dict[str, Any]:
        with self.server.lock:
            objects = self._bucket(Bucket, "DeleteObjects")
            for entry in Delete["Objects"]:
                objects.pop(entry["Key"], None)
        return {}

    def get_paginator(self, op: str) -> FakePaginator:
        assert op == "list_objects_v2", op
        return FakePaginator(self)

    def close(self) -> None:
        pass


class FakePaginator:
    def __init__(self, client: FakeS3Client) -> None:
        self.client = client

    def paginate(self, *, Bucket: str, Prefix: str = "") -> Iterator[dict[str, Any]]:
        """Pages of ``page_size`` keys in S3's (byte) order; an empty listing is one page
        without ``Contents``."""
        server = self.client.server
        with server.lock:
            keys = sorted(
                k for k in self.client._bucket(Bucket, "ListObjectsV2") if k.startswith(Prefix)
            )
        if not keys:
            yield {"KeyCount": 0}
            return
        for start in range(0, len(keys), server.page_size):
            page = keys[start : start + server.page_size]
            yield {"KeyCount": len(page), "Contents": [{"Key": k} for k in page]}
