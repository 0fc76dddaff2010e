"""The driver's pruning and compaction of the epoch log, off the commit's path.

After each batch's ``commit(end)``, :meth:`EpochLogPruner.after_commit` decides from
memory alone whether work may be due:

* **pruning**: the floor may have fallen ``state.epochsRetained`` plus a pruning step
  (:func:`~state.protocol.epoch_floor.pruning_step`) behind the epoch just committed;
  the target is never above ``state.epochsRetained`` below the epoch the query reads
  next, however far the barrier is ahead (a query replaying on a new checkpoint);
* **compaction**: two segments' worth of epochs
  (:data:`~state.protocol.epoch_floor.SEGMENT_EPOCHS`) may be stored one object each
  above the segments.

Only then does a background thread (with ``background=False``, the caller itself: a
deterministic caller that interleaves work at the store's calls) read the barrier state
and do it
(:func:`~state.protocol.epoch_floor.prune_below` to
:func:`~state.protocol.epoch_floor.floor_target`, then
:func:`~state.protocol.epoch_floor.compact` below
:func:`~state.protocol.epoch_floor.compaction_limit`); one at a time, and none while one
runs. The batch never waits for it.

A pipeline that the snapshot coordinator runs (its driver record says a coordinator took a
fencing token: :func:`~state.protocol.fencing.coordinated`; a token the operator's sweep
took does not count) is not pruned here: the coordinator prunes it, keeping the
epochs of its retained snapshots. Its log is compacted here all the same: a compaction
keeps every epoch.

Work that fails on the store (unreachable, a request refused) is logged as a warning and
tried again after a later batch: the records it would have deleted wait, nothing else
depends on them being gone.
"""

from __future__ import annotations

import logging
import threading

from state.errors import GtBarrierError
from state.layout import PipelineLayout
from state.protocol.barrier_state import read_barrier_state
from state.protocol.epoch_floor import (
    SEGMENT_EPOCHS,
    compact,
    compaction_limit,
    floor_target,
    prune_below,
    pruning_step,
    read_floor,
)
from state.protocol.fencing import read_coordinated
from state.stores import StateStore

log = logging.getLogger(__name__)

#: How long :meth:`EpochLogPruner.close` waits for a running pruning.
CLOSE_TIMEOUT_S = 30.0


class EpochLogPruner:
    """Prunes one pipeline's epoch log from the driver, ``retained`` epochs below the
    barrier's progress, and compacts it."""

    def __init__(
        self,
        store: StateStore,
        layout: PipelineLayout,
        retained: int,
        *,
        background: bool = True,
    ) -> None:
        self.store = store
        self.layout = layout
        self.retained = retained
        self.step = pruning_step(retained)
        self._floor: int | None = None  # None: not read yet
        self._segments_end: int | None = None  # None: not read yet
        self._coordinated = False
        self._thread: threading.Thread | None = None
        self._background = background

    def after_commit(self, end_epoch: int) -> None:
        """Batch ``end_epoch - 1`` was committed: start a pruning if one may be due."""
        if self._thread is not None and self._thread.is_alive():
            return
        prune_due = not self._coordinated and (
            self._floor is None or end_epoch - self._floor >= self.retained + self.step
        )
        compact_due = (
            self._segments_end is None or end_epoch - self._segments_end >= 2 * SEGMENT_EPOCHS
        )
        if not (prune_due or compact_due):
            return
        if not self._background:
            self._prune(end_epoch)
            return
        self._thread = threading.Thread(
            target=self._prune,
            args=(end_epoch,),
            name=f"gtbarrier-prune-{self.layout.pipeline_id}",
            daemon=True,
        )
        self._thread.start()

    def close(self) -> None:
        """Wait (bounded) for a running pruning to end."""
        if self._thread is not None:
            self._thread.join(CLOSE_TIMEOUT_S)

    def _prune(self, end_epoch: int) -> None:
        try:
            if not self._coordinated and read_coordinated(self.store, self.layout):
                self._coordinated = True
            if self._floor is None or self._segments_end is None:
                floor = read_floor(self.store, self.layout)
                self._floor = 0 if floor is None else floor.epoch
                self._segments_end = 0 if floor is None else floor.segments_end
            state = read_barrier_state(self.store, self.layout)
            inflight = None if state.inflight is None else state.inflight.bundle_id
            if not self._coordinated:
                # never past the epoch this query reads next (a replay on a new checkpoint)
                target = floor_target(state.progress, inflight, self.retained, query_next=end_epoch)
                if target - self._floor >= self.step:
                    self._floor = prune_below(self.store, self.layout, target).floor
                    self._segments_end = max(self._segments_end, self._floor)
            limit = compaction_limit(state.progress, inflight)
            if limit - self._segments_end >= SEGMENT_EPOCHS:
                result = compact(self.store, self.layout, limit)
                if result.segments:
                    self._segments_end = result.segments[-1].end
        except GtBarrierError as err:
            log.warning(
                "pipeline %s: pruning the epoch log failed (tried again after a later batch): %s",
                self.layout.pipeline_id,
                err,
            )
