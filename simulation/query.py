"""The simulated input (a fixed Kafka log) and the deterministic, stateful query.

The input is a fixed in-memory log per partition of one topic. Planning an epoch takes
up to ``max_per_partition`` records of every partition from its start frontier (drivers
may differ in that limit, as after a change of ``maxOffsetsPerTrigger``: the epoch log
then decides, first writer wins).

The query (version ``v``) turns an epoch's records into rows:

* one ``rec`` row per record, whose ``gt`` is the record's own;
* one ``agg`` row per key the epoch touched: the key's running total (every record adds
  ``v``), whose ``gt`` is the ``gt`` of the *first record ever* of that key, usually from
  an older epoch. That is the stateful output a "drop rows whose gt is at or below
  GT_last" filter loses.

The state (per key: total and first ``gt``) lives in the simulated checkpoint. Versions
differ in the state they build, so a query version that starts from another version's
state produces output that differs from its own reference run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pyarrow as pa

from state.records.gt import GT_COLUMN, GtTuple, arrow_array
from state.records.source_offset import SourceOffset, TopicPartitionKey

TOPIC = "t"

#: A row of output: (kind, key, value, version, gt as (epoch, topic, partition, offset)).
Row = tuple[str, str, int, int, GtTuple]

#: The query's state: key -> (running total, gt of the key's first record), sorted by key.
QueryState = tuple[tuple[str, int, GtTuple], ...]

EMPTY_STATE: QueryState = ()


@dataclass(frozen=True)
class Record:
    """One input record: where it is in the log, and its content."""

    partition: int
    offset: int
    key: str
    value: int


@dataclass(frozen=True)
class InputLog:
    """The fixed input: ``partitions`` partitions of ``per_partition`` records each."""

    partitions: int
    per_partition: int
    keys: int = 2

    def record(self, partition: int, offset: int) -> Record:
        key = f"k{(partition + offset) % self.keys}"
        return Record(partition, offset, key, 1 + offset + 10 * partition)

    def zero(self) -> dict[TopicPartitionKey, int]:
        """The initial frontier (every partition at offset 0)."""
        return {(TOPIC, p): 0 for p in range(self.partitions)}

    def end(self) -> dict[TopicPartitionKey, int]:
        """The frontier after the last record."""
        return {(TOPIC, p): self.per_partition for p in range(self.partitions)}

    def plan(self, start: SourceOffset, max_per_partition: int) -> SourceOffset | None:
        """The end of the epoch that starts at ``start``; None when there is nothing new."""
        offsets = dict(start.offsets)
        end = {tp: min(self.per_partition, off + max_per_partition) for tp, off in offsets.items()}
        if end == offsets:
            return None
        return SourceOffset(start.epoch + 1, end)

    def between(self, start: SourceOffset, end: SourceOffset) -> list[Record]:
        """The records of the epoch from ``start`` to ``end``, in ``gt`` order."""
        out: list[Record] = []
        for (_topic, partition), first in sorted(start.offsets.items()):
            last = end.offsets[(_topic, partition)]
            out.extend(self.record(partition, o) for o in range(first, last))
        return out


def run_epoch(
    version: int, state: QueryState, records: Sequence[Record], epoch: int
) -> tuple[list[Row], QueryState]:
    """The rows of one epoch and the state after it (pure, deterministic)."""
    totals = {key: (total, first) for key, total, first in state}
    rows: list[Row] = []
    touched: list[str] = []
    for r in records:
        gt: GtTuple = (epoch, TOPIC, r.partition, r.offset)
        rows.append(("rec", r.key, r.value, version, gt))
        total, first = totals.get(r.key, (0, gt))
        totals[r.key] = (total + version, first)
        if r.key not in touched:
            touched.append(r.key)
    for key in sorted(touched):
        total, first = totals[key]
        rows.append(("agg", key, total, version, first))
    new_state = tuple((key, *totals[key]) for key in sorted(totals))
    return rows, new_state


def rows_to_batch(rows: Sequence[Row]) -> pa.RecordBatch:
    """The rows as an Arrow batch with gtkafka's ``gt`` struct column.

    Remembered: every schedule recomputes the same few batches, and building Arrow arrays
    was a tenth of the simulator's time (cProfile). A batch is immutable."""
    return _batch(tuple(rows))


@functools.lru_cache(maxsize=4096)
def _batch(rows: tuple[Row, ...]) -> pa.RecordBatch:
    gts = [r[4] for r in rows]
    gt = arrow_array(
        pa.array([g[0] for g in gts], pa.int64()),
        pa.array([g[1] for g in gts], pa.string()),
        pa.array([g[2] for g in gts], pa.int32()),
        pa.array([g[3] for g in gts], pa.int64()),
    )
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r[0] for r in rows], pa.string()),
            pa.array([r[1] for r in rows], pa.string()),
            pa.array([r[2] for r in rows], pa.int64()),
            pa.array([r[3] for r in rows], pa.int64()),
            gt,
        ],
        names=["kind", "key", "value", "version", GT_COLUMN],
    )


def table_rows(table: pa.Table) -> list[Row]:
    """The rows of a staged table, in table order."""
    cols = table.to_pydict()
    out: list[Row] = []
    for kind, key, value, version, gt in zip(
        cols["kind"], cols["key"], cols["value"], cols["version"], cols[GT_COLUMN], strict=True
    ):
        out.append(
            (kind, key, value, version, (gt["epoch"], gt["topic"], gt["partition"], gt["offset"]))
        )
    return out


class Reference:
    """What a failure-free run of each query version outputs for each epoch, over the
    epochs as the epoch log recorded them (computed lazily, remembered)."""

    def __init__(
        self, log: InputLog, epoch_bounds: Callable[[int], tuple[SourceOffset, SourceOffset]]
    ) -> None:
        """``epoch_bounds(k)`` is epoch ``k``'s recorded (start, end); it must exist."""
        self.log = log
        self.epoch_bounds = epoch_bounds
        self._outputs: dict[int, list[list[Row]]] = {}
        self._states: dict[int, QueryState] = {}

    def output(self, version: int, epoch: int) -> list[Row]:
        """The rows version ``version`` outputs for epoch ``epoch``."""
        outputs = self._outputs.setdefault(version, [])
        state = self._states.get(version, EMPTY_STATE)
        while len(outputs) <= epoch:
            k = len(outputs)
            start, end = self.epoch_bounds(k)
            rows, state = run_epoch(version, state, self.log.between(start, end), k)
            outputs.append(rows)
        self._states[version] = state
        return outputs[epoch]


def same_rows(a: Sequence[Row], b: Sequence[Row]) -> bool:
    """Equal as multisets (delivery order within equal ``gt`` is not specified)."""
    return sorted(a) == sorted(b)


@dataclass(frozen=True)
class SimConfig:
    """The simulated pipeline and the bounds of a schedule."""

    partitions: int = 2
    per_partition: int = 3
    keys: int = 2
    #: Each driver's epoch size (records per partition), by driver number, cycling.
    max_per_partition: tuple[int, ...] = (1, 2)
    #: Driver processes a schedule may start (beyond, a crash is not followed by a restart).
    max_procs: int = 4
    max_upgrades: int = 1
    #: Steps before the faulty part of a schedule is cut off (then the heal runs).
    max_steps: int = 1500
    #: Steps the healthy driver may take to finish.
    heal_steps: int = 1500
