"""Spark's offset log, read for one purpose: which gtkafka epoch a micro-batch read.

With ``readMode=driver`` no read task writes a batch's record, so the barrier learns the
batch's epoch from the write-ahead log Spark keeps in the query's checkpoint,
``<checkpointLocation>/offsets/<batchId>``: written before the batch runs, never changed
after. Its lines are ``v1``, a metadata JSON line, then one line per source of the query:
the source's end offset for the batch as JSON (``-`` for a source with none yet). A
gtkafka line is a :class:`~state.records.source_offset.SourceOffset` whose epoch is the one
*after* the batch's (an epoch's end is ``SourceOffset(start.epoch + 1, ...)``).

The parts here are pure (:func:`parse_offset_log`, :func:`decide_batch_epoch`,
:func:`checkpoint_directory`) apart from :func:`read_offset_log` and
:class:`CheckpointOffsetLog`, which read local files.

Identification needs no change of gtkafka's offset format (Spark compares offsets as JSON
text, so a new field would change every offset already checkpointed): a line is
this pipeline's when the pipeline's epoch log records exactly that offset as the end of
the epoch before it; two such lines naming different epochs are refused as ambiguous.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol
from urllib.parse import unquote, urlsplit

from state.errors import (
    ConfigError,
    GtBarrierError,
    MalformedOffset,
    MalformedRecord,
    OffsetLogMismatch,
)
from state.records.source_offset import SourceOffset

#: The sink option Spark passes the query's ``checkpointLocation`` under (lower-cased).
CHECKPOINT_OPTION = "checkpointLocation"

_VERSION_PREFIX = "v"


@dataclass(frozen=True)
class OffsetLogEntry:
    """One batch's entry of the offset log: each source's offset as parsed JSON (None for
    a source without one), in the query's source order."""

    batch_id: int
    sources: tuple[object, ...]

    def gtkafka_offsets(self) -> tuple[SourceOffset, ...]:
        """The sources' offsets that are gtkafka offsets (others are another source's)."""
        found = []
        for raw in self.sources:
            try:
                found.append(SourceOffset.from_json(raw))
            except MalformedOffset:
                continue
        return tuple(found)


def parse_offset_log(text: str, batch_id: int, where: str) -> OffsetLogEntry:
    """The entry of batch ``batch_id`` from its file's text; :class:`MalformedRecord`
    naming ``where`` if the text is not an offset log entry."""
    lines = text.split("\n")
    if len(lines) < 2 or not lines[0].startswith(_VERSION_PREFIX):
        raise MalformedRecord(f"{where}: not a Spark offset log entry (no version line)")
    sources: list[object] = []
    for line in lines[2:]:
        if not line.strip():
            continue
        if line.strip() == "-":
            sources.append(None)
            continue
        try:
            sources.append(json.loads(line))
        except ValueError as err:
            raise MalformedRecord(f"{where}: a source's offset is not JSON: {err}") from None
    return OffsetLogEntry(batch_id, tuple(sources))


def checkpoint_directory(location: str | None) -> Path:
    """The local directory of the query's checkpoint named by the sink's
    ``checkpointLocation`` option: a plain path or a ``file:`` URI.

    :class:`ConfigError` naming the option if it is missing or of another scheme (shown
    without any user name or password it may carry)."""
    expected = (
        "a path the driver can read (a local path or file: URI): with readMode=driver the "
        "barrier learns a batch's epoch from Spark's offset log there; set writeStream "
        "option checkpointLocation to such a path, or read with readMode=executors"
    )
    if location is None or not location.strip():
        raise ConfigError(CHECKPOINT_OPTION, None, expected, where="barrier")
    parts = urlsplit(location)
    if parts.scheme == "":
        return Path(location)
    if parts.scheme == "file":
        return Path(unquote(parts.path))
    shown = parts._replace(netloc=parts.hostname or "").geturl()
    raise ConfigError(CHECKPOINT_OPTION, shown, expected, where="barrier")


def offset_log_file(directory: Path, batch_id: int) -> Path:
    """Where Spark writes batch ``batch_id``'s offsets."""
    return directory / "offsets" / str(batch_id)


def read_offset_log(directory: Path, batch_id: int) -> OffsetLogEntry | None:
    """Batch ``batch_id``'s entry in the checkpoint at ``directory``; None if it has none."""
    path = offset_log_file(directory, batch_id)
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    return parse_offset_log(text, batch_id, str(path))


