"""record_rows decodes every shape of record batch exactly as kafka-python does."""

from __future__ import annotations

import struct
from collections import namedtuple
from typing import Any

import pytest
from kafka import TopicPartition
from kafka.consumer.fetcher import Fetcher, IsolationLevel
from kafka.errors import CorruptRecordError
from kafka.record.default_records import DefaultRecordBase, DefaultRecordBatchBuilder
from kafka.record.legacy_records import LegacyRecordBatchBuilder
from kafka.record.memory_records import MemoryRecords
from kafka.record.util import calc_crc32c

from datasource import record_rows
from datasource.arrow_builder import ArrowBuilder
from datasource.schema import arrow_schema, source_schema

TP = TopicPartition("t", 3)
Aborted = namedtuple("Aborted", ["producer_id", "first_offset"])
H = DefaultRecordBase.HEADER_STRUCT


def v2_batch(
    base: int,
    records: list[Any],
    *,
    compression: int = 0,
    producer_id: int = -1,
    transactional: bool = False,
    control: bool = False,
    append_time: bool = False,
    last_offset_delta: int | None = None,
) -> bytes:
    """One v2 batch at ``base``: records (offset delta, timestamp, key, value, headers)."""
    builder = DefaultRecordBatchBuilder(
        2, compression, transactional, producer_id, 0 if producer_id >= 0 else -1,
        0 if producer_id >= 0 else -1, 1 << 30,
    )  # fmt: skip
    for delta, ts, key, value, headers in records:
        builder.append(delta, ts, key, value, headers)
    buf = builder.build()
    fields = list(H.unpack_from(buf))
    fields[0] = base
    fields[5] |= (0x20 if control else 0) | (0x08 if append_time else 0)
    if last_offset_delta is not None:
        fields[6] = last_offset_delta
    H.pack_into(buf, 0, *fields)
    crc = calc_crc32c(memoryview(buf)[DefaultRecordBase.ATTRIBUTES_OFFSET :])
    struct.pack_into(">I", buf, DefaultRecordBase.CRC_OFFSET, crc)
    return bytes(buf)


def legacy_batch(magic: int, base: int, n: int, compression: int = 0) -> bytes:
    builder = LegacyRecordBatchBuilder(magic, compression, 1 << 30)
    for i in range(n):
        builder.append(i, 1_700_000_000_000 + i if magic else None, b"k%d" % i, b"v" * i)
    buf = builder.build()
    if compression:
        struct.pack_into(">q", buf, 0, base + n - 1)  # a wrapper carries its last offset
    else:
        pos = 0
        for i in range(n):
            struct.pack_into(">q", buf, pos, base + i)
            pos += 12 + struct.unpack_from(">i", buf, pos + 8)[0]
    return bytes(buf)


def plain(base: int, n: int, **kw: Any) -> bytes:
    return v2_batch(
        base, [(i, 1_700_000_000_000 + 3 * i, b"%08d" % i, b"v" * 92, []) for i in range(n)], **kw
    )


def both(
    data: bytes, fetch_offset: int, takes: list[Any], **kw: Any
) -> tuple[list[Any], list[Any]]:
    """(kafka-python's, record_rows') takes, each with next_fetch_offset after it."""
    out = []
    for cls in (Fetcher.PartitionRecords, record_rows._row_partition_records()):
        part = cls(fetch_offset, TP, MemoryRecords(data), **kw)
        seen = []
        for n in takes:
            if not part:  # drained: the fetcher takes no more
                break
            got = part.take(n)
            seen.append(([record_rows.rows_of([r])[0] if hasattr(r, "offset") else r for r in got],
                         part.next_fetch_offset, bool(part)))  # fmt: skip
        out.append(seen)
    return out[0], out[1]


def test_plain_batches_with_partial_takes() -> None:
    data = plain(0, 50) + plain(50, 30) + plain(80, 7)
    expected, got = both(data, 0, [10, 40, 1, 100, 5])
    assert got == expected
    assert sum(len(t[0]) for t in got) == 87


def test_fetch_offset_inside_a_batch_skips_the_records_below() -> None:
    expected, got = both(plain(100, 40), 117, [5, None])
    assert got == expected
    assert got[0][0][0][0] == 117


