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
from typing import Any

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
    """Forwards completed batches (and idle triggers, terminations) of every query to callbacks.

    The coordinator filters by query id. Exceptions in a callback are logged with
    their traceback and not re-raised: an exception escaping a listener would only be
    logged by Spark's listener bus, far from here.
    """

    def __init__(
        self,
        on_batch: Callable[[CompletedBatch], None],
        on_terminated: Callable[[str, str | None], None],
        on_idle: Callable[[str], None] | None = None,
    ) -> None:
        self._on_batch = on_batch
        self._on_terminated = on_terminated
        self._on_idle = on_idle

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        log.debug("query %s started (run %s)", event.id, event.runId)

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        try:
            batch = completed_batch_from_progress(json.loads(event.progress.json))
            self._on_batch(batch)
        except Exception:
            log.exception("gtbarrier coordinator: could not handle a progress event")

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        if self._on_idle is None:
            return
        try:
            self._on_idle(str(event.id))
        except Exception:
            log.exception("gtbarrier coordinator: could not handle an idle event")

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        try:
            self._on_terminated(str(event.id), event.exception)
        except Exception:
            log.exception("gtbarrier coordinator: could not handle a termination event")


def remove_listener(spark: Any, listener: StreamingQueryListener) -> None:
    """``spark.streams.removeListener(listener)``, without PySpark 4.3's Connect deadlock.

    On a Spark Connect session, PySpark's client-side bus removes its *last* listener
    while holding its lock and then joins the thread that receives events; if an event
    is on its way (the termination event of a query stopped just before, say), that
    thread waits for the same lock to dispatch it and both wait forever (SPARK-59623).
    Here the listener leaves the bus under the lock and the join happens after the lock
    is released, so the pending events are dispatched (to nobody) and the thread ends.
    A classic session, or a bus whose internals differ, uses ``removeListener``.
    """
    bus: Any = getattr(spark.streams, "_sqlb", None)
    lock = getattr(bus, "_lock", None)
    listeners = getattr(bus, "_listener_bus", None)
    sqm = getattr(bus, "_sqm", None)
    if lock is None or not isinstance(listeners, list) or sqm is None:
        spark.streams.removeListener(listener)
        return
    import pyspark.sql.connect.proto as pb2

    with lock:
        if listener not in listeners:
            return
        if len(listeners) > 1:
            listeners.remove(listener)
            return
        cmd = pb2.StreamingQueryListenerBusCommand()
        cmd.remove_listener_bus_listener = True
        exec_cmd = pb2.Command()
        exec_cmd.streaming_query_listener_bus_command.CopyFrom(cmd)
        sqm._session.client.execute_command(exec_cmd)
        listeners.remove(listener)
        thread = bus._execution_thread
    if thread is not None:
        thread.join()
    with lock:
        if bus._execution_thread is thread:
            bus._execution_thread = None


__all__ = ["SnapshotListener", "remove_listener"]
