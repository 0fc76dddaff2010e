"""The stateful queries of the coordinator's integration tests and their expected results.

Input record ``i`` (``0 <= i < n``) has key ``b"k<i % KEYS>"`` and value ``b"<i>"``, in
partition ``i % partitions``. Two stateful queries run on it:

* windowed: event time = ``i`` seconds after the epoch, 100-second tumbling windows,
  ``count(*)`` and ``sum(i)`` per window, output mode complete (Python data source sinks
  support append and complete, not update): every bundle is the whole result table;
* keyed: ``applyInPandasWithState`` per key with state (count, sum, max), emitting the
  key's new state for every key seen in the batch (output mode append).

So the consumer's final content is the *last* row per window/key in bundle order. A
correct pipeline makes that equal to the batch computation over all records, and each
count never goes back from bundle to bundle (keyed: rises strictly), so a replayed epoch
applied twice to the state or delivered twice would show.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pyarrow.parquet as pq

from harness.coordinator_program import KEYS

WINDOW_SECONDS = 100
KEYED_SCHEMA = "key binary, n long, total long, mx long"
KEYED_STATE = "n long, total long, mx long"


def windowed_counts(df: Any) -> Any:
    from pyspark.sql import functions as sf

    n = sf.col("value").cast("string").cast("long")
    return (
        df.select(n.alias("i"), sf.timestamp_seconds(n).alias("ts"))
        .groupBy(sf.window("ts", f"{WINDOW_SECONDS} seconds"))
        .agg(sf.count("*").alias("n"), sf.sum("i").alias("total"))
        .select(sf.col("window.start").cast("long").alias("start"), "n", "total")
    )


def keyed_update(
    key: tuple[Any, ...], pdfs: Iterator[pd.DataFrame], state: Any
) -> Iterator[pd.DataFrame]:
    n, total, mx = state.get if state.exists else (0, 0, -1)
    for pdf in pdfs:
        values = pdf["value"].map(lambda b: int(bytes(b))).astype("int64")
        n += len(values)
        total += int(values.sum())
        mx = max(mx, int(values.max()))
    state.update((n, total, mx))
    yield pd.DataFrame({"key": [key[0]], "n": [n], "total": [total], "mx": [mx]})


def start_pipeline(
    spark: Any,
    kind: str,
    *,
    bootstrap: str,
    topic: str,
    pipeline: str,
    state_uri: str,
    checkpoint: Path,
    sink: dict[str, str],
    token: int | None = None,
    max_offsets: int = 200,
    available_now: bool = True,
    processing_time: str = "500 milliseconds",
    store_options: dict[str, str] | None = None,
) -> Any:
    """Start the ``kind`` ("windowed" or "keyed") pipeline; ``sink`` holds the consumer options,
    ``store_options`` the ``s3.*`` options of ``state_uri`` (source and sink)."""
    df = (
        spark.readStream.format("gtkafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", str(max_offsets))
        .option("pipeline.id", pipeline)
        .option("state.uri", state_uri)
        .options(**(store_options or {}))
        .load()
    )
    if kind == "windowed":
        out, mode = windowed_counts(df), "complete"
    else:
        out = df.groupBy("key").applyInPandasWithState(
            keyed_update, KEYED_SCHEMA, KEYED_STATE, "append", "NoTimeout"
        )
        mode = "append"
    writer = (
        out.writeStream.format("barrier")
        .option("pipeline.id", pipeline)
        .option("state.uri", state_uri)
        .options(**(store_options or {}))
        .options(**sink)
        .option("checkpointLocation", str(checkpoint))
        .outputMode(mode)
    )
    if token is not None:
        writer = writer.option("fencing.token", str(token))
    if available_now:
        writer = writer.trigger(availableNow=True)
    else:
        writer = writer.trigger(processingTime=processing_time)
    return writer.start()


def expected_windowed(n: int) -> dict[int, tuple[int, int]]:
    out: dict[int, tuple[int, int]] = {}
    for i in range(n):
        start = i - i % WINDOW_SECONDS
        c, s = out.get(start, (0, 0))
        out[start] = (c + 1, s + i)
    return out


def expected_keyed(n: int) -> dict[bytes, tuple[int, int, int]]:
    out: dict[bytes, tuple[int, int, int]] = {}
    for i in range(n):
        k = b"k%d" % (i % KEYS)
        c, s, m = out.get(k, (0, 0, -1))
        out[k] = (c + 1, s + i, max(m, i))
    return out


def bundles(directory: Path) -> list[tuple[int, list[dict[str, Any]]]]:
    """``(bundle id, rows)`` of a file consumer's directory, in bundle order."""
    out = []
    for path in sorted(directory.glob("bundle-*.parquet")):
        bundle_id = int(path.stem.split("-")[1])
        out.append((bundle_id, pq.read_table(path).to_pylist()))
    return out


def final_rows(directory: Path, key: str) -> tuple[dict[Any, dict[str, Any]], dict[Any, list[int]]]:
    """The last row per ``key`` value, and each key's ``n`` over the bundles."""
    last: dict[Any, dict[str, Any]] = {}
    history: dict[Any, list[int]] = {}
    for _, rows in bundles(directory):
        for row in rows:
            k = row[key]
            last[k] = row
            history.setdefault(k, []).append(int(row["n"]))
    return last, history


def check_windowed(directory: Path, n: int) -> None:
    last, history = final_rows(directory, "start")
    got = {k: (int(r["n"]), int(r["total"])) for k, r in last.items()}
    expected = expected_windowed(n)
    assert got == expected, _diff(got, expected)
    _check_rising(history, strict=False)
    # Complete mode: the last bundle alone is the whole result.
    assert len(bundles(directory)[-1][1]) == len(expected)


def check_keyed(directory: Path, n: int) -> None:
    check_keyed_bundles(bundles(directory), n)


def check_keyed_bundles(bundle_rows: list[tuple[int, list[dict[str, Any]]]], n: int) -> None:
    """The keyed pipeline's bundles, in order, hold the right final state per key."""
    ids = [b for b, _ in bundle_rows]
    assert ids == sorted(set(ids)), f"bundles out of order or repeated: {ids}"
    last: dict[Any, dict[str, Any]] = {}
    history: dict[Any, list[int]] = {}
    for _, rows in bundle_rows:
        for row in rows:
            last[row["key"]] = row
            history.setdefault(row["key"], []).append(int(row["n"]))
    got = {bytes(k): (int(r["n"]), int(r["total"]), int(r["mx"])) for k, r in last.items()}
    expected = expected_keyed(n)
    assert got == expected, _diff(got, expected)
    _check_rising(history, strict=True)


def _check_rising(history: dict[Any, list[int]], *, strict: bool) -> None:
    for k, counts in history.items():
        pairs = list(itertools.pairwise(counts))
        ok = all(a < b for a, b in pairs) if strict else all(a <= b for a, b in pairs)
        assert ok, f"{k!r}: counts {counts} go back from bundle to bundle (lost or doubled state)"


def _diff(got: dict[Any, Any], expected: dict[Any, Any]) -> str:
    wrong = {k: (got.get(k), v) for k, v in expected.items() if got.get(k) != v}
    extra = set(got) - set(expected)
    return (
        f"{len(wrong)} wrong (got, expected), e.g. {list(wrong.items())[:5]}; "
        f"extra keys {sorted(extra)[:5]}"
    )


def events(output: str) -> list[dict[str, Any]]:
    """The JSON event lines a coordinator_driver printed."""
    out = []
    for line in output.splitlines():
        if line.startswith('{"event"'):
            out.append(json.loads(line))
    return out
