"""The driver's pruning of the epoch log, off the commit's path.

After each batch's ``commit(end)``, :meth:`EpochLogPruner.after_commit` decides from
memory alone whether the floor may have fallen ``state.epochsRetained`` plus a pruning
step (:func:`~state.protocol.epoch_floor.pruning_step`) behind the epoch just committed.
Only then does a background thread read the barrier state, compute the target
(:func:`~state.protocol.epoch_floor.floor_target`) and prune
(:func:`~state.protocol.epoch_floor.prune_below`); one pruning at a time, and none while
one runs. The batch never waits for it.

A pipeline that the snapshot coordinator runs (its driver record exists) is not pruned
here: the coordinator prunes it, keeping the epochs of its retained snapshots.

A pruning that fails on the store (unreachable, a request refused) is logged as a warning
and tried again after a later batch: the records it would have deleted wait, nothing else
depends on them being gone.
"""

from __future__ import annotations

import logging
import threading

from state.errors import GtBarrierError
from state.layout import PipelineLayout
from state.protocol.barrier_state import read_barrier_state
from state.protocol.epoch_floor import floor_target, prune_below, pruning_step, read_floor
from state.stores import StateStore

log = logging.getLogger(__name__)

#: How long :meth:`EpochLogPruner.close` waits for a running pruning.
CLOSE_TIMEOUT_S = 30.0


class EpochLogPruner:
    """Prunes one pipeline's epoch log from the driver, ``retained`` epochs below the
    barrier's progress."""

    def __init__(self, store: StateStore, layout: PipelineLayout, retained: int) -> None:
        self.store = store
        self.layout = layout
        self.retained = retained
        self.step = pruning_step(retained)
        self._floor: int | None = None  # None: not read yet
        self._coordinated = False
        self._thread: threading.Thread | None = None

    def after_commit(self, end_epoch: int) -> None:
        """Batch ``end_epoch - 1`` was committed: start a pruning if one may be due."""
        if self._coordinated or (self._thread is not None and self._thread.is_alive()):
            return
        if self._floor is not None and end_epoch - self._floor < self.retained + self.step:
            return
        self._thread = threading.Thread(
            target=self._prune, name=f"gtbarrier-prune-{self.layout.pipeline_id}", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        """Wait (bounded) for a running pruning to end."""
        if self._thread is not None:
            self._thread.join(CLOSE_TIMEOUT_S)

    def _prune(self) -> None:
        try:
            if self.store.get_or_none(self.layout.driver) is not None:
                self._coordinated = True
                return
            if self._floor is None:
                floor = read_floor(self.store, self.layout)
                self._floor = 0 if floor is None else floor.epoch
            state = read_barrier_state(self.store, self.layout)
            inflight = None if state.inflight is None else state.inflight.bundle_id
            target = floor_target(state.gt_last, inflight, self.retained)
            if target - self._floor < self.step:
                return
            self._floor = prune_below(self.store, self.layout, target).floor
        except GtBarrierError as err:
            log.warning(
                "pipeline %s: pruning the epoch log failed (tried again after a later batch): %s",
                self.layout.pipeline_id,
                err,
            )
