"""Durable state for gtbarrier: stores (memory, file, S3), the key layout, errors, retries."""

from state.errors import (
    CommitFailed,
    CommitStateUnknown,
    ConcurrentModification,
    ConfigError,
    GtBarrierError,
    KeyExists,
    KeyNotFound,
    StateError,
    StoreConfigError,
    StoreUnavailable,
)
from state.layout import PipelineLayout, validate_pipeline_id
from state.retry import Retry
from state.store import S3Settings, StateStore, StoreConfig, Versioned, open_store

__all__ = [
    "CommitFailed",
    "CommitStateUnknown",
    "ConcurrentModification",
    "ConfigError",
    "GtBarrierError",
    "KeyExists",
    "KeyNotFound",
    "PipelineLayout",
    "Retry",
    "S3Settings",
    "StateError",
    "StateStore",
    "StoreConfig",
    "StoreConfigError",
    "StoreUnavailable",
    "Versioned",
    "open_store",
    "validate_pipeline_id",
]
