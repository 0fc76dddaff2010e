"""The ``gs://`` and ``az://`` stores' URIs and options, refused before any request.

Their behaviour against a server is in ``integration_tests/test_cloud_stores.py`` (the store
contract on fake-gcs-server and Azurite).
"""

from __future__ import annotations

import logging
import pickle
import sys
from pathlib import Path

import pytest

from datasource.options import SOURCE_OPTIONS
from sink.options import SINK_OPTIONS
from state.errors import ConfigError, StoreConfigError
from state.stores import (
    STORE_OPTIONS,
    AzureSettings,
    GcsSettings,
    StoreConfig,
    new_store,
    open_store,
)
from state.stores.azure_store import AzureStore, SettledBatch, settle_batch
from state.stores.gcs_store import GcsStore

KEY = "c2VjcmV0LWFjY291bnQta2V5LW9mLWF6dXJl"


@pytest.mark.parametrize(
    ("uri", "expected"),
    [
        ("gs://", "gs://bucket[/prefix] with a bucket name"),
        ("gs://B/state", "a valid bucket name"),
        ("gs://ab/state", "a valid bucket name"),
        ("az://", "az://container[/prefix] with a container name"),
        ("az://Upper/state", "a valid container name"),
        ("az://a--b/state", "a valid container name"),
        ("abfss://c@acct.dfs.core.windows.net/state", "az://container[/prefix]"),
        ("wasbs://c@acct.blob.core.windows.net/state", "az://container[/prefix]"),
    ],
)
def test_bad_cloud_uris_are_refused_naming_state_uri(uri: str, expected: str) -> None:
    with pytest.raises(StoreConfigError) as info:
        new_store(StoreConfig(uri, azure=AzureSettings(account_name="acct", account_key=KEY)))
    assert info.value.option == "state.uri"
    assert repr(uri) in str(info.value) and expected in str(info.value)


def test_the_stores_parse_bucket_container_and_prefix() -> None:
    gcs = new_store(StoreConfig("gs://my-bucket/a/b", gcs=GcsSettings(anonymous=True)))
    assert isinstance(gcs, GcsStore) and (gcs.bucket, gcs.prefix) == ("my-bucket", "a/b")
    settings = AzureSettings(account_name="acct", account_key=KEY)
    az = new_store(StoreConfig("az://my-container", azure=settings))
    assert isinstance(az, AzureStore) and (az.container, az.prefix) == ("my-container", "")
    assert az.account_url == "https://acct.blob.core.windows.net"


@pytest.mark.parametrize(
    ("settings", "option", "expected"),
    [
        (AzureSettings(account_key=KEY), "azure.accountName", "the storage account's name"),
        (
            AzureSettings(account_name="acct"),
            "azure.accountKey",
            "azure.accountKey or azure.sasToken",
        ),
        (
            AzureSettings(account_name="acct", account_key=KEY, sas_token="sv=1&sig=x"),
            "azure.sasToken",
            "azure.accountKey or azure.sasToken, not both",
        ),
        (AzureSettings(account_name="Bad_Name", account_key=KEY), "azure.accountName", "3-24"),
        (
            AzureSettings(account_name="acct", account_key=KEY, endpoint="ftp://x"),
            "azure.endpoint",
            "an http:// or https:// URL",
        ),
    ],
)
def test_azure_settings_are_checked(settings: AzureSettings, option: str, expected: str) -> None:
    with pytest.raises(StoreConfigError) as info:
        AzureStore(StoreConfig("az://state-container/x", azure=settings))
    assert info.value.option == option
    assert expected in str(info.value)
    assert KEY not in str(info.value)


def test_gcs_settings_are_checked(tmp_path: Path) -> None:
    both = GcsSettings(anonymous=True, credentials_file=str(tmp_path / "key.json"))
    with pytest.raises(StoreConfigError) as info:
        GcsStore(StoreConfig("gs://state-bucket/x", gcs=both))
    assert info.value.option == "gcs.anonymous" and "not both" in str(info.value)

    missing = GcsStore(
        StoreConfig("gs://state-bucket/x", gcs=GcsSettings(credentials_file=str(tmp_path / "no")))
    )
    with pytest.raises(StoreConfigError) as info:
        missing.put("k", b"x")  # the file is read where the client is made
    assert info.value.option == "gcs.credentialsFile"
    assert str(tmp_path / "no") in str(info.value)

    bad = tmp_path / "bad.json"
    bad.write_text("not a key")
    store = GcsStore(StoreConfig("gs://state-bucket/x", gcs=GcsSettings(credentials_file=str(bad))))
    with pytest.raises(StoreConfigError) as info:
        store.get("k")
    assert info.value.option == "gcs.credentialsFile"
    assert "a service account key" in str(info.value)


