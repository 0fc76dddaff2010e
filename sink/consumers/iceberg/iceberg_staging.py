"""``consumer=iceberg``: parts staged in the table's own location, promoted to data files.

Under the table's location (``file://`` or ``s3://``, through pyiceberg's pyarrow FileIO
and the catalog's ``s3.*`` properties)::

    _gtbarrier/<pipeline>/staging/<queryId>/<batchId>/p00003-t17-r<runId>.parquet
        parts written by the write tasks (executors)
    data/gtbarrier/<pipeline>/<epoch>-p00003-t17-r<runId>.parquet
        the data files of bundle <epoch>: a staged part moved here by the driver
        (a rename on a file system, a server-side copy on S3), then added to the table

A data file's name is its part's name behind the bundle's epoch: unique per write
attempt, so a retried delivery finds the file its failed attempt moved (and moves
nothing twice), and no data file of one attempt ever overwrites another's.

A part is written as the table's data file must be: the columns the table requires are
marked required (the write task has refused the rows with a null there). A dead-letter
part keeps the input's columns as they were.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.parquet as pq
from pyarrow import fs as pafs

from sink.staging import Staging
from state.process_cache import ProcessCache

if TYPE_CHECKING:
    from sink.consumers.iceberg.iceberg_options import IcebergSettings

HIDDEN = "_gtbarrier"
DATA_DIR = "data/gtbarrier"


def data_file_location(pipeline_id: str, epoch: int, part_location: str) -> str:
    """Where (relative to the table location) the data file of a staged part goes."""
    return f"{data_prefix(pipeline_id)}{epoch:012d}-{part_location.rsplit('/', 1)[-1]}"


def data_prefix(pipeline_id: str) -> str:
    return f"{DATA_DIR}/{pipeline_id}/"


def epoch_of_data_file(location: str) -> int | None:
    """The bundle epoch in a data file's name (None if it is not one of ours)."""
    head = location.rsplit("/", 1)[-1].split("-", 1)[0]
    return int(head) if head.isdigit() else None


class IcebergStaging(Staging):
    """Parts and data files under one table location, through a pyarrow file system."""

    def __init__(
        self,
        location: str,
        io_properties: dict[str, str],
        pipeline_id: str,
        required: tuple[str, ...] = (),
    ) -> None:
        from pyiceberg.io.pyarrow import PyArrowFileIO

        self.location = location.rstrip("/")
        self.pipeline_id = pipeline_id
        self.required = required
        scheme, netloc, self.base_path = PyArrowFileIO.parse_location(self.location)
        self.fs: pafs.FileSystem = _file_system(
            tuple(sorted(io_properties.items())), scheme, netloc
        )
        self.local = isinstance(self.fs, pafs.LocalFileSystem)

    @property
    def root_prefix(self) -> str:
        return f"{HIDDEN}/{self.pipeline_id}/staging/"

    def uri(self, location: str) -> str:
        """The full URI (as Iceberg metadata records it) of a location under the table."""
        return f"{self.location}/{location}"

    def path(self, location: str) -> str:
        return f"{self.base_path}/{location}"

    def write_part(self, location: str, table: pa.Table) -> int:
        if self.required:
            from sink.consumers.iceberg.iceberg_table import with_required

            table = table.cast(with_required(table.schema, self.required))
        return self._write(location, table)

    def write_dead_letter_part(self, location: str, table: pa.Table) -> int:
        return self._write(location, table)

    def _write(self, location: str, table: pa.Table) -> int:
        path = self.path(location)
        if self.local:
            os.makedirs(os.path.dirname(path), exist_ok=True)
        with self.fs.open_output_stream(path) as out:
            pq.write_table(table, out)
        return int(self.fs.get_file_info(path).size)

    def read_part(self, location: str) -> pa.Table:
        return pq.read_table(self.path(location), filesystem=self.fs)

    def list(self, prefix: str) -> list[str]:
        directory = prefix if prefix.endswith("/") else prefix.rsplit("/", 1)[0] + "/"
        selector = pafs.FileSelector(
            self.path(directory.rstrip("/")), recursive=True, allow_not_found=True
        )
        base = len(self.base_path) + 1
        out = []
        for info in self.fs.get_file_info(selector):
            if info.type != pafs.FileType.File:
                continue
            rel = info.path[base:]
            if rel.startswith(prefix) and not rel.rsplit("/", 1)[-1].startswith("."):
                out.append(rel)
        return sorted(out)

    def exists(self, location: str) -> bool:
        return bool(self.fs.get_file_info(self.path(location)).type == pafs.FileType.File)

    def delete(self, location: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.fs.delete_file(self.path(location))
        if self.local:
            self._drop_empty_dirs(os.path.dirname(self.path(location)))

    def move(self, location: str, target: str) -> None:
        """Promote a staged part to ``target`` (a rename, or S3 copy + delete)."""
        dst = self.path(target)
        if self.local:
            os.makedirs(os.path.dirname(dst), exist_ok=True)
        self.fs.move(self.path(location), dst)
        if self.local:
            self._drop_empty_dirs(os.path.dirname(self.path(location)))

    def _drop_empty_dirs(self, directory: str) -> None:
        """Remove the batch's and the query's directories once they are empty."""
        root = self.path(self.root_prefix.rstrip("/"))
        while directory.startswith(root + "/"):
            try:
                os.rmdir(directory)
            except OSError:
                break
            directory = os.path.dirname(directory)


#: pyarrow file systems by (FileIO properties, scheme, netloc), per process.
_FILE_SYSTEMS: ProcessCache[tuple[tuple[tuple[str, str], ...], str, str], pafs.FileSystem] = (
    ProcessCache("iceberg file systems", capacity=8)
)


def _file_system(
    io_properties: tuple[tuple[str, str], ...], scheme: str, netloc: str
) -> pafs.FileSystem:
    """pyiceberg's pyarrow file system for the table's FileIO properties (one per process:
    a write task reuses its worker's S3 client; a forked worker makes its own)."""

    def create() -> pafs.FileSystem:
        from pyiceberg.io.pyarrow import PyArrowFileIO

        from sink.consumers.iceberg.iceberg_table import resolved_properties

        fileio = PyArrowFileIO(resolved_properties(dict(io_properties)))
        return fileio.fs_by_scheme(scheme, netloc)

    return _FILE_SYSTEMS.get_or_create((io_properties, scheme, netloc), create)


def iceberg_staging(settings: IcebergSettings, pipeline_id: str) -> IcebergStaging:
    """The staging area of the table of ``settings``: at the location the driver recorded
    when the query started (:func:`~sink.consumers.iceberg.iceberg_table.with_table`), else
    the catalog's."""
    from sink.consumers.iceberg.iceberg_table import table_location

    if settings.location is not None:
        location, io_properties = settings.location, settings.io_properties
    else:
        location, io_properties = table_location(settings)
    return IcebergStaging(location, dict(io_properties), pipeline_id, settings.required)
