"""``consumer=kafka``: what a row of the sink input becomes, and which rows cannot become a
message.

A row is shaped like a row of Spark's Kafka sink: ``value`` (binary or string), optional
``key`` (binary or string), ``headers`` (``array<struct<key: string, value: binary or
string>>``) and ``partition`` (int). Other columns (``gt``, ``topic``, ``offset``...) are not
sent: ``consumer.topic`` names the topic, as Spark's ``topic`` option overrides the column.

What the kafka consumer sends, and what :func:`validate_rows` rejects:

* **value**: its bytes; a null value is sent as null (a tombstone, which compaction uses to
  delete the key), with or without a key.
* **key**: its bytes; null means no key (the producer's partitioner spreads such messages).
* **string columns** (key, value, header values) are sent as the bytes the column holds,
  as Spark's Kafka sink sends them, even where they are not UTF-8 (Spark makes such
  strings from arbitrary bytes, ``CAST(binary AS STRING)``): Kafka stores bytes.
* **headers**: a null array means no headers. Rejected: a null entry, a null key, a key that
  is not UTF-8 (a Kafka header key is text; kafka-python encodes a ``str``), and a null
  value (kafka-python's producer refuses one: only an empty value could be sent instead,
  which would not be the row's). The sink's own ``gtb.*`` headers come after the row's.
* **partition**: null lets the producer choose. Rejected: a negative number, and one at or
  beyond the topic's partition count recorded when the micro-batch was planned
  (``KafkaTopicSettings.partitions``).
* **size**: the message as the producer sizes it before it refuses one larger than its
  ``max.request.size`` (:func:`max_message_size`), the sink's headers included.

The checks are pure functions of the rows and the settings, so a replay with the same
settings rejects the same rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.compute as pc

from sink.consumers.consumer_kind import RowRejection
from state.errors import ConfigError

H_BUNDLE, H_GT, H_INDEX, H_COUNT = "gtb.bundle", "gtb.gt", "gtb.index", "gtb.count"
SINK_HEADERS = (H_BUNDLE, H_GT, H_INDEX, H_COUNT)

MAX_REQUEST_SIZE = "max.request.size"
# The sink's headers hold decimal renderings of non-negative int64s (epochs, indices,
# counts): at most 19 digits each. A write task knows neither its bundle's id nor the
# items' indices, so the size check counts each at 19 digits: an upper bound that is at
# most 4 x 18 bytes above the message actually sent.
SINK_HEADER_DIGITS = 19
# Where a zig-zag varint of a non-negative length grows by a byte (Kafka's record format).
_VARINT_STEPS = (63, 8191, 1048575, 134217727, 17179869183)


def varint_size(n: int) -> int:
    """Bytes of the zig-zag varint of the non-negative ``n``."""
    return 1 + sum(1 for step in _VARINT_STEPS if n > step)


SINK_HEADERS_BYTES = sum(
    varint_size(len(k)) + len(k) + varint_size(SINK_HEADER_DIGITS) + SINK_HEADER_DIGITS
    for k in SINK_HEADERS
)
"""The most the sink's four headers add to a message."""


def record_overhead() -> int:
    """What kafka-python's producer adds to a message's key, value and headers when it sizes
    it (``DefaultRecordBatchBuilder.estimate_size_in_bytes``): a v2 record batch header and
    the most a record's own framing takes (length, attributes, timestamp and offset deltas)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    return int(DefaultRecordBatchBuilder.HEADER_STRUCT.size) + int(
        DefaultRecordBatchBuilder.MAX_RECORD_OVERHEAD
    )


def max_request_size(config: tuple[tuple[str, str], ...]) -> int:
    """``consumer.kafka.max.request.size`` (checked digits when parsed), else the producer's
    default."""
    for name, raw in config:
        if name == MAX_REQUEST_SIZE:
            return int(raw)
    from kafka import KafkaProducer

    return int(KafkaProducer.DEFAULT_CONFIG["max_request_size"])


@dataclass(frozen=True)
class RowLimits:
    """What :func:`validate_rows` knows of the target: the topic, its partition count when
    the micro-batch was planned (None: not recorded), the producer's size limit."""

    topic: str
    partitions: int | None
    max_request_size: int


# --- validation -----------------------------------------------------------------------------


