"""The ``gs://`` and ``az://`` state stores against their emulators.

* The shared contract (``tests/store_contract.py``) against fake-gcs-server and Azurite,
  conditional writes and their races included.
* What each emulator answers to a conditional write whose condition does not hold, raw,
  through the cloud's own SDK: the store's mapping of a lost race rests on it.
* An answer lost after the server wrote (a loopback proxy drops it): the store's retry finds
  its own write by the token it stored with it, and reports a write another writer replaced.
* Credentials the service refuses, and a bucket or container that does not exist.
* The coordinator's snapshots written to and restored from each.
"""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from harness.azurite import AzureContainer, AzuriteServer
from harness.fault_proxy import Fault, FaultProxy
from harness.gcs import GcsBucket, GcsServer
from state.coordinator.snapshot.files import sha256_hex
from state.coordinator.snapshot.restore import load_manifest, materialise
from state.coordinator.snapshot.write import SnapshotWriter
from state.errors import ConcurrentModification, KeyExists, StateError, StoreConfigError
from state.layout import PipelineLayout
from state.retry import Retry
from state.stores import StateStore, StoreConfig, open_store
from state.stores.azure_store import BATCH_DELETES, AzureStore
from state.stores.gcs_store import GcsStore
from tests.coordinator_fakes import write_checkpoint, write_snapshot
from tests.store_contract import StoreContract

pytestmark = pytest.mark.timeout(180)


class TestGcsStoreContract(StoreContract):
    """The one store contract, over HTTP against fake-gcs-server."""

    RACE_ROUNDS = 50
    LIST_KEYS = 1001  # more than one page of objects.list (1000)

    @pytest.fixture
    def store(self, gcs: GcsBucket) -> StateStore:
        return gcs.store("state/contract")

    @pytest.fixture
    def other_store(self, gcs: GcsBucket) -> StateStore:
        return gcs.store("state/contract")


class TestAzureStoreContract(StoreContract):
    """The one store contract, over HTTP against Azurite."""

    RACE_ROUNDS = 50
    LIST_KEYS = 5001  # more than one page of List Blobs (5000)

    @pytest.fixture
    def store(self, azure: AzureContainer) -> StateStore:
        return azure.store("state/contract")

    @pytest.fixture
    def other_store(self, azure: AzureContainer) -> StateStore:
        return azure.store("state/contract")


# --- the emulators' raw answers -------------------------------------------------------


def test_fake_gcs_enforces_if_generation_match(gcs: GcsBucket) -> None:
    """0 refuses an existing object; a stale generation and a missing object are refused."""
    from google.api_core.exceptions import PreconditionFailed

    bucket = gcs.server.client().bucket(gcs.bucket)
    first = bucket.blob("k")
    first.upload_from_string(b"one", if_generation_match=0, retry=None)
    with pytest.raises(PreconditionFailed):
        bucket.blob("k").upload_from_string(b"two", if_generation_match=0, retry=None)
    stale = first.generation
    bucket.blob("k").upload_from_string(b"three", if_generation_match=stale, retry=None)
    with pytest.raises(PreconditionFailed):
        bucket.blob("k").upload_from_string(b"four", if_generation_match=stale, retry=None)
    with pytest.raises(PreconditionFailed):
        bucket.blob("gone").upload_from_string(b"x", if_generation_match=stale, retry=None)
    assert bucket.blob("k").download_as_bytes() == b"three"


def test_azurite_enforces_if_none_match_and_if_match(azure: AzureContainer) -> None:
    from azure.core import MatchConditions
    from azure.core.exceptions import ResourceExistsError, ResourceModifiedError

    container = azure.server.client().get_container_client(azure.container)
    etag = container.get_blob_client("k").upload_blob(b"one", overwrite=False)["etag"]
    with pytest.raises(ResourceExistsError) as exists:
        container.upload_blob("k", b"two", overwrite=False)
    assert exists.value.status_code == 409
    container.upload_blob(
        "k", b"three", overwrite=True, etag=etag, match_condition=MatchConditions.IfNotModified
    )
    for name in ("k", "gone"):
        with pytest.raises(ResourceModifiedError) as modified:
            container.upload_blob(
                name, b"x", overwrite=True, etag=etag, match_condition=MatchConditions.IfNotModified
            )
        assert modified.value.status_code == 412
    assert container.download_blob("k").readall() == b"three"


