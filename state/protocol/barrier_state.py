"""Reading the barrier state (``<pipeline>/barrier/state.json``) from a store.

The sink's commit reads it with its version, for the compare-and-swap that follows
(:func:`load_barrier_state`); everyone else only looks (:func:`read_barrier_state`): the
write tasks for ``GT_last``, the snapshot coordinator for the in-flight bundle, tests.
"""

from __future__ import annotations

from state.layout import PipelineLayout
from state.records.barrier import BarrierState
from state.records.codec import decode
from state.stores import StateStore


def load_barrier_state(
    store: StateStore, layout: PipelineLayout
) -> tuple[BarrierState, str | None]:
    """The barrier state and its version; the empty state and ``None`` before the first
    commit."""
    key = layout.barrier_state
    hit = store.get_or_none(key)
    if hit is None:
        return BarrierState(), None
    return decode(hit.data, BarrierState.from_json, f"{store.uri}/{key}"), hit.version


def read_barrier_state(store: StateStore, layout: PipelineLayout) -> BarrierState:
    """The barrier state (the empty state before the first commit)."""
    return load_barrier_state(store, layout)[0]
