"""The barrier's records: its state, the owner inside it, and the run markers.

``<pipeline>/barrier/state.json`` (docs/PROTOCOL.md, "Barrier state"), every change a
compare-and-swap::

    {"format": 1, "gt_last": 6, "inflight": {...} | null,
     "owner": {"run_id", "query_id", "generation", "since", "token"} | null}

``gt_last`` is the epoch of the last bundle the consumer acknowledged (-1: none),
``inflight`` the one bundle recorded before its delivery began
(:class:`~state.records.bundle.InflightBundle`), ``owner`` the driver run that may advance
the barrier. A state written before the ``format`` field existed decodes as format 1.

``<pipeline>/barrier/runs/<runId>.json`` (:class:`RunMarker`) is created once when a run
claims the barrier: a run whose marker exists but which is not the owner was superseded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from state.records.bundle import InflightBundle
from state.records.codec import FORMAT_FIELD, Fields

BARRIER_STATE_FORMAT = 1
NO_BUNDLE = -1


@dataclass(frozen=True)
class Owner:
    """The driver run that may advance the barrier.

    ``run_id`` is Spark's streaming run id, ``generation`` grows by one at every claim,
    ``token`` is the last ``fencing.token`` seen (None: none), ``since`` a Unix time.
    """

    run_id: str
    query_id: str
    generation: int
    since: float
    token: int | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "query_id": self.query_id,
            "generation": self.generation,
            "since": self.since,
            "token": self.token,
        }

    @classmethod
    def from_json(cls, raw: object) -> Owner:
        f = Fields(raw, "barrier owner")
        return cls(
            run_id=f.string("run_id"),
            query_id=f.string("query_id", ""),
            generation=f.integer("generation", 0, minimum=0),
            since=f.number("since", 0.0),
            token=f.optional_integer("token", minimum=0),
        )


@dataclass(frozen=True)
class BarrierState:
    """``GT_last``, the in-flight bundle and the owner; the empty state before any commit."""

    gt_last: int = NO_BUNDLE
    inflight: InflightBundle | None = None
    owner: Owner | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            FORMAT_FIELD: BARRIER_STATE_FORMAT,
            "gt_last": self.gt_last,
            "inflight": None if self.inflight is None else self.inflight.to_json(),
            "owner": None if self.owner is None else self.owner.to_json(),
        }

    @classmethod
    def from_json(cls, raw: object) -> BarrierState:
        f = Fields(raw, "barrier state")
        f.format(BARRIER_STATE_FORMAT)
        inflight, owner = f.value("inflight"), f.value("owner")
        return cls(
            gt_last=f.integer("gt_last", NO_BUNDLE, minimum=NO_BUNDLE),
            inflight=None if inflight is None else InflightBundle.from_json(inflight),
            owner=None if owner is None else Owner.from_json(owner),
        )


@dataclass(frozen=True)
class RunMarker:
    """Run ``run_id`` (of query ``query_id``) claimed the barrier at ``since`` (Unix time)."""

    run_id: str
    query_id: str
    since: float

    def to_json(self) -> dict[str, Any]:
        return {"query_id": self.query_id, "run_id": self.run_id, "since": self.since}

    @classmethod
    def from_json(cls, raw: object) -> RunMarker:
        f = Fields(raw, "barrier run marker")
        return cls(
            run_id=f.string("run_id"),
            query_id=f.string("query_id", ""),
            since=f.number("since", 0.0),
        )