def validate_rows(table: pa.Table, limits: RowLimits) -> list[RowRejection]:
    """The rows of ``table`` the kafka consumer cannot send (module docstring), by row index,
    at most one per row (the first fault in the order headers, partition, size), in row
    order. A table without ``value`` is not a row's fault: :class:`ConfigError`."""
    _require_value(table)
    found: dict[int, RowRejection] = {}
    headers = table.column("headers").combine_chunks() if "headers" in table.column_names else None
    if headers is not None:
        for rejection in _header_faults(headers):
            found.setdefault(rejection.row, rejection)
    if "partition" in table.column_names:
        for rejection in _partition_faults(table.column("partition").combine_chunks(), limits):
            found.setdefault(rejection.row, rejection)
    for rejection in _size_faults(table, headers, limits.max_request_size):
        found.setdefault(rejection.row, rejection)
    return [found[row] for row in sorted(found)]


def _require_value(table: pa.Table) -> None:
    if "value" not in table.column_names:
        raise ConfigError(
            "value",
            None,
            "a 'value' column (binary or string) in the sink input for consumer=kafka",
            where="barrier",
        )


def _binary(column: pa.ChunkedArray | pa.Array) -> pa.Array:
    """A binary or string column as large binary: its bytes, never decoded."""
    if isinstance(column, pa.ChunkedArray):
        column = column.combine_chunks()
    return column.cast(pa.large_binary())


def _varint_sizes(lengths: pa.Array) -> pa.Array:
    """:func:`varint_size` of each (non-negative) element; null stays null."""
    sizes = pc.add(pc.cast(pc.greater(lengths, _VARINT_STEPS[0]), pa.int64()), 1)
    for step in _VARINT_STEPS[1:]:
        sizes = pc.add(sizes, pc.cast(pc.greater(lengths, step), pa.int64()))
    return sizes


def _field_sizes(values: pa.Array) -> pa.Array:
    """Per element, what the record format takes for a nullable byte field: its varint
    length and its bytes, or one byte for null."""
    lengths = pc.cast(pc.binary_length(values), pa.int64())
    return pc.fill_null(pc.add(_varint_sizes(lengths), lengths), 1)


def _size_faults(table: pa.Table, headers: pa.Array | None, limit: int) -> Iterator[RowRejection]:
    n = table.num_rows
    if n == 0:
        return
    value = _field_sizes(_binary(table.column("value")))
    key = (
        _field_sizes(_binary(table.column("key")))
        if "key" in table.column_names
        else pa.array([1] * n, pa.int64())
    )
    fixed = record_overhead() + SINK_HEADERS_BYTES
    sizes = pc.add(pc.add(value, key), fixed)
    counts = pa.array([0] * n, pa.int64())
    if headers is not None:
        counts = pc.cast(pc.fill_null(pc.list_value_length(headers), 0), pa.int64())
        entries = headers.flatten()
        key_lengths = pc.cast(
            pc.fill_null(pc.binary_length(_binary(pc.struct_field(entries, "key"))), 0),
            pa.int64(),
        )
        entry_sizes = pc.add(
            pc.add(_varint_sizes(key_lengths), key_lengths),
            _field_sizes(_binary(pc.struct_field(entries, "value"))),
        )
        sizes = pc.add(sizes, _sums_per_row(entry_sizes, counts))
    sizes = pc.add(sizes, _varint_sizes(pc.add(counts, len(SINK_HEADERS))))
    over = pc.indices_nonzero(pc.greater(sizes, limit)).to_pylist()
    for row in over:
        size = sizes[row].as_py()
        yield RowRejection(
            row,
            None,
            f"record of {size:,} bytes with its headers (the sink's counted at their largest) "
            f"exceeds max.request.size {limit:,} (consumer.kafka.max.request.size): the "
            "producer refuses it",
        )


def _sums_per_row(entry_sizes: pa.Array, counts: pa.Array) -> pa.Array:
    """Per row, the sum of its ``counts[row]`` consecutive entries of ``entry_sizes``."""
    running = pa.concat_arrays(
        [pa.array([0], pa.int64()), pc.cast(pc.cumulative_sum(entry_sizes), pa.int64())]
    )
    ends = pc.cumulative_sum(counts)
    starts = pc.subtract(ends, counts)
    return pc.subtract(pc.take(running, ends), pc.take(running, starts))


