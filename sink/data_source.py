"""``BarrierSink``: the ``barrier`` data source (a streaming sink only)."""

from __future__ import annotations

from typing import Any

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType

from sink.gt_column import check_spark_schema
from sink.options import SinkOptions
from sink.writer import BarrierStreamWriter
from state.errors import ConfigError


class BarrierSink(DataSource):
    """Exactly-once delivery of a streaming query's output, bundle by bundle, in gt order.

    Options are parsed once here, when Spark instantiates the source to plan the query's
    first micro-batch; a bad option stops the query before any task runs.
    """

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.sink_options = SinkOptions.parse(options)

    @classmethod
    def name(cls) -> str:
        return "barrier"

    def streamWriter(self, schema: StructType, overwrite: bool) -> BarrierStreamWriter:
        has_gt = check_spark_schema(schema)
        options = self.sink_options
        if self.sink_options.consumer == "file":
            from sink.consumers.file import check_writable

            assert self.sink_options.consumer_path is not None
            check_writable(self.sink_options.consumer_path)
        elif self.sink_options.consumer == "kafka":
            from sink.consumers.kafka import check_spark_schema as check_kafka_schema

            check_kafka_schema(schema)
        elif self.sink_options.consumer == "postgres":
            from sink.consumers.postgres import check_at_start

            check_at_start(self.sink_options, schema)
        elif self.sink_options.consumer == "iceberg":
            from sink.consumers.iceberg_table import with_table

            options = with_table(self.sink_options, schema)
        return BarrierStreamWriter(options, has_gt)

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        raise ConfigError(
            "format",
            "barrier",
            "writeStream: the barrier sink delivers streaming micro-batches",
            where="barrier",
        )
