"""The product's protocol as the simulator calls it, and the three places it must adapt it.

Everything the simulated processes do to the pipeline's state goes through the product's
own code, looked up through its module at call time (so that a test can replace one
function by a mutation and the simulator runs the mutated one):

* the epoch log (:class:`state.protocol.epoch_log.EpochLog`), batch records
  (:mod:`state.protocol.batch_records`), fencing tokens (:mod:`state.protocol.fencing`),
  the barrier state's claims and swaps
  (:class:`state.protocol.barrier_state.BarrierStateStore`), resume points
  (:mod:`state.protocol.resume_point`: ``advance_resume_point``, ``accepted_point``,
  ``new_generation``), the recovery decision
  (:func:`state.coordinator.checkpoint_recovery.decide`);
* the sink: a write task (:func:`sink.write_task.stage_task`), the barrier's commit and
  abort (:class:`sink.barrier.Barrier`), the lost-bundle resolution
  (:func:`sink.lost_bundle.resolve`).

What it adapts, each because the product would otherwise use a thread or real time:

1. :class:`SimBarrier` reads the batch's epoch and the barrier state one after the other;
   ``Barrier._epoch_and_state`` reads them concurrently on a thread pool, and a greenlet
   cannot switch across threads. Both reads are of records that the commit only reads,
   so their order changes nothing.
2. :func:`deterministic_retries`: ``take_token`` and ``BarrierStateStore.claim_driver``
   retry a lost race with ``cas_loop()``, which sleeps for real (``time.sleep``) and
   takes its deadline from the real clock; while the simulator runs, their modules' name
   ``cas_loop`` gives a loop whose sleep is a scheduling point and whose clock is the
   simulation's.
3. Retry loops the simulator passes itself (``advance_resume_point(..., retry=...)``,
   the barrier's ``sleep``) use the same sleep and clock.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sink.barrier import Barrier, BatchCommit
from state.protocol import barrier_state, fencing
from state.records.barrier import BarrierState
from state.retry import Retry
from state.retry import cas_loop as product_cas_loop

# The override below replaces a method the product may rename: fail loudly, not by a
# greenlet error on a pool thread.
assert hasattr(Barrier, "_epoch_and_state"), "sink.barrier.Barrier._epoch_and_state moved"


class SimBarrier(Barrier):
    """:class:`~sink.barrier.Barrier` with its two first reads made one after the other."""

    def _epoch_and_state(
        self, batch: BatchCommit
    ) -> tuple[int | None, tuple[BarrierState, str | None]]:
        state = self.states.load()
        return self._epoch_of(batch), state


Sleep = Callable[[float], None]
Clock = Callable[[], float]


def sim_cas_loop(sleep: Sleep, clock: Clock) -> Retry:
    """The product's ``cas_loop`` with the simulation's sleep and clock."""
    return product_cas_loop(sleep=sleep, clock=clock)


@contextmanager
def deterministic_retries(sleep: Sleep, clock: Clock) -> Iterator[None]:
    """While inside, the product's protocol modules retry lost races with the
    simulation's sleep (a scheduling point) and clock, not real time."""

    def cas_loop(deadline: float = 30.0, **_real_time: object) -> Retry:
        # Whatever sleep and clock the caller passes (time.sleep by default), the
        # simulation's are used.
        return product_cas_loop(deadline, sleep=sleep, clock=clock)

    modules = (fencing, barrier_state)
    saved = [getattr(m, "cas_loop") for m in modules]  # noqa: B009 - a module's attribute
    for m in modules:
        setattr(m, "cas_loop", cas_loop)  # noqa: B010
    try:
        yield
    finally:
        for m, original in zip(modules, saved, strict=True):
            setattr(m, "cas_loop", original)  # noqa: B010
