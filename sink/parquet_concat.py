"""Combine a bundle's staged Parquet parts into the one file a consumer shows.

A Parquet file is ``PAR1 | column chunks (+ page indexes, bloom filters) | footer |
footer length | PAR1``, and the footer (a Thrift compact-protocol ``FileMetaData``)
locates every column chunk by its absolute byte offset. Parts written from the same
schema can therefore be *stitched* without decoding a single page: the output is the
bodies of the parts one after the other, and a new footer whose row groups are those of
all parts with their offsets shifted by where each body landed. Only the footers pass
through this process; the bodies are copied by the kernel (``copy_file_range``) for the
file consumer and server-side (``UploadPartCopy``) for the s3 consumer.

Parts that cannot be stitched (different schemas, overlapping ``gt`` ranges that need a
merge sort) are combined by reading and writing them with pyarrow instead.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from sink.bundle import Bundle
from sink.gt_column import sort_by_gt

MAGIC = b"PAR1"
TAIL = 8  # footer length (int32 LE) + magic

# Thrift compact protocol type ids.
T_TRUE, T_FALSE, T_BYTE, T_I16, T_I32, T_I64, T_DOUBLE, T_BINARY = 1, 2, 3, 4, 5, 6, 7, 8
T_LIST, T_SET, T_MAP, T_STRUCT = 9, 10, 11, 12

# Field ids of parquet.thrift that hold absolute file offsets.
FMD_NUM_ROWS, FMD_ROW_GROUPS = 3, 4
RG_COLUMNS, RG_FILE_OFFSET, RG_ORDINAL = 1, 5, 7
CC_FILE_OFFSET, CC_META, CC_OFFSET_INDEX, CC_COLUMN_INDEX = 2, 3, 4, 6
CMD_OFFSETS = (9, 10, 11, 14)  # data page, index page, dictionary page, bloom filter


class NotStitchable(ValueError):
    """The parts cannot be combined at the byte level (combine them by decoding instead)."""


# --- a minimal, lossless Thrift compact protocol codec ----------------------------------
# A struct decodes to a list of [field_id, type, value]; lists to (elem_type, [values]);
# maps to (key_type, value_type, [(k, v)]). Encoding the tree gives back the same bytes.

Field = list[Any]


class _Decoder:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def byte(self) -> int:
        b = self.data[self.pos]
        self.pos += 1
        return b

    def varint(self) -> int:
        shift = result = 0
        while True:
            b = self.byte()
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                return result
            shift += 7

    def zigzag(self) -> int:
        n = self.varint()
        return (n >> 1) ^ -(n & 1)

    def value(self, t: int) -> Any:  # noqa: PLR0911 - one return per Thrift compact type
        if t in (T_TRUE, T_FALSE):  # inside containers: one byte, 1 = true
            return self.byte() == T_TRUE
        if t == T_BYTE:
            return self.byte()
        if t in (T_I16, T_I32, T_I64):
            return self.zigzag()
        if t == T_DOUBLE:
            (v,) = struct.unpack_from("<d", self.data, self.pos)
            self.pos += 8
            return v
        if t == T_BINARY:
            n = self.varint()
            v = self.data[self.pos : self.pos + n]
            self.pos += n
            return bytes(v)
        if t in (T_LIST, T_SET):
            header = self.byte()
            size, elem = header >> 4, header & 0x0F
            if size == 15:
                size = self.varint()
            return (elem, [self.value(elem) for _ in range(size)])
        if t == T_MAP:
            size = self.varint()
            if size == 0:
                return (0, 0, [])
            kv = self.byte()
            kt, vt = kv >> 4, kv & 0x0F
            return (kt, vt, [(self.value(kt), self.value(vt)) for _ in range(size)])
        if t == T_STRUCT:
            return self.struct()
        raise NotStitchable(f"unknown thrift compact type {t}")

    def struct(self) -> list[Field]:
        fields: list[Field] = []
        last = 0
        while True:
            header = self.byte()
            if header == 0:
                return fields
            delta, t = header >> 4, header & 0x0F
            fid = last + delta if delta else self.zigzag()
            if t in (T_TRUE, T_FALSE):
                value: Any = t == T_TRUE
            else:
                value = self.value(t)
            fields.append([fid, t, value])
            last = fid


class _Encoder:
    def __init__(self) -> None:
        self.out = bytearray()

    def varint(self, n: int) -> None:
        while True:
            if n < 0x80:
                self.out.append(n)
                return
            self.out.append((n & 0x7F) | 0x80)
            n >>= 7

    def zigzag(self, n: int) -> None:
        self.varint((n << 1) ^ (n >> 63))

    def value(self, t: int, v: Any) -> None:  # noqa: PLR0912 - one branch per Thrift compact type
        if t in (T_TRUE, T_FALSE):
            self.out.append(T_TRUE if v else T_FALSE)
        elif t == T_BYTE:
            self.out.append(v & 0xFF)
        elif t in (T_I16, T_I32, T_I64):
            self.zigzag(v)
        elif t == T_DOUBLE:
            self.out += struct.pack("<d", v)
        elif t == T_BINARY:
            self.varint(len(v))
            self.out += v
        elif t in (T_LIST, T_SET):
            elem, items = v
            if len(items) < 15:
                self.out.append((len(items) << 4) | elem)
            else:
                self.out.append(0xF0 | elem)
                self.varint(len(items))
            for item in items:
                self.value(elem, item)
        elif t == T_MAP:
            kt, vt, items = v
            self.varint(len(items))
            if items:
                self.out.append((kt << 4) | vt)
                for k, val in items:
                    self.value(kt, k)
                    self.value(vt, val)
        elif t == T_STRUCT:
            self.struct(v)
        else:
            raise NotStitchable(f"unknown thrift compact type {t}")

    def struct(self, fields: list[Field]) -> None:
        last = 0
        for fid, t, v in fields:
            delta = fid - last
            wire_t = (T_TRUE if v else T_FALSE) if t in (T_TRUE, T_FALSE) else t
            if 0 < delta <= 15:
                self.out.append((delta << 4) | wire_t)
            else:
                self.out.append(wire_t)
                self.zigzag(fid)
            if t not in (T_TRUE, T_FALSE):
                self.value(t, v)
            last = fid
        self.out.append(0)


def decode_struct(data: bytes) -> list[Field]:
    return _Decoder(data).struct()


def encode_struct(fields: list[Field]) -> bytes:
    enc = _Encoder()
    enc.struct(fields)
    return bytes(enc.out)


# --- footers ------------------------------------------------------------------------------


@dataclass(frozen=True)
class PartLayout:
    """Where a Parquet part's body and footer are, and its decoded footer."""

    size: int
    body_end: int  # = footer start
    footer: bytes

    @property
    def body_len(self) -> int:
        return self.body_end - len(MAGIC)


