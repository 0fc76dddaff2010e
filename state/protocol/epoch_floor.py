"""The floor of the epoch log, its segments, and the pruning and compaction that move them
(docs/PROTOCOL.md, "Pruning" and "Epoch segments").

``<pipeline>/source/floor.json`` (:class:`~state.records.floor.FloorRecord`) says that the
epochs below ``F`` may be gone, with the batch records that read them, and which epoch
segments hold the epochs from ``F`` up to the segments' end; the later epochs are stored
one object each. This module is the floor's one writer, and the one place that deletes
epochs, batch records and segments:

* **Pruning** (:func:`prune_below`) raises the floor to a target
  (:func:`floor_target`, pure: ``retained`` epochs below the oldest epoch the barrier may
  still need, its in-flight bundle's, else the one after its progress (``GT_last``, or a
  later epoch committed with an empty bundle), and below the epoch the pruning query
  reads next; with the snapshot coordinator,
  :func:`snapshot_floor_target`, never above the oldest retained snapshot's epoch). Its
  counts add what the records about to be deleted told the metrics (epochs that read
  records; batches that replayed an epoch).
* **Compaction** (:func:`compact`) copies whole runs of :data:`SEGMENT_EPOCHS` epochs
  below :func:`compaction_limit` (the newest delivered epochs stay one object each, for
  the restarts that read them), with their batch records, into a segment, and merges
  :data:`MERGE_FANIN` neighbouring segments of one size into one, up to
  :data:`MAX_SEGMENT_EPOCHS` (:func:`merge_plan`, pure). However long a pipeline runs,
  its log is a few dozen objects: at most :data:`SEGMENT_EPOCHS` plus the in-flight
  epochs one each, and a handful of segments per size.
* **Generations.** ``recover(mode="replay")`` records the generation it begins in the
  floor (:func:`fence_generation`) before it writes the new generation's resume point: the
  snapshot coordinator raises the floor only from a floor it read (:class:`FloorRead`) in
  its own generation, so a paused driver of the old generation, whose retained snapshots
  allowed a higher floor, loses its swap instead of pruning the epochs the new
  generation's replay reads from the persisted start.
* **Order.** New objects (segments) are written first; then the floor record is
  replaced, by a create or a compare-and-swap on the version read; only then is anything
  deleted. A writer that loses the swap deletes nothing: the winner did the work, and a
  segment it wrote and no floor names is written again with the same bytes by the next
  compaction, or deleted as a leftover (:func:`_delete_leftovers`). A writer that stops
  between the swap and the deletes leaves objects the floor no longer counts on; the next
  pruning or compaction deletes them without counting them again. The floor never goes
  down.

What the floor means to readers (:class:`~state.protocol.epoch_log.EpochLog`): an epoch
below it may be missing, and one that is missing is not planned again
(:class:`~state.errors.EpochsPruned`); a query on a new checkpoint cannot replay from the
persisted start. An epoch that a segment holds is read from the segment, even if an
object of its own exists (a driver that had fallen behind may have written one after the
compaction deleted it).
"""

from __future__ import annotations

import logging
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

from state.errors import ConcurrentModification, EpochsPruned, KeyExists
from state.lag import Lag
from state.layout import PipelineLayout
from state.protocol.batch_records import batch_record_keys, read_batch_record_at
from state.protocol.epoch_segments import (
    delete_segments,
    read_segment,
    stored_segments,
    write_segment,
)
from state.records.batch import BatchRecord
from state.records.codec import decode
from state.records.epoch import EpochRecord
from state.records.epoch_segment import EpochSegment
from state.records.floor import FloorRecord, SegmentRef
from state.records.source_offset import SourceOffset
from state.stores import StateStore

log = logging.getLogger(__name__)

_EPOCH_KEY = re.compile(r"/epochs/(\d+)\.json\Z")
_BATCH_KEY = re.compile(r"/batches/([^/]+)/(\d+)\.json\Z")

#: Epochs per new segment, and the delivered epochs kept one object each above them.
SEGMENT_EPOCHS = 16
#: Neighbouring segments of one size merged into one.
MERGE_FANIN = 4
#: No merge makes a segment of more epochs (a lookup reads a whole segment).
MAX_SEGMENT_EPOCHS = 256


