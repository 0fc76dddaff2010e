"""Fixtures shared by the unit tests.

* ``memory_uri``: a fresh ``memory://`` state URI; every memory store is forgotten at
  teardown.
* ``store``: a :class:`~state.stores.state_store.StateStore` on ``memory_uri``.
* ``recording_spark``: enough of a SparkSession to register data sources and set confs,
  recording both (``.registered``, ``.settings``).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from state.stores import StateStore, open_store
from state.stores.memory_store import reset_memory_stores


@pytest.fixture
def memory_uri() -> Iterator[str]:
    """``memory://t-<random>``; memory stores are reset after the test."""
    yield f"memory://t-{uuid.uuid4().hex}"
    reset_memory_stores()


@pytest.fixture
def store(memory_uri: str) -> StateStore:
    """A fresh in-memory state store."""
    return open_store(memory_uri)


class RecordingSpark:
    """``spark.dataSource.register(cls)`` and ``spark.conf.set(key, value)``, recorded."""

    def __init__(self) -> None:
        self.registered: list[Any] = []
        self.settings: dict[str, str] = {}
        self.dataSource = self
        self.conf = self

    def register(self, cls: Any) -> None:
        self.registered.append(cls)

    def set(self, key: str, value: str) -> None:
        self.settings[key] = value


@pytest.fixture
def recording_spark() -> RecordingSpark:
    return RecordingSpark()
