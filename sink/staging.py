"""Where write tasks stage Parquet parts until the barrier delivers them.

* :class:`StoreStaging` - in the state store under
  ``<pipeline>/staging/<queryId>/<batchId>/`` (``PipelineLayout.staging``); used by the
  kafka and http consumers, whose delivery reads the parts on the driver.
* :class:`FileStaging` / :class:`S3Staging` - under the consumer's own hidden prefix
  ``<consumer.path>/_staging/<queryId>/<batchId>/``, so that delivery only *promotes* a
  part (a rename, a server-side copy): no item bytes pass through the driver.

A part's name carries the Spark partition, the task attempt id and the driver run id
(``p00003-t17-r<runId>.parquet``): attempts never overwrite each other, and cleanup can
tell the parts of this run from those of another driver. A task's *dead-letter part*, the
rows the consumer's target refuses (:mod:`sink.dead_letters`), sits beside its part as
``dl-p00003-t17-r<runId>.parquet``, so cleanup treats it as the run's like any part.
"""

from __future__ import annotations

import contextlib
import os
import re
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable

import pyarrow as pa
import pyarrow.parquet as pq

from state.layout import PipelineLayout
from state.stores import StateStore

HIDDEN_STAGING = "_staging"
UNKNOWN_RUN = "unknown"
"""The run id in the names of parts staged by a task that saw no run id."""
DEAD_LETTER_PART_PREFIX = "dl-"
_PART = re.compile(r"p(\d+)-t(\d+)-r([A-Za-z0-9-]+)\.parquet\Z")


def part_name(partition: int, task_attempt: int, run_id: str | None) -> str:
    return f"p{partition:05d}-t{task_attempt}-r{run_id or UNKNOWN_RUN}.parquet"


def dead_letter_part_name(partition: int, task_attempt: int, run_id: str | None) -> str:
    """The name of a task's dead-letter part: its part's name behind ``dl-``."""
    return DEAD_LETTER_PART_PREFIX + part_name(partition, task_attempt, run_id)


WITHOUT_DEAD_LETTERS_PREFIX = "kept-"


def without_dead_letters_location(location: str) -> str:
    """Where a part is written again without rows a bundle's dead-letter file holds: beside
    it, its name behind ``kept-`` (the same run id, so cleanup treats it as the part)."""
    head, _, name = location.rpartition("/")
    return (
        f"{head}/{WITHOUT_DEAD_LETTERS_PREFIX}{name}"
        if head
        else WITHOUT_DEAD_LETTERS_PREFIX + name
    )


def part_run_id(location: str) -> str | None:
    """The run id encoded in a part's name (None if it is not a part)."""
    m = _PART.search(location)
    return m.group(3) if m else None


def parquet_bytes(table: pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink)
    return bytes(sink.getvalue().to_pybytes())


class Staging(ABC):
    """Staged parts of the batches of one pipeline: write, read, list, delete."""

    @property
    @abstractmethod
    def root_prefix(self) -> str:
        """The prefix under which every staged part lives (ends with ``/``)."""

    def batch_prefix(self, query_id: str, batch_id: int) -> str:
        """The prefix under which the batch's parts live (ends with ``/``)."""
        return f"{self.root_prefix}{query_id}/{batch_id:012d}/"

    def part_location(
        self, query_id: str, batch_id: int, partition: int, task_attempt: int, run_id: str | None
    ) -> str:
        return self.batch_prefix(query_id, batch_id) + part_name(partition, task_attempt, run_id)

    @abstractmethod
    def write_part(self, location: str, table: pa.Table) -> int:
        """Write ``table`` as a Parquet part at ``location``; its size in bytes."""

    def write_dead_letter_part(self, location: str, table: pa.Table) -> int:
        """Write a task's refused rows (as they were, with the columns
        :func:`sink.dead_letters.dead_letter_format.rejected_rows` adds) at ``location``; its
        size. Never delivered: only read back for the dead-letter file. By default as a
        part."""
        return self.write_part(location, table)

    @abstractmethod
    def read_part(self, location: str) -> pa.Table: ...

    @abstractmethod
    def list(self, prefix: str) -> list[str]: ...

    @abstractmethod
    def delete(self, location: str) -> None:
        """Remove a part; absent parts are not an error."""

    def delete_many(self, locations: Iterable[str]) -> None:
        """Remove parts (absent ones are not an error); batched where the store can."""
        for location in locations:
            self.delete(location)

    def missing(self, locations: Iterable[str]) -> tuple[str, ...]:
        """Those of ``locations`` that are not staged (any more), in the given order."""
        wanted = tuple(locations)
        present: set[str] = set()
        for prefix in sorted({loc[: loc.rfind("/") + 1] for loc in wanted}):
            present.update(self.list(prefix))
        return tuple(loc for loc in wanted if loc not in present)

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release the clients this staging area opened itself."""


class StoreStaging(Staging):
    """Parts as values of a :class:`~state.stores.state_store.StateStore`.

    With a ``layout``, under the pipeline's ``staging/`` keys of the state store; without,
    under ``_staging/`` of the store's root (the s3 consumer's prefix).
    """

    def __init__(self, store: StateStore, layout: PipelineLayout | None = None) -> None:
        self.store = store
        self.layout = layout

    @property
    def root_prefix(self) -> str:
        return f"{HIDDEN_STAGING}/" if self.layout is None else self.layout.staging_prefix

    def batch_prefix(self, query_id: str, batch_id: int) -> str:
        if self.layout is None:
            return super().batch_prefix(query_id, batch_id)
        return self.layout.staging(query_id, batch_id)

    def write_part(self, location: str, table: pa.Table) -> int:
        data = parquet_bytes(table)
        self.store.put(location, data)
        return len(data)

    def read_part(self, location: str) -> pa.Table:
        return pq.read_table(pa.BufferReader(self.store.get(location).data))

    def list(self, prefix: str) -> list[str]:
        return self.store.list(prefix)

    def delete(self, location: str) -> None:
        self.store.delete(location)

    def delete_many(self, locations: Iterable[str]) -> None:
        self.store.delete_many(locations)


class FileStaging(Staging):
    """Parts under ``<root>/_staging/`` of the file consumer's directory."""

    def __init__(self, root: str) -> None:
        self.root = root

    @property
    def root_prefix(self) -> str:
        return f"{HIDDEN_STAGING}/"

    def path(self, location: str) -> str:
        return os.path.join(self.root, location)

    def write_part(self, location: str, table: pa.Table) -> int:
        final = self.path(location)
        directory = os.path.dirname(final)
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(directory, f".tmp-{uuid.uuid4().hex}")
        try:
            with open(tmp, "wb") as f:
                pq.write_table(table, f)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, final)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return os.path.getsize(final)

    def read_part(self, location: str) -> pa.Table:
        return pq.read_table(self.path(location))

    def list(self, prefix: str) -> list[str]:
        base = self.path(prefix)
        directory = base if prefix.endswith("/") else os.path.dirname(base)
        out: list[str] = []
        for dirpath, _dirs, files in os.walk(directory):
            for name in files:
                if name.startswith("."):
                    continue
                rel = os.path.relpath(os.path.join(dirpath, name), self.root)
                if rel.startswith(prefix):
                    out.append(rel)
        return sorted(out)

    def delete(self, location: str) -> None:
        path = self.path(location)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
        # drop the batch's and the query's directories once they are empty
        staging_root = os.path.join(self.root, HIDDEN_STAGING)
        directory = os.path.dirname(path)
        while directory.startswith(staging_root + os.sep):
            try:
                os.rmdir(directory)
            except OSError:
                break
            directory = os.path.dirname(directory)
