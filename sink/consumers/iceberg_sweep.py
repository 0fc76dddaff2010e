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
itself. Run it with the sink's options::

    python -m sink.consumers.iceberg_sweep --option pipeline.id=orders \\
        --option state.uri=... --option consumer=iceberg \\
        --option consumer.iceberg.table=ns.orders --option consumer.iceberg.catalog.uri=... \\
        [--delete]
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, dataclass

from sink.consumers.iceberg import last_bundle_of
from sink.consumers.iceberg_staging import (
    IcebergStaging,
    data_prefix,
    epoch_of_data_file,
    iceberg_staging,
)
from sink.consumers.iceberg_table import load_table
from sink.options import SinkOptions
from state.errors import ConfigError


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


def find_orphans(options: SinkOptions) -> Orphans:
    """List this pipeline's unreferenced data files in its Iceberg table."""
    if options.iceberg is None:
        raise ConfigError("consumer", options.consumer, "iceberg", where="iceberg sweep")
    table = load_table(options.iceberg)
    staging = iceberg_staging(options)
    last = last_bundle_of(table, options.pipeline_id)
    referenced: set[str] = set()
    if table.metadata.snapshots:
        referenced = set(table.inspect.all_data_files().column("file_path").to_pylist())
    orphans, pending = [], []
    for location in staging.list(data_prefix(options.pipeline_id)):
        uri = staging.uri(location)
        if uri in referenced:
            continue
        epoch = epoch_of_data_file(location)
        if last is not None and epoch is not None and epoch <= last.bundle_id:
            orphans.append(uri)
        else:
            pending.append(uri)
    return Orphans(
        table=options.iceberg.identifier,
        pipeline_id=options.pipeline_id,
        last_bundle=None if last is None else last.bundle_id,
        orphans=tuple(orphans),
        pending=tuple(pending),
    )


def delete_orphans(options: SinkOptions, found: Orphans) -> int:
    """Delete ``found.orphans`` (never ``found.pending``); how many were deleted."""
    staging: IcebergStaging = iceberg_staging(options)
    prefix = staging.location + "/"
    for uri in found.orphans:
        staging.delete(uri[len(prefix) :])
    return len(found.orphans)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--option", action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--delete", action="store_true", help="delete the orphans found")
    args = parser.parse_args(argv)
    options = SinkOptions.parse(dict(o.split("=", 1) for o in args.option))
    found = find_orphans(options)
    report = asdict(found)
    if args.delete:
        report["deleted"] = delete_orphans(options, found)
    json.dump(report, sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
