"""A write task's report (:class:`BarrierCommitMessage`) and what commit delivers (:class:`Bundle`).

A bundle is the output of one micro-batch: its id and its global time are the source epoch
``k`` the batch read. It is made of the Parquet parts the batch's successful write tasks
staged, listed in delivery order. When the input has a ``gt`` column every part is sorted
by ``gt``; if the parts' ``gt`` ranges are disjoint (each task read its own Kafka range),
concatenating them in the listed order is ``gt`` order (``ordered``), otherwise delivery
merges them. A staged part and the in-flight record of a bundle are protocol records
(:mod:`state.records.inflight_bundle`).

The rows the consumer's target refuses (``errors.tolerance=all``) travel beside the parts
as the tasks' *dead-letter parts*: never delivered, written once as the bundle's
dead-letter file before the bundle is (:mod:`sink.dead_letters`).
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql.datasource import WriterCommitMessage

from sink.gt_column import sort_by_gt
from state.records.gt import GlobalTime
from state.records.inflight_bundle import InflightBundle, StagedPart

if TYPE_CHECKING:
    from sink.staging import Staging


@dataclass(frozen=True)
class BarrierCommitMessage(WriterCommitMessage):
    """The result of one write task: small and picklable (no rows, only where they are)."""

    query_id: str
    batch_id: int
    run_id: str | None
    partition: int
    task_attempt: int
    has_gt: bool
    part: StagedPart | None = None
    dead_letters: StagedPart | None = None
    """The task's rows the consumer's target refuses (``errors.tolerance=all``)."""

    @property
    def rows(self) -> int:
        return 0 if self.part is None else self.part.rows

    @property
    def dead_letter_rows(self) -> int:
        return 0 if self.dead_letters is None else self.dead_letters.rows


@dataclass(frozen=True)
class Bundle:
    """One batch's output as the barrier delivers it: id and global time are the epoch."""

    pipeline_id: str
    epoch: int
    query_id: str
    batch_id: int
    parts: tuple[StagedPart, ...]
    has_gt: bool
    ordered: bool
    run_id: str | None = None
    dead_letters: tuple[StagedPart, ...] = ()
    """The tasks' dead-letter parts, by location (never delivered)."""
    extra: dict[str, Any] = field(default_factory=dict, compare=False)

    @property
    def bundle_id(self) -> int:
        return self.epoch

    @property
    def gt(self) -> int:
        return self.epoch

    @property
    def rows(self) -> int:
        return sum(p.rows for p in self.parts)

    @property
    def size(self) -> int:
        return sum(p.size for p in self.parts)

    @property
    def dead_letter_rows(self) -> int:
        return sum(p.rows for p in self.dead_letters)

    @property
    def staged_locations(self) -> tuple[str, ...]:
        """Every staged file of the bundle: its parts, then its dead-letter parts."""
        return tuple(p.location for p in (*self.parts, *self.dead_letters))

    @property
    def max_gt(self) -> GlobalTime | None:
        highs = [p.max_gt for p in self.parts if p.max_gt is not None]
        return max(highs) if highs else None

    @classmethod
    def from_messages(
        cls, pipeline_id: str, epoch: int, batch_id: int, messages: Sequence[BarrierCommitMessage]
    ) -> Bundle:
        parts = [m.part for m in messages if m.part is not None and m.part.rows > 0]
        has_gt = any(m.has_gt for m in messages)
        ordered = True
        if has_gt:
            parts.sort(key=lambda p: (p.min_gt.to_tuple() if p.min_gt else (), p.location))
            for prev, nxt in itertools.pairwise(parts):
                if prev.max_gt is None or nxt.min_gt is None or not prev.max_gt < nxt.min_gt:
                    ordered = False
        else:
            parts.sort(key=lambda p: p.location)
        dead = sorted(
            (
                m.dead_letters
                for m in messages
                if m.dead_letters is not None and m.dead_letters.rows
            ),
            key=lambda p: p.location,
        )
        first = messages[0] if messages else None
        return cls(
            pipeline_id=pipeline_id,
            epoch=epoch,
            query_id=first.query_id if first else "",
            batch_id=batch_id,
            parts=tuple(parts),
            has_gt=has_gt,
            ordered=ordered or len(parts) <= 1,
            run_id=first.run_id if first else None,
            dead_letters=tuple(dead),
        )

    # --- the in-flight record (docs/PROTOCOL.md) --------------------------------------

    def to_record(self) -> InflightBundle:
        return InflightBundle(
            epoch=self.epoch,
            query_id=self.query_id,
            batch_id=self.batch_id,
            run_id=self.run_id,
            parts=self.parts,
            has_gt=self.has_gt,
            ordered=self.ordered,
            dead_letters=self.dead_letters,
        )

    @classmethod
    def from_record(cls, pipeline_id: str, record: InflightBundle) -> Bundle:
        return cls(
            pipeline_id=pipeline_id,
            epoch=record.epoch,
            query_id=record.query_id,
            batch_id=record.batch_id,
            parts=record.parts,
            has_gt=record.has_gt,
            ordered=record.ordered,
            run_id=record.run_id,
            dead_letters=record.dead_letters,
        )

    # --- reading the rows back ----------------------------------------------------------

    def tables(self, staging: Staging) -> Iterator[pa.Table]:
        """The bundle's rows as tables, in delivery (``gt``) order."""
        if self.ordered:
            for part in self.parts:
                yield staging.read_part(part.location)
            return
        merged = pa.concat_tables([staging.read_part(p.location) for p in self.parts])
        yield sort_by_gt(merged) if self.has_gt else merged

    def read_dead_letters(self, staging: Staging) -> pa.Table:
        """The bundle's staged dead-letter rows, part after part (in location order)."""
        if not self.dead_letters:
            raise ValueError(f"bundle {self.bundle_id} has no dead letters")
        tables = [staging.read_part(p.location) for p in self.dead_letters]
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables)

    def read_all(self, staging: Staging) -> pa.Table:
        tables = list(self.tables(staging))
        if not tables:
            raise ValueError(f"bundle {self.bundle_id} has no parts")
        return tables[0] if len(tables) == 1 else pa.concat_tables(tables)
