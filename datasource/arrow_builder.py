"""The rows a read task collects, emitted as Arrow RecordBatches of ``gtkafka``'s schema.

Rows are :data:`datasource.record_rows.Row` tuples, added as whole lists per
topic-partition run; nothing is done per row in Python: :meth:`ArrowBuilder.flush` cuts
the first rows off the runs (list slices), takes each field out in one C loop
(``map(itemgetter(i), rows)``) and builds each column with one ``pyarrow`` call.
``topic``, ``partition`` and ``gt``'s epoch are repeated per run, ``gt`` is a struct of
the columns already built. Only the schema's columns are built (a user-specified schema
may name a few of them, in any order).
"""

from __future__ import annotations

from collections.abc import Callable
from operator import itemgetter
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from datasource.record_rows import Row
from state.records.gt import GT_COLUMN
from state.records.gt import arrow_array as gt_array


class ArrowBuilder:
    """Collects rows of one epoch and emits Arrow RecordBatches of ``arrow_schema``."""

    def __init__(self, arrow_schema: Any, epoch: int) -> None:
        self.schema = arrow_schema
        self.epoch = epoch
        self._runs: list[tuple[str, int, list[Row]]] = []  # (topic, partition, rows)
        self.rows = 0

    def add(self, topic: str, partition: int, rows: list[Row]) -> None:
        """Append ``rows`` of ``topic``-``partition`` (in order; the list is kept)."""
        if rows:
            self._runs.append((topic, partition, rows))
            self.rows += len(rows)

    def flush(self, limit: int | None = None) -> Any:
        """A RecordBatch of the first ``limit`` rows collected (all by default)."""
        n = self.rows if limit is None else min(limit, self.rows)
        runs = self._take(n)
        rows: list[Row] = runs[0][2] if len(runs) == 1 else [r for run in runs for r in run[2]]
        columns = _Columns(self.schema, self.epoch, runs, rows)
        arrays = [columns.get(name) for name in self.schema.names]
        return pa.RecordBatch.from_arrays(arrays, schema=self.schema)

    def _take(self, n: int) -> list[tuple[str, int, list[Row]]]:
        """Take the runs of the first ``n`` rows out (the last one cut if need be)."""
        taken: list[tuple[str, int, list[Row]]] = []
        left = n
        while left > 0:
            topic, partition, rows = self._runs[0]
            if len(rows) <= left:
                taken.append(self._runs.pop(0))
                left -= len(rows)
            else:
                taken.append((topic, partition, rows[:left]))
                self._runs[0] = (topic, partition, rows[left:])
                left = 0
        self.rows -= n
        return taken


class _Columns:
    """The columns of one flush, each built on first use: a schema that names few columns
    (a user-specified one) costs only those, and ``gt`` reuses ``topic``, ``partition``
    and ``offset`` when they are built anyway."""

    def __init__(
        self, schema: pa.Schema, epoch: int, runs: list[tuple[str, int, list[Row]]], rows: list[Row]
    ) -> None:
        self.schema = schema
        self.epoch = epoch
        self.runs = runs
        self.rows = rows
        self._built: dict[str, pa.Array] = {}

    def get(self, name: str) -> pa.Array:
        if name not in self._built:
            self._built[name] = _BUILDERS[name](self)
        return self._built[name]

    def _field(self, index: int) -> list[Any]:
        # One C loop per field (zip(*rows) would allocate an iterator per row). Row:
        # (offset, timestamp, timestamp type, key, value, headers).
        return list(map(itemgetter(index), self.rows))

    def key(self) -> pa.Array:
        return pa.array(self._field(3), pa.binary())

    def value(self) -> pa.Array:
        return pa.array(self._field(4), pa.binary())

    def topic(self) -> pa.Array:
        return _repeated([(t, len(rs)) for t, _, rs in self.runs], pa.string())

    def partition(self) -> pa.Array:
        return _repeated([(p, len(rs)) for _, p, rs in self.runs], pa.int32())

    def offset(self) -> pa.Array:
        return pa.array(self._field(0), pa.int64())

    def timestamp(self) -> pa.Array:
        micros = pc.multiply(pa.array(self._field(1), pa.int64()), 1000)
        return micros.cast(self.schema.field("timestamp").type)

    def timestamp_type(self) -> pa.Array:
        return pa.array(self._field(2), pa.int32())

    def headers(self) -> pa.Array:
        return pa.array(self._field(5), self.schema.field("headers").type)

    def gt(self) -> pa.Array:
        epochs = pa.repeat(pa.scalar(self.epoch, pa.int64()), len(self.rows))
        return gt_array(epochs, self.get("topic"), self.get("partition"), self.get("offset"))


_BUILDERS: dict[str, Callable[[_Columns], pa.Array]] = {
    "key": _Columns.key,
    "value": _Columns.value,
    "topic": _Columns.topic,
    "partition": _Columns.partition,
    "offset": _Columns.offset,
    "timestamp": _Columns.timestamp,
    "timestampType": _Columns.timestamp_type,
    "headers": _Columns.headers,
    GT_COLUMN: _Columns.gt,
}


def _repeated(values: list[tuple[Any, int]], dtype: pa.DataType) -> pa.Array:
    """An array of each ``value`` repeated ``count`` times, in order."""
    chunks = [pa.repeat(pa.scalar(v, dtype), c) for v, c in values]
    if len(chunks) == 1:
        return chunks[0]
    if not chunks:
        return pa.array([], dtype)
    return pa.concat_arrays(chunks)
