"""The rows a read task collects, emitted as Arrow RecordBatches of ``gtkafka``'s schema.

Rows are :data:`datasource.record_rows.Row` tuples, added as whole lists per
topic-partition run; nothing is done per row in Python: :meth:`ArrowBuilder.flush` cuts
the first rows off the runs (list slices), takes each field out in one C loop
(``map(itemgetter(i), rows)``) and builds each column with one ``pyarrow`` call.
``topic``, ``partition`` and ``gt``'s epoch are repeated per run, ``gt`` is a struct of
the columns already built.
"""

from __future__ import annotations

from operator import itemgetter
from typing import Any

from datasource.record_rows import Row
from state.records.gt import arrow_array as gt_array


class ArrowBuilder:
    """Collects rows of one epoch and emits Arrow RecordBatches of ``arrow_schema``."""

    def __init__(self, arrow_schema: Any, epoch: int) -> None:
        self.schema = arrow_schema
        self.epoch = epoch
        self.with_headers = "headers" in arrow_schema.names
        self._runs: list[tuple[str, int, list[Row]]] = []  # (topic, partition, rows)
        self.rows = 0

    def add(self, topic: str, partition: int, rows: list[Row]) -> None:
        """Append ``rows`` of ``topic``-``partition`` (in order; the list is kept)."""
        if rows:
            self._runs.append((topic, partition, rows))
            self.rows += len(rows)

    def flush(self, limit: int | None = None) -> Any:
        """A RecordBatch of the first ``limit`` rows collected (all by default)."""
        import pyarrow as pa

        n = self.rows if limit is None else min(limit, self.rows)
        runs = self._take(n)
        schema = self.schema
        rows: list[Row] = runs[0][2] if len(runs) == 1 else [r for run in runs for r in run[2]]
        # One C loop per column (zip(*rows) would allocate an iterator per row).
        offsets_, timestamps_, types_, keys, values = (
            list(map(itemgetter(i), rows)) for i in range(5)
        )
        offsets = pa.array(offsets_, pa.int64())
        topic = _repeated([(t, len(rs)) for t, _, rs in runs], pa.string())
        partition = _repeated([(p, len(rs)) for _, p, rs in runs], pa.int32())
        millis = pa.array(timestamps_, pa.int64())
        timestamps = _micros(millis).cast(schema.field("timestamp").type)
        gt = gt_array(pa.repeat(pa.scalar(self.epoch, pa.int64()), n), topic, partition, offsets)
        arrays = [
            pa.array(keys, pa.binary()),
            pa.array(values, pa.binary()),
            topic,
            partition,
            offsets,
            timestamps,
            pa.array(types_, pa.int32()),
        ]
        if self.with_headers:
            headers = list(map(itemgetter(5), rows))
            arrays.append(pa.array(headers, schema.field("headers").type))
        arrays.append(gt)
        return pa.RecordBatch.from_arrays(arrays, schema=schema)

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


def _repeated(values: list[tuple[Any, int]], dtype: Any) -> Any:
    """An array of each ``value`` repeated ``count`` times, in order."""
    import pyarrow as pa

    chunks = [pa.repeat(pa.scalar(v, dtype), c) for v, c in values]
    if len(chunks) == 1:
        return chunks[0]
    if not chunks:
        return pa.array([], dtype)
    return pa.concat_arrays(chunks)


def _micros(millis: Any) -> Any:
    import pyarrow.compute as pc

    return pc.multiply(millis, 1000)
