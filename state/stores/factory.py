"""Opening a store by URI: the one place that knows every implementation.

The implementations (:mod:`state.stores.memory_store`, :mod:`state.stores.file_store`,
:mod:`state.stores.s3_store`, :mod:`state.stores.gcs_store`,
:mod:`state.stores.azure_store`) import only the contract (:mod:`state.stores.state_store`);
this module imports them, lazily, so that a process that never opens an ``s3://`` store never
imports boto3 (nor the Google or Azure SDK without a ``gs://`` or ``az://`` store).
"""

from __future__ import annotations

from urllib.parse import urlparse

from state.errors import StoreConfigError
from state.stores.shared import close_shared, shared_store
from state.stores.state_store import StateStore, StoreConfig, validate_uri


def open_store(config: StoreConfig | str) -> StateStore:
    """The store for ``config`` (or a bare URI using the AWS configuration chain).

    ``file://`` and ``s3://`` stores are shared per process and configuration (and, for
    S3, the ``AWS_*`` environment): every call in one process returns the same instance,
    whose clients are created once; ``close()`` on it does nothing. A forked child never
    inherits its parent's instances. ``memory://`` stores are cheap views of a named,
    process-wide space and are never cached. :func:`new_store` opens an unshared store.
    """
    config = _config(config)
    if urlparse(config.uri).scheme == "memory":
        return new_store(config)
    return shared_store(config, new_store)


def new_store(config: StoreConfig | str) -> StateStore:
    """A new, unshared store for ``config``; the caller closes it."""
    config = _config(config)
    scheme = urlparse(config.uri).scheme
    if scheme == "memory":
        from state.stores.memory_store import MemoryStore

        return MemoryStore(config)
    if scheme == "file":
        from state.stores.file_store import FileStore

        return FileStore(config)
    if scheme == "s3":
        from state.stores.s3_store import S3Store

        return S3Store(config)
    if scheme == "gs":
        from state.stores.gcs_store import GcsStore

        return GcsStore(config)
    if scheme == "az":
        from state.stores.azure_store import AzureStore

        return AzureStore(config)
    validate_uri(config.uri)  # its refusal says what each scheme expects
    raise StoreConfigError("state.uri", config.uri, "memory://, file://, s3://, gs:// or az://")


def close_all() -> None:
    """Close every store :func:`open_store` shared in this process (they are forgotten;
    a later :func:`open_store` opens new ones). Also run at interpreter exit."""
    close_shared()


def _config(config: StoreConfig | str) -> StoreConfig:
    if isinstance(config, str):
        validate_uri(config)
        return StoreConfig(uri=config)
    return config
