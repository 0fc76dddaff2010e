"""``consumer=delta`` (``mode=append``): parts staged under the table, promoted to data files.

Under the table's uri (``file://`` or ``s3://``, through delta-rs's own object store with
the consumer's storage options, so write tasks and the driver reach the table exactly as
delta-rs does)::

    _gtbarrier/<pipeline>/staging/<queryId>/<batchId>/p00003-t17-r<runId>.parquet
        parts written by the write tasks (executors)
    gtbarrier/<pipeline>/<epoch>-p00003-t17-r<runId>.parquet
        the data files of bundle <epoch>: a staged part moved here by the driver
        (a rename on a file system, a server-side copy on S3), then added to the table

The staging directory starts with ``_``: Delta's ``VACUUM`` leaves such directories alone,
so it never deletes a part still in flight; the data files are outside it, where a full
``VACUUM`` (delta-rs: ``vacuum(full=True)``) removes those that no version references once
they are older than its retention.

A data file's name is its part's name behind the bundle's epoch: unique per write
attempt, so a retried delivery (or the redelivery after a crash between the move and the
commit) finds the file its failed attempt moved and commits that very file, and no data
file of one attempt ever overwrites another's. The barrier's staging cleanup deletes
only under the staging prefix, never a data file.

A part holds the sink's input columns as the write task received them (Arrow types the
start check compared with the table's, one by one); Delta readers find a file's columns
by name, and read a nullable table column the file lacks as null.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from sink.consumers.delta.delta_options import DeltaSettings
from sink.consumers.delta.delta_stats import delta_stats
from sink.consumers.delta.delta_table import storage_options
from sink.staging import Staging

HIDDEN = "_gtbarrier"
DATA_DIR = "gtbarrier"


def data_file_location(pipeline_id: str, epoch: int, part_location: str) -> str:
    """Where (relative to the table) the data file of a staged part goes."""
    return f"{data_prefix(pipeline_id)}{epoch:012d}-{part_location.rsplit('/', 1)[-1]}"


def data_prefix(pipeline_id: str) -> str:
    return f"{DATA_DIR}/{pipeline_id}/"


@dataclass(frozen=True)
class DataFile:
    """A data file under the table, described from its footer for an ``add`` action."""

    location: str
    """Relative to the table (the ``add`` action's path)."""
    size: int
    modification_time: int
    """Milliseconds since the epoch."""
    stats: str
    """:func:`~sink.consumers.delta.delta_stats.delta_stats` of its footer."""


class DeltaStaging(Staging):
    """Parts and data files under one Delta table, through delta-rs's object store."""

    def __init__(self, settings: DeltaSettings, pipeline_id: str) -> None:
        from deltalake.fs import DeltaStorageHandler

        self.uri = settings.uri
        self.pipeline_id = pipeline_id
        self.fs = pafs.PyFileSystem(DeltaStorageHandler(self.uri, storage_options(settings)))
        self.local_root = self.uri[len("file://") :] if self.uri.startswith("file://") else None

    @property
    def root_prefix(self) -> str:
        return f"{HIDDEN}/{self.pipeline_id}/staging/"

    def write_part(self, location: str, table: pa.Table) -> int:
        with self.fs.open_output_stream(location) as out:
            pq.write_table(table, out)
        return int(self.fs.get_file_info(location).size)

    def read_part(self, location: str) -> pa.Table:
        with self.fs.open_input_file(location) as f:
            return pq.read_table(f)

    def list(self, prefix: str) -> list[str]:
        directory = prefix if prefix.endswith("/") else prefix.rsplit("/", 1)[0] + "/"
        selector = pafs.FileSelector(directory.rstrip("/"), recursive=True, allow_not_found=True)
        out = []
        for info in self.fs.get_file_info(selector):
            hidden = info.path.rsplit("/", 1)[-1].startswith(".")
            if info.type == pafs.FileType.File and info.path.startswith(prefix) and not hidden:
                out.append(info.path)
        return sorted(out)

    def exists(self, location: str) -> bool:
        return bool(self.fs.get_file_info(location).type == pafs.FileType.File)

    def delete(self, location: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_file(location)
        self._drop_empty_dirs(location)

    def move(self, location: str, target: str) -> None:
        """Promote a staged part to ``target`` (a rename, or S3 copy + delete)."""
        self.fs.move(location, target)
        self._drop_empty_dirs(location)

    def data_file(self, location: str) -> DataFile:
        """``location``'s size, time and statistics, from its footer (never its rows)."""
        info = self.fs.get_file_info(location)
        with self.fs.open_input_file(location) as f:
            footer = pq.ParquetFile(f)
            stats = delta_stats(footer.metadata, footer.schema_arrow)
        mtime = info.mtime_ns // 1_000_000 if info.mtime_ns else int(time.time() * 1000)
        return DataFile(location, int(info.size), mtime, stats)

    def _drop_empty_dirs(self, location: str) -> None:
        """On a file system, remove the batch's and the query's staging directories once
        they are empty (an object store has none)."""
        if self.local_root is None:
            return
        root = os.path.join(self.local_root, self.root_prefix.rstrip("/"))
        directory = os.path.dirname(os.path.join(self.local_root, location))
        while directory.startswith(root + "/"):
            try:
                os.rmdir(directory)
            except OSError:
                break
            directory = os.path.dirname(directory)
