"""The ``postgres`` consumer kind: what the registry knows of ``consumer=postgres``.

Parts are staged in the state store; delivery and the start check live in
:mod:`sink.consumers.postgres.postgres_consumer`, imported only when used, so that the sink
imports without psycopg (``pip install gtbarrier[postgres]``). Validation
(:mod:`sink.consumers.postgres.postgres_validate`) needs no psycopg: the start check records
what it needs of the table in the settings.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from sink.consumers.base import Consumer
from sink.consumers.consumer_kind import ConsumerKind, RowRejection, SinkView
from sink.consumers.postgres.postgres_options import SPECS, PostgresSettings, parse_settings
from sink.faults import FaultInjector
from sink.staging import Staging
from state.options import Options


class PostgresKind(ConsumerKind[PostgresSettings]):
    """``consumer=postgres``: one transaction per bundle, the bundle id in the same one."""

    settings_type = PostgresSettings
    specs = SPECS

    def parse(self, opts: Options) -> PostgresSettings:
        return parse_settings(opts)

    def check_at_start(self, options: SinkView, spark_schema: Any) -> PostgresSettings:
        from sink.consumers.postgres.postgres_consumer import check_at_start

        return check_at_start(
            self.settings(options), spark_schema, exactly_once=options.exactly_once
        )

    def validate(self, settings: PostgresSettings, table: pa.Table) -> list[RowRejection]:
        """The rows the target table would refuse, from the facts the start check recorded
        in ``settings`` (:mod:`sink.consumers.postgres.postgres_validate`)."""
        from sink.consumers.postgres.postgres_validate import validate

        return validate(settings, table)

    def open_consumer(self, options: SinkView, staging: Staging, faults: FaultInjector) -> Consumer:
        from sink.consumers.postgres.postgres_consumer import PostgresConsumer

        return PostgresConsumer(
            self.settings(options),
            staging,
            faults,
            pipeline_id=options.pipeline_id,
            exactly_once=options.exactly_once,
        )


POSTGRES = PostgresKind()
