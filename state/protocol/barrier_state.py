"""The barrier state (``<pipeline>/barrier/state.json``) and the run markers: the one writer.

Every change of the barrier state is a compare-and-swap on the version that was read, made
here and nowhere else (docs/PROTOCOL.md, "Barrier state"):

* **a run's claim** (:meth:`BarrierStateStore.claim_run`): the first commit of a driver run
  creates the run's marker ``barrier/runs/<run_id>`` and swaps itself in as the owner with
  the next ``generation``, like a Kafka producer epoch. A run whose marker exists but which
  is not the owner was superseded; a run that finds a newer run's marker is fenced. With a
  fencing token, a lower token than the recorded one is fenced too. A claim whose swap
  loses to the run it replaces (that run committed meanwhile) claims again.
* **a driver's claim** (:meth:`BarrierStateStore.claim_driver`): the snapshot coordinator
  records itself, with the fencing token it just took, as the owner before its query runs,
  so that a zombie driver is refused at its very next commit, not only after the new
  query's first one. The new query's first commit turns it into an ordinary run claim.
* **the owner-checked swap** (:meth:`BarrierStateStore.swap`) of every commit step: a lost
  swap is never retried blindly. If another run owns the pipeline now (or the swap was a
  claim) this run is fenced (:class:`~state.errors.PipelineFenced`); otherwise the commit
  failed (:class:`~state.errors.CommitFailed`). A swap from a *remembered* state that
  loses only says the memory is out of date (:class:`StaleState`). A swap whose outcome the
  store cannot establish is :class:`~state.errors.CommitStateUnknown`: only a restart,
  through the in-flight record, resolves it.
* **the skip** (:meth:`BarrierStateStore.skip`) of an in-flight bundle whose staged parts
  are lost, acknowledged by an operator.

Readers that only look (the write tasks, the coordinator, the CLI, tests) use
:func:`read_barrier_state`; a writer reads with :func:`load_barrier_state`, which also
returns the version its swap needs. Nothing here delivers or deletes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from state.errors import (
    CommitFailed,
    CommitStateUnknown,
    ConcurrentModification,
    KeyExists,
    PipelineFenced,
    StateError,
    StoreUnavailable,
)
from state.layout import PipelineLayout
from state.records.barrier import BarrierState, Owner, RunMarker, SkippedBundle
from state.records.codec import decode
from state.retry import Retry, cas_loop
from state.stores import StateStore

# A fence is one of the barrier's decisions: logged with them (docs/sink.md, "Log and metrics").
log = logging.getLogger("sink.barrier")


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


class StaleState(Exception):
    """A swap from a remembered barrier state lost: the state changed since it was
    remembered. Nothing was written; the caller starts again from a read."""


@dataclass(frozen=True)
class Claim:
    """The barrier state after :meth:`BarrierStateStore.claim_run`, and its version.

    ``took_over``: the claim swapped this run in over an earlier state (a new run of the
    query, or a takeover); what earlier runs staged may now be swept.
    """

    state: BarrierState
    version: str
    took_over: bool


def claimant(run_id: str | None, query_id: str) -> str:
    """The id a run claims the pipeline under: its run id, else one derived from the query."""
    return run_id or f"query-{query_id}"


class BarrierStateStore:
    """Every write of one pipeline's barrier state and run markers (module docstring)."""

    def __init__(
        self,
        store: StateStore,
        layout: PipelineLayout,
        *,
        clock: Callable[[], float] = time.time,
        races: Retry | None = None,
    ) -> None:
        """``clock`` stamps owners and run markers; ``races`` retries what a lost race
        makes a claim do again (default :func:`~state.retry.cas_loop`)."""
        self.store = store
        self.layout = layout
        self.clock = clock
        self.races = races or cas_loop()

    @property
    def where(self) -> str:
        """The state's address, for messages."""
        return f"{self.store.uri}/{self.layout.barrier_state}"

    def load(self) -> tuple[BarrierState, str | None]:
        """The state and its version (``None``: no state yet)."""
        return load_barrier_state(self.store, self.layout)

    # --- claims ----------------------------------------------------------------------------

    def claim_run(
        self,
        state: BarrierState,
        version: str | None,
        run_id: str,
        query_id: str,
        token: int | None,
    ) -> Claim:
        """Make run ``run_id`` (a :func:`claimant` id) the owner, or raise
        :class:`PipelineFenced` if it was superseded or its ``token`` is lower than the
        recorded one.

        ``state``/``version`` are what the commit read (``version`` None: no state yet).
        An owner that is already this run (with this fencing token) is returned unchanged.
        """
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
        if version is None:
            claimed = replace(state, owner=self._owner(run_id, query_id, generation, token, owner))
            try:
                new_version = self.store.create_json(self.layout.barrier_state, claimed.to_json())
            except KeyExists:
                current, _ = self.load()
                raise self.fenced(current.owner, run_id, "another run claimed it first") from None
            return Claim(claimed, new_version, took_over=False)
        return self._swap_in(state, version, run_id, query_id, token)

    def _swap_in(
        self, state: BarrierState, version: str, run_id: str, query_id: str, token: int | None
    ) -> Claim:
        """Swap run ``run_id`` (whose marker exists) in as the owner over ``state``.

        A swap can lose to the run it replaces: the old owner's ordinary commit lands
        between this claim's read and its swap. The claim then lost to an older run, not a
        newer one, so it is made again from a fresh read of the state (a lost race can only
        repeat while the old run keeps committing; :func:`~state.retry.cas_loop` bounds
        it). A swap that loses to anything else, another claim or an operator, fences.
        """
        replaced = state.owner
        read = [(state, version)]  # the commit's read; after a lost race, a fresh one

        def once() -> Claim:
            state, version = read[-1]
            generation = (replaced.generation + 1) if replaced else 1
            claimed = replace(
                state, owner=self._owner(run_id, query_id, generation, token, replaced)
            )
            try:
                new_version = self.store.compare_and_swap_json(
                    self.layout.barrier_state, claimed.to_json(), version
                )
            except ConcurrentModification:
                fresh, fresh_version = self.load()
                if fresh_version is None or fresh.owner != replaced:
                    raise self.fenced(
                        fresh.owner, run_id, "it lost the race to claim the pipeline"
                    ) from None
                read.append((fresh, fresh_version))
                raise  # the owner it replaces committed meanwhile: claim again
            except StoreUnavailable as err:  # StoreWriteUnknown included
                raise CommitStateUnknown(
                    f"barrier: could not claim the pipeline: {err}; restarting the query "
                    "resolves it"
                ) from err
            return Claim(claimed, new_version, took_over=True)

        try:
            return self.races(once)
        except ConcurrentModification:
            raise self.fenced(
                replaced, run_id, "it lost the race to claim the pipeline every time"
            ) from None

    def _owner(
        self,
        run_id: str,
        query_id: str,
        generation: int,
        token: int | None,
        replaced: Owner | None,
    ) -> Owner:
        return Owner(
            run_id=run_id,
            query_id=query_id,
            generation=generation,
            since=self.clock(),
            token=token if token is not None else (replaced.token if replaced else None),
        )

    def claim_driver(self, token: int, *, driver: str) -> Owner:
        """Record driver ``driver`` (``host:pid:id``), holding fencing token ``token``, as
        the owner before its query runs; returns the owner.

        The owner becomes a driver claim (:meth:`Owner.driver_claim`) with the next
        generation, so every earlier run is superseded at once and a commit with a lower
        token is refused. Idempotent for the same token; :class:`PipelineFenced` if a
        higher token is already recorded. The state is created if absent; a lost race
        reads it again (:func:`~state.retry.cas_loop`).
        """
        key = self.layout.barrier_state

        def once() -> Owner:
            state, version = self.load()
            owner = state.owner
            if owner is not None and owner.token is not None:
                if owner.token > token:
                    raise PipelineFenced(
                        f"pipeline '{self.layout.pipeline_id}': the barrier ({self.where}) is "
                        f"owned with fencing token {owner.token} > ours {token}; this driver "
                        "must stop"
                    )
                if owner.token == token:
                    return owner
            generation = (owner.generation + 1) if owner else 1
            claimed = Owner.driver_claim(driver, token, generation, self.clock())
            new = replace(state, owner=claimed)
            if version is None:
                self.store.create_json(key, new.to_json())
            else:
                self.store.compare_and_swap_json(key, new.to_json(), version)
            return claimed

        return self.races(once)

    def run_generation(self, run_id: str) -> int | None:
        """The generation run ``run_id`` claimed (0 for a marker written before markers
        carried it); None if it never claimed."""
        key = self.layout.barrier_run(run_id)
        hit = self.store.get_or_none(key)
        if hit is None:
            return None
        marker = decode(hit.data, RunMarker.from_json, f"{self.store.uri}/{key}")
        return 0 if marker.generation is None else marker.generation

    # --- transitions -----------------------------------------------------------------------

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
        """Compare-and-swap the state from ``old`` (at ``version``) to ``new``, as ``me``.

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

    def skip(self, state: BarrierState, version: str, skipped: SkippedBundle) -> BarrierState:
        """Skip the in-flight bundle of ``state`` (at ``version``), whose loss an operator
        acknowledged: ``GT_last`` moves to it, the in-flight record is cleared and the loss
        is recorded under ``skipped``, in one compare-and-swap.

        Raises :class:`~state.errors.StateError` if the state changed meanwhile (a driver
        is running the pipeline); nothing changed then.
        """
        inflight = state.inflight
        assert inflight is not None, "only an in-flight bundle is skipped"
        new = replace(
            state,
            gt_last=max(state.gt_last, inflight.epoch),
            inflight=None,
            skipped=(*state.skipped, skipped),
        )
        try:
            self.store.compare_and_swap_json(self.layout.barrier_state, new.to_json(), version)
        except ConcurrentModification:
            raise StateError(
                f"barrier: {self.where} changed while skipping bundle {inflight.bundle_id}: a "
                "driver is running the pipeline; stop it and try again. Nothing changed"
            ) from None
        return new

    # --- fencing ---------------------------------------------------------------------------

    def fenced(self, owner: Owner | None, run_id: str, why: str) -> PipelineFenced:
        """The error that stops run ``run_id`` because ``owner`` holds the pipeline (logged)."""
        err = self._fenced_error(owner, run_id, why)
        log.warning("%s", err)
        return err

    def _fenced_error(self, owner: Owner | None, run_id: str, why: str) -> PipelineFenced:
        pipeline = self.layout.pipeline_id
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
