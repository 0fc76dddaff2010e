"""The ``delta`` consumer kind: what the registry knows of ``consumer=delta``.

Everything that needs ``deltalake`` is imported when used, so that the sink imports
without it (``pip install gtbarrier[delta]``; with ``mode=append`` the executors open the
table's storage through it too). In ``mode=append`` write tasks stage their parts under
the table (:mod:`sink.consumers.delta.delta_staging`) and each bundle's parts become the
data files of its one commit; a merge (or an append into a table whose writes must be
checked row by row) stages them in the state store and the commit reads them.
``gtbarrier sweep`` has nothing of the consumer's own to list: staged parts are the
barrier's, and a data file moved but never committed is committed by the bundle's
redelivery; one no Delta version references (a zombie driver's, or of a failed
delta-rs write) is removed by a full ``VACUUM``.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from sink.consumers.base import Consumer
from sink.consumers.consumer_kind import ConsumerKind, RowRejection, SinkView
from sink.consumers.delta.delta_options import SPECS, DeltaSettings, parse_settings
from sink.consumers.row_checks import invalid_utf8, nulls_where_required
from sink.faults import FaultInjector
from sink.staging import Staging
from state.options import Options
from state.stores import StateStore


class DeltaKind(ConsumerKind[DeltaSettings]):
    """``consumer=delta``: parts staged under the table (append) or in the state store
    (merge), each bundle one Delta commit."""

    settings_type = DeltaSettings
    specs = SPECS

    def parse(self, opts: Options) -> DeltaSettings:
        return parse_settings(opts)

    def validate(self, settings: DeltaSettings, table: pa.Table) -> list[RowRejection]:
        """Rows with a null in a ``NOT NULL`` column of the table (as recorded when the query
        started), and strings that are not UTF-8 (a Delta string is UTF-8)."""
        return [
            *nulls_where_required(
                table,
                settings.not_null,
                f"null in a NOT NULL column of Delta table {settings.uri}",
            ),
            *invalid_utf8(
                table,
                f"string not valid UTF-8, which Delta table {settings.uri} cannot hold "
                "(a Delta string is UTF-8)",
            ),
        ]

    def check_at_start(self, options: SinkView, spark_schema: Any) -> DeltaSettings:
        """The table, opened or created, takes the input's columns; the settings the write
        tasks receive carry its ``NOT NULL`` columns (they never open the table)."""
        from sink.consumers.delta.delta_table import with_table

        return with_table(self.settings(options), spark_schema)

    def open_staging(self, options: SinkView, store: StateStore) -> Staging:
        """Under the table when its parts become its data files, else the state store."""
        from sink.consumers.delta.delta_staging import DeltaStaging
        from sink.consumers.delta.delta_table import parts_in_table

        settings = self.settings(options)
        if parts_in_table(settings):
            return DeltaStaging(settings, options.pipeline_id)
        return super().open_staging(options, store)

    def open_consumer(self, options: SinkView, staging: Staging, faults: FaultInjector) -> Consumer:
        from sink.consumers.delta.delta_consumer import DeltaConsumer

        return DeltaConsumer(
            self.settings(options), staging, faults, pipeline_id=options.pipeline_id
        )

    def consumer_path(self, options: SinkView) -> str:
        """The table's directory (``file://`` read as its path) or S3 prefix: nothing else
        may be written under it, as Delta's ``VACUUM`` deletes every file there that no
        version of the table references (dead letters among them)."""
        uri = self.settings(options).uri
        return uri[len("file://") :] if uri.startswith("file://") else uri


DELTA = DeltaKind()
