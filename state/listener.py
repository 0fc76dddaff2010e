"""The coordinator's ``StreamingQueryListener``: completed micro-batches as minimal-time events.

Spark posts ``QueryProgressEvent`` on its listener bus after a micro-batch has run
and its entry in ``commits/`` is written. PySpark delivers it to this listener on the
driver (py4j callback thread). The listener turns it into a small
:class:`CompletedBatch` and hands it to the coordinator, which does all work on a
thread of its own: a listener must return quickly or it delays every later event.

The epoch of a batch comes from the gtkafka source's end offset, which is
``{"epoch": k + 1, "offsets": {...}}`` for a batch that read epoch ``k`` (see
docs/PROTOCOL.md). For a query without a gtkafka source (Spark's ``rate`` source, say)
the batch id stands in for the epoch.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

log = logging.getLogger("gtbarrier.coordinator")


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
    )


class SnapshotListener(StreamingQueryListener):
    """Forwards completed batches (and terminations) of every query to callbacks.

    The coordinator filters by query id. Exceptions in a callback are logged with
    their traceback and not re-raised: an exception escaping a listener would only be
    logged by Spark's listener bus, far from here.
    """

    def __init__(
        self,
        on_batch: Callable[[CompletedBatch], None],
        on_terminated: Callable[[str, str | None], None],
    ) -> None:
        self._on_batch = on_batch
        self._on_terminated = on_terminated

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        log.debug("query %s started (run %s)", event.id, event.runId)

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        try:
            batch = completed_batch_from_progress(json.loads(event.progress.json))
            self._on_batch(batch)
        except Exception:
            log.exception("gtbarrier coordinator: could not handle a progress event")

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        pass

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        try:
            self._on_terminated(str(event.id), event.exception)
        except Exception:
            log.exception("gtbarrier coordinator: could not handle a termination event")