def _header_faults(headers: pa.Array) -> Iterator[RowRejection]:
    entries = headers.flatten()
    if len(entries) == 0:
        return
    keys = pc.struct_field(entries, "key")
    values = pc.struct_field(entries, "value")
    bad_utf8 = _not_utf8(keys)
    faulty = pc.or_(
        pc.or_(pc.is_null(entries), pc.is_null(keys)),
        pc.is_null(values),
    )
    candidates = set(pc.indices_nonzero(faulty).to_pylist()) | set(bad_utf8)
    if not candidates:
        return
    parents = pc.list_parent_indices(headers)
    counts = pc.cast(pc.fill_null(pc.list_value_length(headers), 0), pa.int64())
    firsts = pc.subtract(pc.cumulative_sum(counts), counts)
    for entry in sorted(candidates):
        row = parents[entry].as_py()
        position = entry - firsts[row].as_py() + 1
        if not entries[entry].is_valid:
            why = f"header {position} is null (an entry of the headers array)"
        elif not keys[entry].is_valid:
            why = f"header {position} has a null key"
        elif entry in bad_utf8:
            raw = _binary(keys.slice(entry, 1))[0].as_py()
            shown = raw[:32].hex(" ") + (" ..." if len(raw) > 32 else "")
            why = (
                f"header {position} has a key that is not UTF-8 (bytes {shown}): a Kafka "
                "header key is text"
            )
        else:
            why = (
                f"header {keys[entry].as_py()!r} has a null value, which kafka-python's "
                "producer cannot send (an empty value would not be the row's)"
            )
        yield RowRejection(row, "headers", why)


def _not_utf8(keys: pa.Array) -> set[int]:
    """Positions of ``keys`` (string) whose bytes are not UTF-8 (Arrow does not check what
    Spark hands over)."""
    try:
        keys.validate(full=True)
    except pa.ArrowInvalid:
        pass
    else:
        return set()
    out: set[int] = set()
    for i, raw in enumerate(_binary(keys).to_pylist()):
        if raw is None:
            continue
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            out.add(i)
    return out


def _partition_faults(partitions: pa.Array, limits: RowLimits) -> Iterator[RowRejection]:
    bad = pc.less(partitions, 0)
    if limits.partitions is not None:
        bad = pc.or_(bad, pc.greater_equal(partitions, limits.partitions))
    for row in pc.indices_nonzero(pc.fill_null(bad, False)).to_pylist():
        value = partitions[row].as_py()
        if value < 0:
            why = f"partition {value}: partitions are numbered from 0"
        else:
            n = limits.partitions
            why = (
                f"partition {value} is not in the output topic: {limits.topic!r} has {n} "
                f"partition{'' if n == 1 else 's'} (0-{(n or 1) - 1}) as the micro-batch was "
                "planned"
            )
        yield RowRejection(row, "partition", why)


# --- the messages ----------------------------------------------------------------------------

Message = tuple[bytes | None, bytes | None, list[tuple[str, bytes]], int | None]
"""``(value, key, headers, partition)``; a null value stays None."""

_HEADERS_AS_BYTES = pa.large_list(
    pa.struct([("key", pa.large_binary()), ("value", pa.large_binary())])
)


def messages(table: pa.Table) -> Iterator[Message]:
    """``(value, key, headers, partition)`` per row, as the module docstring says: bytes as
    the columns hold them, nulls kept. A row :func:`validate_rows` rejects for its headers
    raises :class:`ConfigError` here rather than be sent otherwise than it is."""
    _require_value(table)
    names = table.column_names
    n = table.num_rows
    values = _binary(table.column("value")).to_pylist()
    keys = _binary(table.column("key")).to_pylist() if "key" in names else [None] * n
    headers = (
        table.column("headers").combine_chunks().cast(_HEADERS_AS_BYTES).to_pylist()
        if "headers" in names
        else [None] * n
    )
    parts = table.column("partition").to_pylist() if "partition" in names else [None] * n
    for value, key, hdrs, partition in zip(values, keys, headers, parts, strict=True):
        yield value, key, [_header(h) for h in hdrs or []], partition


def _header(entry: dict[str, bytes | None] | None) -> tuple[str, bytes]:
    key = None if entry is None else entry["key"]
    value = None if entry is None else entry["value"]
    try:
        text = None if key is None else key.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is None or value is None:
        raise ConfigError(
            "headers",
            repr(entry),
            "headers with a UTF-8 key and a value that is not null (validation rejects the "
            "row otherwise)",
            where="barrier",
        )
    return text, value
