"""The state stores: one contract (:mod:`~state.stores.state_store`), five implementations
(``memory://``, ``file://``, ``s3://``, ``gs://``, ``az://``) and the factory that opens one by URI
(:mod:`~state.stores.factory`, shared per process by :mod:`~state.stores.shared`).

Callers import from here; the implementations import only :mod:`state.stores.state_store`.
"""

from state.stores.factory import close_all, new_store, open_store
from state.stores.state_store import (
    STATE_URI,
    STORE_OPTIONS,
    AzureSettings,
    GcsSettings,
    S3Settings,
    StateStore,
    StoreConfig,
    Versioned,
    check_key,
    validate_uri,
)

__all__ = [
    "STATE_URI",
    "STORE_OPTIONS",
    "AzureSettings",
    "GcsSettings",
    "S3Settings",
    "StateStore",
    "StoreConfig",
    "Versioned",
    "check_key",
    "close_all",
    "new_store",
    "open_store",
    "validate_uri",
]
