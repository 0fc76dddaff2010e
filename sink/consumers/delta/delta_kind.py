"""The ``delta`` consumer kind: what the registry knows of ``consumer=delta``.

Everything that needs ``deltalake`` is imported when used, so that the sink imports
without it (``pip install gtbarrier[delta]``). Write tasks stage their parts in the state
store (the default staging); the commit reads them and writes one Delta commit per bundle.
``gtbarrier sweep`` has nothing of the consumer's own to list: staged parts are the
barrier's, and the data files of a commit that failed are files no Delta version
references, which Delta's ``VACUUM`` removes.
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


class DeltaKind(ConsumerKind[DeltaSettings]):
    """``consumer=delta``: parts staged in the state store, each bundle one Delta commit."""

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
