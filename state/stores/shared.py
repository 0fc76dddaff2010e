"""One shared store per process and configuration, behind :func:`state.stores.base.open_store`.

Spark reuses its Python workers: an executor's worker runs task after task, and the sink's
commit runs in one worker forked from ``pyspark.daemon`` that serves every micro-batch of
the query. A store opened through ``open_store`` in such a worker is the one the earlier
tasks or commits opened, with its client (boto3: a module import plus a client built from
the service model, 0.1-0.5 s) already built.

* **Thread-safe.** One lock guards the map; creating a store is cheap (clients are lazy)
  and happens under it, so two threads never build two stores for one key.
* **Fork-safe.** The map belongs to the process that filled it. A forked child
  (``pyspark.daemon`` forks every worker) starts with an empty map: a hook registered
  with :func:`os.register_at_fork` empties it, and every lookup compares the pid as
  well. The parent's instances are dropped in the child, never used: their connections
  belong to the parent.
* **Closing.** ``close()`` on a shared store does nothing (other code in the process uses
  it); :func:`close_shared` closes them all, and runs at interpreter exit.

The key is the :class:`~state.stores.base.StoreConfig` and, for ``s3://``, the ``AWS_*``
environment, which supplies the settings a config leaves unset.
"""

from __future__ import annotations

import atexit
import os
import threading
from collections.abc import Callable, Hashable
from urllib.parse import urlparse

from state.stores.base import StateStore, StoreConfig, aws_environment


class _Registry:
    """The shared stores of one process; see the module docstring."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.pid = os.getpid()
        self.stores: dict[Hashable, StateStore] = {}

    def forget_if_forked(self) -> None:
        """Drop a parent's stores in a forked child (the at-fork hook's fallback; hold lock)."""
        if self.pid != os.getpid():
            self.stores = {}
            self.pid = os.getpid()

    def after_fork_in_child(self) -> None:
        self.lock = threading.Lock()  # another thread of the parent may have held it
        self.pid = os.getpid()
        self.stores = {}


_registry = _Registry()


def shared_store(config: StoreConfig, factory: Callable[[StoreConfig], StateStore]) -> StateStore:
    """The process's store for ``config``, made by ``factory`` on first use."""
    key = _key(config)
    with _registry.lock:
        _registry.forget_if_forked()
        store = _registry.stores.get(key)
        if store is None:
            store = factory(config)
            store.shared = True
            _registry.stores[key] = store
        return store


def close_shared() -> None:
    """Release every shared store of this process and forget them."""
    with _registry.lock:
        _registry.forget_if_forked()
        stores = list(_registry.stores.values())
        _registry.stores = {}
    failure: BaseException | None = None
    for store in stores:
        try:
            store.release()
        except Exception as err:  # release the others, then report the first failure
            failure = failure or err
    if failure is not None:
        raise failure


def shared_count() -> int:
    """How many stores this process shares (for tests and diagnostics)."""
    with _registry.lock:
        _registry.forget_if_forked()
        return len(_registry.stores)


def _key(config: StoreConfig) -> Hashable:
    if urlparse(config.uri).scheme == "s3":
        return (config, aws_environment())
    return (config, ())


os.register_at_fork(after_in_child=_registry.after_fork_in_child)
atexit.register(close_shared)
