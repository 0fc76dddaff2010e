"""The ``postgres`` consumer kind: what the registry knows of ``consumer=postgres``.

Parts are staged in the state store; delivery and the start check live in
:mod:`sink.consumers.postgres.postgres_consumer`, imported only when used, so that the sink
imports without psycopg (``pip install gtbarrier[postgres]``).
"""

from __future__ import annotations

from typing import Any

from sink.consumers.base import Consumer
from sink.consumers.consumer_kind import ConsumerKind, SinkView
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

        settings = self.settings(options)
        check_at_start(settings, spark_schema, exactly_once=options.exactly_once)
        return settings

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
