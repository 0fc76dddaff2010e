"""Deleting staged parts that can never be delivered, only under verified ownership.

A part's name carries the run that staged it (:func:`sink.staging.part_run_id`). A run
may delete

* its own parts, unless an in-flight record references them;
* the parts of another run only while it owns the pipeline, and only if that run claimed
  the pipeline *before* it (the generation of the run's claim, or of its marker for a run
  of a release before claims, is at most the deleting run's own), never parts an
  in-flight record references, never parts of a run that has not claimed (a driver that
  may be starting up). A run whose claim was pruned (more than ``CLAIMS_KEPT``
  generations below the owner: :mod:`state.protocol.barrier_state`) looks like one that
  has not claimed: the parts it staged after the sweeps of the runs that superseded it,
  and never deleted itself (its driver died before its abort), are left to
  ``gtbarrier sweep``.

The owner also sweeps after a commit, every ``staging.sweepEvery`` bundles
(:func:`sweep_due`): a zombie that staged after the claim's sweep and died before its
abort leaves parts that only a later sweep finds. It runs once the bundle is delivered and
``GT_last`` advanced, with the state that swap wrote, so the commit does not wait on it to
be safe and a sweep that fails only leaves the parts to the next one.

Ownership is verified on a barrier state read right before deleting (or the state this
run has just written with a compare-and-swap), never on one read before another run could
have claimed. The generation rule closes the window between that read and the deletion:
a run that claims meanwhile is newer, and its parts are kept. Without it, a zombie driver
cleaning up with a stale state could delete a newer run's in-flight parts, and every
restart would then fail.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sink.staging import UNKNOWN_RUN, Staging, part_run_id
from state.protocol.barrier_state import BarrierStateStore
from state.records.barrier import BarrierState


def sweep_due(bundle_id: int, every: int) -> bool:
    """Whether the owner sweeps superseded runs' parts after committing ``bundle_id``:
    every ``every``-th bundle (``staging.sweepEvery``; 0: never, only at a claim)."""
    return every > 0 and bundle_id % every == 0


@dataclass(frozen=True)
class Authority:
    """What a run may delete, from a verified barrier state.

    ``run_id`` is the run id in the names of its parts (None: the tasks saw none),
    ``generation`` the generation it owns the pipeline with (None: it is not the owner,
    so it deletes only its own parts), ``keep`` the parts an in-flight record references.
    """

    run_id: str | None
    generation: int | None
    keep: frozenset[str]

    @classmethod
    def of(cls, run_id: str | None, claimant: str, state: BarrierState) -> Authority:
        """``claimant`` is the id the run claims the pipeline under (its run id, or a
        stand-in derived from the query id when the tasks saw no run id)."""
        owner = state.owner
        return cls(
            run_id=run_id,
            generation=(
                owner.generation if owner is not None and owner.run_id == claimant else None
            ),
            keep=frozenset(state.inflight.staged_locations if state.inflight else ()),
        )


class StagingCleanup:
    """The deletions of one commit or abort, against one pipeline's staging area."""

    def __init__(self, states: BarrierStateStore, staging: Staging) -> None:
        self.states = states
        self.staging = staging
        self._claimed: dict[str, int | None] = {}
        self._claims: dict[str, int] | None = None  # listed once, when first needed

    def verify(
        self, run_id: str | None, claimant: str, state: BarrierState | None = None
    ) -> Authority:
        """The run's authority: from ``state`` if the caller has just written it with a
        compare-and-swap, else from a fresh read of the barrier state."""
        if state is None:
            state = self.states.load().state
        return Authority.of(run_id, claimant, state)

    def discard(self, locations: Iterable[str], auth: Authority) -> None:
        """Delete parts this run staged (its commit messages), unless in flight."""
        self.staging.delete_many(loc for loc in locations if loc not in auth.keep)

    def clean_batch(self, query_id: str, batch_id: int, auth: Authority) -> None:
        """Delete the batch's leftover parts that can never be delivered (failed task
        attempts of this run; parts of runs superseded by it)."""
        prefix = self.staging.batch_prefix(query_id, batch_id)
        self._clean(self.staging.list(prefix), auth, own_parts=True)

    def sweep(self, auth: Authority) -> None:
        """After a claim: delete every staged part of the runs this one superseded.

        A driver that died leaves the parts of its last batch behind, possibly under a
        query id that will never run again (a deleted checkpoint). This run's own parts
        stay: they are the batch it is committing.
        """
        self._clean(self.staging.list(self.staging.root_prefix), auth, own_parts=False)

    def _clean(self, locations: Iterable[str], auth: Authority, *, own_parts: bool) -> None:
        own = auth.run_id or UNKNOWN_RUN
        doomed: list[str] = []
        for location in locations:
            rid = part_run_id(location)
            if location in auth.keep or rid is None:
                continue
            if (own_parts and rid == own) or self._superseded(rid, auth):
                doomed.append(location)
        self.staging.delete_many(doomed)

    def _superseded(self, rid: str, auth: Authority) -> bool:
        if auth.generation is None or rid == (auth.run_id or UNKNOWN_RUN):
            return False
        if rid not in self._claimed:
            if self._claims is None:
                self._claims = self.states.claimed_runs()
            claim = self._claims.get(rid)
            self._claimed[rid] = claim if claim is not None else self.states.run_generation(rid)
        claimed = self._claimed[rid]
        return claimed is not None and claimed <= auth.generation
