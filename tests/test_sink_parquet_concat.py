"""Stitching Parquet parts at the byte level (sink.parquet_concat)."""

from __future__ import annotations

import datetime as dt
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from sink.bundle import Bundle
from sink.parquet_concat import (
    NotStitchable,
    concat_parts_to_file,
    decode_struct,
    encode_struct,
    read_layout,
    stitch_bytes,
    stitch_files,
)
from state.records.inflight_bundle import StagedPart


def rich_table(start: int, n: int) -> pa.Table:
    ids = list(range(start, start + n))
    return pa.table(
        {
            "id": pa.array(ids, pa.int64()),
            "name": pa.array([f"name-{i % 7}" if i % 5 else None for i in ids], pa.string()),
            "blob": pa.array([bytes([i % 256]) * (i % 13) for i in ids], pa.binary()),
            "ts": pa.array(
                [dt.datetime(2024, 1, 1) + dt.timedelta(seconds=i) for i in ids],
                pa.timestamp("us", tz="UTC"),
            ),
            "score": pa.array([i / 3 for i in ids], pa.float64()),
            "flag": pa.array([i % 2 == 0 for i in ids]),
            "tags": pa.array([[f"t{i % 3}"] * (i % 3) for i in ids], pa.list_(pa.string())),
            "gt": pa.array([{"epoch": 1, "topic": "t", "partition": 0, "offset": i} for i in ids]),
        }
    )


def write_parts(tmp_path: Path, sizes: list[int], **kwargs: object) -> tuple[list[str], pa.Table]:
    paths, tables, start = [], [], 0
    for i, n in enumerate(sizes):
        t = rich_table(start, n)
        path = str(tmp_path / f"part-{i}.parquet")
        pq.write_table(t, path, **kwargs)
        paths.append(path)
        tables.append(t)
        start += n
    return paths, pa.concat_tables(tables)


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"row_group_size": 100},
        {"compression": "zstd"},
        {"write_page_index": True},
        {"use_dictionary": False, "write_statistics": False},
    ],
)
def test_footer_codec_round_trips(tmp_path: Path, kwargs: dict[str, object]) -> None:
    [path], _ = write_parts(tmp_path, [1000], **kwargs)
    footer = read_layout(path).footer
    assert encode_struct(decode_struct(footer)) == footer


@pytest.mark.parametrize(
    "kwargs",
    [
        {},
        {"row_group_size": 250},
        {"compression": "zstd"},
        {"write_page_index": True},
    ],
)
def test_stitched_file_reads_like_the_concatenated_parts(
    tmp_path: Path, kwargs: dict[str, object]
) -> None:
    paths, expected = write_parts(tmp_path, [1000, 1, 777], **kwargs)
    out = str(tmp_path / "out.parquet")
    through = stitch_files(paths, out)
    assert through < 64 * 1024  # footers only
    assert pq.read_table(out).equals(expected)
    meta = pq.ParquetFile(out).metadata
    assert meta.num_rows == 1778
    groups = [meta.row_group(i) for i in range(meta.num_row_groups)]
    assert sum(g.num_rows for g in groups) == 1778
    # every column chunk points inside the file, in increasing order
    offsets = [g.column(0).data_page_offset for g in groups]
    assert offsets == sorted(offsets) and offsets[-1] < os.path.getsize(out)
    # row-group pruning by statistics still finds the right rows
    hit = ds.dataset(out).to_table(filter=ds.field("id") == 1500)
    assert hit.column("id").to_pylist() == [1500]
    pf = pq.ParquetFile(out)
    assert pf.read_row_group(meta.num_row_groups - 1).column("id").to_pylist()[-1] == 1777


@pytest.mark.parametrize("kwargs", [{}, {"row_group_size": 250}, {"write_page_index": True}])
def test_stitching_in_memory_gives_the_file_stitch(
    tmp_path: Path, kwargs: dict[str, object]
) -> None:
    paths, expected = write_parts(tmp_path, [1000, 1, 777], **kwargs)
    out = str(tmp_path / "out.parquet")
    stitch_files(paths, out)
    stitched = stitch_bytes([Path(p).read_bytes() for p in paths])
    assert stitched == Path(out).read_bytes()
    assert pq.read_table(pa.BufferReader(stitched)).equals(expected)
    with pytest.raises(NotStitchable):
        stitch_bytes([Path(paths[0]).read_bytes(), b"not parquet at all"])


def test_parts_of_different_schemas_are_not_stitched(tmp_path: Path) -> None:
    a = str(tmp_path / "a.parquet")
    b = str(tmp_path / "b.parquet")
    pq.write_table(pa.table({"x": [1, 2]}), a)
    pq.write_table(pa.table({"y": [1, 2]}), b)
    with pytest.raises(NotStitchable, match="schemas"):
        stitch_files([a, b], str(tmp_path / "out.parquet"))


def test_concat_falls_back_to_a_merge_for_unordered_parts(tmp_path: Path) -> None:
    paths, _ = write_parts(tmp_path, [10, 10])
    parts = tuple(StagedPart(p, 10, os.path.getsize(p)) for p in paths)
    bundle = Bundle("p", 1, "q", 0, tuple(reversed(parts)), has_gt=True, ordered=False)
    out = str(tmp_path / "out.parquet")
    moved = concat_parts_to_file(bundle, [p.location for p in bundle.parts], out)
    assert moved == sum(p.size for p in parts)  # decoded on this process
    assert pq.read_table(out).column("id").to_pylist() == list(range(20))


def test_not_a_parquet_file(tmp_path: Path) -> None:
    bad = tmp_path / "x.parquet"
    bad.write_bytes(b"hello world, not parquet")
    with pytest.raises(NotStitchable, match="not a Parquet file"):
        read_layout(str(bad))
