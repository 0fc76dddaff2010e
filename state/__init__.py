"""Durable state for gtbarrier: stores (memory, file, S3), the key layout, errors, retries,
and the snapshot coordinator (``state.SnapshotCoordinator``, imported lazily)."""

from typing import TYPE_CHECKING, Any

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
from state.stores import S3Settings, StateStore, StoreConfig, Versioned, open_store

if TYPE_CHECKING:
    from state.coordinator import SnapshotCoordinator


def __getattr__(name: str) -> Any:
    # Lazy: the coordinator imports pyspark and kazoo, which executors never need.
    if name == "SnapshotCoordinator":
        from state.coordinator import SnapshotCoordinator

        return SnapshotCoordinator
    raise AttributeError(f"module 'state' has no attribute {name!r}")


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
    "SnapshotCoordinator",
    "StateError",
    "StateStore",
    "StoreConfig",
    "StoreConfigError",
    "StoreUnavailable",
    "Versioned",
    "open_store",
    "validate_pipeline_id",
]
