"""The source's durable records: the resolved start and the epoch log (docs/PROTOCOL.md).

* ``<pipeline>/source/start.json``: the initial offset, resolved once (``latest`` and
  timestamps become concrete offsets) and created once, so ``initialOffset()`` answers
  the same after a restart or on a new checkpoint; with the topic ids it was resolved
  under (:class:`~state.records.source_start.SourceStart`, :meth:`EpochLog.topic_ids_at`).
* ``<pipeline>/epochs/<k>.json``: the :class:`~state.records.epoch.EpochRecord` of epoch
  ``k``, created before ``latestOffset`` returns its ``end`` for ``start``; first writer
  wins. A replay of ``start`` gets the recorded end, whatever the read limit is now. The
  record also keeps the topic ids under which its end was computed
  (:meth:`EpochLog.topic_ids_at`), so that a driver that starts again can tell a topic
  deleted and created again since from the one the frontier belongs to.
* Delivered epochs are compacted into segments (:mod:`state.protocol.epoch_floor`): an
  epoch that a segment named by the floor record holds is read from it, even if an
  object of its own exists (one written after the compaction deleted it, by a driver that
  had fallen behind); its batch records too (:func:`epoch_of_batch`). So an epoch read
  from the store costs the floor's read as well; the driver's own next epochs are
  answered from memory (below).

The store retries its own requests (and resolves a create whose answer was lost), so a
``KeyExists`` here always means another writer won.

An :class:`EpochLog` lives as long as the driver's source reader and remembers what it
learnt, to spare the store a request per micro-batch (and one per poll while idle):

* a recorded epoch (and the start) never changes, so once read or created it is answered
  from memory;
* an epoch it found absent, or the epoch after one it created itself (nobody can know
  where that one starts before the create), is taken as still absent: ``latestOffset``
  then computes an end and creates the epoch without reading it first. That is the same
  as if the read had been made at the moment the epoch was seen absent: another driver
  that records it meanwhile wins the create, and its record is the one returned, as
  after any lost race.

A create that succeeds is followed by a read of the floor (:meth:`EpochLog.record`): the
object may have been absent only because a compaction had already moved the epoch into
a segment, while this planner paused or fell behind, and then the segment's record is
the epoch's. So a micro-batch's planning costs one create and one read of the floor.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from state.errors import (
    EpochLogConflict,
    EpochsPruned,
    KeyExists,
    MalformedRecord,
    SegmentGone,
    StateError,
)
from state.layout import PipelineLayout
from state.protocol.batch_records import read_batch_record
from state.protocol.epoch_floor import read_floor
from state.protocol.epoch_segments import read_segment
from state.records.batch import BatchRecord
from state.records.codec import decode
from state.records.epoch import EpochRecord
from state.records.epoch_segment import EpochSegment
from state.records.floor import FloorRecord
from state.records.source_offset import SourceOffset
from state.records.source_start import SourceStart
from state.stores import StateStore

R = TypeVar("R")
T = TypeVar("T")

_EPOCH_KEY = re.compile(r"/epochs/(\d+)\.json\Z")


@dataclass
class EpochLog:
    """Reads and creates the source's records in one pipeline's state."""

    store: StateStore
    layout: PipelineLayout
    _start: SourceStart | None = field(default=None, init=False, repr=False)
    _recorded: dict[int, EpochRecord] = field(default_factory=dict, init=False, repr=False)
    _absent: int | None = field(default=None, init=False, repr=False)

    #: How many recorded epochs are remembered (Spark asks for the newest ones).
    REMEMBERED = 16

    # --- the resolved start ----------------------------------------------------------

    def start(self) -> SourceOffset | None:
        """The persisted initial offset, if any."""
        start = self._start_record()
        return None if start is None else start.offset

    def create_start(
        self, offset: SourceOffset, topic_ids: Mapping[str, str] | None = None
    ) -> SourceOffset:
        """Persist ``offset`` as the initial offset, with the ``topic_ids`` it was resolved
        under, unless one exists; the one that won."""
        key = self.layout.source_start
        record = SourceStart(offset, dict(topic_ids or {}))
        winner, _ = self._create_or_get(key, record.to_json(), SourceStart.from_json)
        self._start = winner
        return winner.offset

    def _start_record(self) -> SourceStart | None:
        if self._start is None:
            self._start = self._read(self.layout.source_start, SourceStart.from_json)
        return self._start

    # --- epochs ------------------------------------------------------------------------

    def floor(self) -> FloorRecord | None:
        """The floor of the log (:mod:`state.protocol.epoch_floor`), read now: None if
        nothing was pruned."""
        return read_floor(self.store, self.layout)

    def recorded_end(self, start: SourceOffset) -> SourceOffset | None:
        """The end recorded for epoch ``start.epoch``, checked against ``start``.

        None if the epoch is not recorded yet. Raises :class:`EpochsPruned` if it is not
        recorded because it lies below the floor: it was pruned, and planning it again
        would give it other bounds than the ones its first batch read.
        """
        key = self.layout.epoch(start.epoch)
        record = self._recorded.get(start.epoch)
        if record is None:
            if self._absent == start.epoch:
                return None
            record = self.read_epoch(start.epoch, pruned_is_error=True)
            if record is None:
                self._absent = start.epoch
                return None
            self._remember(start.epoch, record)
        return self._check(key, record, start)

    def record(
        self,
        start: SourceOffset,
        end: SourceOffset,
        topic_ids: Mapping[str, str] | None = None,
    ) -> SourceOffset:
        """Create epoch ``start.epoch = (start, end)``, with the ``topic_ids`` under which
        ``end`` was computed; if the epoch exists, the recorded end (and its ids count,
        see :meth:`topic_ids_at`).

        A create that succeeds is checked against the floor read after it: a compaction may
        have moved the epoch into a segment, and deleted its object, since this planner
        found it absent (a driver that had fallen behind). The segment's record is then
        the epoch's, as every reader sees it (:meth:`read_epoch`), and its end is the one
        returned; the object just written is a leftover that no reader takes."""
        if end.epoch != start.epoch + 1:
            raise ValueError(f"epoch {start.epoch} must end at epoch {start.epoch + 1}, not {end}")
        key = self.layout.epoch(start.epoch)
        if self._absent == start.epoch:
            self._absent = None  # whatever happens next, the store is asked again
        winner, created = self._create_or_get(
            key,
            EpochRecord(start.epoch, start, end, dict(topic_ids or {})).to_json(),
            lambda raw: self._epoch_record(key, raw),
        )
        if created:
            winner, created = self._unless_compacted(start.epoch, winner)
        self._remember(start.epoch, winner)
        if created:
            self._absent = end.epoch
        return self._check(key, winner, start)

    def topic_ids_at(self, offset: SourceOffset) -> dict[str, str] | None:
        """The topic ids under which the frontier ``offset`` was computed: those recorded
        with epoch ``offset.epoch - 1``, the one that ends at ``offset``, or with the start
        if ``offset`` is the start (epoch 0).

        ``None`` when there are none to compare with: that epoch (or the start) is not
        recorded or is another frontier, or it was recorded without ids (by a gtbarrier
        before topic ids were recorded, or from a broker that gives none).
        """
        if offset.epoch == 0:
            start = self._start_record()
            if start is None or not start.offset.same_as(offset) or not start.topic_ids:
                return None
            return dict(start.topic_ids)
        epoch = offset.epoch - 1
        record = self._recorded.get(epoch)
        if record is None:
            record = self.read_epoch(epoch)
            if record is None:
                return None
            self._remember(epoch, record)
        if not record.end.same_as(offset) or not record.topic_ids:
            return None
        return dict(record.topic_ids)

    def _remember(self, epoch: int, record: EpochRecord) -> None:
        self._recorded[epoch] = record
        while len(self._recorded) > self.REMEMBERED:
            del self._recorded[min(self._recorded)]

    def _epoch_record(self, key: str, raw: object) -> EpochRecord:
        try:
            return EpochRecord.from_json(raw)
        except MalformedRecord as err:
            raise EpochLogConflict(f"{self.store.uri}/{key}: not an epoch record: {err}") from err

    def _check(self, key: str, record: EpochRecord, start: SourceOffset) -> SourceOffset:
        if not record.start.same_as(start):
            raise EpochLogConflict(
                f"{self.store.uri}/{key}: epoch {start.epoch} is recorded as starting at "
                f"{record.start}, but Spark asked for the epoch starting at {start}. The "
                "checkpoint and the pipeline's epoch log describe different inputs; use a new "
                "pipeline.id or the checkpoint that belongs to this pipeline"
            )
        if record.end.epoch != start.epoch + 1:
            raise EpochLogConflict(
                f"{self.store.uri}/{key}: recorded end {record.end} is not epoch {start.epoch + 1}"
            )
        return record.end

    # --- looking at the log (operators) ---------------------------------------------------

    def epoch_numbers(self) -> list[int]:
        """The recorded epochs, ascending: those the floor's segments hold from the floor
        up, and those stored one each (below the floor too, if an interrupted pruning
        left them); one list request and the floor's read."""
        keys = self.store.list(self.layout.epochs_prefix)
        found = (_EPOCH_KEY.search("/" + key) for key in keys)
        floor = self.floor()
        compacted = set() if floor is None else set(range(floor.epoch, floor.segments_end))
        return sorted({int(m.group(1)) for m in found if m} | compacted)

    def read_epoch(self, epoch: int, *, pruned_is_error: bool = False) -> EpochRecord | None:
        """Epoch ``epoch``'s record as stored (in a segment, or one object), or None if it
        is not recorded. With ``pruned_is_error``, an epoch that is not recorded because
        it lies below the floor raises :class:`EpochsPruned`: it was pruned, and planning
        it again would give it other bounds than the ones its first batch read."""
        key = self.layout.epoch(epoch)
        loose = self._read(key, lambda raw: self._epoch_record(key, raw))
        # After the object: a compaction names its segment first.
        compacted, floor = self._in_segment(epoch, self.floor())
        if compacted is not None:
            return compacted
        if loose is None and pruned_is_error and floor is not None and epoch < floor.epoch:
            raise EpochsPruned(
                f"{self.store.uri}/{key}: epoch {epoch} was pruned: the epoch log of "
                f"pipeline '{self.layout.pipeline_id}' begins at epoch {floor.epoch} "
                "(state.epochsRetained keeps that many epochs below how far the barrier "
                "committed them). This checkpoint is older than the epochs kept; restore a "
                "newer snapshot, or start the query on a new checkpoint with "
                "state.startAtFloor=true"
            )
        return loose

    def _unless_compacted(self, epoch: int, created: EpochRecord) -> tuple[EpochRecord, bool]:
        """After this log created epoch ``epoch``'s object as ``created``: the epoch's record
        and whether it is ``created``. A compaction may have moved the epoch into a segment
        and deleted its object before the create (this planner had found it absent, then
        fell behind); the floor, read after the create, names that segment, and its record
        is the epoch's as every reader sees it."""
        compacted, _ = self._in_segment(epoch, self.floor())
        if compacted is None:
            return created, True
        return compacted, False

    def _in_segment(
        self, epoch: int, floor: FloorRecord | None
    ) -> tuple[EpochRecord | None, FloorRecord | None]:
        """Epoch ``epoch``'s record in the segment ``floor`` names for it, if one does, and
        the floor it was found by: ``floor``, or the floor read again if that segment is
        gone (merged or pruned since: the floor says where, or that it is pruned)."""
        ref = None if floor is None else floor.segment_of(epoch)
        if ref is None:
            return None, floor
        try:
            return read_segment(self.store, self.layout, ref).epoch(epoch), floor
        except SegmentGone:
            floor = self.floor()
            ref = None if floor is None else floor.segment_of(epoch)
            if ref is None:
                return None, floor
            return read_segment(self.store, self.layout, ref).epoch(epoch), floor

    def read_epochs(self, numbers: Iterable[int]) -> dict[int, EpochRecord]:
        """The records of the epochs ``numbers`` that are recorded, for a view of the log
        (the metrics, the operator CLI): the floor is read once, so an epoch that a
        compaction takes meanwhile is read by :meth:`read_epoch`."""
        floor = self.floor()
        found: dict[int, EpochRecord] = {}
        for n in numbers:
            ref = None if floor is None else floor.segment_of(n)
            record = None
            if ref is not None:
                try:
                    record = read_segment(self.store, self.layout, ref).epoch(n)
                except SegmentGone:
                    record = self.read_epoch(n)
            else:
                record = self.read_epoch(n)
            if record is not None:
                found[n] = record
        return found

    def compacted_batches(self, floor: FloorRecord) -> list[BatchRecord]:
        """The batch records held by the segments that ``floor`` names."""

        def batches(named: FloorRecord) -> list[BatchRecord]:
            return [
                b
                for ref in named.segments
                for b in read_segment(self.store, self.layout, ref).batches
            ]

        return with_floor_read_again(self.store, self.layout, floor, batches) or []

    # --- store access --------------------------------------------------------------------

    def _read(self, key: str, parse: Callable[[object], R]) -> R | None:
        hit = self.store.get_or_none(key)
        return None if hit is None else decode(hit.data, parse, f"{self.store.uri}/{key}")

    def _create_or_get(
        self, key: str, doc: dict[str, Any], parse: Callable[[object], R]
    ) -> tuple[R, bool]:
        """The value that won, and whether it is ours."""
        try:
            self.store.create_json(key, doc)
        except KeyExists:
            winner = self.store.get(key)  # another writer won: its record is the one
            return decode(winner.data, parse, f"{self.store.uri}/{key}"), False
        return parse(doc), True


