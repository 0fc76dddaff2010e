"""The generation marker: which pipeline and resume point generation a checkpoint is for.

A local file in the query's checkpoint directory, ``<checkpoint>/.gtbarrier-generation``,
written by ``recover()`` (docs/PROTOCOL.md, "Checkpoint generation marker")::

    {"format": 1, "generation": 1, "pipeline_id": "orders"}

Hidden (a dot file), so Spark and the snapshot copy ignore it. A checkpoint without one
was made before the marker existed and counts as generation 0.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from state.records.codec import FORMAT_FIELD, Fields

MARKER_FILE = ".gtbarrier-generation"
MARKER_FORMAT = 1


@dataclass(frozen=True)
class CheckpointMarker:
    """The checkpoint was made for generation ``generation`` of pipeline ``pipeline_id``."""

    pipeline_id: str
    generation: int

    def to_json(self) -> dict[str, Any]:
        return {
            FORMAT_FIELD: MARKER_FORMAT,
            "generation": self.generation,
            "pipeline_id": self.pipeline_id,
        }

    @classmethod
    def from_json(cls, raw: object) -> CheckpointMarker:
        f = Fields(raw, "checkpoint generation marker")
        f.format(MARKER_FORMAT)
        return cls(f.string("pipeline_id"), f.integer("generation", minimum=0))
