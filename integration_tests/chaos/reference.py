"""The input of a round as the pipeline saw it: every Kafka record with the epoch that read it.

The epoch log (``<pipeline>/epochs/<k>.json``, docs/PROTOCOL.md) is the source's record of
its micro-batch boundaries; it is replay-stable by design, so a failure-free run of the
same deterministic query over the same epochs delivers exactly what
:meth:`~integration_tests.chaos.queries.Query.expected` computes from these records.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

from state.layout import PipelineLayout
from state.protocol.epoch_log import EpochLog
from state.records.epoch import EpochRecord
from state.stores import StateStore


@dataclass(frozen=True)
class InputRecord:
    """Input record ``number`` (its value), at ``partition``/``offset``, read in ``epoch``."""

    number: int
    key: bytes
    partition: int
    offset: int
    epoch: int


@dataclass(frozen=True)
class EpochedInput:
    """The records of the epoch log's epochs; ``unread`` are records no epoch covers;
    ``problems`` describe gaps or overlaps in the log."""

    records: list[InputRecord]
    unread: list[tuple[int, int]]  # (partition, offset)
    epochs: list[EpochRecord]
    problems: list[str]


def read_epochs(
    store: StateStore, pipeline: str, known: dict[int, EpochRecord] | None = None
) -> list[EpochRecord]:
    """Every epoch record of ``pipeline`` stored now (one object each, or in the
    compacted segments), with those of ``known``, in epoch order; ``known`` (records read
    before, which a pruning may have deleted since) gets the new ones. An epoch record
    never changes once written, so one read before its pruning is as good as one now."""
    log = EpochLog(store, PipelineLayout(pipeline))
    seen: dict[int, EpochRecord] = {} if known is None else known
    seen.update(log.read_epochs(n for n in log.epoch_numbers() if n not in seen))
    return [seen[n] for n in sorted(seen)]


def stored_epochs(store: StateStore, pipeline: str) -> int:
    """How many epochs ``pipeline``'s log stores now (above its floor, compacted or not)."""
    return len(EpochLog(store, PipelineLayout(pipeline)).epoch_numbers())


def check_log(epochs: list[EpochRecord]) -> list[str]:
    """Gaps in the epoch numbers, and epochs whose start is not the previous one's end."""
    problems = []
    for i, e in enumerate(epochs):
        if e.epoch != i:
            problems.append(f"epoch log: epoch {e.epoch} at position {i} (gap)")
            break
        if i and dict(e.start.offsets) != dict(epochs[i - 1].end.offsets):
            problems.append(
                f"epoch log: epoch {e.epoch} starts at {dict(e.start.offsets)}, "
                f"epoch {i - 1} ended at {dict(epochs[i - 1].end.offsets)}"
            )
    return problems


def assign_epochs(
    topic: str, records: list[tuple[int, int, bytes | None, bytes]], epochs: list[EpochRecord]
) -> EpochedInput:
    """``(partition, offset, key, value)`` of every input record -> records with epochs."""
    ranges: dict[int, list[tuple[int, int, int]]] = {}  # partition -> (start, end, epoch)
    for e in epochs:
        for (t, p), end in e.end.offsets.items():
            start = e.start.offsets.get((t, p), 0)
            if t == topic and end > start:
                ranges.setdefault(p, []).append((start, end, e.epoch))
    for spans in ranges.values():
        spans.sort()
    out: list[InputRecord] = []
    unread: list[tuple[int, int]] = []
    for partition, offset, key, value in records:
        spans = ranges.get(partition, [])
        at = bisect.bisect_right(spans, (offset, float("inf"), 0)) - 1
        if at >= 0 and spans[at][0] <= offset < spans[at][1]:
            out.append(InputRecord(int(value), key or b"", partition, offset, spans[at][2]))
        else:
            unread.append((partition, offset))
    return EpochedInput(out, unread, epochs, check_log(epochs))


def read_input(kafka: Any, topic: str) -> list[tuple[int, int, bytes | None, bytes]]:
    """``(partition, offset, key, value)`` of every record of ``topic`` (a
    :class:`~harness.kafka.KafkaHelper` reads it)."""
    return [(r.partition, r.offset, r.key, r.value) for r in kafka.consume_all(topic)]
