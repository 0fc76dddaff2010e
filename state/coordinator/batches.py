"""Completed micro-batches, the coordinator's minimal-time events, parsed from Spark's progress.

Spark-free: the listener (:mod:`state.coordinator.listener`) and the query's
``lastProgress`` both hand over ``StreamingQueryProgress`` JSON, which
:func:`completed_batch_from_progress` turns into a :class:`CompletedBatch`.

The epoch of a batch comes from the gtkafka source's end offset, which is
``{"epoch": k + 1, "offsets": {...}}`` for a batch that read epoch ``k`` (see
docs/PROTOCOL.md). For a query without a gtkafka source (Spark's ``rate`` source, say)
the batch id stands in for the epoch.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class CompletedBatch:
    """One finished micro-batch of the watched query."""

    query_id: str
    run_id: str
    batch_id: int
    epoch: int
    frontier: Any  # the gtkafka end offset, or {source description: end offset} without one
    num_input_rows: int
    duration_ms: int
    gtkafka: bool
    latest: Any = None
    """The gtkafka source's ``latestOffset``, ``{"offsets": {...}}``: Kafka's end offsets
    as the source last fetched them (None without one, or before it fetched any)."""

    @property
    def run(self) -> str:
        """The query run this batch belongs to (batch ids restart with a new checkpoint)."""
        return f"{self.query_id}/{self.run_id}"


def _json_or_text(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def is_gtkafka_offset(value: Any) -> bool:
    return (
        isinstance(value, dict)
        and isinstance(value.get("epoch"), int)
        and isinstance(value.get("offsets"), dict)
    )


def completed_batch_from_progress(progress: Mapping[str, Any]) -> CompletedBatch:
    """Parse ``StreamingQueryProgress`` JSON (``json.loads(progress.json)``).

    Raises ValueError for a query with more than one gtkafka source (one epoch per
    batch is needed; such a query cannot be coordinated).
    """
    sources = progress.get("sources") or []
    ends = [
        (s.get("description", f"source{i}"), _json_or_text(s.get("endOffset")))
        for i, s in enumerate(sources)
    ]
    gt = [end for _, end in ends if is_gtkafka_offset(end)]
    latest = [
        _json_or_text(s.get("latestOffset"))
        for s in sources
        if is_gtkafka_offset(_json_or_text(s.get("endOffset")))
    ]
    batch_id = int(progress["batchId"])
    if len(gt) > 1:
        raise ValueError(
            f"batch {batch_id} has {len(gt)} gtkafka sources; the coordinator needs exactly one"
        )
    if gt:
        frontier: Any = gt[0]
        epoch = int(gt[0]["epoch"]) - 1
    else:
        frontier = {desc: end for desc, end in ends}
        epoch = batch_id
    return CompletedBatch(
        query_id=str(progress["id"]),
        run_id=str(progress["runId"]),
        batch_id=batch_id,
        epoch=epoch,
        frontier=frontier,
        num_input_rows=int(progress.get("numInputRows") or 0),
        duration_ms=int(progress.get("batchDuration") or 0),
        gtkafka=bool(gt),
        latest=latest[0] if latest and isinstance(latest[0], dict) else None,
    )


__all__ = ["CompletedBatch", "completed_batch_from_progress", "is_gtkafka_offset"]
