"""Kafka records decoded straight into row tuples: the read path's per-record loop.

kafka-python parses every record of a fetch into a ``DefaultRecord`` (seven calls of its
``decode_varint``), then into a 13-field ``ConsumerRecord`` with key, value and header
sizes: about 10 us per record, most of a read task's CPU. A read task needs none of
that. :func:`install` gives a consumer's fetcher :class:`RowPartitionRecords`, which
yields one plain tuple :data:`Row` ``(offset, timestamp, timestamp_type, key, value,
headers)`` per record, decoded by one loop with the varints inlined; ``poll()`` then
returns lists of rows instead of ``ConsumerRecord``\\ s (:func:`installed` tells which).

Everything around the records is kafka-python's and unchanged: fetching, positions,
``max_records``, errors, and per batch (as its ``PartitionRecords`` does): the CRC-32C
check of each batch (``check_crcs``, the only CRC of the v2 format: kafka-python's
per-record check of a v2 record is a no-op), decompression, control batches (skipped),
aborted transactions under ``read_committed``, records below the fetch offset (skipped),
the leader epoch, and the ``CorruptRecordError``\\ s of a malformed batch. Batches of the
old formats (magic 0 and 1) go through kafka-python's own record classes.

Header keys are decoded leniently (``errors="replace"``: bytes that are not UTF-8 become
U+FFFD), as Spark's Kafka source gets them from the Java client, where kafka-python
refuses the whole batch; a consumer installed with ``headers=False`` (a read without
``includeHeaders``, the driver's end probe) skips every header without decoding it, so
headers can neither cost time nor fail a read that does not return them.

The fetcher class and the batch internals used here (``_buffer``, ``_pos``,
``_maybe_uncompress``) are checked once (:func:`supported`); where they are missing
(another kafka-python), nothing is installed and ``poll()`` returns ``ConsumerRecord``\\ s
as before. ``tests/test_source_record_rows.py`` compares the rows with kafka-python's
records for every shape of batch.
"""

from __future__ import annotations

import functools
import gc
import itertools
import logging
from collections.abc import Iterator
from typing import Any

log = logging.getLogger(__name__)

#: ``(offset, timestamp ms, timestamp type, key, value, headers)``.
Row = tuple[int, int, int, "bytes | None", "bytes | None", "list[tuple[str, bytes | None]]"]

NO_HEADERS: list[tuple[str, bytes | None]] = []  # shared; never mutated

_ATTR = "_gtkafka_rows"


@functools.cache
def supported() -> bool:
    """Whether this kafka-python has the fetcher and batch internals :func:`install` uses."""
    try:
        from kafka.consumer.fetcher import Fetcher
        from kafka.record.default_records import DefaultRecordBatch
    except ImportError:
        return False
    needed = ("_unpack_records", "_maybe_skip_record", "_consume_aborted_transactions_up_to")
    slots = getattr(DefaultRecordBatch, "__slots__", ())
    ok = (
        all(hasattr(Fetcher.PartitionRecords, name) for name in needed)
        and hasattr(DefaultRecordBatch, "_maybe_uncompress")
        and "_buffer" in slots
        and "_pos" in slots
    )
    if not ok:
        log.warning("gtkafka: this kafka-python's fetcher differs; reading without record_rows")
    return ok


def install(consumer: Any, *, headers: bool = True) -> bool:
    """Make ``consumer.poll()`` return :data:`Row` lists; ``False`` (and nothing changed)
    where this kafka-python or this consumer does not allow it.

    ``headers=False``: every row's headers are empty, and the records' headers are
    skipped without being decoded. Fixed for the consumer's life (records it fetched ahead
    are decoded one way), so consumers are pooled by it too.
    """
    fetcher = getattr(consumer, "_fetcher", None)
    if fetcher is None or not supported():
        return False
    config = getattr(fetcher, "config", {})
    if config.get("key_deserializer") is not None or config.get("value_deserializer") is not None:
        return False
    fetcher.PartitionRecords = _row_partition_records(headers)
    setattr(consumer, _ATTR, True)
    return True


def rows_of(records: list[Any]) -> list[Row]:
    """``ConsumerRecord``\\ s (of a consumer without :func:`install`) as rows."""
    return [
        (r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers or NO_HEADERS)
        for r in records
    ]


def installed(consumer: Any) -> bool:
    """Whether ``consumer.poll()`` returns :data:`Row` lists (see :func:`install`)."""
    return getattr(consumer, _ATTR, False) is True


def _row_partition_records(headers: bool = True) -> type:
    """:class:`RowPartitionRecords`, decoding headers or skipping them (one class for
    each; defined on first use: kafka-python is imported late)."""
    return _row_partition_records_class(headers)


