"""The barrier's records: its state, the owner inside it, and the run markers.

``<pipeline>/barrier/state.json`` (docs/PROTOCOL.md, "Barrier state"), every change a
compare-and-swap::

    {"format": 1, "gt_last": 6, "inflight": {...} | null,
     "owner": {"run_id", "query_id", "generation", "since", "token"[, "driver"]} | null
     [, "skipped": [{...a lost in-flight bundle skipped by the operator...}]]
     [, "committed": 9]}

``gt_last`` is the epoch of the last bundle the consumer acknowledged (-1: none),
``inflight`` the one bundle recorded before its delivery began
(:class:`~state.records.inflight_bundle.InflightBundle`), ``owner`` the driver run that may advance
the barrier, or a driver that took the pipeline before its query's first commit
(:attr:`Owner.driver`), ``skipped`` the bundles whose loss an operator acknowledged
(:class:`SkippedBundle`), ``committed`` the newest epoch the barrier recorded as committed
without a delivery (its bundle had no row to deliver: :attr:`BarrierState.progress`). A
state written before the ``format`` field existed decodes as format 1; ``owner.driver``,
``skipped`` and ``committed`` are written only when set, and absent in older records
(``committed`` then decodes as -1: only ``gt_last`` says how far epochs are done). A reader
that ignores ``committed`` reads the state right: it only takes the barrier's progress for
less than it is.

:class:`RunMarker` is created once when a run claims the barrier, with the generation it
claims: at ``<pipeline>/barrier/claims/<generation>-<runId>.json`` (a run's claim, pruned
once the owner is far enough ahead) or, for a run that does not know the generation it
started at (as every release before claims), ``<pipeline>/barrier/runs/<runId>.json`` (a
run whose marker exists but which is not the owner was superseded).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from state.records.codec import FORMAT_FIELD, Fields
from state.records.inflight_bundle import InflightBundle

BARRIER_STATE_FORMAT = 1
NO_BUNDLE = -1


@dataclass(frozen=True)
class Owner:
    """The driver run that may advance the barrier.

    ``run_id`` is Spark's streaming run id, ``generation`` grows by one at every claim,
    ``token`` is the last ``fencing.token`` seen (None: none), ``since`` a Unix time.

    A *driver claim* (``driver`` set, ``run_id`` and ``query_id`` empty): the snapshot
    coordinator ``driver`` (``host:pid:id``) took the pipeline with fencing token
    ``token`` before its query's first commit; that commit claims it for the run.
    """

    run_id: str
    query_id: str
    generation: int
    since: float
    token: int | None = None
    driver: str | None = None

    @classmethod
    def driver_claim(cls, driver: str, token: int, generation: int, since: float) -> Owner:
        return cls("", "", generation, since, token, driver)

    @property
    def is_driver_claim(self) -> bool:
        return self.driver is not None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "run_id": self.run_id,
            "query_id": self.query_id,
            "generation": self.generation,
            "since": self.since,
            "token": self.token,
        }
        if self.driver is not None:
            out["driver"] = self.driver
        return out

    @classmethod
    def from_json(cls, raw: object) -> Owner:
        f = Fields(raw, "barrier owner")
        return cls(
            run_id=f.string("run_id"),
            query_id=f.string("query_id", ""),
            generation=f.integer("generation", 0, minimum=0),
            since=f.number("since", 0.0),
            token=f.optional_integer("token", minimum=0),
            driver=f.optional_string("driver"),
        )


@dataclass(frozen=True)
class SkippedBundle:
    """An in-flight bundle that could not be delivered (its staged parts were gone and the
    consumer did not have it), skipped when an operator acknowledged the loss.

    ``rows`` is the bundle's row count (all of them are lost), ``parts_missing`` the
    staged parts that were gone and ``rows_missing`` their rows; ``since`` a Unix time.
    """

    bundle_id: int
    batch_id: int
    query_id: str
    run_id: str | None
    rows: int
    parts_missing: tuple[str, ...]
    rows_missing: int
    since: float

    def to_json(self) -> dict[str, Any]:
        return {
            "bundle_id": self.bundle_id,
            "batch_id": self.batch_id,
            "query_id": self.query_id,
            "run_id": self.run_id,
            "rows": self.rows,
            "parts_missing": list(self.parts_missing),
            "rows_missing": self.rows_missing,
            "since": self.since,
        }

    @classmethod
    def from_json(cls, raw: object) -> SkippedBundle:
        f = Fields(raw, "skipped bundle")
        missing = f.array("parts_missing", [])
        if not all(isinstance(loc, str) for loc in missing):
            raise f.invalid("parts_missing", "a list of staged part locations (strings)")
        return cls(
            bundle_id=f.integer("bundle_id", minimum=0),
            batch_id=f.integer("batch_id", 0, minimum=0),
            query_id=f.string("query_id", ""),
            run_id=f.optional_string("run_id"),
            rows=f.integer("rows", 0, minimum=0),
            parts_missing=tuple(missing),
            rows_missing=f.integer("rows_missing", 0, minimum=0),
            since=f.number("since", 0.0),
        )


@dataclass(frozen=True)
class BarrierState:
    """``GT_last``, the in-flight bundle and the owner; the empty state before any commit.

    ``committed``: the newest epoch whose batch the barrier committed with nothing to
    deliver (an empty bundle, or one whose rows were all refused), -1 if none is
    recorded; it may be below ``gt_last``, which a delivery advances alone.
    """

    gt_last: int = NO_BUNDLE
    inflight: InflightBundle | None = None
    owner: Owner | None = None
    skipped: tuple[SkippedBundle, ...] = ()
    committed: int = NO_BUNDLE

    @property
    def progress(self) -> int:
        """How far epochs are done: the newest epoch whose bundle was delivered or found
        to have nothing to deliver (``max(gt_last, committed)``; -1: none). Every epoch
        at or below it was committed by the barrier; what may still need an epoch below
        it (a bundle in flight, a query replaying) is the pruner's to check."""
        return max(self.gt_last, self.committed)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            FORMAT_FIELD: BARRIER_STATE_FORMAT,
            "gt_last": self.gt_last,
            "inflight": None if self.inflight is None else self.inflight.to_json(),
            "owner": None if self.owner is None else self.owner.to_json(),
        }
        if self.skipped:
            out["skipped"] = [s.to_json() for s in self.skipped]
        if self.committed != NO_BUNDLE:
            out["committed"] = self.committed
        return out

    @classmethod
    def from_json(cls, raw: object) -> BarrierState:
        f = Fields(raw, "barrier state")
        f.format(BARRIER_STATE_FORMAT)
        inflight, owner = f.value("inflight"), f.value("owner")
        return cls(
            gt_last=f.integer("gt_last", NO_BUNDLE, minimum=NO_BUNDLE),
            inflight=None if inflight is None else InflightBundle.from_json(inflight),
            owner=None if owner is None else Owner.from_json(owner),
            skipped=tuple(SkippedBundle.from_json(s) for s in f.array("skipped", [])),
            committed=f.integer("committed", NO_BUNDLE, minimum=NO_BUNDLE),
        )


@dataclass(frozen=True)
class RunMarker:
    """Run ``run_id`` (of query ``query_id``) claimed the barrier at ``since`` (Unix time)
    as ``generation`` (None in markers written before the field existed: older than any)."""

    run_id: str
    query_id: str
    since: float
    generation: int | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "query_id": self.query_id,
            "run_id": self.run_id,
            "since": self.since,
        }
        if self.generation is not None:
            out["generation"] = self.generation
        return out

    @classmethod
    def from_json(cls, raw: object) -> RunMarker:
        f = Fields(raw, "barrier run marker")
        return cls(
            run_id=f.string("run_id"),
            query_id=f.string("query_id", ""),
            since=f.number("since", 0.0),
            generation=f.optional_integer("generation", minimum=0),
        )
