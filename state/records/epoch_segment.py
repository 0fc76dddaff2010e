"""The epoch segment: ``<pipeline>/epochs/segments/<first>-<end>-<digest>.json``, the epochs
``[first, end)`` and the batch records that read them, compacted into one object.

``{"batches": [<batch record>, ...], "end": 48, "epochs": [<epoch record>, ...], "first":
32, "format": 1}`` (docs/PROTOCOL.md, "Epoch segments"): the epoch records exactly as
they were stored one each, in epoch order, each epoch starting where the one before it
ends; the batch records whose epoch is in the range, ordered by query and batch id.
Immutable: written once by a create, then the floor record names it by its range and the
digest of its bytes (:class:`~state.records.floor.SegmentRef`), so two writers of one
range that copied different batch records write two objects, and the floor names one.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from state.records.batch import BatchRecord
from state.records.codec import FORMAT_FIELD, Fields, dumps
from state.records.epoch import EpochRecord
from state.records.floor import SegmentRef

EPOCH_SEGMENT_FORMAT = 1


@dataclass(frozen=True)
class EpochSegment:
    """Epochs ``first`` to ``end - 1``, and the batch records that read them."""

    epochs: tuple[EpochRecord, ...]
    batches: tuple[BatchRecord, ...] = ()

    def __post_init__(self) -> None:
        if not self.epochs:
            raise ValueError("a segment holds at least one epoch")
        first = self.epochs[0].epoch
        for i, record in enumerate(self.epochs):
            if record.epoch != first + i:
                raise ValueError(f"segment from epoch {first}: epoch {first + i} is missing")
            if i and not record.start.same_as(self.epochs[i - 1].end):
                raise ValueError(
                    f"segment from epoch {first}: epoch {record.epoch} starts at "
                    f"{record.start}, not where epoch {record.epoch - 1} ends"
                )
        for batch in self.batches:
            if not self.first <= batch.epoch < self.end:
                raise ValueError(
                    f"batch record {batch} reads an epoch outside [{self.first}, {self.end})"
                )

    @property
    def first(self) -> int:
        return self.epochs[0].epoch

    @property
    def end(self) -> int:
        return self.epochs[-1].epoch + 1

    def to_bytes(self) -> bytes:
        return dumps(self.to_json())

    @property
    def ref(self) -> SegmentRef:
        """How the floor names this segment: its range and the digest of its bytes."""
        digest = hashlib.sha256(self.to_bytes()).hexdigest()[:16]
        return SegmentRef(self.first, self.end, digest)

    def epoch(self, k: int) -> EpochRecord | None:
        """Epoch ``k``'s record, if this segment holds it."""
        return self.epochs[k - self.first] if self.first <= k < self.end else None

    def batch(self, query_id: str, batch_id: int) -> BatchRecord | None:
        """The record of batch ``batch_id`` of query ``query_id``, if this segment holds it."""
        for record in self.batches:
            if record.query_id == query_id and record.batch_id == batch_id:
                return record
        return None

    def batches_per_epoch(self) -> Counter[int]:
        """How many batch records read each epoch."""
        return Counter(b.epoch for b in self.batches)

    @classmethod
    def merge(cls, parts: Iterable[EpochSegment]) -> EpochSegment:
        """One segment of consecutive ``parts``."""
        ordered = sorted(parts, key=lambda s: s.first)
        return cls(
            epochs=tuple(e for part in ordered for e in part.epochs),
            batches=_ordered(b for part in ordered for b in part.batches),
        )

    @classmethod
    def of(cls, epochs: Iterable[EpochRecord], batches: Iterable[BatchRecord]) -> EpochSegment:
        """The segment of ``epochs`` (in any order) and ``batches``, in canonical order."""
        return cls(epochs=tuple(sorted(epochs, key=lambda e: e.epoch)), batches=_ordered(batches))

    def to_json(self) -> dict[str, Any]:
        return {
            "batches": [b.to_json() for b in self.batches],
            "end": self.end,
            "epochs": [e.to_json() for e in self.epochs],
            "first": self.first,
            FORMAT_FIELD: EPOCH_SEGMENT_FORMAT,
        }

    @classmethod
    def from_json(cls, raw: object) -> EpochSegment:
        f = Fields(raw, "epoch segment")
        f.format(EPOCH_SEGMENT_FORMAT, required=True)
        first = f.integer("first", minimum=0)
        end = f.integer("end", minimum=first + 1)
        epochs = tuple(EpochRecord.from_json(e) for e in f.array("epochs"))
        batches = tuple(BatchRecord.from_json(b) for b in f.array("batches"))
        try:
            segment = cls(epochs=epochs, batches=batches)
        except ValueError as err:
            expected = f"the epochs {first} to {end - 1}, in order ({err})"
            raise f.invalid("epochs", expected) from None
        if (segment.first, segment.end) != (first, end):
            raise f.invalid("epochs", f"the epochs {first} to {end - 1}, in order")
        return segment


def _ordered(batches: Iterable[BatchRecord]) -> tuple[BatchRecord, ...]:
    return tuple(sorted(set(batches), key=lambda b: (b.query_id, b.batch_id)))
