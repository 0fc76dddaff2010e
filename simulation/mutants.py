"""Known bugs put back into the product's code, shared by the mutation tests
(``tests/test_simulation_mutations.py``) and the PCT benchmark (:mod:`simulation.pct_bench`).

Each :class:`Mutant` names the product attribute it replaces, in the module that calls
it (where the product looks it up when it runs, so the simulator runs the replacement) and makes the
replacement from the original; :meth:`Mutant.applied` puts it in place for a ``with``
block, :meth:`Mutant.replacement` gives it to a test's ``monkeypatch``.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from sink import cleanup
from state.coordinator.snapshot import attempt as snapshot_attempt
from state.protocol.barrier_state import BarrierStateStore, HeldState
from state.records.barrier import BarrierState, Owner
from state.records.resume_point import ResumePoint, SnapshotRef


@dataclass(frozen=True)
class Mutant:
    """A bug: ``owner.name`` replaced by ``make(original)``."""

    owner: Any
    name: str
    make: Callable[[Any], Any]

    def replacement(self) -> Any:
        """The buggy attribute, made from the one in place now."""
        return self.make(self.owner.__dict__[self.name])

    @contextlib.contextmanager
    def applied(self) -> Iterator[None]:
        """The bug in place for the block; the original back afterwards."""
        original = self.owner.__dict__[self.name]
        setattr(self.owner, self.name, self.make(original))
        try:
            yield
        finally:
            setattr(self.owner, self.name, original)


def _accepted_anywhere(accepted: Callable[..., ResumePoint]) -> Callable[..., ResumePoint]:
    def accepted_anywhere(
        current: ResumePoint | None, snapshot: SnapshotRef, **fields: Any
    ) -> ResumePoint:
        # No generation check: the snapshot joins whatever generation the point is in.
        if current is not None:
            fields["generation"] = current.generation
        return accepted(current, snapshot, **fields)

    return accepted_anywhere


#: Mutation 2: a snapshot accepted into whatever generation the resume point is in, not
#: only its own (``accepted_point`` without its generation check, as the snapshot
#: pipeline calls it).
SNAPSHOT_INTO_ANOTHER_GENERATION = Mutant(snapshot_attempt, "accepted_point", _accepted_anywhere)


def _any_claimed_run(
    superseded: Callable[[cleanup.StagingCleanup, str, cleanup.Authority], bool],
) -> Callable[[cleanup.StagingCleanup, str, cleanup.Authority], bool]:
    def any_claimed_run(self: cleanup.StagingCleanup, rid: str, auth: cleanup.Authority) -> bool:
        # Every run that ever claimed counts as superseded, also one newer than the owner.
        if auth.generation is None:
            return superseded(self, rid, auth)
        return superseded(self, rid, replace(auth, generation=1 << 62))

    return any_claimed_run


#: Mutation 3: a zombie's cleanup deleting a newer run's parts (``_superseded`` without
#: the generation rule).
CLEANUP_WITHOUT_THE_GENERATION_RULE = Mutant(
    cleanup.StagingCleanup, "_superseded", _any_claimed_run
)


def _unconfirmed(swap: Callable[..., HeldState]) -> Callable[..., HeldState]:
    def unconfirmed(
        self: BarrierStateStore,
        held: HeldState,
        new: BarrierState,
        me: Owner | None,
        what: str,
        *,
        claiming: bool = False,
    ) -> HeldState:
        if held.remembered:
            # The decision made on the remembered state is swapped in on whatever version
            # the state has now: the compare-and-swap no longer confirms it.
            now = self.load().version
            held = HeldState(held.state, now or held.version)
        return swap(self, held, new, me, what, claiming=claiming)

    return unconfirmed


#: Mutation 5: a bundle recorded in flight from a stale remembered state (the swap made on
#: the current version instead of the remembered one).
STALE_REMEMBERED_STATE = Mutant(BarrierStateStore, "swap", _unconfirmed)

__all__ = [
    "CLEANUP_WITHOUT_THE_GENERATION_RULE",
    "SNAPSHOT_INTO_ANOTHER_GENERATION",
    "STALE_REMEMBERED_STATE",
    "Mutant",
]
