"""Removing the coordinator's listener from a Spark Connect session does not deadlock when
an event is on its way (PySpark 4.3's bus joins its event thread under its own lock)."""

from __future__ import annotations

import threading
import uuid
from types import SimpleNamespace
from typing import Any

from pyspark.sql.connect.streaming.query import StreamingQueryListenerBus
from pyspark.sql.streaming.listener import QueryTerminatedEvent

from state.coordinator.listener import SnapshotListener, remove_listener


def test_last_listener_removed_while_an_event_is_pending() -> None:
    command_sent = threading.Event()
    terminated: list[str] = []

    def execute_command(cmd: Any) -> None:
        assert cmd.streaming_query_listener_bus_command.remove_listener_bus_listener
        command_sent.set()

    session = SimpleNamespace(client=SimpleNamespace(execute_command=execute_command))
    streams = SimpleNamespace(_session=session)
    bus = StreamingQueryListenerBus(streams)  # type: ignore[arg-type]
    listener = SnapshotListener(lambda batch: None, lambda qid, exc: terminated.append(qid))
    bus._listener_bus.append(listener)
    query_id = uuid.uuid4()
    event = QueryTerminatedEvent.fromJson(
        {
            "id": str(query_id),
            "runId": str(uuid.uuid4()),
            "exception": None,
            "errorClassOnException": None,
        }
    )

    def event_thread() -> None:
        # The server's last event arrives while the remover holds the bus lock, then the
        # stream ends: PySpark's own removeListener waits for this thread forever here.
        command_sent.wait(10)
        bus.post_to_all(event)

    bus._execution_thread = threading.Thread(target=event_thread, daemon=True)
    bus._execution_thread.start()
    spark = SimpleNamespace(streams=SimpleNamespace(_sqlb=bus))
    remover = threading.Thread(target=remove_listener, args=(spark, listener), daemon=True)
    remover.start()
    remover.join(10)
    assert not remover.is_alive(), "remove_listener deadlocked"
    assert bus._listener_bus == []
    assert bus._execution_thread is None
    assert terminated == []  # the listener had left the bus before the event was dispatched


def test_a_classic_session_uses_remove_listener() -> None:
    removed: list[Any] = []
    spark = SimpleNamespace(streams=SimpleNamespace(removeListener=removed.append))
    listener = SnapshotListener(lambda batch: None, lambda qid, exc: None)
    remove_listener(spark, listener)
    assert removed == [listener]
