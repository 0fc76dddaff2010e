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
        """The writer of the query's micro-batches, once the consumer's kind has checked,
        before any data moves, that it can take them (its start check may complete the
        options the tasks receive, e.g. with a table's location)."""
        has_gt = check_spark_schema(schema)
        return BarrierStreamWriter(self.sink_options.check_at_start(schema), has_gt)

    def writer(self, schema: StructType, overwrite: bool) -> Any:
        raise ConfigError(
            "format",
            "barrier",
            "writeStream: the barrier sink delivers streaming micro-batches",
            where="barrier",
        )
