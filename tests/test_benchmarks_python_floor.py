"""benchmarks.python_floor's driver-side reader: the same rows as the worker-side one, one
batch per read, no new data past maxBatches, and a replay of a range reads it again."""

from __future__ import annotations

from benchmarks.python_floor import PAYLOAD, DriverFloorReader, FloorPartition, FloorReader


def test_the_driver_reader_makes_the_worker_readers_rows_one_batch_per_read() -> None:
    reader = DriverFloorReader(rows=3, max_batches=2)
    start = reader.initialOffset()
    rows, end = reader.read(start)
    assert end == {"batch": 1}
    worker = next(iter(FloorReader(3).read(FloorPartition(0, 3))))
    assert list(rows) == list(zip(worker.column("key").to_pylist(), [PAYLOAD] * 3, strict=True))
    rows, end = reader.read(end)
    assert end == {"batch": 2} and [k for k, _ in rows] == [b"1-0", b"1-1", b"1-2"]
    rows, same = reader.read(end)
    assert same == end and list(rows) == []  # maxBatches: no new data


def test_a_replay_reads_the_range_again() -> None:
    reader = DriverFloorReader(rows=2)
    keys = [k for k, _ in reader.readBetweenOffsets({"batch": 1}, {"batch": 3})]
    assert keys == [b"1-0", b"1-1", b"2-0", b"2-1"]