# --- lost answers ---------------------------------------------------------------------


def _proxy_for(endpoint: str) -> FaultProxy:
    host, rest = endpoint.removeprefix("http://").split(":", 1)
    return FaultProxy(host, int(rest.split("/", 1)[0]))


def _proxied_endpoint(endpoint: str, proxy: FaultProxy) -> str:
    path = endpoint.removeprefix("http://").split("/", 1)
    return proxy.endpoint + ("/" + path[1] if len(path) > 1 else "")


@pytest.fixture(params=["gcs", "azure"])
def cloud(request: pytest.FixtureRequest) -> Iterator[tuple[Any, FaultProxy]]:
    """A bucket or container, and a fault proxy in front of its emulator."""
    holder = request.getfixturevalue(request.param)
    with _proxy_for(holder.server.endpoint) as proxy:
        yield holder, proxy


def _write_method(holder: Any) -> str:
    """The HTTP method of the store's writes: GCS uploads with POST, Azure puts blobs."""
    return "POST" if isinstance(holder, GcsBucket) else "PUT"


def _faulty(holder: Any, proxy: FaultProxy) -> StateStore:
    retry = Retry(max_attempts=20, base_delay=0.05, max_delay=0.4, deadline=5.0)
    store: StateStore = holder.store(
        "faults", retry=retry, endpoint=_proxied_endpoint(holder.server.endpoint, proxy)
    )
    # The first request of a google-cloud-storage client also starts a background fetch of
    # the bucket's metadata (retried by the SDK), which could take the one faulted
    # connection meant for the write under test.
    store.put("warm-up", b"")
    return store


@pytest.mark.parametrize("op", ["create", "cas"])
def test_lost_answer_to_a_conditional_write_is_resolved(
    cloud: tuple[Any, FaultProxy], op: str
) -> None:
    """The server applied the write but the client never heard: the store finds out it won."""
    holder, proxy = cloud
    store = _faulty(holder, proxy)
    expected = store.put("k", b"old") if op == "cas" else None
    proxy.inject(Fault.DROP_RESPONSE, method=_write_method(holder))
    if op == "create":
        version = store.create("c", b"mine")
        key = "c"
    else:
        assert expected is not None
        version = store.compare_and_swap("k", b"mine", expected)
        key = "k"
    assert proxy.stats().by_kind == {"drop-response": 1}
    got = holder.store("faults").get(key)
    assert got.data == b"mine" and got.version == version