def test_varint_widths_nulls_headers_and_negative_deltas() -> None:
    records = [
        (0, 1_700_000_000_000, None, b"", []),
        (1, 1_699_999_000_000, b"", None, [("h", b"x"), ("n", None), ("\u00e9", b"y" * 300)]),
        (2, 1_700_000_000_000 + 10**9, b"k" * 70, b"v" * 9000, []),
        (200, 1_700_000_000_001, b"k" * 20_000, b"v" * 3_000_000, [("a", b"")]),
        (70_000, 1_700_000_000_002, b"k", b"v" * 64, []),
    ]
    expected, got = both(v2_batch(10**12, records, last_offset_delta=70_005), 0, [2, None, 1])
    assert got == expected
    assert got[-1][1] == 10**12 + 70_006  # past the batch's last offset (compaction)


class RawKey(str):
    """A header key that kafka-python's batch builder writes as the given bytes."""

    raw: bytes

    def __new__(cls, raw: bytes) -> RawKey:
        key = super().__new__(cls, raw.decode("latin-1"))
        key.raw = raw
        return key

    def encode(self, encoding: str = "utf-8", errors: str = "strict") -> bytes:
        return self.raw


def test_header_keys_that_are_not_utf8_are_replaced_or_never_decoded() -> None:
    """Kafka-python refuses the whole batch; record_rows reads the key with replacement
    characters, and without headers skips them all (widths, null values) undecoded."""
    records = [
        (0, 1_700_000_000_000, b"k0", b"v0", [(RawKey(b"\xff\xfeh"), b"x"), ("ok", None)]),
        (1, 1_700_000_000_001, b"k1", b"v1", [("h" * 70, b"y" * 9000), (RawKey(b"\xc3"), b"")]),
        (2, 1_700_000_000_002, b"k2", b"v2", []),
    ]
    data = v2_batch(40, records)
    with pytest.raises(CorruptRecordError, match="UnicodeDecodeError"):
        Fetcher.PartitionRecords(0, TP, MemoryRecords(data)).take(None)
    rows = record_rows._row_partition_records(True)(0, TP, MemoryRecords(data)).take(None)
    assert [r[5] for r in rows] == [
        [("\ufffd\ufffdh", b"x"), ("ok", None)],
        [("h" * 70, b"y" * 9000), ("\ufffd", b"")],
        [],
    ]
    bare = record_rows._row_partition_records(False)(0, TP, MemoryRecords(data)).take(None)
    assert [r[5] for r in bare] == [[], [], []]
    assert [r[:5] for r in bare] == [r[:5] for r in rows]  # all else the same


@pytest.mark.parametrize("compression", [1, 4])  # gzip, zstd
def test_compressed_batches(compression: int) -> None:
    data = plain(0, 300, compression=compression) + plain(300, 5, compression=compression)
    expected, got = both(data, 120, [100, None])
    assert got == expected


def test_log_append_time() -> None:
    expected, got = both(plain(0, 20, append_time=True), 0, [None])
    assert got == expected
    assert {row[2] for row in got[0][0]} == {1}


def test_control_batches_are_skipped() -> None:
    marker: list[Any] = [(0, 1_700_000_000_000, struct.pack(">hh", 0, 1), b"\0\0\0\0\0\0", [])]
    data = plain(0, 5, producer_id=7, transactional=True)
    data += v2_batch(5, marker, producer_id=7, transactional=True, control=True)
    data += plain(6, 5)
    for takes in ([None], [5, 1, None], [6, None]):
        expected, got = both(data, 0, takes)
        assert got == expected


def test_aborted_transactions_under_read_committed() -> None:
    abort: list[Any] = [(0, 1_700_000_000_000, struct.pack(">hh", 0, 0), b"\0\0\0\0\0\0", [])]
    data = plain(0, 5, producer_id=7, transactional=True)
    data += v2_batch(5, abort, producer_id=7, transactional=True, control=True)
    data += plain(6, 5, producer_id=8, transactional=True)
    for level in (IsolationLevel.READ_COMMITTED, IsolationLevel.READ_UNCOMMITTED):
        expected, got = both(
            data, 0, [3, None], isolation_level=level, aborted_transactions=[Aborted(7, 0)]
        )
        assert got == expected


