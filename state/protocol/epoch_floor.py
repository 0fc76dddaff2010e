"""The floor of the epoch log, and pruning below it (docs/PROTOCOL.md, "Pruning").

``<pipeline>/source/floor.json`` (:class:`~state.records.floor.FloorRecord`) says that the
epochs below ``F`` may be gone, with the batch records that read them. This module is its
one writer, and the one place that deletes epochs and batch records:

* **The target** (:func:`floor_target`, pure): the oldest epoch the barrier may still
  need is its in-flight bundle's, else ``GT_last + 1``; the floor may rise to
  ``retained`` epochs below it. With the snapshot coordinator
  (:func:`snapshot_floor_target`), never above the oldest retained snapshot's epoch.
* **Raising the floor** (:func:`prune_below`): the new floor is written first, by a
  create or a compare-and-swap on the version read, and only then is anything deleted.
  Its counts add what the records about to be deleted told the metrics (epochs that
  read records; batches that replayed an epoch). A pruner that loses the swap deletes
  nothing: the winner prunes. The floor never goes down.
* **Deleting**: the batch records whose epoch is below the floor (per query in batch-id
  order, since a query's batches never read an older epoch than its previous batch, so a
  query's scan stops at its first record at or above the floor), then the epochs below
  the floor. A pruner that stops between the swap and the deletes leaves records below
  the floor; the next pruning deletes them without counting them again.

What the floor means to readers: an epoch below it may be missing, and one that is
missing is not planned again (:meth:`EpochLog.recorded_end
<state.protocol.epoch_log.EpochLog.recorded_end>` raises
:class:`~state.errors.EpochsPruned`); a query on a new checkpoint cannot replay from the
persisted start.
"""

from __future__ import annotations

import logging
import re
from collections import Counter, defaultdict
from dataclasses import dataclass

from state.errors import ConcurrentModification, EpochsPruned, KeyExists
from state.lag import Lag
from state.layout import PipelineLayout
from state.protocol.batch_records import batch_record_keys, read_batch_record_at
from state.records.codec import decode
from state.records.epoch import EpochRecord
from state.records.floor import FloorRecord
from state.records.source_offset import SourceOffset
from state.stores import StateStore

log = logging.getLogger(__name__)

_EPOCH_KEY = re.compile(r"/epochs/(\d+)\.json$")
_BATCH_KEY = re.compile(r"/batches/([^/]+)/(\d+)\.json$")


