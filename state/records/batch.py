"""The batch record: ``<pipeline>/batches/<queryId>/<batchId>.json``, which epoch a batch read.

``{"batch_id": 3, "epoch": 7, "query_id": "4bfc1e8a-..."}`` (docs/PROTOCOL.md, "Batch
records"). Created by every read task of a streaming batch; the sink's commit looks it up
to learn the global time of output that carries no ``gt`` column. Immutable and tiny, so
it has no format field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from state.records.codec import Fields


@dataclass(frozen=True)
class BatchRecord:
    """Spark's batch ``batch_id`` of query ``query_id`` read source epoch ``epoch``."""

    query_id: str
    batch_id: int
    epoch: int

    def to_json(self) -> dict[str, Any]:
        return {"batch_id": self.batch_id, "epoch": self.epoch, "query_id": self.query_id}

    @classmethod
    def from_json(cls, raw: object) -> BatchRecord:
        f = Fields(raw, "batch record")
        return cls(
            query_id=f.string("query_id"),
            batch_id=f.integer("batch_id", minimum=0),
            epoch=f.integer("epoch", minimum=0),
        )
