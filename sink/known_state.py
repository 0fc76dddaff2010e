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

Kept in a :class:`~state.process_cache.ProcessCache` (per process, thread-safe, bounded).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

from state.layout import PipelineLayout
from state.process_cache import ProcessCache
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

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._cache: ProcessCache[Hashable, KnownState] = ProcessCache(
            "remembered barrier states", capacity=capacity
        )

    def get(self, store: StateStore, layout: PipelineLayout) -> KnownState | None:
        return self._cache.get(_key(store, layout))

    def put(
        self, store: StateStore, layout: PipelineLayout, state: BarrierState, version: str
    ) -> None:
        self._cache.put(_key(store, layout), KnownState(state, version))

    def forget(self, store: StateStore, layout: PipelineLayout) -> None:
        self._cache.discard(_key(store, layout))

    def clear(self) -> None:
        self._cache.clear()


def _key(store: StateStore, layout: PipelineLayout) -> Hashable:
    return (store.config, layout.pipeline_id)


KNOWN = KnownStates()
