"""The store contract through :class:`~state.stores.s3_store.S3Store` on an in-memory fake S3
that answers as AWS does and as SeaweedFS does (``tests/s3_fake.py``).

The two differ on ``If-Match`` for a missing key (AWS: 404, SeaweedFS: 412); the store
must behave identically. The contract also runs against a real SeaweedFS and moto in
``integration_tests/test_stores.py``.
"""

from __future__ import annotations

import uuid

import pytest

from state.stores import S3Settings, StateStore, StoreConfig, new_store
from state.stores.s3_store import S3Store
from tests.s3_fake import FakeS3, Flavour
from tests.store_contract import StoreContract


class _FakeS3Contract(StoreContract):
    FLAVOUR: Flavour
    REWRITE_CHANGES_VERSION = False  # the ETag is the MD5 of the body
    RACE_ROUNDS = 50
    LIST_KEYS = 10  # four pages of FakeS3.page_size (3) keys

    @pytest.fixture
    def server(self, monkeypatch: pytest.MonkeyPatch) -> FakeS3:
        server = FakeS3(self.FLAVOUR)
        monkeypatch.setattr(S3Store, "_make_client", lambda _self: server.client())
        return server

    @pytest.fixture
    def store(self, server: FakeS3) -> StateStore:
        bucket = f"fake-{uuid.uuid4().hex[:12]}"  # a fresh bucket: no shared store is reused
        server.buckets[bucket] = {}
        config = StoreConfig(f"s3://{bucket}/state", S3Settings(endpoint="http://fake-s3.test"))
        return new_store(config)

    @pytest.fixture
    def other_store(self, store: StateStore) -> StateStore:
        return new_store(store.config)


class TestAwsAnswersContract(_FakeS3Contract):
    FLAVOUR = "aws"


class TestSeaweedFSAnswersContract(_FakeS3Contract):
    FLAVOUR = "seaweedfs"
