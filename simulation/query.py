"""The simulated input (a fixed Kafka log) and the deterministic, stateful query.

The input is a fixed in-memory log per partition of one topic, which the product's stream
reader plans epochs over (:mod:`simulation.source`): up to ``max_per_partition`` records
of every partition from its start frontier, its ``maxOffsetsPerTrigger`` (drivers may
differ in that limit, as after a change of the option: the epoch log then decides, first
writer wins).

The query (version ``v``) turns an epoch's records into rows:

* one ``rec`` row per record, whose ``gt`` is the record's own;
* one ``agg`` row per key the epoch touched: the key's running total (every record adds
  ``v``), whose ``gt`` is the ``gt`` of the *first record ever* of that key, usually from
  an older epoch. That is the stateful output a "drop rows whose gt is at or below
  GT_last" filter loses.

The state (per key: total and first ``gt``) lives in the simulated checkpoint. Versions
differ in the state they build, so a query version that starts from another version's
state produces output that differs from its own reference run.

**Poison records** (``SimConfig.poison`` and ``no_gt``) are records the query cannot use:
it passes each through as one row that the consumer's target refuses, and counts it in no
total (a key touched only by poison records has no ``agg`` row in that epoch):

* a ``bad`` row, whose value the simulated consumer kind's ``validate`` refuses
  (:mod:`simulation.dead_letters`);
* a ``nogt`` row, whose ``gt`` is null: every consumer refuses it (the write task's check
  every consumer shares).

**Dropped records** (``SimConfig.dropped``) are filtered out by the query (a ``where``
clause): they produce no row and count in no total, so an epoch of them only has an
empty bundle (nothing to deliver, nothing refused): sparse output.

**Fan-out records** (``SimConfig.fanout``) are passed through as two rows that share the
record's ``gt`` (as an explode or a join's fan-out makes them), ``fa`` and ``fb`` with
different values, counted in no total. The consumer's target refuses one of them, which
one a consumer setting says (:data:`SETTINGS`: the setting a query run reads, which can
change between driver starts as a table's column or a topic's partitions can:
``SimConfig.flip``).

Which rows are refused is a function of the records and the setting alone, the same for
every version, so an epoch's refused rows (:func:`refused`) and what is delivered of it
are too; an epoch whose records are all poison has nothing to deliver.

**A recreated topic** (``SimConfig.recreate``): the topic may be deleted and created again
once (the world's ``recreate`` event, :class:`simulation.source.SimBroker`). The new
topic, incarnation 1, has one record a partition more than the old one (new records past
every end planned under the old id), and its records are told apart from the old ones
by their keys (``n...`` instead of ``k...``) and values (1000 more): a row of the new topic
in an epoch planned under the old id is visible in the output.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace

import pyarrow as pa

from state.records.gt import GT_COLUMN, GtTuple, arrow_array
from state.records.source_offset import SourceOffset, TopicPartitionKey

TOPIC = "t"
#: The keys' first letter by topic incarnation, and how much more a record of the new
#: topic's value is (module docstring: a recreated topic).
KEY_PREFIXES = ("k", "n")
INCARNATION_VALUE = 1000

#: A row of output: (kind, key, value, version, gt as (epoch, topic, partition, offset));
#: gt is None for a ``nogt`` row.
Row = tuple[str, str, int, int, GtTuple | None]
#: The record sorts, and the kinds of rows the consumer's target refuses.
OK, BAD, NO_GT, FAN, DROP = "ok", "bad", "nogt", "fan", "drop"
REFUSED_KINDS = frozenset({BAD, NO_GT})
#: The two rows of a fan-out record, and the consumer settings: setting ``s`` refuses the
#: row of kind ``SETTINGS[s]`` (the other is delivered).
FAN_A, FAN_B = "fa", "fb"
SETTINGS = (FAN_A, FAN_B)
#: How much a fan-out record's ``fb`` row's value exceeds its ``fa`` row's.
FAN_SPREAD = 100

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
    #: ``ok``, or poison: ``bad`` (a value the target refuses), ``nogt`` (no gt); or
    #: ``fan`` (two rows sharing its gt, one of which the target refuses); or ``drop``
    #: (filtered out by the query: no row).
    sort: str = OK


@dataclass(frozen=True)
class InputLog:
    """The fixed input: ``partitions`` partitions of ``per_partition`` records each;
    ``poison`` and ``no_gt`` name the (partition, offset) of the poison records."""

    partitions: int
    per_partition: int
    keys: int = 2
    poison: frozenset[tuple[int, int]] = frozenset()
    no_gt: frozenset[tuple[int, int]] = frozenset()
    fanout: frozenset[tuple[int, int]] = frozenset()
    dropped: frozenset[tuple[int, int]] = frozenset()
    #: Which topic this is: 0, or 1 once the topic was deleted and created again.
    incarnation: int = 0

    @property
    def poisoned(self) -> bool:
        """Whether some record's row is refused by the consumer's target."""
        return bool(self.poison or self.no_gt or self.fanout)

    def record(self, partition: int, offset: int) -> Record:
        key = f"{KEY_PREFIXES[self.incarnation]}{(partition + offset) % self.keys}"
        where = (partition, offset)
        sort = (
            BAD
            if where in self.poison
            else NO_GT
            if where in self.no_gt
            else FAN
            if where in self.fanout
            else DROP
            if where in self.dropped
            else OK
        )
        value = 1 + offset + 10 * partition + INCARNATION_VALUE * self.incarnation
        return Record(partition, offset, key, value, sort)

    def zero(self) -> dict[TopicPartitionKey, int]:
        """The initial frontier (every partition at offset 0)."""
        return {(TOPIC, p): 0 for p in range(self.partitions)}

    def end(self) -> dict[TopicPartitionKey, int]:
        """The frontier after the last record."""
        return {(TOPIC, p): self.per_partition for p in range(self.partitions)}

    def between(self, start: SourceOffset, end: SourceOffset) -> list[Record]:
        """The records of the epoch from ``start`` to ``end``, in ``gt`` order."""
        out: list[Record] = []
        for (_topic, partition), first in sorted(start.offsets.items()):
            last = end.offsets[(_topic, partition)]
            out.extend(self.record(partition, o) for o in range(first, last))
        return out

    def in_ranges(self, ranges: Iterable[tuple[int, int, int]]) -> list[Record]:
        """The records of ``ranges`` (partition, from, until), in ``gt`` order."""
        out: list[Record] = []
        for partition, first, until in sorted(ranges):
            out.extend(self.record(partition, o) for o in range(first, until))
        return out


def incarnation_of(row: Row) -> int:
    """The topic incarnation whose record made ``row`` (by its key's prefix)."""
    return KEY_PREFIXES.index(row[1][0])


def run_epoch(
    version: int, state: QueryState, records: Sequence[Record], epoch: int
) -> tuple[list[Row], QueryState]:
    """The rows of one epoch and the state after it (pure, deterministic); a poison
    record is passed through as a row its target refuses, a fan-out record as its two
    rows, and neither is counted anywhere."""
    totals = {key: (total, first) for key, total, first in state}
    rows: list[Row] = []
    touched: list[str] = []
    for r in records:
        gt: GtTuple = (epoch, TOPIC, r.partition, r.offset)
        if r.sort == DROP:
            continue
        if r.sort == FAN:
            rows.append((FAN_A, r.key, r.value, version, gt))
            rows.append((FAN_B, r.key, r.value + FAN_SPREAD, version, gt))
            continue
        if r.sort != OK:
            rows.append((r.sort, r.key, r.value, version, gt if r.sort == BAD else None))
            continue
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
        pa.array([None if g is None else g[0] for g in gts], pa.int64()),
        pa.array([None if g is None else g[1] for g in gts], pa.string()),
        pa.array([None if g is None else g[2] for g in gts], pa.int32()),
        pa.array([None if g is None else g[3] for g in gts], pa.int64()),
    )
    if any(g is None for g in gts):
        # A null gt struct, as Spark gives for a row whose gt the query set to null.
        gt = pa.StructArray.from_arrays(
            gt.flatten(), fields=list(gt.type), mask=pa.array([g is None for g in gts])
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
        where: GtTuple | None = (
            None
            if gt is None or gt["epoch"] is None
            else (gt["epoch"], gt["topic"], gt["partition"], gt["offset"])
        )
        out.append((kind, key, value, version, where))
    return out


def refused(row: Row, setting: int = 0) -> bool:
    """Whether the consumer's target refuses ``row`` (a poison record's, or the fan-out
    row the consumer ``setting`` refuses)."""
    return row[0] in REFUSED_KINDS or row[0] == SETTINGS[setting]


Identity = tuple[str, str, int | None, GtTuple | None]


def identity(row: Row) -> Identity:
    """What makes ``row`` one item of the output, whatever query version computed it: a
    record's row by its record (kind, key, value, gt), an ``agg`` row by its key and the
    ``gt`` it carries (its value, a total, depends on the version)."""
    kind, key, value, _version, gt = row
    return (kind, key, None if kind == "agg" else value, gt)


class Reference:
    """What a failure-free run of each query version outputs for each epoch, over the
    epochs as the epoch log recorded them (computed lazily, remembered)."""

    def __init__(
        self,
        log: InputLog,
        epoch_bounds: Callable[[int], tuple[SourceOffset, SourceOffset]],
        log_of: Callable[[int], InputLog] | None = None,
    ) -> None:
        """``epoch_bounds(k)`` is epoch ``k``'s recorded (start, end); it must exist.
        ``log_of(k)`` is the topic epoch ``k`` was planned under (default: ``log``)."""
        self.log = log
        self.epoch_bounds = epoch_bounds
        self.log_of = log_of
        self._outputs: dict[int, list[list[Row]]] = {}
        self._states: dict[int, QueryState] = {}

    def output(self, version: int, epoch: int) -> list[Row]:
        """The rows version ``version`` outputs for epoch ``epoch``."""
        outputs = self._outputs.setdefault(version, [])
        state = self._states.get(version, EMPTY_STATE)
        while len(outputs) <= epoch:
            k = len(outputs)
            start, end = self.epoch_bounds(k)
            log = self.log if self.log_of is None else self.log_of(k)
            rows, state = run_epoch(version, state, log.between(start, end), k)
            outputs.append(rows)
        self._states[version] = state
        return outputs[epoch]

    def accepted(self, version: int, epoch: int, setting: int = 0) -> list[Row]:
        """The rows of :meth:`output` the consumer's target accepts (delivered) under the
        consumer ``setting``."""
        return [r for r in self.output(version, epoch) if not refused(r, setting)]

    def refused(self, version: int, epoch: int, setting: int = 0) -> list[Row]:
        """The rows of :meth:`output` the target refuses (the dead letters) under the
        consumer ``setting``."""
        return [r for r in self.output(version, epoch) if refused(r, setting)]


def row_order(row: Row) -> tuple[object, ...]:
    """A total order of rows (a null ``gt`` first), for comparing them as multisets."""
    return (*row[:4], () if row[4] is None else row[4])


def same_rows(a: Sequence[Row], b: Sequence[Row]) -> bool:
    """Equal as multisets (delivery order within equal ``gt`` is not specified)."""
    return sorted(a, key=row_order) == sorted(b, key=row_order)


@dataclass(frozen=True)
class SimConfig:
    """The simulated pipeline and the bounds of a schedule."""

    partitions: int = 2
    per_partition: int = 3
    keys: int = 2
    #: Each driver's epoch size (records per partition: its ``maxOffsetsPerTrigger`` is that
    #: times ``partitions``), by driver number, cycling.
    max_per_partition: tuple[int, ...] = (1, 2)
    #: Driver processes a schedule may start (beyond, a crash is not followed by a restart).
    max_procs: int = 4
    max_upgrades: int = 1
    #: Steps before the faulty part of a schedule is cut off (then the heal runs).
    max_steps: int = 1500
    #: Steps the healthy driver may take to finish.
    heal_steps: int = 1500
    #: Poison records, as (partition, offset): a value the consumer kind refuses, and a
    #: null gt (module docstring).
    poison: tuple[tuple[int, int], ...] = ()
    no_gt: tuple[tuple[int, int], ...] = ()
    #: Fan-out records, as (partition, offset) (module docstring).
    fanout: tuple[tuple[int, int], ...] = ()
    #: Whether the consumer setting changes between query runs (a run of driver ``pN``
    #: reads setting ``(N + run number) % 2``); else every run reads setting 0. The
    #: healthy driver starts at 0, and its operator switches it back when a run stops
    #: because the target refuses rows it accepted before (the error's way out).
    flip: bool = False
    #: The sink's errors.tolerance when the schedule starts: ``all`` (refused rows go to
    #: dead letters) or ``none`` (the query stops at a poison bundle until the operator
    #: switches to ``all``: the ``tolerate`` event, or the healthy driver's operator).
    tolerance: str = "none"
    #: Records the query filters out, as (partition, offset): no row (module docstring).
    dropped: tuple[tuple[int, int], ...] = ()
    #: Whether the drivers run the snapshot coordinator (a fencing token, snapshots, the
    #: resume point); without it a driver recovers only from its checkpoint (the
    #: supervisor's restarts stand for the scheduler that restarts a failed job).
    coordinator: bool = True
    #: The source's ``state.epochsRetained``; 0: the product's default (1,000: never due
    #: here). Every query run calls the product's driver pruner after each batch's commit;
    #: with a small value and without the coordinator it prunes, and a query on a new
    #: checkpoint starts where the product's ``initialOffset`` does; with the coordinator it
    #: defers (the coordinator owns the pruning).
    epochs_retained: int = 0
    #: Whether the topic may be deleted and created again (once: the ``recreate`` event),
    #: and the source's ``failOnDataLoss``.
    recreate: bool = False
    fail_on_data_loss: bool = True
    #: The source's ``readMode``: with ``driver`` a batch planned in the running query
    #: run is read on the driver (no read task writes its batch record: the barrier
    #: learns its epoch from the checkpoint's offset log and records it); a batch that
    #: a restart runs again from the checkpoint is read by a read task, which writes it.
    read_mode: str = "executors"
    #: The epoch log's compaction unit (``state.protocol.epoch_floor.SEGMENT_EPOCHS``, and
    #: the barrier's step for recording empty bundles, ``COMMITTED_STEP``, which follows
    #: it) for this pipeline's runs; 0: the product's 16, which these short pipelines
    #: never reach. Everything else about compaction is the product's own code.
    segment_epochs: int = 0
    #: ``errors.deadLetter.retention`` in the simulation's seconds (a millisecond a step),
    #: at ``errors.tolerance=all``, with the owner's sweep after every commit
    #: (``staging.sweepEvery=1``): the files older than it, of bundles at or below
    #: ``GT_last``, are deleted within a run; 0: unset, every file is kept.
    dead_letter_retention: float = 0.0

    def input_log(self) -> InputLog:
        return InputLog(
            self.partitions,
            self.per_partition,
            self.keys,
            frozenset(self.poison),
            frozenset(self.no_gt),
            frozenset(self.fanout),
            frozenset(self.dropped),
        )

    def input_logs(self) -> tuple[InputLog, ...]:
        """The topic, then (if it may be recreated) the topic created again: one record a
        partition more, past every end planned under the old id."""
        first = self.input_log()
        if not self.recreate:
            return (first,)
        return (first, replace(first, per_partition=self.per_partition + 1, incarnation=1))

    def to_json(self) -> dict[str, object]:
        """The fields that differ from the defaults (for ``--schedule``)."""
        default = SimConfig()
        return {
            name: [list(p) for p in value]
            if isinstance(value, tuple) and name != "max_per_partition"
            else value
            for name, value in vars(self).items()
            if value != getattr(default, name)
        }

    @classmethod
    def from_json(cls, raw: dict[str, object]) -> SimConfig:
        """The configuration :meth:`to_json` wrote."""
        fields: dict[str, object] = {}
        for name, value in raw.items():
            if name in ("poison", "no_gt", "fanout", "dropped"):
                assert isinstance(value, list)
                fields[name] = tuple((int(p), int(o)) for p, o in value)
            elif name == "max_per_partition":
                assert isinstance(value, list)
                fields[name] = tuple(int(v) for v in value)
            else:
                fields[name] = value
        return cls(**fields)  # type: ignore[arg-type]