def parse_tail(size: int, tail: bytes) -> int:
    """The footer length from the file's last 8 bytes."""
    if len(tail) != TAIL or tail[4:] != MAGIC:
        raise NotStitchable("not a Parquet file (no PAR1 at the end)")
    (length,) = struct.unpack("<i", tail[:4])
    if length <= 0 or length + TAIL + len(MAGIC) > size:
        raise NotStitchable(f"bad Parquet footer length {length}")
    return int(length)


def layout_of(data: bytes) -> PartLayout:
    """The layout of a Parquet file held in memory."""
    size = len(data)
    length = parse_tail(size, data[size - TAIL :])
    return PartLayout(size, size - TAIL - length, data[size - TAIL - length : size - TAIL])


def stitch_bytes(parts: Sequence[bytes]) -> bytes:
    """The parts (whole Parquet files in memory) stitched into one: their bodies one after
    the other behind a new footer, no page decoded (:class:`NotStitchable` if they differ
    in schema or metadata)."""
    layouts = [layout_of(data) for data in parts]
    footer = stitched_footer(layouts)
    bodies = [data[len(MAGIC) : lay.body_end] for data, lay in zip(parts, layouts, strict=True)]
    return b"".join([MAGIC, *bodies, footer])


def read_layout(path: str) -> PartLayout:
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        f.seek(size - TAIL)
        length = parse_tail(size, f.read(TAIL))
        f.seek(size - TAIL - length)
        footer = f.read(length)
    return PartLayout(size, size - TAIL - length, footer)


def _get(fields: list[Field], fid: int) -> Field | None:
    for f in fields:
        if f[0] == fid:
            return f
    return None


def _shift(fields: list[Field], fids: Sequence[int], delta: int) -> None:
    for f in fields:
        if f[0] in fids:
            f[2] += delta


