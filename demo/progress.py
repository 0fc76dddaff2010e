"""The demo's progress log: one JSON object per line, appended by drivers and the runner.

Every line has ``t`` (wall-clock seconds), ``driver`` (1, 2, ...; 0 for the runner) and
``event``; the rest depends on the event:

==================  =========================================================================
``driver_started``  ``pid``, ``checkpoint``, ``master``
``spark_ready``     ``version``
``recovered``       ``action`` (keep | materialise | fresh), ``reason``, ``batch_id``, ``seconds``
``query_started``   ``query_id``, ``run_id``
``batch``           ``batch_id``, ``epoch``, ``rows`` (Kafka records read), ``input_rows``
                    (Spark's count), ``duration_ms``, ``durations``, ``offsets`` (end, summed),
                    ``watermark``
``commit``          ``batch_id``, ``epoch``, ``action`` (delivered | dropped | empty), ``rows``
``gt_last``         ``gt_last``: the barrier's last acknowledged epoch moved forward
``snapshot``        an accepted snapshot: ``snapshot_id``, ``epoch``, ``batch_id``, ``bytes``, ...
``failed``          ``error``
``driver_stopped``  ``code``
``produced``        (runner) ``records``, ``seconds``
``kill``            (runner) ``pid``, ``gt_last``
``checkpoint_deleted`` (runner) ``path``
==================  =========================================================================
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any


class ProgressWriter:
    """Appends events to the progress file; each line is written with one ``write``."""

    def __init__(self, path: Path, driver: int) -> None:
        self.path = path
        self.driver = driver

    def emit(self, event: str, **fields: Any) -> dict[str, Any]:
        rec = {"t": round(time.time(), 3), "driver": self.driver, "event": event, **fields}
        line = json.dumps(rec, sort_keys=True, default=str) + "\n"
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        return rec


def read_events(path: Path) -> list[dict[str, Any]]:
    """Every complete line of the progress file (a line being written is left out)."""
    return list(ProgressTail(path).new())


class ProgressTail:
    """Reads the lines appended to a progress file since the last call."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def new(self) -> Iterator[dict[str, Any]]:
        if not self.path.exists():
            return
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        for line in data[:end].splitlines():
            if line.strip():
                yield json.loads(line)
