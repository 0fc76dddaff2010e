"""The state stores: one contract (:mod:`~state.stores.state_store`), five implementations
(``memory://``, ``file://``, ``s3://`` or ``s3a://``, ``gs://``, ``az://``) and the factory that
opens one by URI
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
    canonical_uri,
    check_key,
    is_s3_uri,
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
    "canonical_uri",
    "check_key",
    "close_all",
    "is_s3_uri",
    "new_store",
    "open_store",
    "validate_uri",
]
