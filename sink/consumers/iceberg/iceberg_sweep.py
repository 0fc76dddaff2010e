"""``consumer=iceberg`` housekeeping: the data files of failed attempts that no snapshot uses.

A delivery moves a bundle's staged parts to ``data/gtbarrier/<pipeline>/`` before it
commits them. A retry, or the redelivery after a SIGKILL between the move and the commit,
commits those same files, so they are orphaned only when the bundle is committed from
other parts: by another driver (a zombie moved its parts, the new owner committed its
own), or after a state reset. :func:`find_orphans` lists them; :func:`delete_orphans`
deletes them.

A file is an orphan when no snapshot of the table (any snapshot, not only the current
one) references it and its bundle is at most the pipeline's last committed bundle: files
of a newer bundle may belong to the bundle in flight and are reported apart, never
deleted. Staged parts (``_gtbarrier/<pipeline>/staging/``) are cleaned by the barrier
itself. ``gtbarrier sweep`` runs it with the sink's options::

    gtbarrier sweep --pipeline orders --state-uri ... --option consumer=iceberg \\
        --option consumer.iceberg.table=ns.orders --option consumer.iceberg.catalog.uri=... \\
        [--delete --zookeeper HOSTS]
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sink.consumers.iceberg.iceberg_consumer import last_bundle_of
from sink.consumers.iceberg.iceberg_options import IcebergSettings
from sink.consumers.iceberg.iceberg_staging import (
    data_prefix,
    epoch_of_data_file,
    iceberg_staging,
)
from sink.consumers.iceberg.iceberg_table import load_table


@dataclass(frozen=True)
class Orphans:
    """What a sweep found (full URIs, sorted)."""

    table: str
    pipeline_id: str
    last_bundle: int | None
    orphans: tuple[str, ...]
    """Unreferenced data files of bundles up to ``last_bundle``: safe to delete."""
    pending: tuple[str, ...]
    """Unreferenced data files of newer bundles (maybe in flight): kept."""


def find_orphans(settings: IcebergSettings, pipeline_id: str) -> Orphans:
    """List the unreferenced data files of ``pipeline_id`` in the table of ``settings``."""
    table = load_table(settings)
    staging = iceberg_staging(settings, pipeline_id)
    last = last_bundle_of(table, pipeline_id)
    referenced: set[str] = set()
    if table.metadata.snapshots:
        referenced = set(table.inspect.all_data_files().column("file_path").to_pylist())
    orphans, pending = [], []
    for location in staging.list(data_prefix(pipeline_id)):
        uri = staging.uri(location)
        if uri in referenced:
            continue
        epoch = epoch_of_data_file(location)
        if last is not None and epoch is not None and epoch <= last.bundle_id:
            orphans.append(uri)
        else:
            pending.append(uri)
    return Orphans(
        table=settings.identifier,
        pipeline_id=pipeline_id,
        last_bundle=None if last is None else last.bundle_id,
        orphans=tuple(orphans),
        pending=tuple(pending),
    )


def delete_orphans(settings: IcebergSettings, pipeline_id: str, uris: Iterable[str]) -> int:
    """Delete the data files ``uris`` (orphans :func:`find_orphans` listed, never its
    ``pending``); how many were deleted."""
    staging = iceberg_staging(settings, pipeline_id)
    prefix = staging.location + "/"
    count = 0
    for uri in uris:
        if not uri.startswith(prefix):
            raise ValueError(f"{uri} is not a file under the table's location {staging.location}")
        staging.delete(uri[len(prefix) :])
        count += 1
    return count