def segment_holding(
    store: StateStore,
    layout: PipelineLayout,
    floor: FloorRecord,
    holds: Callable[[EpochSegment], object],
) -> EpochSegment | None:
    """The newest segment named by ``floor`` for which ``holds`` gives a value, looked
    for again in the floor read again if one is gone (:func:`with_floor_read_again`)."""

    def first(named: FloorRecord) -> EpochSegment | None:
        for ref in reversed(named.segments):
            segment = read_segment(store, layout, ref)
            if holds(segment) is not None:
                return segment
        return None

    return with_floor_read_again(store, layout, floor, first)


def with_floor_read_again(
    store: StateStore,
    layout: PipelineLayout,
    floor: FloorRecord,
    read: Callable[[FloorRecord], T],
) -> T | None:
    """``read(floor)``; if a segment it names is gone since ``floor`` was read (a
    compaction merged it, or a pruning deleted it: :class:`~state.errors.SegmentGone`),
    ``read`` of the floor read again (None if there is none). Gone again, the error is
    raised: it is retriable, and compactions run one per 16 epochs at most.
    """
    try:
        return read(floor)
    except SegmentGone:
        again = read_floor(store, layout)
        return None if again is None else read(again)


def epoch_of_batch(
    store: StateStore, layout: PipelineLayout, query_id: str, batch_id: int
) -> int | None:
    """The epoch batch ``batch_id`` of query ``query_id`` read; None for a no-data batch.

    Its record stored one each, else the one in a segment that the floor names (a batch
    of a compacted epoch, replayed by a worker that remembers having written its record,
    :func:`~state.protocol.batch_records.write_batch_record`). Raises
    :class:`~state.errors.StateError` if the record found names another batch.
    """
    record = read_batch_record(store, layout, query_id, batch_id)
    if record is None:
        floor = read_floor(store, layout)
        if floor is None or not floor.segments:
            return None
        segment = segment_holding(store, layout, floor, lambda s: s.batch(query_id, batch_id))
        record = None if segment is None else segment.batch(query_id, batch_id)
        if record is None:
            return None
    if (record.query_id, record.batch_id) != (query_id, batch_id):
        raise StateError(
            f"barrier: batch record {layout.batch(query_id, batch_id)} names another batch: "
            f"{record.to_json()}"
        )
    return record.epoch
