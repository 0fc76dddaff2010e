"""The barrier state a commit process last read or wrote, per pipeline.

Spark runs every commit of a query in one reused Python worker, so the state the last
commit left behind is, as a rule, what the next commit would read. An exactly-once commit
may therefore start from it instead of reading (:meth:`sink.barrier.Barrier.commit`): its
first write is the compare-and-swap that records the bundle in flight, and that swap
succeeds exactly when the stored state is still the remembered one (S3: the ETag of the
same bytes; file and memory stores: the version token of that very write). Nothing is
decided from the remembered state that the swap does not confirm before any delivery; a
lost swap means the state changed (another run claimed the pipeline, an operator acted),
and the commit forgets it and starts again from a read, as if it had never tried.

Per process (a forked child starts empty), thread-safe, bounded.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Hashable
from dataclasses import dataclass

from state.layout import PipelineLayout
from state.records.barrier import BarrierState
from state.stores import StateStore

#: How many pipelines a process remembers (a commit process serves one or a few).
CAPACITY = 64


@dataclass(frozen=True)
class KnownState:
    """A barrier state and the version it had when this process read or wrote it."""

    state: BarrierState
    version: str


class KnownStates:
    """The remembered states of one process, by store configuration and pipeline."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._by_key: dict[Hashable, KnownState] = {}

    def get(self, store: StateStore, layout: PipelineLayout) -> KnownState | None:
        with self._lock:
            self._forget_if_forked()
            return self._by_key.get(_key(store, layout))

    def put(
        self, store: StateStore, layout: PipelineLayout, state: BarrierState, version: str
    ) -> None:
        with self._lock:
            self._forget_if_forked()
            key = _key(store, layout)
            self._by_key.pop(key, None)
            self._by_key[key] = KnownState(state, version)
            while len(self._by_key) > CAPACITY:
                del self._by_key[next(iter(self._by_key))]

    def forget(self, store: StateStore, layout: PipelineLayout) -> None:
        with self._lock:
            self._forget_if_forked()
            self._by_key.pop(_key(store, layout), None)

    def clear(self) -> None:
        with self._lock:
            self._by_key = {}

    def _forget_if_forked(self) -> None:
        if self._pid != os.getpid():
            self._pid = os.getpid()
            self._by_key = {}

    def after_fork_in_child(self) -> None:
        self._lock = threading.Lock()  # another thread of the parent may have held it
        self._pid = os.getpid()
        self._by_key = {}


def _key(store: StateStore, layout: PipelineLayout) -> Hashable:
    return (store.config, layout.pipeline_id)


KNOWN = KnownStates()
os.register_at_fork(after_in_child=KNOWN.after_fork_in_child)
