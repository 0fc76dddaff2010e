"""A data file's Delta statistics from its Parquet footer (no rows read): the same as
delta-rs records for the same rows where both record a column, true bounds everywhere."""

from __future__ import annotations

import datetime as dt
import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

pytest.importorskip("deltalake")

from deltalake import write_deltalake

from sink.consumers.delta.delta_stats import STRING_PREFIX, delta_stats

UTC = dt.UTC


def rows() -> pa.Table:
    return pa.table(
        {
            "i": pa.array([3, None, -7], pa.int32()),
            "l": pa.array([10, 20, None], pa.int64()),
            "s": pa.array(["pear", "apple", None]),
            "bo": pa.array([True, None, False]),
            "d": pa.array([dt.date(2024, 1, 1), None, dt.date(2020, 2, 2)]),
            "ts": pa.array(
                [dt.datetime(2024, 1, 1, 1, 2, 3, 456000), None, dt.datetime(2023, 5, 1)],
                pa.timestamp("us", tz="UTC"),
            ),
            "st": pa.array([{"x": 1, "y": "q"}, None, {"x": 5, "y": None}]),
            "f": pa.array([1.5, float("nan"), None]),
            "b": pa.array([b"x", None, b"y"]),
            "arr": pa.array([[1], [2, 3], None]),
            "after": pa.array([1, 2, 3], pa.int16()),
        }
    )


def footer_stats(table: pa.Table, tmp_path: Path, **write: Any) -> dict[str, Any]:
    path = tmp_path / "part.parquet"
    pq.write_table(table, path, **write)
    f = pq.ParquetFile(path)
    return dict(json.loads(delta_stats(f.metadata, f.schema_arrow)))


def test_footer_statistics_are_delta_rs_own_for_the_columns_recorded(tmp_path: Path) -> None:
    table = rows()
    ours = footer_stats(table, tmp_path)
    write_deltalake(f"file://{tmp_path}/ref", table)
    log = (tmp_path / "ref" / "_delta_log" / "00000000000000000000.json").read_text()
    [add] = [a["add"] for a in map(json.loads, log.splitlines()) if "add" in a]
    theirs = json.loads(add["stats"])
    assert ours["numRecords"] == theirs["numRecords"] == 3
    # delta-rs records no null count for binary columns; a list's leaves have none
    assert theirs["nullCount"] == {k: v for k, v in ours["nullCount"].items() if k != "b"}
    assert ours["nullCount"]["b"] == 1 and "arr" not in ours["nullCount"]
    for bound in ("minValues", "maxValues"):
        # floating point bounds are left out (NaN is not ordered); a timestamp is the same
        # instant, always with its milliseconds (delta-rs leaves ".000" out)
        mine, ref = dict(ours[bound]), dict(theirs[bound])
        assert dt.datetime.fromisoformat(mine.pop("ts")) == dt.datetime.fromisoformat(ref["ts"])
        assert mine == {k: v for k, v in ref.items() if k not in ("f", "arr", "ts")}
    assert ours["minValues"]["st"] == {"x": 1, "y": "q"}
    assert ours["minValues"]["ts"] == "2023-05-01T00:00:00.000Z"
    assert ours["maxValues"]["after"] == 3  # the leaf after a list is the right column


def test_bounds_over_row_groups_hold_every_value(tmp_path: Path) -> None:
    table = pa.table(
        {
            "n": pa.array([5, 1, None, None, 9, 4], pa.int64()),
            "ts": pa.array(
                [dt.datetime(2024, 1, 1, 0, 0, 0, 1500, tzinfo=UTC)] * 2
                + [None] * 2
                + [dt.datetime(2024, 1, 1, 0, 0, 0, 999, tzinfo=UTC)] * 2,
                pa.timestamp("us", tz="UTC"),
            ),
        }
    )
    stats = footer_stats(table, tmp_path, row_group_size=2)
    assert stats["nullCount"] == {"n": 2, "ts": 2}
    assert (stats["minValues"]["n"], stats["maxValues"]["n"]) == (1, 9)
    # milliseconds: the minimum rounded down, the maximum up (.0015 s -> .002 s)
    assert stats["minValues"]["ts"] == "2024-01-01T00:00:00.000Z"
    assert stats["maxValues"]["ts"] == "2024-01-01T00:00:00.002Z"


def test_a_long_string_keeps_a_prefix_as_its_minimum_and_no_maximum(tmp_path: Path) -> None:
    long = "z" * (STRING_PREFIX + 5)
    stats = footer_stats(pa.table({"s": ["a" * (STRING_PREFIX + 1), long]}), tmp_path)
    assert stats["minValues"] == {"s": "a" * STRING_PREFIX}
    assert stats["maxValues"] == {}
    assert stats["nullCount"] == {"s": 0}


def test_a_file_written_without_statistics_records_only_its_row_count(tmp_path: Path) -> None:
    stats = footer_stats(rows(), tmp_path, write_statistics=False)
    assert stats == {"numRecords": 3, "minValues": {}, "maxValues": {}, "nullCount": {}}