def pruning_step(retained: int) -> int:
    """How far the target must be above the floor before a pruning runs: a quarter of
    the window (at least 1), so that each pruning's requests serve many epochs."""
    return max(1, retained // 4)


def floor_target(gt_last: int, inflight_epoch: int | None, retained: int) -> int:
    """The highest floor the barrier's progress allows: ``retained`` epochs below the
    oldest epoch it may still need (the in-flight bundle's, else ``GT_last + 1``); 0 at
    least."""
    if retained < 1:
        raise ValueError(f"retained must be >= 1, not {retained}")
    needed = gt_last + 1 if inflight_epoch is None else min(gt_last + 1, inflight_epoch)
    return max(0, needed - retained)


def snapshot_floor_target(
    gt_last: int, inflight_epoch: int | None, retained: int, oldest_snapshot_epoch: int
) -> int:
    """:func:`floor_target` for a pipeline the snapshot coordinator runs: never above the
    epoch of its oldest retained snapshot, where a restore of that snapshot starts."""
    return min(oldest_snapshot_epoch, floor_target(gt_last, inflight_epoch, retained))


def new_checkpoint_start(
    floor: FloorRecord | None,
    persisted: SourceOffset,
    *,
    pipeline_id: str,
    retained: int,
    start_at_floor: bool,
) -> SourceOffset:
    """Where a query on a new checkpoint starts: the ``persisted`` start while nothing was
    pruned; once epochs were, the floor's start if ``start_at_floor``, else
    :class:`EpochsPruned` (a stateful query would build its state from the floor only)."""
    if floor is None:
        return persisted
    if not start_at_floor:
        raise EpochsPruned(
            f"gtkafka: pipeline '{pipeline_id}': a query on a new checkpoint replays from the "
            f"persisted start (epoch {persisted.epoch}), but the epochs below epoch "
            f"{floor.epoch} were pruned (state.epochsRetained={retained}), so a stateful "
            f"query would build its state from epoch {floor.epoch} only. Start the query on "
            "its checkpoint, restore a snapshot of the snapshot coordinator, or set "
            f"state.startAtFloor=true to start at epoch {floor.epoch} (the barrier drops "
            "what the consumer already has)"
        )
    log.warning(
        "gtkafka: pipeline %s: the epochs below epoch %d were pruned; the query on a new "
        "checkpoint starts there (state.startAtFloor)",
        pipeline_id,
        floor.epoch,
    )
    return floor.start


def read_floor(store: StateStore, layout: PipelineLayout) -> FloorRecord | None:
    """The pipeline's floor, or None if nothing was ever pruned."""
    floor, _ = _load_floor(store, layout)
    return floor


def _load_floor(store: StateStore, layout: PipelineLayout) -> tuple[FloorRecord | None, str | None]:
    key = layout.source_floor
    hit = store.get_or_none(key)
    if hit is None:
        return None, None
    return decode(hit.data, FloorRecord.from_json, f"{store.uri}/{key}"), hit.version


@dataclass(frozen=True)
class PruneResult:
    """What one :func:`prune_below` did: the floor after it, whether this call raised it,
    and how many records it deleted."""

    floor: int
    raised: bool
    epochs_deleted: int = 0
    batches_deleted: int = 0


def prune_below(store: StateStore, layout: PipelineLayout, target: int) -> PruneResult:
    """Raise the floor to ``target`` if it is below, then delete what lies below the floor.

    ``target`` must come from :func:`floor_target` (or lower): nothing at or above it is
    touched. The floor is not raised if epoch ``target`` is not recorded (its start is
    the floor's), nor if another pruner raised it meanwhile.
    """
    floor, version = _load_floor(store, layout)
    current = 0 if floor is None else floor.epoch
    if target <= current:
        return PruneResult(current, raised=False)
    at_target = _read_epoch(store, layout, target)
    if at_target is None:
        return PruneResult(current, raised=False)
    epochs = _epoch_keys(store, layout)

    batches = _batches_below(store, layout, target)
    made = 0
    for epoch in sorted(e for e in epochs if current <= e < target):
        record = _read_epoch(store, layout, epoch)
        if record is not None and Lag.between(record.start.offsets, record.end.offsets).total > 0:
            made += 1
    reads = Counter(epoch for epoch in batches.values() if epoch >= current)
    raised = FloorRecord(
        epoch=target,
        start=at_target.start,
        epochs_with_records=(0 if floor is None else floor.epochs_with_records) + made,
        replays_dropped=(0 if floor is None else floor.replays_dropped)
        + sum(n - 1 for n in reads.values()),
    )
    try:
        if version is None:
            store.create_json(layout.source_floor, raised.to_json())
        else:
            store.compare_and_swap_json(layout.source_floor, raised.to_json(), version)
    except (KeyExists, ConcurrentModification):
        log.info("pipeline %s: another pruner raised the floor first", layout.pipeline_id)
        return PruneResult(current, raised=False)

    doomed_epochs = [key for epoch, key in epochs.items() if epoch < target]
    store.delete_many(list(batches))
    store.delete_many(doomed_epochs)
    log.info(
        "pipeline %s: epoch log pruned below epoch %d (%d epoch(s), %d batch record(s) deleted)",
        layout.pipeline_id,
        target,
        len(doomed_epochs),
        len(batches),
    )
    return PruneResult(target, True, len(doomed_epochs), len(batches))


def _epoch_keys(store: StateStore, layout: PipelineLayout) -> dict[int, str]:
    found = ((_EPOCH_KEY.search("/" + key), key) for key in store.list(layout.epochs_prefix))
    return {int(m.group(1)): key for m, key in found if m}


def _read_epoch(store: StateStore, layout: PipelineLayout, epoch: int) -> EpochRecord | None:
    key = layout.epoch(epoch)
    hit = store.get_or_none(key)
    return None if hit is None else decode(hit.data, EpochRecord.from_json, f"{store.uri}/{key}")


def _batches_below(store: StateStore, layout: PipelineLayout, target: int) -> dict[str, int]:
    """``{key: epoch}`` of the batch records whose epoch is below ``target``: each query's
    records in batch-id order, up to its first one at or above ``target``."""
    by_query: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for key in batch_record_keys(store, layout):
        m = _BATCH_KEY.search("/" + key)
        if m:
            by_query[m.group(1)].append((int(m.group(2)), key))
    below: dict[str, int] = {}
    for records in by_query.values():
        for _, key in sorted(records):
            record = read_batch_record_at(store, key)
            if record is None:
                continue
            if record.epoch >= target:
                break
            below[key] = record.epoch
    return below
