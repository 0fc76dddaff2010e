"""One shared store per process and configuration, behind :func:`state.stores.open_store`.

Spark reuses its Python workers: an executor's worker runs task after task, and the sink's
commit runs in one worker forked from ``pyspark.daemon`` that serves every micro-batch of
the query. A store opened through ``open_store`` in such a worker is the one the earlier
tasks or commits opened, with its client (boto3: a module import plus a client built from
the service model, 0.1-0.5 s) already built.

The stores live in a :class:`~state.process_cache.ProcessCache`: thread-safe (creating a
store is cheap, clients are lazy, and happens under its lock, so two threads never build
two stores for one key) and fork-safe (a forked child, as ``pyspark.daemon`` forks every
worker, never uses its parent's instances: their connections belong to the parent).
``close()`` on a shared store does nothing (other code in the process uses it);
:func:`close_shared` releases them all, and runs at interpreter exit.

The key is the :class:`~state.stores.state_store.StoreConfig` and, for ``s3://``, the ``AWS_*``
environment (for ``gs://``, ``STORAGE_EMULATOR_HOST`` and ``GOOGLE_APPLICATION_CREDENTIALS``),
which supplies the settings a config leaves unset.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Hashable
from urllib.parse import urlparse

from state.process_cache import ProcessCache
from state.stores.state_store import StateStore, StoreConfig, aws_environment


def _release(store: StateStore) -> None:
    store.release()


_stores: ProcessCache[Hashable, StateStore] = ProcessCache(
    "shared stores", close=_release, close_at_exit=True
)


def shared_store(config: StoreConfig, factory: Callable[[StoreConfig], StateStore]) -> StateStore:
    """The process's store for ``config``, made by ``factory`` on first use."""

    def create() -> StateStore:
        store = factory(config)
        store.shared = True
        return store

    return _stores.get_or_create(_key(config), create)


def close_shared() -> None:
    """Release every shared store of this process and forget them; every store is
    released, and the first failure is raised after."""
    _stores.clear()


def shared_count() -> int:
    """How many stores this process shares (for tests and diagnostics)."""
    return len(_stores)


def _key(config: StoreConfig) -> Hashable:
    scheme = urlparse(config.uri).scheme
    if scheme == "s3":
        return (config, aws_environment())
    if scheme == "gs":
        return (config, tuple((name, os.environ.get(name)) for name in _GOOGLE_ENVIRONMENT))
    return (config, ())


# What google-cloud-storage reads from the environment when a config leaves it unset.
_GOOGLE_ENVIRONMENT = ("STORAGE_EMULATOR_HOST", "GOOGLE_APPLICATION_CREDENTIALS")