def test_options_are_read_into_the_config_and_keep_secret_references() -> None:
    config = StoreConfig.from_options(
        {
            "state.uri": "az://state-container/p",
            "azure.accountName": "acct",
            "azure.accountKey": "${env:GTB_TEST_AZURE_KEY}",
            "azure.retryDeadline": "7s",
        }
    )
    assert config.azure == AzureSettings(
        account_name="acct", account_key="${env:GTB_TEST_AZURE_KEY}", retry_deadline=7.0
    )
    gcs = StoreConfig.from_options(
        {
            "state.uri": "gs://state-bucket",
            "gcs.endpoint": "http://127.0.0.1:9",
            "gcs.anonymous": "true",
            "gcs.project": "proj",
        }
    )
    assert gcs.gcs == GcsSettings(endpoint="http://127.0.0.1:9", project="proj", anonymous=True)


def test_an_inline_key_stays_out_of_reprs_and_pickles_keep_it() -> None:
    config = StoreConfig(
        "az://state-container/p", azure=AzureSettings(account_name="acct", account_key=KEY)
    )
    assert KEY not in repr(config)
    store = AzureStore(config)
    assert KEY not in repr(store.config)
    assert pickle.loads(pickle.dumps(store)).config == config


def test_an_unset_secret_reference_is_refused_naming_the_option(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("GTB_TEST_AZURE_KEY", raising=False)
    settings = AzureSettings(account_name="acct", account_key="${env:GTB_TEST_AZURE_KEY}")
    store = AzureStore(StoreConfig("az://state-container/p", azure=settings))
    with pytest.raises(ConfigError) as info:
        store.get("k")
    assert "azure.accountKey" in str(info.value) and "GTB_TEST_AZURE_KEY" in str(info.value)


def test_every_component_accepts_the_cloud_options() -> None:
    names = ("gcs.endpoint", "gcs.credentialsFile", "azure.accountName", "azure.sasToken")
    for table in (STORE_OPTIONS, SOURCE_OPTIONS, SINK_OPTIONS):
        assert all(name in table.names() for name in names), table


def test_a_resolved_account_key_is_hidden_from_log_records(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The key is resolved where the client is made (no request is sent here) and from then
    on kept out of every log record of the process, as the SDK's own logging could quote it."""
    secret = "c2VjcmV0LWtleS1mb3ItbG9nLWNoZWNr"
    monkeypatch.setenv("GTB_TEST_AZURE_LOG_KEY", secret)
    settings = AzureSettings(account_name="acct", account_key="${env:GTB_TEST_AZURE_LOG_KEY}")
    store = AzureStore(StoreConfig("az://state-container/p", azure=settings))
    assert store.client is not None
    with caplog.at_level(logging.INFO):
        logging.getLogger("azure.core").info("signing with %s", secret)
    assert caplog.records and secret not in caplog.text


def test_shared_gs_stores_follow_the_google_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A config that leaves the endpoint and credentials to the environment gets a store per
    environment (STORAGE_EMULATOR_HOST, GOOGLE_APPLICATION_CREDENTIALS), as s3:// per AWS_*."""
    config = StoreConfig("gs://state-bucket/env", gcs=GcsSettings(anonymous=True))
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:9")
    first = open_store(config)
    assert open_store(config) is first
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", "http://127.0.0.1:10")
    assert open_store(config) is not first


@pytest.mark.parametrize(
    ("uri", "module", "extra"),
    [
        ("gs://state-bucket/p", "google.cloud.storage", "gcs"),
        ("az://state-container/p", "azure.storage.blob", "azure"),
    ],
)
def test_a_missing_sdk_names_the_extra(
    uri: str, module: str, extra: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without the cloud's SDK (an install without the extra), the first use of the store
    says what to install, naming state.uri."""
    monkeypatch.setitem(sys.modules, module, None)  # import fails as if not installed
    settings = AzureSettings(account_name="acct", account_key=KEY)
    store = new_store(StoreConfig(uri, gcs=GcsSettings(anonymous=True), azure=settings))
    with pytest.raises(StoreConfigError) as info:
        store.get("k")
    assert info.value.option == "state.uri"
    assert f"pip install 'gtbarrier[{extra}]'" in str(info.value)


def test_a_batch_of_deletes_is_settled_by_its_answers() -> None:
    settled = settle_batch(
        [("a", 202), ("b", 404), ("c", 409), ("d", 400), ("e", 202), ("f", 503), ("g", 403)]
    )
    assert settled == SettledBatch(failed=[("f", 503), ("g", 403)], alone=["c", "d"])
    assert settle_batch([("a", 202), ("b", 404)]) == SettledBatch(failed=[], alone=[])


@pytest.mark.parametrize(
    ("statuses", "retriable", "expected"),
    [
        ([503, 403], True, "delete of 2 of 256 key(s) failed, e.g. 'k0' with HTTP 503"),
        ([429], True, "HTTP 429"),
        ([403], False, "permission 'd'"),
    ],
)
def test_a_refused_batch_delete_is_retriable_only_if_throttled_or_a_server_error(
    statuses: list[int], retriable: bool, expected: str
) -> None:
    store = AzureStore(
        StoreConfig(
            "az://state-container/p", azure=AzureSettings(account_name="acct", account_key=KEY)
        )
    )
    err = store._batch_failed([(f"k{i}", s) for i, s in enumerate(statuses)], 256)
    assert err.retriable is retriable
    assert expected in str(err) and "az://state-container/p" in str(err)
