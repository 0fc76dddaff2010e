"""The floor record: ``<pipeline>/source/floor.json``, where the stored epoch log begins and
which of its epochs are compacted into segments.

Format 1 (written while no epoch is in a segment, so a release before segments still
reads it): ``{"epoch": F, "epochs_with_records": 57, "format": 1, "replays_dropped": 3,
"start": {...offset...}}``. Format 2 adds ``"segments": [[first, end], ...]``, the epoch
segments (:mod:`state.records.epoch_segment`) that hold the epochs from the floor up to
the last segment's end, and allows ``"epoch": 0`` (nothing pruned, some epochs compacted).
A segment is named by its range and the digest of its bytes (:class:`SegmentRef`). A
release before segments refuses format 2 rather than reading the compacted epochs as
never planned (docs/PROTOCOL.md, "Pruning" and "Epoch segments"). Format 3 adds
``"generation": G``, the newest generation of the resume point that
``recover(mode="replay")`` began: the snapshot coordinator of an older generation does not
raise the floor (its retained snapshots no longer say what a restore needs), and a floor
at epoch 0 may then hold no segment (nothing pruned nor compacted, only the generation).
A release before generations refuses format 3 rather than prune past a new generation's
replay.

Epochs below ``F`` and the batch records that read them may be deleted; ``start`` is where
epoch ``F`` starts, which is where a query on a new checkpoint may begin once the epochs
before it are gone. The two counts keep what the metrics derived from the deleted records:
how many pruned epochs read records (each made one bundle) and how many batches replayed a
pruned epoch (the barrier dropped their bundles), so that counters never go down. The floor
only rises, and the segments' end with it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from state.records.codec import FORMAT_FIELD, Fields
from state.records.source_offset import SourceOffset

FLOOR_RECORD_FORMAT = 3

#: The format written while the log has no segment: the bytes of a release before them.
FLOOR_WITHOUT_SEGMENTS_FORMAT = 1
#: The format written with segments and no generation: the bytes of a release before them.
FLOOR_WITHOUT_GENERATION_FORMAT = 2

SEGMENTS_FIELD = "segments"
GENERATION_FIELD = "generation"

_DIGEST = re.compile(r"[0-9a-f]{16}")


@dataclass(frozen=True, order=True)
class SegmentRef:
    """The epoch segment that holds epochs ``[first, end)``, named by ``digest``: the
    first 16 hex digits of the SHA-256 of its bytes, so that two writers of one range
    never write one object with different contents."""

    first: int
    end: int
    digest: str

    def __post_init__(self) -> None:
        if not 0 <= self.first < self.end:
            raise ValueError(f"a segment holds epochs [first, end) with 0 <= first < end: {self}")
        if not _DIGEST.fullmatch(self.digest):
            raise ValueError(f"a segment's digest is 16 lowercase hex digits: {self.digest!r}")

    def __contains__(self, epoch: object) -> bool:
        return isinstance(epoch, int) and self.first <= epoch < self.end

    @property
    def size(self) -> int:
        return self.end - self.first


@dataclass(frozen=True)
class FloorRecord:
    """Epochs below ``epoch`` are pruned (none if it is 0); epoch ``epoch`` starts at
    ``start``; ``segments`` hold the epochs from there up to :attr:`segments_end`, the
    later ones are stored one object each.

    ``epochs_with_records``: pruned epochs that read at least one record.
    ``replays_dropped``: batches, beyond the first, that read a pruned epoch.
    ``generation``: the newest resume point generation begun by ``recover(mode="replay")``
    (0: none); every writer of the floor carries it over.
    """

    epoch: int
    start: SourceOffset
    epochs_with_records: int = 0
    replays_dropped: int = 0
    segments: tuple[SegmentRef, ...] = ()
    generation: int = 0

    def __post_init__(self) -> None:
        if self.start.epoch != self.epoch:
            raise ValueError(f"the floor {self.epoch} must start at its own epoch: {self.start}")
        if self.generation < 0:
            raise ValueError(f"a floor's generation is >= 0, not {self.generation}")
        if self.epoch == 0 and not self.segments and self.generation == 0:
            raise ValueError(
                "a floor at epoch 0 (nothing pruned) must hold segments or a generation"
            )
        for before, after in zip(self.segments, self.segments[1:], strict=False):
            if after.first != before.end:
                raise ValueError(f"segments must follow each other: {before} then {after}")
        if self.segments and not self.segments[0].first <= self.epoch < self.segments[0].end:
            raise ValueError(f"the first segment {self.segments[0]} must hold epoch {self.epoch}")

    @property
    def pruned(self) -> bool:
        """Whether epochs were pruned (a floor at epoch 0 only says some are compacted)."""
        return self.epoch > 0

    @property
    def segments_end(self) -> int:
        """The first epoch not in a segment: the epochs from here on are stored one each."""
        return self.segments[-1].end if self.segments else self.epoch

    def segment_of(self, epoch: int) -> SegmentRef | None:
        """The segment that holds ``epoch``, if one does."""
        for segment in self.segments:
            if epoch in segment:
                return segment
        return None

    def to_json(self) -> dict[str, Any]:
        if self.generation:
            fmt = FLOOR_RECORD_FORMAT
        elif self.segments:
            fmt = FLOOR_WITHOUT_GENERATION_FORMAT
        else:
            fmt = FLOOR_WITHOUT_SEGMENTS_FORMAT
        doc: dict[str, Any] = {
            "epoch": self.epoch,
            "epochs_with_records": self.epochs_with_records,
            FORMAT_FIELD: fmt,
            "replays_dropped": self.replays_dropped,
            "start": self.start.to_json(),
        }
        if self.segments:
            doc[SEGMENTS_FIELD] = [[s.first, s.end, s.digest] for s in self.segments]
        if self.generation:
            doc[GENERATION_FIELD] = self.generation
        return doc

    @classmethod
    def from_json(cls, raw: object) -> FloorRecord:
        f = Fields(raw, "floor record")
        fmt = f.format(FLOOR_RECORD_FORMAT)
        epoch = f.integer("epoch", minimum=0 if fmt >= 2 else 1)
        start = SourceOffset.from_json(f.required("start", "a gtkafka offset"))
        if start.epoch != epoch:
            raise f.invalid("start", f"the offset at which epoch {epoch} starts")
        generation = f.integer(GENERATION_FIELD, minimum=1) if fmt >= 3 else 0
        # A floor at epoch 0 without segments only carries a generation (format 3).
        optional = fmt >= 3 and f.value(SEGMENTS_FIELD) is None
        segments = _segments(f, epoch) if fmt >= 2 and not optional else ()
        return cls(
            epoch=epoch,
            start=start,
            epochs_with_records=f.integer("epochs_with_records", minimum=0),
            replays_dropped=f.integer("replays_dropped", minimum=0),
            segments=segments,
            generation=generation,
        )


def _segments(f: Fields, epoch: int) -> tuple[SegmentRef, ...]:
    expected = (
        f"a non-empty JSON array of [first, end, digest] epoch segments that follow each "
        f"other, the first holding epoch {epoch}"
    )
    items = f.array(SEGMENTS_FIELD, [])
    if not items:
        raise f.invalid(SEGMENTS_FIELD, expected)
    try:
        ranges = tuple(_segment_ref(item) for item in items)
        FloorRecord(epoch, SourceOffset(epoch, {}), segments=ranges)
    except (TypeError, ValueError):
        raise f.invalid(SEGMENTS_FIELD, expected) from None
    return ranges


def _segment_ref(item: object) -> SegmentRef:
    if (
        not isinstance(item, list)
        or len(item) != 3
        or not all(isinstance(x, int) and not isinstance(x, bool) for x in item[:2])
        or not isinstance(item[2], str)
    ):
        raise ValueError(f"not an epoch segment: {item!r}")
    return SegmentRef(item[0], item[1], item[2])
