"""The epoch record: ``<pipeline>/epochs/<k>.json``, the source's replayable batch boundary.

``{"end": {...offset...}, "epoch": k, "format": 1, "start": {...offset...}}``
(docs/PROTOCOL.md, "Epoch log"). Created once, before ``latestOffset(start)`` returns
``end``; the first writer wins. Records written before the ``format`` field existed
decode as format 1.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from state.records.codec import FORMAT_FIELD, Fields
from state.records.source_offset import SourceOffset

EPOCH_RECORD_FORMAT = 1


@dataclass(frozen=True)
class EpochRecord:
    """Epoch ``epoch`` reads from ``start`` (whose epoch is ``epoch``) up to ``end``."""

    epoch: int
    start: SourceOffset
    end: SourceOffset

    def to_json(self) -> dict[str, Any]:
        return {
            "end": self.end.to_json(),
            "epoch": self.epoch,
            FORMAT_FIELD: EPOCH_RECORD_FORMAT,
            "start": self.start.to_json(),
        }

    @classmethod
    def from_json(cls, raw: object) -> EpochRecord:
        f = Fields(raw, "epoch record")
        f.format(EPOCH_RECORD_FORMAT)
        return cls(
            epoch=f.integer("epoch", minimum=0),
            start=SourceOffset.from_json(f.required("start", "a gtkafka offset")),
            end=SourceOffset.from_json(f.required("end", "a gtkafka offset")),
        )
