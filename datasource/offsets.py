"""Offset-range arithmetic over frontiers: pure functions, no I/O.

A *frontier* maps ``(topic, partition)`` to the next offset to read; a
:class:`~state.records.source_offset.SourceOffset` (the record Spark checkpoints) is a
frontier plus the number of the epoch that starts at it.

Everything here is deterministic: the same inputs always give the same ranges, so that a
replayed batch reads exactly the same records in the same splits.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from state.records.source_offset import Frontier, TopicPartitionKey

__all__ = [
    "Frontier",
    "OffsetRange",
    "TopicPartitionKey",
    "backlog",
    "cap_frontier",
    "pack_ranges",
    "plan_end",
    "ranges_between",
    "rate_limit",
    "split_ranges",
    "start_of",
    "task_ranges",
]


@dataclass(frozen=True)
class OffsetRange:
    """Offsets ``[from_offset, until_offset)`` of one topic-partition."""

    topic: str
    partition: int
    from_offset: int
    until_offset: int

    @property
    def size(self) -> int:
        return max(0, self.until_offset - self.from_offset)

    def __str__(self) -> str:
        return f"{self.topic}-{self.partition} [{self.from_offset}, {self.until_offset})"


def start_of(start: Mapping[TopicPartitionKey, int], tp: TopicPartitionKey) -> int:
    """Where ``tp`` starts: its offset in ``start``, or 0 for a partition new since then.

    New partitions are read from their beginning (offset 0), as Spark's Kafka source does;
    if retention already removed records of a new partition, reading reports data loss.
    """
    return start.get(tp, 0)


def ranges_between(
    start: Mapping[TopicPartitionKey, int], end: Mapping[TopicPartitionKey, int]
) -> list[OffsetRange]:
    """The non-empty ranges from ``start`` to ``end``, sorted by topic and partition.

    Partitions only in ``start`` (gone from the end frontier) and partitions whose end is
    not after their start yield no range.
    """
    ranges = []
    for tp in sorted(end):
        begin = start_of(start, tp)
        if end[tp] > begin:
            ranges.append(OffsetRange(tp[0], tp[1], begin, end[tp]))
    return ranges


def backlog(start: Mapping[TopicPartitionKey, int], latest: Mapping[TopicPartitionKey, int]) -> int:
    """Records between ``start`` and ``latest``."""
    return sum(r.size for r in ranges_between(start, latest))


def rate_limit(
    start: Mapping[TopicPartitionKey, int], latest: Mapping[TopicPartitionKey, int], max_rows: int
) -> Frontier:
    """The end frontier that reads at most ``max_rows`` records from ``start`` towards ``latest``.

    The allowance is split across partitions in proportion to each one's backlog (largest
    remainder method, ties broken by topic-partition order, so the split is deterministic),
    and no partition with a backlog is starved: each reads at least one record. Hence the
    total is exactly ``min(backlog, max(max_rows, partitions with a backlog))``.
    """
    if max_rows < 1:
        raise ValueError(f"max_rows must be >= 1, got {max_rows}")
    end: Frontier = dict(latest)
    sizes = {(r.topic, r.partition): r.size for r in ranges_between(start, latest)}
    total = sum(sizes.values())
    if total <= max_rows:
        return end
    budget = max(max_rows, len(sizes))
    grant: dict[TopicPartitionKey, int] = {}
    remainders: list[tuple[int, TopicPartitionKey]] = []
    for tp in sorted(sizes):
        share, rem = divmod(budget * sizes[tp], total)
        grant[tp] = max(1, share)
        remainders.append((rem, tp))
    granted = sum(grant.values())
    if granted < budget:
        # Largest remainders first; a partition never gets more than its backlog.
        order = sorted(remainders, key=lambda x: (-x[0], x[1]))
        for _, tp in order:
            if granted == budget:
                break
            if grant[tp] < sizes[tp]:
                grant[tp] += 1
                granted += 1
    while granted > budget:
        # Raising small shares to one may overshoot: take back from the largest grants.
        heap = [(-g, tp) for tp, g in grant.items() if g > 1]
        heapq.heapify(heap)
        while granted > budget and heap:
            g, tp = heapq.heappop(heap)
            grant[tp] = -g - 1
            granted -= 1
    for tp, n in grant.items():
        end[tp] = start_of(start, tp) + n
    return end


def plan_end(  # noqa: PLR0913 - keyword-only limits, each one of the source's options
    begin: Mapping[TopicPartitionKey, int],
    latest: Mapping[TopicPartitionKey, int],
    *,
    restart: Mapping[TopicPartitionKey, int] | None = None,
    target: Mapping[TopicPartitionKey, int] | None = None,
    max_rows: int | None = None,
    min_rows: int | None = None,
    delay_passed: Callable[[], bool] = lambda: True,
) -> Frontier | None:
    """The end of the next epoch from ``begin``, or ``None``: no new epoch now.

    The planning decision of the stream reader's ``latestOffset``, over answers it has
    already got (no I/O here): ``latest`` is the broker's end of every partition, settled
    (a partition that vanished or whose answer is stale carries its ``begin`` offset),
    and ``restart`` the partitions that start again at a new log start (a recreated or
    truncated one: the epoch ends there, an epoch of its own even without records).

    * ``target`` (Trigger.AvailableNow): no partition goes past it, never backwards, and
      a partition it does not know is not read;
    * ``None`` when no partition has a record past ``begin`` and none restarts;
    * ``min_rows`` (minOffsetsPerTrigger): ``None`` while fewer records are available
      and ``delay_passed()`` says ``maxTriggerDelay`` has not passed yet (asked only
      then); never under a ``target``;
    * ``max_rows`` (maxOffsetsPerTrigger): at most that many records, as :func:`rate_limit`
      splits them, so the epoch holds ``min(backlog, max(max_rows, partitions with a
      backlog))`` records.

    Every partition of ``latest`` (and of ``restart``) is in the result; none ends past
    its ``latest`` end.
    """
    restart = restart or {}
    candidate: Frontier = {}
    for tp, off in latest.items():
        if tp in restart:
            candidate[tp] = restart[tp]  # the next epoch starts at the new log start
        elif target is not None:
            if tp in target:
                candidate[tp] = max(begin.get(tp, 0), min(off, target[tp]))
            elif tp in begin:
                candidate[tp] = begin[tp]
        else:
            candidate[tp] = off
    changed = bool(restart)
    growing = {tp: off for tp, off in candidate.items() if tp not in restart}
    available = backlog(begin, growing)
    if available == 0 and not changed:
        return None
    short = min_rows is not None and target is None and available < min_rows and not changed
    if short and not delay_passed():
        return None
    if max_rows is not None and available > 0:
        candidate.update(rate_limit(begin, growing, max_rows))
    return candidate


def cap_frontier(
    latest: Mapping[TopicPartitionKey, int], target: Mapping[TopicPartitionKey, int]
) -> Frontier:
    """``latest`` limited to ``target`` (the Trigger.AvailableNow frontier).

    Partitions unknown to ``target`` appeared after it was taken and are not read.
    """
    return {tp: min(off, target[tp]) for tp, off in latest.items() if tp in target}


def split_ranges(
    ranges: Iterable[OffsetRange],
    *,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[OffsetRange]:
    """Split ranges into Spark input partitions, deterministically.

    Every range is cut into ``ceil(size / max_records_per_partition)`` pieces; if that makes
    fewer than ``min_partitions`` pieces in all, each range gets at least
    ``ceil(size * min_partitions / total)`` pieces (never more pieces than records). Pieces
    of a range are contiguous and differ in size by at most one record.
    """
    ranges = [r for r in ranges if r.size > 0]
    total = sum(r.size for r in ranges)
    pieces: list[int] = []
    for r in ranges:
        n = 1
        if max_records_per_partition is not None:
            n = -(-r.size // max_records_per_partition)
        pieces.append(n)
    if min_partitions is not None and sum(pieces) < min_partitions and total > 0:
        pieces = [
            min(r.size, max(n, -(-r.size * min_partitions // total)))
            for r, n in zip(ranges, pieces, strict=True)
        ]
    out: list[OffsetRange] = []
    for r, n in zip(ranges, pieces, strict=True):
        base, extra = divmod(r.size, n)
        begin = r.from_offset
        for i in range(n):
            length = base + (1 if i < extra else 0)
            out.append(OffsetRange(r.topic, r.partition, begin, begin + length))
            begin += length
    return out


def pack_ranges(
    pieces: Sequence[OffsetRange],
    *,
    min_records_per_task: int,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
) -> list[tuple[OffsetRange, ...]]:
    """Group consecutive pieces into tasks of at least ``min_records_per_task`` records.

    A piece of that size or more is a task of its own; smaller ones are packed in order
    until their task reaches it (so a packed task holds fewer than twice as many). The
    splitting options win: a packed task never holds more than
    ``max_records_per_partition`` records, and with ``min_partitions`` the target shrinks
    to ``total // min_partitions``; if packing would still leave fewer than
    ``min_partitions`` tasks, every piece is its own task. ``min_records_per_task`` below
    2 packs nothing. Deterministic, and the pieces keep their order.
    """
    singles: list[tuple[OffsetRange, ...]] = [(p,) for p in pieces]
    target = min_records_per_task
    total = sum(p.size for p in pieces)
    if min_partitions is not None:
        target = min(target, total // min_partitions)
    if target < 2:
        return singles
    cap = max_records_per_partition
    tasks: list[tuple[OffsetRange, ...]] = []
    current: list[OffsetRange] = []
    records = 0
    for piece in pieces:
        if current and (piece.size >= target or (cap is not None and records + piece.size > cap)):
            tasks.append(tuple(current))
            current, records = [], 0
        current.append(piece)
        records += piece.size
        if records >= target:
            tasks.append(tuple(current))
            current, records = [], 0
    if current:
        tasks.append(tuple(current))
    if min_partitions is not None and len(tasks) < min_partitions:
        return singles
    return tasks


def task_ranges(
    ranges: Iterable[OffsetRange],
    *,
    min_partitions: int | None = None,
    max_records_per_partition: int | None = None,
    min_records_per_task: int = 0,
) -> list[tuple[OffsetRange, ...]]:
    """The ranges of each Spark task: :func:`split_ranges`, then :func:`pack_ranges`."""
    pieces = split_ranges(
        ranges,
        min_partitions=min_partitions,
        max_records_per_partition=max_records_per_partition,
    )
    return pack_ranges(
        pieces,
        min_records_per_task=min_records_per_task,
        min_partitions=min_partitions,
        max_records_per_partition=max_records_per_partition,
    )
