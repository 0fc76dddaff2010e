"""The epoch record: ``<pipeline>/epochs/<k>.json``, the source's replayable batch boundary.

``{"end": {...offset...}, "epoch": k, "format": 1, "start": {...offset...}}``, plus
``"topic_ids": {"topic": "<uuid>"}`` when the broker reported topic ids for the answer
behind ``end`` (docs/PROTOCOL.md, "Epoch log"). Created once, before
``latestOffset(start)`` returns ``end``; the first writer wins. Records written before the
``format`` field existed decode as format 1; records without ``topic_ids`` (written before
the field existed, or from a broker that gives no ids) decode with none, and a record
without ids is written exactly as before the field existed.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from state.records.codec import FORMAT_FIELD, Fields
from state.records.source_offset import SourceOffset

EPOCH_RECORD_FORMAT = 1

TOPIC_IDS_FIELD = "topic_ids"


@dataclass(frozen=True)
class EpochRecord:
    """Epoch ``epoch`` reads from ``start`` (whose epoch is ``epoch``) up to ``end``.

    ``topic_ids`` maps each topic of ``end`` whose id the broker reported to that id, as
    it was when ``end`` was computed: a later answer with another id for the topic means
    it was deleted and created again since (empty: no ids known).
    """

    epoch: int
    start: SourceOffset
    end: SourceOffset
    topic_ids: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "end": self.end.to_json(),
            "epoch": self.epoch,
            FORMAT_FIELD: EPOCH_RECORD_FORMAT,
            "start": self.start.to_json(),
        }
        if self.topic_ids:  # absent, not empty: a record without ids keeps its old bytes
            doc[TOPIC_IDS_FIELD] = dict(sorted(self.topic_ids.items()))
        return doc

    @classmethod
    def from_json(cls, raw: object) -> EpochRecord:
        f = Fields(raw, "epoch record")
        f.format(EPOCH_RECORD_FORMAT)
        return cls(
            epoch=f.integer("epoch", minimum=0),
            start=SourceOffset.from_json(f.required("start", "a gtkafka offset")),
            end=SourceOffset.from_json(f.required("end", "a gtkafka offset")),
            topic_ids=read_topic_ids(f),
        )


def read_topic_ids(f: Fields) -> dict[str, str]:
    """The ``topic_ids`` field of a record that has one (the epoch record, the source's
    start): empty when it is absent."""
    value = f.value(TOPIC_IDS_FIELD)
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(t, str) and t and isinstance(i, str) and i for t, i in value.items()
    ):
        raise f.invalid(
            TOPIC_IDS_FIELD, 'an object of topic names to topic ids, {"topic": "<uuid>"}'
        )
    return dict(value)