def pruning_step(retained: int) -> int:
    """How far the target must be above the floor before a pruning runs: a quarter of
    the window (at least 1), so that each pruning's requests serve many epochs."""
    return max(1, retained // 4)


def _needed(progress: int, inflight_epoch: int | None) -> int:
    """The oldest epoch the barrier may still need: its in-flight bundle's, else the one
    after its progress."""
    return progress + 1 if inflight_epoch is None else min(progress + 1, inflight_epoch)


def floor_target(
    progress: int, inflight_epoch: int | None, retained: int, *, query_next: int | None = None
) -> int:
    """The highest floor the barrier's progress allows: ``retained`` epochs below the
    oldest epoch it may still need (the in-flight bundle's, else ``progress + 1``); 0 at
    least. ``progress`` is :attr:`~state.records.barrier.BarrierState.progress`: the
    epochs of empty bundles are done too, so a query whose output is sparse is pruned.

    ``query_next``: the epoch the pruning query's next batch reads (the end of the batch
    it just committed). A query that replays on a new checkpoint, from the persisted
    start because nothing was pruned yet, is below the barrier's progress: the floor
    stays ``retained`` epochs below it too, so that the epochs and batch records it has
    still to read are never deleted ahead of it.
    """
    if retained < 1:
        raise ValueError(f"retained must be >= 1, not {retained}")
    needed = _needed(progress, inflight_epoch)
    if query_next is not None:
        needed = min(needed, query_next)
    return max(0, needed - retained)


def snapshot_floor_target(
    progress: int, inflight_epoch: int | None, retained: int, oldest_snapshot_epoch: int
) -> int:
    """:func:`floor_target` for a pipeline the snapshot coordinator runs: never above the
    epoch of its oldest retained snapshot, where a restore of that snapshot starts."""
    return min(oldest_snapshot_epoch, floor_target(progress, inflight_epoch, retained))


def compaction_limit(progress: int, inflight_epoch: int | None) -> int:
    """The epochs below this may be compacted: all were committed (delivered, or empty),
    and the :data:`SEGMENT_EPOCHS` newest of them stay one object each (a restart on the
    query's checkpoint reads those). ``progress`` as for :func:`floor_target`."""
    return max(0, _needed(progress, inflight_epoch) - SEGMENT_EPOCHS)


def merge_plan(ranges: Sequence[tuple[int, int]]) -> tuple[tuple[int, int], ...]:
    """The segments' ``(first, end)`` ranges after merging: while :data:`MERGE_FANIN`
    neighbours have one size and their merge stays within :data:`MAX_SEGMENT_EPOCHS`, the
    oldest such run becomes one segment. Pure; ``ranges`` follow each other.

    Applied after every append, so no mergeable run is ever left: every merge of a plan
    holds the segment just appended (:func:`_delete_leftovers` relies on it).
    """
    plan = list(ranges)
    merged = True
    while merged:
        merged = False
        for i in range(len(plan) - MERGE_FANIN + 1):
            run = plan[i : i + MERGE_FANIN]
            size = run[0][1] - run[0][0]
            fits = size * MERGE_FANIN <= MAX_SEGMENT_EPOCHS
            if fits and all(end - first == size for first, end in run):
                plan[i : i + MERGE_FANIN] = [(run[0][0], run[-1][1])]
                merged = True
                break
    return tuple(plan)


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
    if floor is None or not floor.pruned:
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
    """The pipeline's floor, or None if nothing was ever pruned or compacted."""
    floor, _ = _load_floor(store, layout)
    return floor


@dataclass(frozen=True)
class FloorRead:
    """The floor as one read found it, with its version: a raise decided from it
    (:func:`prune_below` with ``read=``) takes effect only if no one wrote the floor since."""

    floor: FloorRecord | None
    version: str | None

    @property
    def epoch(self) -> int:
        return 0 if self.floor is None else self.floor.epoch

    @property
    def generation(self) -> int:
        return 0 if self.floor is None else self.floor.generation


def read_floor_versioned(store: StateStore, layout: PipelineLayout) -> FloorRead:
    """The pipeline's floor and its version, for a raise decided on what else is read after."""
    return FloorRead(*_load_floor(store, layout))


def fence_generation(
    store: StateStore,
    layout: PipelineLayout,
    generation: int,
    start: Callable[[], SourceOffset | None],
) -> bool:
    """Record in the floor that resume point generation ``generation`` begins, before it is
    written: every raise decided from an older read of the floor then loses its swap, and
    the snapshot coordinator of an older generation raises it no more.

    ``start`` gives the persisted start (read only if there is no floor yet: the new floor
    is at epoch 0, nothing pruned); without one no epoch is recorded and nothing needs
    fencing. Returns whether the floor was written. One attempt: a lost race raises
    :class:`~state.errors.ConcurrentModification` or :class:`~state.errors.KeyExists`, for
    the caller's read-modify-write loop to decide again.
    """
    floor, version = _load_floor(store, layout)
    if floor is not None and floor.generation >= generation:
        return False
    if floor is None or version is None:
        persisted = start()
        if persisted is None:
            return False
        fenced = FloorRecord(0, persisted, generation=generation)
        store.create_json(layout.source_floor, fenced.to_json())
    else:
        fenced = replace(floor, generation=generation)
        store.compare_and_swap_json(layout.source_floor, fenced.to_json(), version)
    log.info(
        "pipeline %s: the epoch log's floor records generation %d",
        layout.pipeline_id,
        generation,
    )
    return True


def _load_floor(store: StateStore, layout: PipelineLayout) -> tuple[FloorRecord | None, str | None]:
    key = layout.source_floor
    hit = store.get_or_none(key)
    if hit is None:
        return None, None
    return decode(hit.data, FloorRecord.from_json, f"{store.uri}/{key}"), hit.version


def _swap_floor(
    store: StateStore, layout: PipelineLayout, new: FloorRecord, version: str | None
) -> bool:
    """Replace the floor read at ``version`` (None: absent) by ``new``; False if another
    writer replaced it first."""
    try:
        if version is None:
            store.create_json(layout.source_floor, new.to_json())
        else:
            store.compare_and_swap_json(layout.source_floor, new.to_json(), version)
    except (KeyExists, ConcurrentModification):
        log.info("pipeline %s: another writer changed the epoch log's floor", layout.pipeline_id)
        return False
    return True


# --- pruning ---------------------------------------------------------------------------


@dataclass(frozen=True)
class PruneResult:
    """What one :func:`prune_below` did: the floor after it, whether this call raised it,
    and how many records it deleted."""

    floor: int
    raised: bool
    epochs_deleted: int = 0
    batches_deleted: int = 0
    segments_deleted: int = 0


def prune_below(
    store: StateStore, layout: PipelineLayout, target: int, *, read: FloorRead | None = None
) -> PruneResult:
    """Raise the floor to ``target`` if it is below, then delete what lies below the floor.

    ``target`` must come from :func:`floor_target` (or lower): nothing at or above it is
    touched. The floor is not raised if epoch ``target`` is not recorded (its start is
    the floor's), nor if another writer changed the floor meanwhile: since ``read``, the
    floor read before what decided ``target`` was read, if given, else since this call
    reads it. A segment that holds epochs on both sides of ``target`` is kept whole.
    """
    floor, version = _load_floor(store, layout) if read is None else (read.floor, read.version)
    current = 0 if floor is None else floor.epoch
    if target <= current:
        return PruneResult(current, raised=False)
    segments = () if floor is None else floor.segments
    # the segments that hold epochs from the floor to the target, the target included
    held = _segment_contents(store, layout, [s for s in segments if s.first <= target])
    at_target = _epoch_in(held, target) or _read_epoch(store, layout, target)
    if at_target is None:
        return PruneResult(current, raised=False)
    epochs = _epoch_keys(store, layout)
    loose_batches = _batches_below(store, layout, target)
    made = 0
    for epoch in range(current, target):
        record = _epoch_in(held, epoch)
        if record is None and epoch in epochs:
            record = _read_epoch(store, layout, epoch)
        if record is not None and Lag.between(record.start.offsets, record.end.offsets).total > 0:
            made += 1
    # A batch record may be in a segment and stored one each again (a replay wrote it).
    read_by = {key: b.epoch for key, b in loose_batches.items()}
    for segment in held:
        for b in segment.batches:
            read_by.setdefault(layout.batch(b.query_id, b.batch_id), b.epoch)
    reads = Counter(e for e in read_by.values() if current <= e < target)
    kept = tuple(s for s in segments if s.end > target)
    raised = FloorRecord(
        epoch=target,
        start=at_target.start,
        epochs_with_records=(0 if floor is None else floor.epochs_with_records) + made,
        replays_dropped=(0 if floor is None else floor.replays_dropped)
        + sum(n - 1 for n in reads.values()),
        segments=kept,
        generation=0 if floor is None else floor.generation,
    )
    if not _swap_floor(store, layout, raised, version):
        return PruneResult(current, raised=False)

    dropped = [s for s in segments if s.end <= target]
    doomed_epochs = [key for epoch, key in epochs.items() if epoch < target]
    store.delete_many(list(loose_batches))
    store.delete_many(doomed_epochs)
    delete_segments(store, layout, dropped)
    log.info(
        "pipeline %s: epoch log pruned below epoch %d (%d epoch(s), %d batch record(s), "
        "%d segment(s) deleted)",
        layout.pipeline_id,
        target,
        len(doomed_epochs),
        len(loose_batches),
        len(dropped),
    )
    return PruneResult(target, True, len(doomed_epochs), len(loose_batches), len(dropped))


# --- compaction ------------------------------------------------------------------------


@dataclass(frozen=True)
class CompactResult:
    """What one :func:`compact` did: the segments the floor names after it (empty if it
    changed nothing), and how many objects it deleted."""

    segments: tuple[SegmentRef, ...] = ()
    compacted: bool = False
    epochs_deleted: int = 0
    batches_deleted: int = 0
    segments_deleted: int = 0


def compact(store: StateStore, layout: PipelineLayout, limit: int) -> CompactResult:
    """Compact the epochs below ``limit`` (from :func:`compaction_limit`, or lower) that
    are still one object each, in whole segments of :data:`SEGMENT_EPOCHS`, then merge
    segments (:func:`merge_plan`). Nothing at or above ``limit`` is touched; a run that
    would hold an epoch not recorded stops before it."""
    floor, version = _load_floor(store, layout)
    begin = 0 if floor is None else floor.segments_end
    existing = () if floor is None else floor.segments
    new = _new_segments(store, layout, begin, limit)
    if not new:
        return CompactResult(existing)
    contents: dict[tuple[int, int], EpochSegment | SegmentRef] = {
        (r.first, r.end): r for r in existing
    }
    contents.update({(s.first, s.end): s for s in new})
    refs: list[SegmentRef] = []
    for first, end in merge_plan(list(contents)):
        if (first, end) in contents:
            held = contents[(first, end)]
            written = held if isinstance(held, SegmentRef) else write_segment(store, layout, held)
            refs.append(written)
            continue
        parts = [
            part if isinstance(part, EpochSegment) else read_segment(store, layout, part)
            for (a, b), part in contents.items()
            if first <= a and b <= end
        ]
        refs.append(write_segment(store, layout, EpochSegment.merge(parts)))
    start = new[0].epochs[0].start if floor is None else floor.start
    compacted = FloorRecord(
        epoch=0 if floor is None else floor.epoch,
        start=start,
        epochs_with_records=0 if floor is None else floor.epochs_with_records,
        replays_dropped=0 if floor is None else floor.replays_dropped,
        segments=tuple(refs),
        generation=0 if floor is None else floor.generation,
    )
    if not _swap_floor(store, layout, compacted, version):
        return CompactResult()

    end = new[-1].end
    doomed_epochs = [layout.epoch(k) for k in range(begin, end)]
    doomed_batches = [layout.batch(b.query_id, b.batch_id) for s in new for b in s.batches]
    store.delete_many(doomed_batches)
    store.delete_many(doomed_epochs)
    leftovers = _delete_leftovers(store, layout, compacted, existing)
    log.info(
        "pipeline %s: epochs %d to %d compacted (%d batch record(s)); the log keeps %d "
        "segment(s), %d leftover segment(s) deleted",
        layout.pipeline_id,
        begin,
        end - 1,
        len(doomed_batches),
        len(refs),
        len(leftovers),
    )
    return CompactResult(
        compacted.segments,
        compacted=True,
        epochs_deleted=len(doomed_epochs),
        batches_deleted=len(doomed_batches),
        segments_deleted=len(leftovers),
    )


def _new_segments(
    store: StateStore, layout: PipelineLayout, begin: int, limit: int
) -> list[EpochSegment]:
    """Whole segments of the epochs ``begin`` to ``limit - 1`` that are one object each,
    with the batch records that read them; none past an epoch not recorded."""
    count = max(0, limit - begin) // SEGMENT_EPOCHS * SEGMENT_EPOCHS
    if count == 0:
        return []
    records: list[EpochRecord] = []
    for k in range(begin, begin + count):
        record = _read_epoch(store, layout, k)
        if record is None:
            break
        records.append(record)
    count = len(records) // SEGMENT_EPOCHS * SEGMENT_EPOCHS
    if count == 0:
        return []
    end = begin + count
    batches: dict[int, list[BatchRecord]] = defaultdict(list)
    for batch in _batches_below(store, layout, end).values():
        if begin <= batch.epoch:
            batches[(batch.epoch - begin) // SEGMENT_EPOCHS].append(batch)
    return [
        EpochSegment.of(records[i : i + SEGMENT_EPOCHS], batches[i // SEGMENT_EPOCHS])
        for i in range(0, count, SEGMENT_EPOCHS)
    ]


def _delete_leftovers(
    store: StateStore,
    layout: PipelineLayout,
    floor: FloorRecord,
    previous: Iterable[SegmentRef],
) -> list[SegmentRef]:
    """Delete the segment objects within ``floor``'s segments that neither it nor the
    ``previous`` floor names: the parts of the segments merged by the compaction before
    (kept one compaction longer, for readers that read the floor before that merge), and
    the objects of compactions that lost their swap. An object past ``floor``'s segments'
    end is kept: a compaction that read this floor may be writing it (every merge holds the
    segment it appends, :func:`merge_plan`)."""
    named = {*floor.segments, *previous}
    leftovers = [
        r for r in stored_segments(store, layout) if r not in named and r.end <= floor.segments_end
    ]
    delete_segments(store, layout, leftovers)
    return leftovers


# --- reading ---------------------------------------------------------------------------


def _segment_contents(
    store: StateStore, layout: PipelineLayout, segments: Iterable[SegmentRef]
) -> list[EpochSegment]:
    return [read_segment(store, layout, s) for s in segments]


def _epoch_in(segments: Iterable[EpochSegment], epoch: int) -> EpochRecord | None:
    for segment in segments:
        record = segment.epoch(epoch)
        if record is not None:
            return record
    return None


def _epoch_keys(store: StateStore, layout: PipelineLayout) -> dict[int, str]:
    found = ((_EPOCH_KEY.search("/" + key), key) for key in store.list(layout.epochs_prefix))
    return {int(m.group(1)): key for m, key in found if m}


def _read_epoch(store: StateStore, layout: PipelineLayout, epoch: int) -> EpochRecord | None:
    key = layout.epoch(epoch)
    hit = store.get_or_none(key)
    return None if hit is None else decode(hit.data, EpochRecord.from_json, f"{store.uri}/{key}")


def _batches_below(
    store: StateStore, layout: PipelineLayout, target: int
) -> dict[str, BatchRecord]:
    """``{key: record}`` of the batch records stored one each whose epoch is below
    ``target``: each query's records in batch-id order, up to its first one at or above
    ``target``."""
    by_query: dict[str, list[tuple[int, str]]] = defaultdict(list)
    for key in batch_record_keys(store, layout):
        m = _BATCH_KEY.search("/" + key)
        if m:
            by_query[m.group(1)].append((int(m.group(2)), key))
    below: dict[str, BatchRecord] = {}
    for records in by_query.values():
        for _, key in sorted(records):
            record = read_batch_record_at(store, key)
            if record is None:
                continue
            if record.epoch >= target:
                break
            below[key] = record
    return below
