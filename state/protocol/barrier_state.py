"""The barrier state (``<pipeline>/barrier/state.json``) and the run claims: the one writer.

The rules are docs/PROTOCOL.md's ("Barrier state", "A run's claim", "A commit's
decisions"); this module holds the two pure decisions, :func:`decide_claim` (may a run
own the pipeline) and :func:`decide_commit` (what a commit does with its bundle), and
every write of the state: :meth:`BarrierStateStore.claim_run`,
:meth:`~BarrierStateStore.claim_driver`, the owner-checked
:meth:`~BarrierStateStore.swap`, :meth:`~BarrierStateStore.prune_claims` and the
operator's :meth:`~BarrierStateStore.skip`, and the committed epoch of a batch with
nothing to deliver (:meth:`~BarrierStateStore.record_committed`, every
:data:`COMMITTED_STEP` epochs: :func:`decide_committed`, pure). A state and the version
a swap expects travel together as :class:`HeldState`.

Readers that only look (the write tasks, the coordinator, the CLI, tests) use
:func:`read_barrier_state`. Nothing here delivers or logs; only the pruning deletes.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from state.errors import (
    CommitFailed,
    CommitStateUnknown,
    ConcurrentModification,
    KeyExists,
    PipelineFenced,
    StaleState,
    StateError,
    StoreUnavailable,
)
from state.layout import PipelineLayout
from state.records.barrier import BarrierState, Owner, RunMarker, SkippedBundle
from state.records.codec import decode
from state.retry import Retry, cas_loop
from state.stores import StateStore

#: The claims :meth:`BarrierStateStore.prune_claims` keeps below the owner's generation: the
#: run it replaced (directly, or through a driver's claim) may leave staged parts after
#: the owner's first sweep (a zombie's last batch), which the owner deletes only while that
#: run's claim says it claimed first.
CLAIMS_KEPT = 2


@dataclass(frozen=True)
class HeldState:
    """A barrier state and the version its next compare-and-swap expects (``None``: no
    state stored yet).

    ``remembered``: this process remembers it from its last commit (:mod:`sink.known_state`)
    rather than having read it in this commit; a swap from it that loses raises
    :class:`~state.errors.StaleState`, never a fence (docs/PROTOCOL.md, "A commit's
    decisions").
    """

    state: BarrierState
    version: str | None
    remembered: bool = False


def load_barrier_state(store: StateStore, layout: PipelineLayout) -> HeldState:
    """The barrier state and its version; the empty state and ``None`` before the first
    commit."""
    key = layout.barrier_state
    hit = store.get_or_none(key)
    if hit is None:
        return HeldState(BarrierState(), None)
    return HeldState(decode(hit.data, BarrierState.from_json, f"{store.uri}/{key}"), hit.version)


def read_barrier_state(store: StateStore, layout: PipelineLayout) -> BarrierState:
    """The barrier state (the empty state before the first commit)."""
    return load_barrier_state(store, layout).state


def start_generation(store: StateStore, layout: PipelineLayout) -> int:
    """The generation a run starting now claims over: the owner's (0 if it has none, or
    before the first commit). Read once per run, when Spark pickles its commit-side sink."""
    owner = read_barrier_state(store, layout).owner
    return 0 if owner is None else owner.generation


@dataclass(frozen=True)
class ClaimDecision:
    """What a commit's run may do with the pipeline (:func:`decide_claim`).

    ``owns``: the run is the owner (``generation``); nothing to write. ``claims``: it swaps
    itself in as ``generation``. ``fenced``: it stops, ``why``.
    """

    action: Literal["owns", "claims", "fenced"]
    generation: int = 0
    why: str = ""


def decide_claim(
    owner: Owner | None,
    run_id: str,
    token: int | None,
    start: int | None,
    *,
    marker_exists: bool = False,
) -> ClaimDecision:
    """Whether run ``run_id`` (a :func:`claimant` id, holding fencing ``token``, started at
    generation ``start``) owns the pipeline, claims it, or is fenced, given its ``owner``.

    * a ``token`` lower than the owner's: fenced;
    * the owner is this run with this token: it owns (whatever it started at);
    * the owner is this run with another token: it claims again;
    * otherwise it claims the next generation only if the owner's generation (0 without an
      owner) is still ``start``: no claim happened since it started. Generations only
      grow: a run that finds another generation was superseded, or lost the race with a
      run that started with it, and can never claim again.

    ``start`` None: the run does not know where it started (a release before claims); it
    is fenced if its marker exists (``marker_exists``), else claims the next generation.
    """
    generation = 0 if owner is None else owner.generation
    why: str | None = None
    if owner is not None and token is not None and owner.token is not None and token < owner.token:
        why = f"its fencing.token {token} < {owner.token}"
    elif owner is not None and owner.run_id == run_id:
        if token is None or token == owner.token:
            return ClaimDecision("owns", generation)
    elif start is None:
        if marker_exists:
            why = "a newer run took the pipeline over"
    elif generation != start and owner is None:
        why = f"the barrier state was made anew after this run started at generation {start}"
    elif generation != start:
        why = (
            f"the pipeline was claimed at generation {generation} after this run started at "
            f"generation {start}"
        )
    if why is not None:
        return ClaimDecision("fenced", why=why)
    return ClaimDecision("claims", generation + 1)


#: How far an empty bundle's epoch must be past the barrier's recorded progress before the
#: barrier records it as committed (:func:`decide_committed`): one swap per this many empty
#: bundles, not one each. The compaction's unit (``epoch_floor.SEGMENT_EPOCHS``): the
#: recorded progress trails the committed epochs by fewer epochs than a segment holds.
COMMITTED_STEP = 16


def decide_committed(state: BarrierState, epoch: int) -> BarrierState | None:
    """The state that records ``epoch`` as committed, after its batch committed with
    nothing to deliver or refuse (an empty bundle), or None if
    the swap is not worth making yet.

    Pruning and compaction go only as far as the barrier's progress
    (:attr:`~state.records.barrier.BarrierState.progress`), which a delivery advances
    through ``GT_last``; without this, a query whose output is empty or sparse would keep
    every epoch since its last output row. An empty batch already costs the commit its
    reads, so a swap for each would add a write to every one: the epoch is recorded only
    once it is :data:`COMMITTED_STEP` epochs past the progress recorded, so the log keeps
    at most that many epochs more than its window. Nothing in flight may be passed over:
    with a bundle in flight the commit resolves it first.
    """
    if state.inflight is not None or epoch - state.progress < COMMITTED_STEP:
        return None
    return replace(state, committed=epoch)


CommitAction = Literal["read", "no-data", "dropped", "empty", "advance"]


def decide_commit(  # noqa: PLR0913 - the facts a commit decides on, each named at the call
    epoch: int | None,
    held: HeldState,
    *,
    rows: int,
    refused: int,
    run_id: str,
    token: int | None,
    exactly_once: bool,
) -> CommitAction:
    """What the commit of a batch that read ``epoch`` (None: no batch record), with
    ``rows`` rows to deliver and ``refused`` rows its target refused, does from ``held``
    (docs/PROTOCOL.md, "A commit's decisions"):

    * from a *remembered* state: ``advance`` only if an exactly-once commit of run
      ``run_id`` (a :func:`claimant` id, holding fencing ``token``) owns it with nothing in
      flight and the bundle is above ``GT_last`` with something to settle; anything else
      ``read`` (the state is read, and the read's decisions are made);
    * from a state read by this commit, claimed by the run and with nothing in flight:
      ``no-data`` without a batch record, ``dropped`` at or below ``GT_last``, ``empty``
      with no row to deliver or refused, else ``advance``.
    """
    if held.remembered:
        owner, state = held.state.owner, held.state
        mine = (
            exactly_once
            and state.inflight is None
            and owner is not None
            and owner.run_id == run_id
            and (token is None or token == owner.token)
        )
        ahead = epoch is not None and epoch > state.gt_last and rows + refused > 0
        return "advance" if mine and ahead else "read"
    if epoch is None:
        return "no-data"
    if epoch <= held.state.gt_last:
        return "dropped"
    if rows == 0 and refused == 0:
        return "empty"
    return "advance"


@dataclass(frozen=True)
class Claim:
    """What :meth:`BarrierStateStore.claim_run` left: the state it holds now.

    ``took_over``: the claim swapped this run in over an earlier state (a new run of the
    query, or a takeover); what earlier runs staged may now be swept.
    """

    held: HeldState
    took_over: bool


def claimant(run_id: str | None, query_id: str) -> str:
    """The id a run claims the pipeline under: its run id, else one derived from the query."""
    return run_id or f"query-{query_id}"


class BarrierStateStore:
    """Every write of one pipeline's barrier state, run claims and run markers (module
    docstring)."""

    def __init__(
        self,
        store: StateStore,
        layout: PipelineLayout,
        *,
        clock: Callable[[], float] = time.time,
        races: Retry | None = None,
    ) -> None:
        """``clock`` stamps owners and claims; ``races`` retries what a lost race
        makes a claim do again (default :func:`~state.retry.cas_loop`)."""
        self.store = store
        self.layout = layout
        self.clock = clock
        self.races = races or cas_loop()

    @property
    def where(self) -> str:
        """The state's address, for messages."""
        return f"{self.store.uri}/{self.layout.barrier_state}"

    def load(self) -> HeldState:
        """The state and its version (``None``: no state yet)."""
        return load_barrier_state(self.store, self.layout)

    # --- claims ----------------------------------------------------------------------------

    def claim_run(
        self,
        held: HeldState,
        run_id: str,
        query_id: str,
        token: int | None,
        *,
        start_generation: int | None = None,
    ) -> Claim:
        """Make run ``run_id`` (a :func:`claimant` id) the owner, or raise
        :class:`PipelineFenced` (:func:`decide_claim`).

        ``held`` is what the commit read (its version None: no state yet);
        ``start_generation`` is the generation the run started at (:func:`start_generation`),
        None for a run that does not know it, which its marker fences instead. An owner
        that is already this run (with this fencing token) is returned unchanged. Taking
        the pipeline from another run creates this run's claim (or its marker) first.
        """
        state, version = held.state, held.version
        owner = state.owner
        marker = self.layout.barrier_run(run_id)
        looks = start_generation is None and owner is not None and owner.run_id != run_id
        decision = decide_claim(
            owner,
            run_id,
            token,
            start_generation,
            marker_exists=looks and self.store.get_or_none(marker) is not None,
        )
        if decision.action == "fenced":
            raise self.fenced(owner, run_id, decision.why)
        if decision.action == "owns":
            assert version is not None
            return Claim(HeldState(state, version), took_over=False)
        if owner is None or owner.run_id != run_id:
            claimed_as = RunMarker(run_id, query_id, self.clock(), decision.generation)
            if start_generation is None:
                try:
                    self.store.create_json(marker, claimed_as.to_json())
                except KeyExists:
                    raise self.fenced(owner, run_id, "this run was superseded") from None
            else:
                # KeyExists: this run's claim of this generation, recorded before
                with contextlib.suppress(KeyExists):
                    self.store.create_json(
                        self.layout.barrier_claim(decision.generation, run_id),
                        claimed_as.to_json(),
                    )
        if version is None:
            claimed = replace(
                state, owner=self._owner(run_id, query_id, decision.generation, token, owner)
            )
            try:
                new_version = self.store.create_json(self.layout.barrier_state, claimed.to_json())
            except KeyExists:
                current = self.load().state
                raise self.fenced(current.owner, run_id, "another run claimed it first") from None
            return Claim(HeldState(claimed, new_version), took_over=False)
        return self._swap_in(state, version, run_id, query_id, token)

    def _swap_in(
        self, state: BarrierState, version: str, run_id: str, query_id: str, token: int | None
    ) -> Claim:
        """Swap run ``run_id`` (whose claim or marker exists) in as the owner over ``state``.

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
                fresh = self.load()
                if fresh.version is None or fresh.state.owner != replaced:
                    raise self.fenced(
                        fresh.state.owner, run_id, "it lost the race to claim the pipeline"
                    ) from None
                read.append((fresh.state, fresh.version))
                raise  # the owner it replaces committed meanwhile: claim again
            except StoreUnavailable as err:  # StoreWriteUnknown included
                raise CommitStateUnknown(
                    f"barrier: could not claim the pipeline: {err}; restarting the query "
                    "resolves it"
                ) from err
            return Claim(HeldState(claimed, new_version), took_over=True)

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
            held = self.load()
            state, version = held.state, held.version
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

    def claimed_runs(self) -> dict[str, int]:
        """The runs whose claims are kept, each with the newest generation it claimed."""
        runs: dict[str, int] = {}
        for key in self.store.list(self.layout.barrier_claims_prefix):
            claim = self.layout.claim_of(key)
            if claim is not None:
                generation, run_id = claim
                runs[run_id] = max(generation, runs.get(run_id, 0))
        return runs

    def run_generation(self, run_id: str) -> int | None:
        """The generation run ``run_id`` claimed by its marker, written by a run without a
        start generation (0 for a marker written before markers carried it); None if it has
        none."""
        key = self.layout.barrier_run(run_id)
        hit = self.store.get_or_none(key)
        if hit is None:
            return None
        marker = decode(hit.data, RunMarker.from_json, f"{self.store.uri}/{key}")
        return 0 if marker.generation is None else marker.generation

    def prune_claims(self, state: BarrierState | None = None) -> int:
        """Delete the claims more than :data:`CLAIMS_KEPT` generations below the owner of
        ``state`` (read if None); returns how many. Markers (``barrier/runs/``) are kept.

        A pruned claim's run is fenced by the generation it started at, whatever it does
        next. Store errors are raised; a pruning that stops halfway is finished by the next.
        """
        if state is None:
            state = read_barrier_state(self.store, self.layout)
        if state.owner is None:
            return 0
        below = state.owner.generation - CLAIMS_KEPT
        doomed = [
            key
            for key in self.store.list(self.layout.barrier_claims_prefix)
            if (claim := self.layout.claim_of(key)) is not None and claim[0] < below
        ]
        self.store.delete_many(doomed)
        return len(doomed)

    # --- transitions -----------------------------------------------------------------------

    def swap(
        self,
        held: HeldState,
        new: BarrierState,
        me: Owner | None,
        what: str,
        *,
        claiming: bool = False,
    ) -> HeldState:
        """Compare-and-swap the state from ``held`` to ``new``, as ``me``; the state held
        after it.

        The store retries the request itself and resolves a swap whose answer was lost
        (S3: by the write's token). A lost race is never retried: it raises
        :class:`PipelineFenced` when another run owns the pipeline now (or when this swap
        was a claim), :class:`CommitFailed` otherwise. A swap from a remembered state
        (``held.remembered``) that loses raises :class:`~state.errors.StaleState` instead:
        that state was not read by this commit, so the loss only says it is out of date.
        An outcome the store cannot establish raises :class:`CommitStateUnknown`.
        """
        key = self.layout.barrier_state
        assert held.version is not None, "a swap needs the version it replaces"
        try:
            return HeldState(
                new, self.store.compare_and_swap_json(key, new.to_json(), held.version)
            )
        except ConcurrentModification:
            if held.remembered:
                raise StaleState(
                    f"barrier: {self.store.uri}/{key} changed since this process remembered "
                    f"it; {what} starts again from a read"
                ) from None
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

    def record_committed(self, held: HeldState, epoch: int) -> HeldState:
        """After a batch of ``epoch`` committed with nothing to deliver: record ``epoch``
        as committed if :func:`decide_committed` says the swap is worth it (an
        owner-checked :meth:`swap`, with its errors), else nothing is written. Returns the
        state held after it."""
        new = decide_committed(held.state, epoch)
        if new is None:
            return held
        return self.swap(held, new, held.state.owner, f"record epoch {epoch} committed")

    def skip(self, held: HeldState, skipped: SkippedBundle) -> BarrierState:
        """Skip the in-flight bundle of ``held``, whose loss an operator
        acknowledged: ``GT_last`` moves to it, the in-flight record is cleared and the loss
        is recorded under ``skipped``, in one compare-and-swap.

        Raises :class:`~state.errors.StateError` if the state changed meanwhile (a driver
        is running the pipeline); nothing changed then.
        """
        state, version = held.state, held.version
        inflight = state.inflight
        assert inflight is not None and version is not None, "only an in-flight bundle is skipped"
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
        """The error that stops run ``run_id`` because ``owner`` holds the pipeline (the
        barrier logs it with its decisions: :mod:`sink.barrier`)."""
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
