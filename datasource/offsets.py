"""Source offsets and offset-range arithmetic: pure functions, no I/O.

A *frontier* maps ``(topic, partition)`` to the next offset to read. A
:class:`SourceOffset` is a frontier plus the number of the epoch that starts at it;
its JSON form (see docs/PROTOCOL.md) is what Spark checkpoints:
``{"epoch": 7, "offsets": {"orders": {"0": 1200, "1": 1187}}}``, keys inserted in sorted
order because Spark compares offsets as JSON text.

Everything here is deterministic: the same inputs always give the same ranges, so that a
replayed batch reads exactly the same records in the same splits.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from state.errors import MalformedOffset

TopicPartitionKey = tuple[str, int]
Frontier = dict[TopicPartitionKey, int]


@dataclass(frozen=True)
class SourceOffset:
    """An epoch number and the frontier at which that epoch starts."""

    epoch: int
    offsets: Mapping[TopicPartitionKey, int]

    def to_json(self) -> dict[str, Any]:
        """The offset as Spark stores it, keys inserted in sorted order."""
        return {"epoch": self.epoch, "offsets": frontier_json(self.offsets)}

    @classmethod
    def from_json(cls, value: Any) -> SourceOffset:
        """Parse an offset that Spark (or the epoch log) hands back.

        :class:`MalformedOffset` if it is not a gtkafka offset, e.g. a checkpoint written
        by another source.
        """
        if not isinstance(value, dict) or set(value) != {"epoch", "offsets"}:
            raise MalformedOffset(f"not a gtkafka offset (expected keys epoch, offsets): {value!r}")
        epoch = value["epoch"]
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise MalformedOffset(f"gtkafka offset with an invalid epoch: {value!r}")
        return cls(epoch, parse_frontier_json(value["offsets"]))

    def same_as(self, other: SourceOffset) -> bool:
        return self.epoch == other.epoch and dict(self.offsets) == dict(other.offsets)

    def __str__(self) -> str:
        return f"epoch {self.epoch} at {frontier_json(self.offsets)}"


def frontier_json(frontier: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    """``{topic: {str(partition): offset}}``, topics and partitions in sorted (text) order."""
    nested: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in frontier.items():
        nested.setdefault(topic, {})[str(partition)] = int(offset)
    return {t: dict(sorted(nested[t].items())) for t in sorted(nested)}


def parse_frontier_json(value: Any) -> Frontier:
    if not isinstance(value, dict):
        raise MalformedOffset(f"gtkafka offsets must be a JSON object: {value!r}")
    frontier: Frontier = {}
    for topic, parts in value.items():
        if not isinstance(topic, str) or not isinstance(parts, dict):
            raise MalformedOffset(
                f"gtkafka offsets must map topic -> {{partition: offset}}: {value!r}"
            )
        for p, off in parts.items():
            if (
                not isinstance(p, str)
                or not p.isdigit()
                or isinstance(off, bool)
                or not isinstance(off, int)
                or off < 0
            ):
                raise MalformedOffset(f"gtkafka offset {topic}-{p} = {off!r} is invalid: {value!r}")
            frontier[(topic, int(p))] = off
    return frontier


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