class OffsetLog(Protocol):
    """A query's offset log as the barrier reads it (the checkpoint's files; the
    protocol's simulator gives its simulated checkpoint)."""

    def entry(self, batch_id: int) -> OffsetLogEntry | None:
        """Batch ``batch_id``'s entry; None if the log has none."""
        ...

    def where(self, batch_id: int) -> str:
        """Batch ``batch_id``'s entry, named in errors."""
        ...

    def missing(self, batch_id: int) -> GtBarrierError:
        """The error for a batch being committed that the log does not hold."""
        ...


class CheckpointOffsetLog:
    """The offset log under the sink's ``checkpointLocation`` (:func:`checkpoint_directory`:
    a :class:`ConfigError` naming the option if it is missing or not local)."""

    def __init__(self, location: str | None) -> None:
        self.location = location
        self.directory = checkpoint_directory(location)

    def entry(self, batch_id: int) -> OffsetLogEntry | None:
        return read_offset_log(self.directory, batch_id)

    def where(self, batch_id: int) -> str:
        return str(offset_log_file(self.directory, batch_id))

    def missing(self, batch_id: int) -> GtBarrierError:
        # Spark writes the entry before the batch runs: this process does not see the
        # query's checkpoint there (a relative path, or another machine's disk).
        return ConfigError(
            CHECKPOINT_OPTION,
            self.location,
            f"the query's checkpoint as this process sees it, which holds Spark's offset "
            f"log entry of batch {batch_id} ({self.where(batch_id)} is missing): an "
            "absolute path on the driver's disk, or read with readMode=executors",
            where="barrier",
        )


def _refuse_shared_partitions(logged: Sequence[SourceOffset], where: str) -> None:
    distinct: list[SourceOffset] = []
    for offset in logged:
        if not any(offset.same_as(d) for d in distinct):
            distinct.append(offset)
    seen: set[tuple[str, int]] = set()
    for offset in distinct:
        shared = seen & set(offset.offsets)
        if shared:
            topic, partition = min(shared)
            raise OffsetLogMismatch(
                f"{where}: two gtkafka sources of this query read {topic}[{partition}]: "
                "with readMode=driver the barrier learns a batch's epoch from Spark's "
                "offset log, which cannot tell their offsets apart; read them with "
                "readMode=executors"
            )
        seen |= set(offset.offsets)


def decide_batch_epoch(
    logged: Sequence[SourceOffset],
    previous: Sequence[SourceOffset] | None,
    recorded_ends: Mapping[int, SourceOffset | None],
    *,
    where: str,
) -> int | None:
    """The epoch a batch read, from its gtkafka offsets in the offset log (``logged``),
    the previous batch's (``previous``; None if there is none) and the epoch log's
    recorded end of each epoch ``o.epoch - 1`` for ``o`` in ``logged``
    (``recorded_ends``; None where not recorded). Pure.

    * an offset that the previous batch logged too did not advance: that source read
      nothing in this batch;
    * an advanced offset equal to the recorded end of the epoch before it is this
      pipeline's: the batch read that epoch;
    * none matches: None (a no-data batch, or a query without this pipeline's source);
      except that when exactly one gtkafka offset advanced and it does not match,
      :class:`OffsetLogMismatch` (the checkpoint is another pipeline's, or the epoch log
      was reset);
    * several match with different epochs: :class:`OffsetLogMismatch` (ambiguous);
    * an epoch found while two different offsets name one topic-partition:
      :class:`OffsetLogMismatch`. Offsets carry no pipeline, so two sources on one
      partition can pass through the same offsets: a source that lags may log, while
      this pipeline reads nothing, the end this pipeline recorded for an older epoch.
      (Identical offsets are one: a query that reads one pipeline's source several
      times logs it once per read.)
    """
    before = [] if previous is None else list(previous)
    advanced = [o for o in logged if o.epoch > 0 and not any(o.same_as(p) for p in before)]
    matching = {
        o.epoch - 1
        for o in advanced
        if (end := recorded_ends.get(o.epoch - 1)) is not None and end.same_as(o)
    }
    if matching:
        _refuse_shared_partitions(logged, where)
    if len(matching) == 1:
        return matching.pop()
    if len(matching) > 1:
        raise OffsetLogMismatch(
            f"{where}: several gtkafka offsets of this batch match this pipeline's epoch log "
            f"(epochs {sorted(matching)}): give each gtkafka source of a query its own "
            "pipeline.id"
        )
    if len(advanced) == 1:
        offset = advanced[0]
        end = recorded_ends.get(offset.epoch - 1)
        recorded = "no end" if end is None else f"the end {end}"
        raise OffsetLogMismatch(
            f"{where}: Spark's offset log says this batch read up to {offset}, but this "
            f"pipeline's epoch log records {recorded} for epoch {offset.epoch - 1}: the "
            "checkpointLocation belongs to another pipeline or state.uri, or the epoch log "
            "was reset; start the query on a new checkpointLocation"
        )
    return None
