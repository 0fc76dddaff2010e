"""The state store every simulated process uses: the product's memory store behind
scheduling points, with lost answers.

:class:`SimStore` is a view of one ``memory://`` store (``state.stores.new_store``). Each
process (and each process's executors) gets its own view with its own
:class:`~state.stores.state_store.StoreConfig`, because the product keeps per-process memory
keyed by the store's configuration (the barrier state a commit process last swapped, the
batch records a Python worker wrote): two simulated processes must not share it, and a
crashed process's memory must not survive it.

Every request is a scheduling point. A write whose answer the scheduler decides to lose
raises what the product's stores raise once their own retries give up: a conditional
write (``create``, compare-and-swap) :class:`~state.errors.StoreWriteUnknown`, an
unconditional one :class:`~state.errors.StoreUnavailable`, whether or not the write took
effect. (An answer lost and then resolved by the store's retries, as S3's write token
does, is the same as no fault.)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Protocol, TypeVar

from simulation.scheduler import Op
from state.errors import StoreUnavailable, StoreWriteUnknown
from state.stores import StateStore, StoreConfig, Versioned

T = TypeVar("T")

LOST_APPLIED = "lost-applied"
LOST_NOT_APPLIED = "lost-not-applied"
UNAVAILABLE = "unavailable"


class StoreHost(Protocol):
    """What a store view needs of the simulation (:class:`simulation.world.World`)."""

    def point(self, op: Op) -> str | None:
        """A scheduling point; the fault to apply to ``op``, if any."""

    def wrote(self, key: str) -> None:
        """A write took effect."""


class SimStore(StateStore):
    """One process's view of the shared memory store (module docstring)."""

    def __init__(self, world: StoreHost, inner: StateStore, view: str) -> None:
        super().__init__(StoreConfig(uri=f"{inner.uri}#{view}"))
        self.world = world
        self.inner = inner

    def get(self, key: str) -> Versioned:
        self._read(Op("get", key), key)
        return self.inner.get(key)

    def list(self, prefix: str = "") -> list[str]:
        self._read(Op("list", prefix), prefix)
        return self.inner.list(prefix)

    def put(self, key: str, data: bytes) -> str:
        return self._write(Op("put", key), key, lambda: self.inner.put(key, data))

    def create(self, key: str, data: bytes) -> str:
        return self._write(Op("create", key), key, lambda: self.inner.create(key, data))

    def compare_and_swap(self, key: str, data: bytes, expected_version: str) -> str:
        return self._write(
            Op("cas", key), key, lambda: self.inner.compare_and_swap(key, data, expected_version)
        )

    def delete(self, key: str) -> None:
        self._write(Op("delete", key), key, lambda: self.inner.delete(key))

    def delete_many(self, keys: Iterable[str]) -> None:
        # One request for all of them, as S3's DeleteObjects.
        wanted = list(keys)
        if not wanted:
            return

        def delete_all() -> None:
            for k in wanted:
                self.inner.delete(k)

        self._write(Op("delete", wanted[0]), wanted[0], delete_all)

    # --- faults ------------------------------------------------------------------------

    def _read(self, op: Op, key: str) -> None:
        if self.world.point(op) == UNAVAILABLE:
            raise StoreUnavailable(self.uri, key, "simulated: the store stayed unreachable")

    def _write(self, op: Op, key: str, write: Callable[[], T]) -> T:
        fault = self.world.point(op)
        if fault == UNAVAILABLE:
            fault = LOST_NOT_APPLIED
        if fault == LOST_NOT_APPLIED:
            raise self._lost(op, key, "before the write took effect")
        result = write()
        self.world.wrote(key)
        if fault == LOST_APPLIED:
            raise self._lost(op, key, "after the write took effect")
        return result

    def _lost(self, op: Op, key: str, when: str) -> StoreUnavailable:
        cause = f"simulated: the answer to {op.kind} was lost ({when})"
        if op.kind in ("create", "cas"):
            return StoreWriteUnknown(self.uri, key, cause)
        return StoreUnavailable(self.uri, key, cause)
