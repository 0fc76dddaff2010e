"""The source's start: ``<pipeline>/source/start.json``, the initial offset resolved once.

``{"epoch": 0, "offsets": {...frontier...}}`` (a gtkafka offset, docs/PROTOCOL.md, "Epoch
log"), plus ``"topic_ids": {"topic": "<uuid>"}`` when the broker reported topic ids for
the answer the start was resolved from. Created once, first writer wins. A start written
before the field existed decodes with no ids, and a start without ids is written exactly
as before the field existed. A release that predates the field cannot read a start with
ids (it read the start as Spark's offset, whose keys are fixed): docs/operations.md,
"Upgrades".
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from state.records.codec import Fields
from state.records.epoch import TOPIC_IDS_FIELD, read_topic_ids
from state.records.source_offset import SourceOffset

#: The fields of the offset (Spark's, :class:`SourceOffset`) in the start.
OFFSET_FIELDS = ("epoch", "offsets")


@dataclass(frozen=True)
class SourceStart:
    """The pipeline's initial offset, and the topic ids it was resolved under.

    ``topic_ids`` maps each topic of ``offset`` whose id the broker reported to that id:
    a driver that finds the start persisted by another compares them with the broker's,
    so that a topic deleted and created again before the first epoch is data loss, not a
    new topic read from the old topic's offsets (empty: no ids known).
    """

    offset: SourceOffset
    topic_ids: Mapping[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        doc = self.offset.to_json()
        if self.topic_ids:  # absent, not empty: a start without ids keeps its old bytes
            doc[TOPIC_IDS_FIELD] = dict(sorted(self.topic_ids.items()))
        return doc

    @classmethod
    def from_json(cls, raw: object) -> SourceStart:
        """The start; fields it does not know are ignored, as in every record
        (:mod:`state.records.codec`), though the offset itself is Spark's, whose keys
        are fixed."""
        if not isinstance(raw, dict):
            return cls(SourceOffset.from_json(raw))
        offset = {k: raw[k] for k in OFFSET_FIELDS if k in raw}
        return cls(SourceOffset.from_json(offset), read_topic_ids(Fields(raw, "source start")))