def test_lost_answer_then_another_writer_is_reported_as_lost(
    cloud: tuple[Any, FaultProxy],
) -> None:
    """Our create was applied, its answer lost, and another writer replaced the value before
    the retry: the store must not claim the key holds our write."""
    holder, proxy = cloud
    store = _faulty(holder, proxy)
    other = holder.store("faults")
    real = store._write_once  # type: ignore[attr-defined]
    calls = {"n": 0}

    def write_then_interfere(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 2:  # the retry: meanwhile someone else took over the key
            other.compare_and_swap("c", b"theirs", other.get("c").version)
        return real(*args, **kwargs)

    store._write_once = write_then_interfere  # type: ignore[attr-defined]
    proxy.inject(Fault.DROP_RESPONSE, method=_write_method(holder))
    with pytest.raises(KeyExists) as info:
        store.create("c", b"mine")
    assert calls["n"] == 2 and proxy.stats().by_kind == {"drop-response": 1}
    assert "never took effect, or another writer has replaced it" in "".join(info.value.__notes__)
    assert other.get("c").data == b"theirs"


@pytest.mark.parametrize("op", ["create", "cas"])
def test_a_writer_dead_after_its_request_head_stores_nothing(
    cloud: tuple[Any, FaultProxy], op: str
) -> None:
    """A writer killed after its request's head leaves the server a request without its
    body: the emulator must store nothing, and the retry the whole value."""
    holder, proxy = cloud
    store = _faulty(holder, proxy)
    plain = holder.store("faults")
    old = plain.put("k", b"old") if op == "cas" else None
    proxy.inject(Fault.HEAD_ONLY, method=_write_method(holder))
    if op == "create":
        store.create("k", b"mine")
    else:
        assert old is not None
        store.compare_and_swap("k", b"mine", old)
    assert proxy.stats().by_kind == {"head-only": 1}
    assert plain.get("k").data == b"mine"


# --- configuration and refusals -------------------------------------------------------


def test_gcs_missing_bucket_is_a_config_error_naming_it(gcs_server: GcsServer) -> None:
    store = GcsStore(StoreConfig("gs://gtb-no-such-bucket/x", gcs=gcs_server.settings()))
    for op in (lambda: store.put("k", b"x"), lambda: store.create("k", b"x"), store.list):
        with pytest.raises(StoreConfigError) as info:
            op()
        text = str(info.value)
        assert "'gtb-no-such-bucket'" in text and "state.uri" in text


def test_azure_missing_container_is_a_config_error_naming_it(
    azurite_server: AzuriteServer,
) -> None:
    store = AzureStore(StoreConfig("az://gtb-no-such-container/x", azure=azurite_server.settings()))
    for op in (lambda: store.put("k", b"x"), lambda: store.get("k"), store.list):
        with pytest.raises(StoreConfigError) as info:
            op()
        text = str(info.value)
        assert "'gtb-no-such-container'" in text and "state.uri" in text


def test_azure_wrong_account_key_is_refused_naming_the_option(azure: AzureContainer) -> None:
    """A key the service does not accept: fatal at once, naming azure.accountKey, never the key."""
    wrong = "d3Jvbmcga2V5IG9mIDY0IGJ5dGVzIHdyb25nIGtleSBvZiA2NCBieXRlcyB3cm9uZyBrZXkgb2YgNjQ="
    store = azure.store("denied", account_key=wrong)
    with pytest.raises(StateError) as info:
        store.put("k", b"x")
    assert not info.value.retriable
    text = str(info.value)
    assert "azure.accountKey" in text and "put of key 'k'" in text
    assert wrong not in text and azure.server.account_key not in text


def _container_sas(azure: AzureContainer, permission: str) -> str:
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    return generate_container_sas(
        azure.server.account_name,
        azure.container,
        account_key=azure.server.account_key,
        permission=ContainerSasPermissions.from_string(permission),
        expiry=datetime.now(UTC) + timedelta(hours=1),
    )


def test_azure_deletes_many_keys_in_batches_with_a_sas_token(azure: AzureContainer) -> None:
    """More keys than one Blob Batch takes, some absent, deleted under a container SAS."""
    store = azure.store("batch", account_key=None, sas_token=_container_sas(azure, "racwdl"))
    keys = [f"parts/{i:04d}" for i in range(BATCH_DELETES + 44)]
    with ThreadPoolExecutor(max_workers=16) as pool:
        list(pool.map(lambda k: store.put(k, b"x"), keys[::2]))
    store.put("kept", b"y")
    store.delete_many(keys)  # every other key was never written
    assert store.list() == ["kept"]


def test_azure_batch_delete_without_the_permission_is_fatal_naming_it(
    azure: AzureContainer,
) -> None:
    """A SAS token that may write but not delete: the batch is refused, at once (not
    retried), with the permission named and the token nowhere in the message."""
    token = _container_sas(azure, "racwl")
    store = azure.store("nodelete", account_key=None, sas_token=token)
    for k in ("a", "b", "c"):
        store.put(k, b"x")
    with pytest.raises(StateError) as info:
        store.delete_many(["a", "b", "c"])
    assert not info.value.retriable
    text = str(info.value)
    assert "permission 'd'" in text and "delete" in text
    assert token not in text
    assert store.list() == ["a", "b", "c"]


def test_azure_deletes_one_by_one_where_the_account_takes_no_batch(
    azure: AzureContainer,
) -> None:
    """An account that refuses Blob Batch requests (one with a hierarchical namespace, which
    ``abfs://`` users often have): the keys are deleted one by one, and the store sends no
    more batches."""
    with _proxy_for(azure.server.endpoint) as proxy:
        store = _faulty(azure, proxy)
        keys = [f"parts/{i}" for i in range(6)]
        for k in keys:
            store.put(k, b"x")
        proxy.inject(Fault.HTTP_400, count=2, method="POST")  # a batch is a POST
        store.delete_many(keys[:3])
        store.delete_many(keys[3:])
        assert store.list() == ["warm-up"]
        assert proxy.stats().by_kind == {"http-400": 1}


def test_azure_retries_a_batch_the_service_could_not_take_then(azure: AzureContainer) -> None:
    with _proxy_for(azure.server.endpoint) as proxy:
        store = _faulty(azure, proxy)
        keys = [f"parts/{i}" for i in range(4)]
        for k in keys:
            store.put(k, b"x")
        proxy.inject(Fault.HTTP_503, method="POST")
        store.delete_many(keys)
        assert store.list() == ["warm-up"]
        assert proxy.stats().by_kind == {"http-503": 1}


def test_open_store_shares_cloud_stores_per_configuration(
    gcs: GcsBucket, azure: AzureContainer
) -> None:
    for config in (gcs.config("shared"), azure.config("shared")):
        first = open_store(config)
        assert first.shared and open_store(config) is first
        first.put("k", b"x")
        assert (
            open_store(StoreConfig(config.uri, gcs=config.gcs, azure=config.azure)).get("k").data
            == b"x"
        )


def test_cas_loser_sees_the_winner(gcs: GcsBucket, azure: AzureContainer) -> None:
    for store in (gcs.store("cas"), azure.store("cas")):
        v = store.put("k", b"1")
        store.compare_and_swap("k", b"2", v)
        with pytest.raises(ConcurrentModification):
            store.compare_and_swap("k", b"3", v)
        assert store.get("k").data == b"2"


# --- the coordinator's snapshots on these stores -------------------------------------


@pytest.mark.parametrize("where", ["gcs", "azure"])
def test_a_snapshot_is_written_and_restored(
    where: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The coordinator's snapshot writer and restore, through ``open_store`` as the
    coordinator opens its store: a checkpoint written, its manifest read back by checksum,
    and every file restored byte for byte on a "new host" (neither version is an MD5, so the
    writer verifies each pack by reading it back)."""
    holder = request.getfixturevalue(where)
    store = open_store(holder.config("snapshots"))
    layout = PipelineLayout("p1")
    cp = write_checkpoint(tmp_path / "cp", 3)
    writer = SnapshotWriter(store, layout)
    manifest = write_snapshot(writer, cp, 3)
    key = writer.manifest_key(manifest.snapshot_id)
    again = load_manifest(store, key, sha256_hex(store.get(key).data))
    assert again.files == manifest.files
    target = tmp_path / "new-host" / "cp"
    done = materialise(store, layout, again, target)
    restored = {
        p.relative_to(target).as_posix(): p.read_bytes() for p in target.rglob("*") if p.is_file()
    }
    assert done.files == len(manifest.files) == len(restored) > 0
    assert restored == {f.path: (cp / f.path).read_bytes() for f in manifest.files}
