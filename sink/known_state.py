"""The barrier state a commit process last read or wrote, per pipeline.

Spark runs every commit of a query in one reused Python worker, so the state the last
commit left behind is, as a rule, what the next commit would read. An exactly-once commit
may therefore start from it instead of reading (:meth:`sink.barrier.Barrier.commit`); its
first write, the compare-and-swap that records the bundle in flight, confirms it, and
nothing (a dead letter included) is written before that swap (docs/PROTOCOL.md, "A
commit's decisions").

Kept in a :class:`~state.process_cache.ProcessCache` (per process, thread-safe, bounded).
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import replace

from state.layout import PipelineLayout
from state.process_cache import ProcessCache
from state.protocol.barrier_state import HeldState
from state.stores import StateStore

#: How many pipelines a process remembers (a commit process serves one or a few).
CAPACITY = 64


class KnownStates:
    """The remembered states of one process, by store configuration and pipeline."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._cache: ProcessCache[Hashable, HeldState] = ProcessCache(
            "remembered barrier states", capacity=capacity
        )

    def get(self, store: StateStore, layout: PipelineLayout) -> HeldState | None:
        """The state this process remembers for the pipeline (marked ``remembered``)."""
        return self._cache.get(_key(store, layout))

    def put(self, store: StateStore, layout: PipelineLayout, held: HeldState) -> None:
        """Remember ``held``, the state a swap of this process just wrote or read."""
        assert held.version is not None, "only a stored state is remembered"
        self._cache.put(_key(store, layout), replace(held, remembered=True))

    def forget(self, store: StateStore, layout: PipelineLayout) -> None:
        self._cache.discard(_key(store, layout))

    def clear(self) -> None:
        self._cache.clear()


def _key(store: StateStore, layout: PipelineLayout) -> Hashable:
    return (store.config, layout.pipeline_id)


KNOWN = KnownStates()