@pytest.mark.parametrize(("magic", "compression"), [(0, 0), (1, 0), (1, 1)])
def test_old_formats(magic: int, compression: int) -> None:
    expected, got = both(legacy_batch(magic, 40, 12, compression), 40, [5, None])
    assert got == expected
    assert len(got[0][0]) + len(got[1][0]) == 12


def test_a_corrupt_batch_fails_its_crc_check() -> None:
    data = bytearray(plain(0, 10))
    data[-3] ^= 0xFF
    for cls in (Fetcher.PartitionRecords, record_rows._row_partition_records()):
        with pytest.raises(CorruptRecordError):
            cls(0, TP, MemoryRecords(bytes(data))).take(None)


def test_a_malformed_record_is_corrupt_without_the_crc_check() -> None:
    data = bytearray(plain(0, 10))
    data[H.size] = 0x7E  # the first record's length: 63 instead of ~105
    with pytest.raises(CorruptRecordError):
        record_rows._row_partition_records()(
            0, TP, MemoryRecords(bytes(data)), check_crcs=False
        ).take(None)


def test_install_only_without_deserializers() -> None:
    class Consumer:
        def __init__(self, **config: Any) -> None:
            self._fetcher = Fetcher.__new__(Fetcher)
            self._fetcher.config = {"key_deserializer": None, "value_deserializer": None, **config}

    consumer = Consumer()
    assert record_rows.install(consumer)
    assert record_rows.installed(consumer)
    assert consumer._fetcher.PartitionRecords is record_rows._row_partition_records()
    assert Fetcher.PartitionRecords is not record_rows._row_partition_records()
    bare = Consumer()
    assert record_rows.install(bare, headers=False)
    assert bare._fetcher.PartitionRecords is record_rows._row_partition_records(False)
    assert bare._fetcher.PartitionRecords is not record_rows._row_partition_records()
    other = Consumer(value_deserializer=bytes)
    assert not record_rows.install(other)
    assert not record_rows.installed(other)
    assert not record_rows.install(object())


def test_arrow_builder_builds_only_the_schema_s_columns_in_its_order() -> None:
    from pyspark.sql.types import StructType

    full = source_schema(False)
    rows: list[Any] = [(i, 1000 + i, 0, b"k", b"v%d" % i, record_rows.NO_HEADERS) for i in range(3)]
    everything = ArrowBuilder(arrow_schema(full), 4)
    everything.add("a", 1, list(rows))
    expected = everything.flush().to_pylist()
    for names in (["gt", "value"], ["partition"], ["timestamp", "key", "topic", "offset"]):
        narrow = ArrowBuilder(arrow_schema(StructType([full[n] for n in names])), 4)
        narrow.add("a", 1, list(rows))
        batch = narrow.flush()
        assert batch.schema.names == names
        assert batch.to_pylist() == [{n: row[n] for n in names} for row in expected]


def test_arrow_builder_cuts_runs_across_partitions() -> None:
    schema = arrow_schema(source_schema(True))
    builder = ArrowBuilder(schema, 9)
    rows_a: list[Any] = [
        (i, 1000 + i, 0, b"k", b"v%d" % i, record_rows.NO_HEADERS) for i in range(5)
    ]
    rows_b: list[Any] = [(i, 2000 + i, 1, None, None, [("h", b"x")]) for i in range(10, 14)]
    builder.add("a", 0, rows_a)
    builder.add("b", 2, rows_b)
    first = builder.flush(7).to_pylist()
    rest = builder.flush().to_pylist()
    assert builder.rows == 0
    assert [(r["topic"], r["partition"], r["offset"]) for r in first + rest] == [
        ("a", 0, i) for i in range(5)
    ] + [("b", 2, i) for i in range(10, 14)]
    assert len(first) == 7
    assert first[0]["gt"] == {"epoch": 9, "topic": "a", "partition": 0, "offset": 0}
    assert rest[-1]["gt"] == {"epoch": 9, "topic": "b", "partition": 2, "offset": 13}
    assert rest[-1]["headers"] == [{"key": "h", "value": b"x"}]
    assert first[0]["headers"] == []
    assert rest[-1]["timestampType"] == 1
    assert first[1]["timestamp"].timestamp() == 1.001
