"""Is the driver ready? The decision behind the metrics endpoint's ``/ready``.

Ready means: this driver runs a query, holds the pipeline, is not stopping, and has heard
from the query within :func:`ready_bound` of its trigger interval. Hearing from it is a
completed micro-batch (Spark's progress event, after the batch's commit) or an idle
trigger (Spark's ``QueryIdleEvent``, posted when a trigger finds no new data, at most
every ``spark.sql.streaming.noDataProgressEventInterval``, 10 s by default); before
either, the time the query was watched counts. So a pipeline without input stays ready,
and one whose batch hangs (a consumer that does not answer, a stalled source) does not.

The bound is ``READY_FACTOR x max(trigger interval, READY_FLOOR)``: 30 s for the default
trigger and any interval up to 10 s, three intervals above that. The floor covers the
idle events' own interval; the factor lets a batch take two intervals more than planned
before the driver is reported unready.
"""

from __future__ import annotations

from dataclasses import dataclass

from state.metrics.probes import Readiness

READY_FLOOR = 10.0
"""Seconds: Spark's default ``noDataProgressEventInterval``, how often an idle query is heard."""

READY_FACTOR = 3.0
"""How many (floored) trigger intervals may pass without news before the driver is unready."""


def ready_bound(trigger_interval: float | None) -> float:
    """Seconds without a commit or an idle trigger after which the driver is not ready
    (``trigger_interval`` None: unknown, taken as 0, Spark's default trigger)."""
    return READY_FACTOR * max(trigger_interval or 0.0, READY_FLOOR)


@dataclass(frozen=True)
class QueryLiveness:
    """What the coordinator knows of its query for ``/ready``.

    ``active``: a query is watched and running. ``owner``: this driver holds the
    pipeline (its token, and with ZooKeeper its lock). ``stopping``: a graceful stop was
    requested. ``trigger_interval``: the query's processing-time interval in seconds (None:
    unknown or the default trigger). ``heard``: when the query last committed a batch or
    reported an idle trigger, or was watched (a time in seconds, as ``now``).
    """

    active: bool
    owner: bool
    stopping: bool
    trigger_interval: float | None
    heard: float | None


def readiness(liveness: QueryLiveness, now: float) -> Readiness:
    """Decide ``/ready`` (see the module docstring)."""
    if liveness.stopping:
        return Readiness(False, "the driver is stopping (graceful stop requested)")
    if not liveness.active or liveness.heard is None:
        return Readiness(False, "no query is running")
    if not liveness.owner:
        return Readiness(False, "this driver does not hold the pipeline (no token or lock)")
    bound = ready_bound(liveness.trigger_interval)
    silent = now - liveness.heard
    interval = liveness.trigger_interval or 0.0
    if silent > bound:
        return Readiness(
            False,
            f"no batch committed and no idle trigger for {silent:.0f}s (bound {bound:g}s = "
            f"{READY_FACTOR:g} x max(trigger {interval:g}s, {READY_FLOOR:g}s))",
        )
    return Readiness(True, f"ready: last heard from the query {max(silent, 0.0):.0f}s ago")


__all__ = [
    "READY_FACTOR",
    "READY_FLOOR",
    "QueryLiveness",
    "readiness",
    "ready_bound",
]