@functools.cache
def _row_partition_records_class(headers: bool) -> type:
    from kafka import errors
    from kafka.consumer.fetcher import Fetcher, IsolationLevel

    class RowPartitionRecords(Fetcher.PartitionRecords):  # type: ignore[misc]
        """kafka-python's ``PartitionRecords``, yielding :data:`Row`\\ s."""

        def _maybe_skip_record(self, record: Row) -> bool:
            return bool(record[0] < self.fetch_offset)

        def take(self, n: int | None = None) -> list[Row]:
            # kafka-python moves next_fetch_offset past each record as it is yielded;
            # here once per call, past the last record taken (unless the records ran
            # out: the generator then set it past its last batch and drained).
            rows: list[Row] = super().take(n)
            if rows:
                self.records_read += len(rows)
                if self.record_iterator is not None:
                    self.next_fetch_offset = rows[-1][0] + 1
            return rows

        def _unpack_records(
            self, tp: Any, records: Any, key_deserializer: Any, value_deserializer: Any
        ) -> Iterator[Row]:
            # kafka-python's loop over the batches (PartitionRecords._unpack_records),
            # with the records of a v2 batch decoded by _batch_rows.
            try:
                batch = records.next_batch()
                last_batch = None
                while batch is not None:
                    last_batch = batch
                    if self.check_crcs and not batch.validate_crc():
                        raise errors.CorruptRecordError(
                            f"Record batch for partition {self.topic_partition} at offset "
                            f"{batch.base_offset} failed crc check"
                        )
                    if batch.magic == 2:
                        self.leader_epoch = batch.leader_epoch
                        if (
                            self.isolation_level == IsolationLevel.READ_COMMITTED
                            and batch.has_producer_id()
                        ):
                            self._consume_aborted_transactions_up_to(batch.last_offset)
                            if self._contains_abort_marker(batch):
                                self.aborted_producer_ids.discard(batch.producer_id)
                            elif self._is_batch_aborted(batch):
                                self.next_fetch_offset = batch.next_offset
                                batch = records.next_batch()
                                continue
                        if batch.is_control_batch:
                            self.next_fetch_offset = batch.next_offset
                            batch = records.next_batch()
                            continue
                        self.bytes_read += batch.size_in_bytes
                        # take() sets next_fetch_offset and records_read after each call.
                        yield from _batch_rows(batch, errors.CorruptRecordError, headers)
                    else:
                        yield from self._legacy_rows(batch)
                    batch = records.next_batch()
                # As kafka-python: a v2 batch's last offset survives compaction.
                if last_batch is not None and last_batch.magic == 2:
                    self.next_fetch_offset = last_batch.next_offset
                self.drain()
            except StopIteration:
                raise RuntimeError("StopIteration raised unpacking messageset") from None

        def _legacy_rows(self, batch: Any) -> Iterator[Row]:
            """A batch of format v0 or v1, through kafka-python's record classes."""
            for record in batch:
                if self.check_crcs and not record.validate_crc():
                    raise errors.CorruptRecordError(
                        f"Record for partition {self.topic_partition} at offset "
                        f"{record.offset} failed crc check"
                    )
                self.bytes_read += record.size_in_bytes
                self.next_fetch_offset = record.offset + 1
                yield (
                    record.offset,
                    record.timestamp,
                    record.timestamp_type,
                    record.key,
                    record.value,
                    record.headers or NO_HEADERS,
                )

    return RowPartitionRecords


def _uvarint(buf: bytes, pos: int) -> tuple[int, int]:
    """An unsigned varint at ``pos`` (any length): (raw value, next position)."""
    result = 0
    shift = 0
    while True:
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift >= 64:
            raise ValueError("Out of int64 range")


