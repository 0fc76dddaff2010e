"""The ``iceberg`` consumer kind: what the registry knows of ``consumer=iceberg``.

Everything that needs pyiceberg is imported when used, so that the sink imports without
it (``pip install gtbarrier[iceberg]``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pyarrow as pa

from sink.consumers.base import Consumer
from sink.consumers.consumer_kind import ConsumerKind, ConsumerLeftover, RowRejection, SinkView
from sink.consumers.iceberg.iceberg_options import SPECS, IcebergSettings, parse_settings
from sink.consumers.row_checks import invalid_utf8, nulls_where_required
from sink.faults import FaultInjector
from sink.staging import Staging
from state.options import Options
from state.stores import StateStore

ORPHAN = "unreferenced data file"
PENDING = "unreferenced data file of a newer bundle"


class IcebergKind(ConsumerKind[IcebergSettings]):
    """``consumer=iceberg``: parts staged under the table's location, each bundle one
    append commit."""

    settings_type = IcebergSettings
    specs = SPECS

    def parse(self, opts: Options) -> IcebergSettings:
        return parse_settings(opts)

    def validate(self, settings: IcebergSettings, table: pa.Table) -> list[RowRejection]:
        """Rows with a null in a column the table requires (as recorded when the query
        started), and strings that are not UTF-8 (an Iceberg string is UTF-8)."""
        return [
            *nulls_where_required(
                table,
                settings.required,
                f"null in a required (NOT NULL) column of Iceberg table {settings.identifier}",
            ),
            *invalid_utf8(
                table,
                f"string not valid UTF-8, which Iceberg table {settings.identifier} "
                "cannot hold (an Iceberg string is UTF-8)",
            ),
        ]

    def check_at_start(self, options: SinkView, spark_schema: Any) -> IcebergSettings:
        """The table, loaded or created, takes the input's columns; the settings the write
        tasks receive carry its location and its required columns (they never open the
        catalog)."""
        from sink.consumers.iceberg.iceberg_table import with_table

        return with_table(self.settings(options), spark_schema)

    def open_staging(self, options: SinkView, store: StateStore) -> Staging:
        from sink.consumers.iceberg.iceberg_staging import iceberg_staging

        return iceberg_staging(self.settings(options), options.pipeline_id)

    def open_consumer(self, options: SinkView, staging: Staging, faults: FaultInjector) -> Consumer:
        from sink.consumers.iceberg.iceberg_consumer import IcebergConsumer

        return IcebergConsumer(
            self.settings(options), staging, faults, pipeline_id=options.pipeline_id
        )

    def find_leftovers(self, options: SinkView) -> list[ConsumerLeftover]:
        """Data files no snapshot references: those of bundles up to the last one (deleted
        with ``--delete``), and those of newer bundles (maybe in flight: kept)."""
        from sink.consumers.iceberg.iceberg_sweep import find_orphans

        found = find_orphans(self.settings(options), options.pipeline_id)
        return [ConsumerLeftover(ORPHAN, uri) for uri in found.orphans] + [
            ConsumerLeftover(PENDING, uri, kept=True) for uri in found.pending
        ]

    def delete_leftovers(
        self, options: SinkView, leftovers: Sequence[ConsumerLeftover]
    ) -> list[str]:
        from sink.consumers.iceberg.iceberg_sweep import delete_orphans

        uris = [leftover.location for leftover in leftovers if not leftover.kept]
        delete_orphans(self.settings(options), options.pipeline_id, uris)
        return uris


ICEBERG = IcebergKind()
