"""Who may commit a pipeline: the ``owner`` of its barrier state, and every swap of it.

Zombie fencing works like a Kafka producer epoch (docs/PROTOCOL.md, "Ownership"):

* the first commit of a driver run *claims* the pipeline (:meth:`Ownership.claim`): it
  creates the run's marker ``barrier/runs/<run_id>`` and swaps itself in as the owner with
  the next ``generation``. A run whose marker exists but which is not the owner was
  superseded; a run that finds a newer run's marker is fenced;
* with ``fencing.token`` a lower token than the recorded one is fenced; a *driver claim*
  (the snapshot coordinator recorded its token as the owner before the query ran,
  :func:`state.protocol.fencing.claim_barrier`) is turned into this run's claim;
* every change of the barrier state is a compare-and-swap on the version that was read
  (:meth:`Ownership.swap`). A lost swap is never retried blindly: if another run owns the
  pipeline now, this one is fenced (:class:`~state.errors.PipelineFenced`); otherwise the
  commit failed (:class:`~state.errors.CommitFailed`). A swap whose outcome the store
  cannot establish is :class:`~state.errors.CommitStateUnknown`: only a restart, through
  the in-flight record, resolves it.

Nothing here delivers or deletes; the barrier (:mod:`sink.barrier`) decides what to do
with a claim.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from sink.options import SinkOptions
from state.errors import (
    CommitFailed,
    CommitStateUnknown,
    ConcurrentModification,
    KeyExists,
    PipelineFenced,
    StoreUnavailable,
)
from state.layout import PipelineLayout
from state.protocol.barrier_state import load_barrier_state, read_barrier_state
from state.records.barrier import BarrierState, Owner, RunMarker
from state.stores import StateStore

# A fence is one of the barrier's decisions: logged with them (docs/sink.md, "Log and metrics").
log = logging.getLogger("sink.barrier")


class StaleState(Exception):
    """A swap from a remembered barrier state lost: the state changed since it was
    remembered. Nothing was written; the caller starts again from a read."""


@dataclass(frozen=True)
class Claim:
    """The barrier state after :meth:`Ownership.claim`, and its version.

    ``took_over``: the claim swapped this run in over an earlier state (a new run of the
    query, or a takeover); what earlier runs staged may now be swept.
    """

    state: BarrierState
    version: str
    took_over: bool


def claimant(run_id: str | None, query_id: str) -> str:
    """The id a run claims the pipeline under: its run id, else one derived from the query."""
    return run_id or f"query-{query_id}"


class Ownership:
    """The owner checks and swaps of one pipeline's barrier state (module docstring)."""

    def __init__(
        self,
        options: SinkOptions,
        store: StateStore,
        layout: PipelineLayout,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.options = options
        self.store = store
        self.layout = layout
        self.clock = clock

    def claim(
        self, state: BarrierState, version: str | None, parts_run: str | None, query_id: str
    ) -> Claim:
        """Make this run the owner, or raise :class:`PipelineFenced` if it was superseded.

        ``state``/``version`` are what the commit read (``version`` None: no state yet).
        An owner that is already this run (with this fencing token) is returned unchanged.
        """
        run_id = claimant(parts_run, query_id)
        token = self.options.fencing_token
        owner = state.owner
        if (
            owner is not None
            and token is not None
            and owner.token is not None
            and token < owner.token
        ):
            raise self.fenced(owner, run_id, f"its fencing.token {token} < {owner.token}")
        if owner is not None and owner.run_id == run_id and (token is None or token == owner.token):
            assert version is not None
            return Claim(state, version, took_over=False)
        marker = self.layout.barrier_run(run_id)
        if (
            owner is not None
            and owner.run_id != run_id
            and self.store.get_or_none(marker) is not None
        ):
            raise self.fenced(owner, run_id, "a newer run took the pipeline over")
        generation = (owner.generation + 1) if owner else 1
        if owner is None or owner.run_id != run_id:
            try:
                self.store.create_json(
                    marker, RunMarker(run_id, query_id, self.clock(), generation).to_json()
                )
            except KeyExists:
                raise self.fenced(owner, run_id, "this run was superseded") from None
        new_owner = Owner(
            run_id=run_id,
            query_id=query_id,
            generation=generation,
            since=self.clock(),
            token=token if token is not None else (owner.token if owner else None),
        )
        claimed = replace(state, owner=new_owner)
        if version is None:
            try:
                new_version = self.store.create_json(self.layout.barrier_state, claimed.to_json())
            except KeyExists:
                current, _ = load_barrier_state(self.store, self.layout)
                raise self.fenced(current.owner, run_id, "another run claimed it first") from None
            return Claim(claimed, new_version, took_over=False)
        claimed, new_version = self.swap(
            state, claimed, version, new_owner, "claim the pipeline", claiming=True
        )
        return Claim(claimed, new_version, took_over=True)

    def swap(  # noqa: PLR0913 - the swap, and what its errors must name
        self,
        old: BarrierState,
        new: BarrierState,
        version: str,
        me: Owner | None,
        what: str,
        *,
        claiming: bool = False,
        remembered: bool = False,
    ) -> tuple[BarrierState, str]:
        """Compare-and-swap the barrier state from ``old`` (at ``version``) to ``new``.

        The store retries the request itself and resolves a swap whose answer was lost
        (S3: by the write's token). A lost race is never retried: it raises
        :class:`PipelineFenced` when another run owns the pipeline now (or when this swap
        was a claim), :class:`CommitFailed` otherwise. A swap from a ``remembered`` state
        that loses raises :class:`StaleState` instead: that state was not read by this
        commit, so the loss only says it is out of date. An outcome the store cannot
        establish raises :class:`CommitStateUnknown`.
        """
        key = self.layout.barrier_state
        try:
            return new, self.store.compare_and_swap_json(key, new.to_json(), version)
        except ConcurrentModification:
            if remembered:
                raise StaleState from None
            now = read_barrier_state(self.store, self.layout)
            if now.owner is not None and (me is None or now.owner.run_id != me.run_id or claiming):
                raise self.fenced(
                    now.owner, me.run_id if me else "?", f"it lost the race to {what}"
                ) from None
            raise CommitFailed(
                f"barrier: {self.store.uri}/{key} changed while this driver tried to {what}; "
                "not retried"
            ) from None
        except StoreUnavailable as err:  # StoreWriteUnknown included
            raise CommitStateUnknown(
                f"barrier: could not {what}: {err}; restarting the query resolves it"
            ) from err

    def fenced(self, owner: Owner | None, run_id: str, why: str) -> PipelineFenced:
        """The error that stops run ``run_id`` because ``owner`` holds the pipeline (logged)."""
        err = self._fenced_error(owner, run_id, why)
        log.warning("%s", err)
        return err

    def _fenced_error(self, owner: Owner | None, run_id: str, why: str) -> PipelineFenced:
        pipeline = self.options.pipeline_id
        if owner is None:
            return PipelineFenced(
                f"barrier: pipeline {pipeline!r}: this driver (run {run_id}) is fenced: {why}"
            )
        since = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(owner.since))
        if owner.is_driver_claim:
            return PipelineFenced(
                f"barrier: pipeline {pipeline!r} was taken by driver "
                f"{owner.driver} with fencing token {owner.token} (generation "
                f"{owner.generation}) at {since}, before its query's first commit; this driver "
                f"(run {run_id}) is a zombie and stops ({why})"
            )
        return PipelineFenced(
            f"barrier: pipeline {pipeline!r} is owned by run {owner.run_id} "
            f"(query {owner.query_id}, generation {owner.generation}) since {since}; this "
            f"driver (run {run_id}) is a zombie and stops ({why})"
        )
