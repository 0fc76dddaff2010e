"""``memory://name``: a process-local store for unit tests.

Stores with the same name in one process share their contents. Spark's Python
workers are other processes, so this store is for single-process tests only.
"""

from __future__ import annotations

import itertools
import threading

from state.errors import ConcurrentModification, KeyExists, KeyNotFound
from state.stores.state_store import StateStore, StoreConfig, Versioned, check_key

_SPACES: dict[str, dict[str, Versioned]] = {}
_LOCK = threading.Lock()
_VERSIONS = itertools.count(1)


class MemoryStore(StateStore):
    def __init__(self, config: StoreConfig) -> None:
        super().__init__(config)
        with _LOCK:
            self._data = _SPACES.setdefault(config.uri, {})

    def __getstate__(self) -> dict[str, object]:
        # The contents belong to the process-wide space, not to this instance.
        return {"config": self.config}

    def __setstate__(self, state: dict[str, object]) -> None:
        config = state["config"]
        assert isinstance(config, StoreConfig)
        self.__init__(config)  # type: ignore[misc]

    def get(self, key: str) -> Versioned:
        check_key(self.uri, key)
        with _LOCK:
            hit = self._data.get(key)
        if hit is None:
            raise KeyNotFound(self.uri, key)
        return hit

    def put(self, key: str, data: bytes) -> str:
        check_key(self.uri, key)
        with _LOCK:
            return self._write(key, data)

    def create(self, key: str, data: bytes) -> str:
        check_key(self.uri, key)
        with _LOCK:
            if key in self._data:
                raise KeyExists(self.uri, key)
            return self._write(key, data)

    def compare_and_swap(self, key: str, data: bytes, expected_version: str) -> str:
        check_key(self.uri, key)
        with _LOCK:
            current = self._data.get(key)
            if current is None or current.version != expected_version:
                raise ConcurrentModification(
                    self.uri, key, expected_version, None if current is None else current.version
                )
            return self._write(key, data)

    def list(self, prefix: str = "") -> list[str]:
        with _LOCK:
            return sorted(k for k in self._data if k.startswith(prefix))

    def delete(self, key: str) -> None:
        check_key(self.uri, key)
        with _LOCK:
            self._data.pop(key, None)

    def _write(self, key: str, data: bytes) -> str:
        version = str(next(_VERSIONS))
        self._data[key] = Versioned(bytes(data), version)
        return version


def reset_memory_stores() -> None:
    """Forget every ``memory://`` store (for tests)."""
    with _LOCK:
        _SPACES.clear()