def _batch_rows(  # noqa: PLR0912, PLR0915 - the hot loop, inlined on purpose
    batch: Any, corrupt: type[Exception], with_headers: bool = True
) -> list[Row]:
    """The records of one v2 batch (CRC checked by the caller) as rows; without
    ``with_headers`` every row's headers are empty and none is decoded.

    The zigzag varints are decoded inline: one byte ``< 0x80`` (most fields) and two
    bytes (lengths of 64 to 8191) without a call; longer ones by :func:`_uvarint`.
    """
    batch._maybe_uncompress()
    buf = bytes(batch._buffer)
    pos = batch._pos
    base = batch.base_offset
    ts_type = batch.timestamp_type
    append_time = ts_type == 1  # LOG_APPEND_TIME: every record has the batch's max
    first_ts = batch.max_timestamp if append_time else batch.first_timestamp
    count = batch.records_count
    uvarint = _uvarint
    rows: list[Row] = []
    append = rows.append
    # The loop creates no reference cycles, only tuples: without this, the garbage
    # collector runs every 700 of them and scans the rows still alive (half the time).
    collecting = gc.isenabled()
    gc.disable()
    try:
        for _ in itertools.repeat(None, count):
            # length
            raw = buf[pos]
            if raw < 0x80:
                pos += 1
            elif buf[pos + 1] < 0x80:
                raw = (raw & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
            else:
                raw, pos = uvarint(buf, pos)
            length = (raw >> 1) ^ -(raw & 1)
            start = pos
            # attributes (unused)
            if buf[pos] < 0x80:
                pos += 1
            else:
                _, pos = uvarint(buf, pos)
            # timestamp delta
            raw = buf[pos]
            if raw < 0x80:
                pos += 1
            elif buf[pos + 1] < 0x80:
                raw = (raw & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
            else:
                raw, pos = uvarint(buf, pos)
            timestamp = first_ts if append_time else first_ts + ((raw >> 1) ^ -(raw & 1))
            # offset delta
            raw = buf[pos]
            if raw < 0x80:
                pos += 1
            elif buf[pos + 1] < 0x80:
                raw = (raw & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
            else:
                raw, pos = uvarint(buf, pos)
            offset = base + ((raw >> 1) ^ -(raw & 1))
            # key
            raw = buf[pos]
            if raw < 0x80:
                pos += 1
            elif buf[pos + 1] < 0x80:
                raw = (raw & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
            else:
                raw, pos = uvarint(buf, pos)
            size = (raw >> 1) ^ -(raw & 1)
            if size >= 0:
                key: bytes | None = buf[pos : pos + size]
                pos += size
            else:
                key = None
            # value
            raw = buf[pos]
            if raw < 0x80:
                pos += 1
            elif buf[pos + 1] < 0x80:
                raw = (raw & 0x7F) | (buf[pos + 1] << 7)
                pos += 2
            else:
                raw, pos = uvarint(buf, pos)
            size = (raw >> 1) ^ -(raw & 1)
            if size >= 0:
                value: bytes | None = buf[pos : pos + size]
                pos += size
            else:
                value = None
            # headers
            if buf[pos] == 0:
                pos += 1
                headers = NO_HEADERS
            elif with_headers:
                headers, pos = _headers(buf, pos, corrupt)
            else:
                pos = _skip_headers(buf, pos, corrupt)
                headers = NO_HEADERS
            if pos - start != length:
                raise corrupt(
                    f"Invalid record size: expected to read {length} bytes in record "
                    f"payload, but instead read {pos - start}"
                )
            append((offset, timestamp, ts_type, key, value, headers))
    except (ValueError, IndexError) as err:
        raise corrupt(f"Found invalid record structure: {err!r}") from err
    finally:
        if collecting:
            gc.enable()
    if pos != len(buf):
        raise corrupt(f"{len(buf) - pos} unconsumed bytes after all records consumed")
    return rows


def _headers(
    buf: bytes, pos: int, corrupt: type[Exception]
) -> tuple[list[tuple[str, bytes | None]], int]:
    """A record's headers at ``pos`` (their count first): (headers, next position)."""
    raw, pos = _uvarint(buf, pos)
    count = (raw >> 1) ^ -(raw & 1)
    if count < 0:
        raise corrupt(f"Found invalid number of record headers {count}")
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        raw, pos = _uvarint(buf, pos)
        size = (raw >> 1) ^ -(raw & 1)
        if size < 0:
            raise corrupt(f"Invalid negative header key size {size}")
        # Kafka does not require header keys to be UTF-8; a key that is not must not fail
        # the partition on every replay. Replacement characters, as the Java client gives
        # Spark's Kafka source.
        name = buf[pos : pos + size].decode("utf-8", "replace")
        pos += size
        raw, pos = _uvarint(buf, pos)
        size = (raw >> 1) ^ -(raw & 1)
        if size >= 0:
            value: bytes | None = buf[pos : pos + size]
            pos += size
        else:
            value = None
        headers.append((name, value))
    return headers, pos


def _skip_headers(buf: bytes, pos: int, corrupt: type[Exception]) -> int:
    """The position after a record's headers at ``pos`` (their count first), none decoded."""
    raw, pos = _uvarint(buf, pos)
    count = (raw >> 1) ^ -(raw & 1)
    if count < 0:
        raise corrupt(f"Found invalid number of record headers {count}")
    for _ in range(count):
        raw, pos = _uvarint(buf, pos)
        size = (raw >> 1) ^ -(raw & 1)
        if size < 0:
            raise corrupt(f"Invalid negative header key size {size}")
        pos += size
        raw, pos = _uvarint(buf, pos)
        size = (raw >> 1) ^ -(raw & 1)
        if size > 0:
            pos += size
    return pos
