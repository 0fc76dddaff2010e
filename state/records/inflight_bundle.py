"""The in-flight bundle record: the one bundle the barrier recorded before delivering it.

Stored as ``inflight`` in the barrier state (:mod:`state.records.barrier`,
docs/PROTOCOL.md "Barrier state")::

    {"bundle_id": 7, "epoch": 7, "query_id": "...", "batch_id": 3, "run_id": "...",
     "parts": ["..."], "rows": 1000,
     "part_info": [{"rows": 600, "size": 18000, "min_gt": {...}, "max_gt": {...}}],
     "has_gt": true, "ordered": true, "max_gt": {...}}

``parts`` are the staged Parquet parts in delivery order and ``part_info`` their sizes and
``gt`` ranges, index by index. ``bundle_id``, ``rows`` and ``max_gt`` are derived (from
``epoch`` and the parts) and written for readers of the raw record. Its format is the
barrier state's.

``dead_letters`` (written only when the bundle has any, so a record without them keeps
its bytes) lists the staged dead-letter parts, the rows the consumer's target refused
under ``errors.tolerance=all``: ``{"parts": ["..."], "part_info": [{"rows": 2,
"size": 900, "min_gt": null, "max_gt": null}], "rows": 2}``. The bundle's dead-letter file
is published from them once the bundle is recorded in flight (docs/PROTOCOL.md, "Dead
letters"); the record keeps them until the bundle is resolved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from state.records.codec import Fields
from state.records.gt import GlobalTime


@dataclass(frozen=True)
class StagedPart:
    """One Parquet part a write task staged; ``location`` is a key of its staging area."""

    location: str
    rows: int
    size: int
    min_gt: GlobalTime | None = None
    max_gt: GlobalTime | None = None

    def info_json(self) -> dict[str, Any]:
        """The part's ``part_info`` entry (its location is listed in ``parts``)."""
        return {
            "rows": self.rows,
            "size": self.size,
            "min_gt": None if self.min_gt is None else self.min_gt.to_json(),
            "max_gt": None if self.max_gt is None else self.max_gt.to_json(),
        }

    @classmethod
    def from_info_json(cls, location: str, raw: object, where: str) -> StagedPart:
        f = Fields(raw, where)
        min_gt, max_gt = f.value("min_gt"), f.value("max_gt")
        return cls(
            location=location,
            rows=f.integer("rows", minimum=0),
            size=f.integer("size", minimum=0),
            min_gt=GlobalTime.from_json(min_gt) if min_gt else None,
            max_gt=GlobalTime.from_json(max_gt) if max_gt else None,
        )


@dataclass(frozen=True)
class InflightBundle:
    """Bundle ``epoch`` of batch ``batch_id``: recorded in flight, being delivered."""

    epoch: int
    query_id: str
    batch_id: int
    run_id: str | None
    parts: tuple[StagedPart, ...]
    has_gt: bool
    ordered: bool
    dead_letters: tuple[StagedPart, ...] = ()

    @property
    def bundle_id(self) -> int:
        return self.epoch

    @property
    def dead_letter_rows(self) -> int:
        return sum(p.rows for p in self.dead_letters)

    @property
    def staged_locations(self) -> tuple[str, ...]:
        """Every staged file the record references: its parts and dead-letter parts."""
        return (*self.locations, *(p.location for p in self.dead_letters))

    @property
    def locations(self) -> tuple[str, ...]:
        return tuple(p.location for p in self.parts)

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.parts)

    @property
    def max_gt(self) -> GlobalTime | None:
        highs = [p.max_gt for p in self.parts if p.max_gt is not None]
        return max(highs) if highs else None

    def to_json(self) -> dict[str, Any]:
        max_gt = self.max_gt
        raw: dict[str, Any] = {
            "bundle_id": self.bundle_id,
            "epoch": self.epoch,
            "query_id": self.query_id,
            "batch_id": self.batch_id,
            "run_id": self.run_id,
            "parts": list(self.locations),
            "part_info": [p.info_json() for p in self.parts],
            "rows": self.rows,
            "has_gt": self.has_gt,
            "ordered": self.ordered,
            "max_gt": None if max_gt is None else max_gt.to_json(),
        }
        if self.dead_letters:
            raw["dead_letters"] = {
                "parts": [p.location for p in self.dead_letters],
                "part_info": [p.info_json() for p in self.dead_letters],
                "rows": self.dead_letter_rows,
            }
        return raw

    @classmethod
    def from_json(cls, raw: object) -> InflightBundle:
        """Decode the record; ``part_info`` may be absent (parts of unknown size)."""
        what = "in-flight bundle"
        f = Fields(raw, what)
        epoch = f.integer("epoch", minimum=0)
        if f.integer("bundle_id", epoch) != epoch:
            raise f.invalid("bundle_id", f"the bundle's epoch {epoch}")
        locations = f.array("parts")
        if not all(isinstance(loc, str) for loc in locations):
            raise f.invalid("parts", "a list of staged part locations (strings)")
        infos = f.value("part_info") or [{"rows": 0, "size": 0}] * len(locations)
        if not isinstance(infos, list) or len(infos) != len(locations):
            raise f.invalid("part_info", f"a list of {len(locations)} part(s), one per 'parts'")
        parts = tuple(
            StagedPart.from_info_json(loc, info, f"{what}: part_info[{i}]")
            for i, (loc, info) in enumerate(zip(locations, infos, strict=True))
        )
        return cls(
            epoch=epoch,
            query_id=f.string("query_id"),
            batch_id=f.integer("batch_id", minimum=0),
            run_id=f.optional_string("run_id"),
            parts=parts,
            has_gt=f.boolean("has_gt", False),
            ordered=f.boolean("ordered", True),
            dead_letters=_dead_letters(f.value("dead_letters"), f"{what}: dead_letters"),
        )


def _dead_letters(raw: object, where: str) -> tuple[StagedPart, ...]:
    """The ``dead_letters`` object (absent or null: none)."""
    if raw is None:
        return ()
    f = Fields(raw, where)
    locations = f.array("parts")
    if not all(isinstance(loc, str) for loc in locations):
        raise f.invalid("parts", "a list of staged dead-letter part locations (strings)")
    infos = f.value("part_info")
    if not isinstance(infos, list) or len(infos) != len(locations):
        raise f.invalid("part_info", f"a list of {len(locations)} part(s), one per 'parts'")
    return tuple(
        StagedPart.from_info_json(loc, info, f"{where}: part_info[{i}]")
        for i, (loc, info) in enumerate(zip(locations, infos, strict=True))
    )
