"""``open_store`` shares one store per process and configuration (state/stores/shared.py).

No server: S3 clients are built against an address nothing listens on and never used
for a request.
"""

from __future__ import annotations

import os
import pickle
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from state.stores import (
    S3Settings,
    StateStore,
    StoreConfig,
    close_all,
    new_store,
    open_store,
    s3_store,
)
from state.stores import shared as store_cache
from state.stores.file_store import FileStore
from state.stores.memory_store import MemoryStore
from state.stores.s3_store import S3Store
from state.stores.state_store import aws_environment

NOWHERE = S3Settings(
    endpoint="http://127.0.0.1:9",
    region="us-east-1",
    access_key_id="a",
    secret_access_key="b",
    path_style=True,
)


@pytest.fixture(autouse=True)
def fresh_cache() -> Iterator[None]:
    close_all()
    yield
    close_all()


def s3_config(uri: str = "s3://bucket/state", **settings: object) -> StoreConfig:
    values = {**NOWHERE.__dict__, **settings}
    return StoreConfig(uri, S3Settings(**values))


def in_child(check: Callable[[], bool]) -> bool:
    """Run ``check`` in a forked child; its answer (a crash counts as False)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child reports through the pipe
        ok = False
        try:
            ok = check()
        finally:
            os.write(write, b"1" if ok else b"0")
            os._exit(0)
    os.close(write)
    answer = os.read(read, 1)
    os.close(read)
    os.waitpid(pid, 0)
    return answer == b"1"


# --- one instance per configuration --------------------------------------------------


def test_same_config_same_instance(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}/state"
    first = open_store(uri)
    assert isinstance(first, FileStore) and first.shared
    assert open_store(uri) is first
    assert open_store(StoreConfig(uri)) is first
    assert store_cache.shared_count() == 1


def test_another_config_another_instance(tmp_path: Path) -> None:
    a = open_store(f"file://{tmp_path}/a")
    b = open_store(f"file://{tmp_path}/b")
    assert a is not b
    s3 = open_store(s3_config())
    assert open_store(s3_config()) is s3
    assert open_store(s3_config(read_timeout=5.0)) is not s3
    assert open_store(s3_config("s3://bucket/other")) is not s3


def test_another_aws_environment_another_s3_store(monkeypatch: pytest.MonkeyPatch) -> None:
    """Settings a config leaves unset come from AWS_*: a change there is another store."""
    first = open_store("s3://bucket/state")
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "http://127.0.0.1:9")
    second = open_store("s3://bucket/state")
    assert second is not first
    assert open_store("s3://bucket/state") is second


def test_memory_stores_are_views_not_cached(memory_uri: str) -> None:
    a, b = open_store(memory_uri), open_store(memory_uri)
    assert isinstance(a, MemoryStore) and a is not b and not a.shared
    a.put("k", b"1")
    assert b.get("k").data == b"1"


def test_new_store_is_never_shared(tmp_path: Path) -> None:
    uri = f"file://{tmp_path}/state"
    shared = open_store(uri)
    own = new_store(uri)
    assert own is not shared and not own.shared
    assert store_cache.shared_count() == 1


def test_concurrent_opens_get_one_instance(tmp_path: Path) -> None:
    configs = [s3_config(), StoreConfig(f"file://{tmp_path}/state")]
    seen: list[StateStore] = []
    lock = threading.Lock()
    gate = threading.Barrier(16)

    def run(i: int) -> None:
        gate.wait(timeout=30)
        store = open_store(configs[i % 2])
        if isinstance(store, S3Store):
            assert store.client is not None  # clients built concurrently, one per store
        with lock:
            seen.append(store)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert len(seen) == 16
    assert len({id(s) for s in seen}) == 2
    s3 = next(s for s in seen if isinstance(s, S3Store))
    assert len({id(s.client) for s in seen if s is s3}) == 1


# --- closing ---------------------------------------------------------------------------


def test_close_of_a_shared_store_keeps_its_client() -> None:
    store = open_store(s3_config())
    assert isinstance(store, S3Store)
    client = store.client
    store.close()
    assert store.client is client
    assert open_store(s3_config()) is store


def test_close_all_releases_and_forgets() -> None:
    store = open_store(s3_config())
    assert isinstance(store, S3Store)
    client = store.client
    close_all()
    assert store._s3 is None
    assert store_cache.shared_count() == 0
    again = open_store(s3_config())
    assert again is not store
    assert isinstance(again, S3Store) and again.client is not client


def test_close_of_an_unshared_store_releases_its_client() -> None:
    store = new_store(s3_config())
    assert isinstance(store, S3Store)
    client = store.client
    store.close()
    assert store._s3 is None
    assert store.client is not client  # usable again: a new client


def test_a_pickled_shared_store_is_not_shared(tmp_path: Path) -> None:
    for shared in (open_store(f"file://{tmp_path}/state"), open_store(s3_config())):
        clone = pickle.loads(pickle.dumps(shared))
        assert shared.shared and not clone.shared
        assert clone.config == shared.config


# --- processes -------------------------------------------------------------------------


def test_a_forked_child_never_uses_the_parents_instances(tmp_path: Path) -> None:
    parent_file = open_store(f"file://{tmp_path}/state")
    parent_s3 = open_store(s3_config())
    assert isinstance(parent_s3, S3Store)
    parent_client = parent_s3.client

    def child() -> bool:
        return (
            store_cache.shared_count() == 0
            and open_store(f"file://{tmp_path}/state") is not parent_file
            and open_store(s3_config()) is not parent_s3
            # a store carried over in memory builds its own client in the child
            and parent_s3.client is not parent_client
        )

    assert in_child(child)
    assert open_store(f"file://{tmp_path}/state") is parent_file
    assert parent_s3.client is parent_client  # the child did not touch the parent's


def test_a_pid_change_without_the_fork_hook_also_forgets(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = open_store(f"file://{tmp_path}/state")
    monkeypatch.setattr(store_cache._stores, "_pid", -1)
    assert open_store(f"file://{tmp_path}/state") is not first


def test_clients_share_one_session_per_process() -> None:
    """The session caches the service model: one per process and AWS_* environment."""
    a = new_store(s3_config("s3://bucket/a"))
    b = new_store(s3_config("s3://bucket/b", read_timeout=3.0))
    assert isinstance(a, S3Store) and isinstance(b, S3Store)
    assert a.client is not b.client
    session = s3_store._sessions.get(aws_environment())
    assert session is not None
    assert a.client.meta.config is not b.client.meta.config
    assert s3_store._sessions.get(aws_environment()) is session  # one per environment
    a.close()
    b.close()