def stitched_footer(parts: Sequence[PartLayout]) -> bytes:
    """The footer of the parts' bodies laid one after the other behind ``PAR1``.

    Raises :class:`NotStitchable` if the parts do not share schema and metadata.
    """
    metas = [decode_struct(p.footer) for p in parts]
    first = metas[0]
    shared = [f for f in first if f[0] not in (FMD_NUM_ROWS, FMD_ROW_GROUPS)]
    for meta in metas[1:]:
        if [f for f in meta if f[0] not in (FMD_NUM_ROWS, FMD_ROW_GROUPS)] != shared:
            raise NotStitchable("the parts' schemas or file metadata differ")
    row_groups: list[Any] = []
    num_rows = 0
    position = len(MAGIC)
    for part, meta in zip(parts, metas, strict=True):
        delta = position - len(MAGIC)
        num_rows_field = _get(meta, FMD_NUM_ROWS)
        num_rows += num_rows_field[2] if num_rows_field else 0
        groups = _get(meta, FMD_ROW_GROUPS)
        for rg in groups[2][1] if groups else []:
            _shift(rg, (RG_FILE_OFFSET,), delta)
            columns = _get(rg, RG_COLUMNS)
            for cc in columns[2][1] if columns else []:
                _shift(cc, (CC_FILE_OFFSET, CC_OFFSET_INDEX, CC_COLUMN_INDEX), delta)
                cmd = _get(cc, CC_META)
                if cmd is not None:
                    _shift(cmd[2], CMD_OFFSETS, delta)
            ordinal = _get(rg, RG_ORDINAL)
            if ordinal is not None:
                ordinal[2] = len(row_groups)
            row_groups.append(rg)
        position += part.body_len
    out = [list(f) for f in first]
    for f in out:
        if f[0] == FMD_NUM_ROWS:
            f[2] = num_rows
        elif f[0] == FMD_ROW_GROUPS:
            f[2] = (T_STRUCT, row_groups)
    footer = encode_struct(out)
    return footer + struct.pack("<i", len(footer)) + MAGIC


# --- the file consumer's combine ------------------------------------------------------------


def _copy_range(src: int, dst: int, offset: int, count: int, out_pos: int) -> None:
    """Copy ``count`` bytes inside the kernel (``copy_file_range``), else by read/write."""
    done = 0
    try:
        while done < count:
            n = os.copy_file_range(src, dst, count - done, offset + done, out_pos + done)
            if n == 0:
                raise OSError("copy_file_range copied nothing")
            done += n
        return
    except OSError:
        pass  # another file system, an old kernel: plain copy of what is left
    os.lseek(src, offset + done, os.SEEK_SET)
    os.lseek(dst, out_pos + done, os.SEEK_SET)
    while done < count:
        chunk = os.read(src, min(8 << 20, count - done))
        if not chunk:
            raise OSError("unexpected end of a staged part")
        os.write(dst, chunk)
        done += len(chunk)


def stitch_files(paths: Sequence[str], out_path: str) -> int:
    """Stitch Parquet files into ``out_path``; the bytes that went through this process."""
    layouts = [read_layout(p) for p in paths]
    footer = stitched_footer(layouts)
    fd = os.open(out_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        os.write(fd, MAGIC)
        position = len(MAGIC)
        for path, layout in zip(paths, layouts, strict=True):
            src = os.open(path, os.O_RDONLY)
            try:
                _copy_range(src, fd, len(MAGIC), layout.body_len, position)
            finally:
                os.close(src)
            position += layout.body_len
        os.lseek(fd, position, os.SEEK_SET)
        os.write(fd, footer)
        os.fsync(fd)
    finally:
        os.close(fd)
    return len(footer) + sum(len(layout.footer) for layout in layouts)


def merge_tables(bundle: Bundle, tables: Sequence[pa.Table]) -> pa.Table:
    table = pa.concat_tables(tables)
    return sort_by_gt(table) if bundle.has_gt and not bundle.ordered else table


def concat_parts_to_file(bundle: Bundle, paths: Sequence[str], out_path: str) -> int:
    """One Parquet file of the parts in delivery order; the item bytes read by this process.

    Ordered parts of one schema are stitched (only footers, no item bytes, pass through
    this process: 0); otherwise they are decoded, merged in ``gt`` order and written again.
    """
    if bundle.ordered:
        try:
            stitch_files(paths, out_path)
            return 0
        except NotStitchable:
            pass
    table = merge_tables(bundle, [pq.read_table(p) for p in paths])
    with open(out_path, "wb") as out:
        pq.write_table(table, out)
        out.flush()
        os.fsync(out.fileno())
    return sum(os.path.getsize(p) for p in paths)
