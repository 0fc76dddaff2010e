"""Fencing tokens: a number that grows every time a driver takes a pipeline.

The record ``<pipeline>/coordinator/driver.json`` (``{"token": n, "owner": {...}}``)
is bumped with a compare-and-swap by every driver that takes the pipeline, after it
holds the ZooKeeper lock (with ZooKeeper) or right away (without). The token travels
to the barrier sink as the option ``fencing.token``; the sink refuses a commit whose
token is lower than the highest it has recorded (:class:`PipelineFenced`), so a zombie
driver that lost its lock cannot deliver once a newer driver has committed. The
coordinator also refuses to write a resume point once a newer token exists.
"""

from __future__ import annotations

import os
import socket
import time
from typing import Any

from state.errors import ConcurrentModification, KeyExists, PipelineFenced
from state.layout import PipelineLayout
from state.retry import Retry
from state.store import StateStore


def read_token(store: StateStore, layout: PipelineLayout) -> int:
    """The highest token handed out so far (0: none)."""
    hit = store.get_json_or_none(layout.driver)
    return 0 if hit is None else int(hit[0].get("token", 0))


def take_token(store: StateStore, layout: PipelineLayout, *, identifier: str = "") -> int:
    """Hand out the next token (compare-and-swap on the driver record)."""
    owner: dict[str, Any] = {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "id": identifier,
        "since": time.time(),
    }

    def once() -> int:
        hit = store.get_json_or_none(layout.driver)
        if hit is None:
            store.create_json(layout.driver, {"owner": owner, "token": 1})
            return 1
        record, version = hit
        token = int(record.get("token", 0)) + 1
        store.compare_and_swap_json(layout.driver, {"owner": owner, "token": token}, version)
        return token

    retry = Retry(
        max_attempts=20,
        base_delay=0.02,
        max_delay=0.5,
        deadline=30.0,
        is_retriable=lambda e: (
            isinstance(e, ConcurrentModification | KeyExists)
            or bool(getattr(e, "retriable", False))
        ),
    )
    return retry(once)


def check_token(store: StateStore, layout: PipelineLayout, token: int) -> None:
    """Raise :class:`PipelineFenced` if a driver with a higher token took the pipeline."""
    current = read_token(store, layout)
    if current > token:
        raise PipelineFenced(
            f"pipeline '{layout.pipeline_id}' was taken by a newer driver (fencing token "
            f"{current} > ours {token}); this driver must stop"
        )
