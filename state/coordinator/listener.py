"""The coordinator's ``StreamingQueryListener``: completed micro-batches as minimal-time events.

Spark posts ``QueryProgressEvent`` on its listener bus after a micro-batch has run
and its entry in ``commits/`` is written. PySpark delivers it to this listener on the
driver (py4j callback thread). The listener turns it into a small
:class:`~state.coordinator.batches.CompletedBatch` and hands it to the coordinator,
which does all work on a thread of its own: a listener must return quickly or it
delays every later event.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable

from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

from state.coordinator.batches import CompletedBatch, completed_batch_from_progress

log = logging.getLogger(__name__)


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


__all__ = ["SnapshotListener"]
