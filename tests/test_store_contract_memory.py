"""The store contract against ``memory://`` and ``file://`` (no servers), plus URI parsing.

The same :class:`tests.store_contract.StoreContract` runs against a real S3 server in
``integration_tests/test_stores.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from state.errors import ConfigError, StoreConfigError
from state.stores import (
    S3Settings,
    StateStore,
    StoreConfig,
    new_store,
    open_store,
    validate_uri,
)
from state.stores.file_store import FileStore
from state.stores.memory_store import MemoryStore
from tests.store_contract import StoreContract


class TestMemoryStoreContract(StoreContract):
    @pytest.fixture
    def store(self, store: StateStore) -> StateStore:
        assert isinstance(store, MemoryStore)
        return store

    @pytest.fixture
    def other_store(self, store: StateStore) -> StateStore:
        return open_store(store.config)


class TestFileStoreContract(StoreContract):
    @pytest.fixture
    def store(self, tmp_path: Path) -> StateStore:
        s = open_store(f"file://{tmp_path}/state root")  # a space: paths are taken literally
        assert isinstance(s, FileStore)
        return s

    @pytest.fixture
    def other_store(self, store: StateStore) -> StateStore:
        return new_store(StoreConfig(store.uri))  # not the shared instance: independent


# --- URIs and options --------------------------------------------------------------


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        (
            "ftp://host/x",
            "memory://name, file:///absolute/path, s3://bucket[/prefix] (or s3a://), "
            "gs://bucket[/prefix] "
            "or az://",
        ),
        (
            "/just/a/path",
            "memory://name, file:///absolute/path, s3://bucket[/prefix] (or s3a://), "
            "gs://bucket[/prefix] "
            "or az://",
        ),
        ("file://relative/path", "file:///absolute/path (three slashes)"),
        ("file:relative", "file:///absolute/path (three slashes)"),
        ("s3:///no-bucket", "s3://bucket[/prefix] with a bucket name"),
        ("", "a store URI"),
    ],
)
def test_bad_uri_names_option_and_value(uri: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        StoreConfig.from_options({"state.uri": uri}, default_uri=None)
    text = str(info.value)
    assert "'state.uri'" in text
    assert expected in text
    if uri:
        assert repr(uri) in text
        with pytest.raises(StoreConfigError):
            open_store(uri)


def test_missing_uri_names_the_option() -> None:
    with pytest.raises(ConfigError) as info:
        StoreConfig.from_options({})
    assert "'state.uri' = <missing>" in str(info.value)


def test_uri_option_name_is_reported_as_given() -> None:
    with pytest.raises(ConfigError) as info:
        StoreConfig.from_options({"consumer.uri": "nope://x"}, uri_option="consumer.uri")
    assert "'consumer.uri' = 'nope://x'" in str(info.value)


def test_s3_options_are_parsed_once_into_settings() -> None:
    config = StoreConfig.from_options(
        {
            "state.URI": "s3://bucket/some/prefix/",
            "s3.endpoint": "http://127.0.0.1:9000",
            "S3.Region": "eu-west-1",
            "s3.accessKeyId": "AK",
            "s3.secretAccessKey": "SK",
            "s3.pathStyle": "false",
        }
    )
    assert config.uri == "s3://bucket/some/prefix"
    assert config.s3 == S3Settings("http://127.0.0.1:9000", "eu-west-1", "AK", "SK", False)
    assert "SK" not in repr(config)


def test_bad_path_style_names_the_option() -> None:
    with pytest.raises(ConfigError) as info:
        StoreConfig.from_options({"state.uri": "s3://b", "s3.pathStyle": "sometimes"})
    assert "'s3.pathStyle' = 'sometimes'" in str(info.value)
    assert "true or false" in str(info.value)


def test_validate_uri_accepts_the_three_schemes() -> None:
    for uri in ("memory://x", "file:///tmp/x", "file://localhost/tmp/x", "s3://b", "s3://b/p/q"):
        validate_uri(uri)
