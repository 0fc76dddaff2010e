"""The source's durable records: the resolved start and the epoch log (docs/PROTOCOL.md).

* ``<pipeline>/source/start.json``: the initial offset, resolved once (``latest`` and
  timestamps become concrete offsets) and created once, so ``initialOffset()`` answers
  the same after a restart or on a new checkpoint.
* ``<pipeline>/epochs/<k>.json``: the :class:`~state.records.epoch.EpochRecord` of epoch
  ``k``, created before ``latestOffset`` returns its ``end`` for ``start``; first writer
  wins. A replay of ``start`` gets the recorded end, whatever the read limit is now. The
  record also keeps the topic ids under which its end was computed
  (:meth:`EpochLog.topic_ids_at`), so that a driver that starts again can tell a topic
  deleted and created again since from the one the frontier belongs to.

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
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from state.errors import EpochLogConflict, EpochsPruned, KeyExists, MalformedRecord
from state.layout import PipelineLayout
from state.protocol.epoch_floor import read_floor
from state.records.codec import decode
from state.records.epoch import EpochRecord
from state.records.floor import FloorRecord
from state.records.source_offset import SourceOffset
from state.stores import StateStore

R = TypeVar("R")

_EPOCH_KEY = re.compile(r"/epochs/(\d+)\.json$")


@dataclass
class EpochLog:
    """Reads and creates the source's records in one pipeline's state."""

    store: StateStore
    layout: PipelineLayout
    _start: SourceOffset | None = field(default=None, init=False, repr=False)
    _recorded: dict[int, EpochRecord] = field(default_factory=dict, init=False, repr=False)
    _absent: int | None = field(default=None, init=False, repr=False)
    _floor_read: tuple[FloorRecord | None] | None = field(default=None, init=False, repr=False)

    #: How many recorded epochs are remembered (Spark asks for the newest ones).
    REMEMBERED = 16

    # --- the resolved start ----------------------------------------------------------

    def start(self) -> SourceOffset | None:
        """The persisted initial offset, if any."""
        if self._start is None:
            self._start = self._read(self.layout.source_start, SourceOffset.from_json)
        return self._start

    def create_start(self, offset: SourceOffset) -> SourceOffset:
        """Persist ``offset`` as the initial offset unless one exists; the one that won."""
        key = self.layout.source_start
        winner, _ = self._create_or_get(key, offset.to_json(), SourceOffset.from_json)
        self._start = winner
        return winner

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
            record = self._read(key, lambda raw: self._epoch_record(key, raw))
            if record is None:
                self._check_not_pruned(start.epoch)
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
        see :meth:`topic_ids_at`)."""
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
        self._remember(start.epoch, winner)
        if created:
            self._absent = end.epoch
        return self._check(key, winner, start)

    def _check_not_pruned(self, epoch: int) -> None:
        # Read once per log: an epoch below the floor is asked for by a driver whose
        # checkpoint was already behind when it started; a driver's next epoch to plan
        # lies above any floor its own progress allows.
        if self._floor_read is None:
            self._floor_read = (self.floor(),)
        floor = self._floor_read[0]
        if floor is not None and epoch < floor.epoch:
            raise EpochsPruned(
                f"{self.store.uri}/{self.layout.epoch(epoch)}: epoch {epoch} was pruned: the "
                f"epoch log of pipeline '{self.layout.pipeline_id}' begins at epoch "
                f"{floor.epoch} (state.epochsRetained keeps that many epochs below the "
                "barrier's GT_last). This checkpoint is older than the epochs kept; restore "
                "a newer snapshot, or start the query on a new checkpoint with "
                "state.startAtFloor=true"
            )

    def topic_ids_at(self, offset: SourceOffset) -> dict[str, str] | None:
        """The topic ids under which the frontier ``offset`` was computed: those recorded
        with epoch ``offset.epoch - 1``, the one that ends at ``offset``.

        ``None`` when there are none to compare with: ``offset`` is the start (epoch 0),
        that epoch is not recorded or ends elsewhere, or it was recorded without ids (by a
        gtbarrier before topic ids were recorded, or from a broker that gives none).
        """
        if offset.epoch == 0:
            return None
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
        """The recorded epochs, ascending (one list request)."""
        keys = self.store.list(self.layout.epochs_prefix)
        found = (_EPOCH_KEY.search("/" + key) for key in keys)
        return sorted(int(m.group(1)) for m in found if m)

    def read_epoch(self, epoch: int) -> EpochRecord | None:
        """Epoch ``epoch``'s record as stored, or None if it is not recorded."""
        key = self.layout.epoch(epoch)
        return self._read(key, lambda raw: self._epoch_record(key, raw))

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
