"""``gtkafka``: the replayable Kafka source, as a ``pyspark.sql.datasource.DataSource``.

Options are parsed once, here in the constructor, which Spark runs at ``load()``: an
unknown, malformed or conflicting option fails there, before any data moves. Checks that
depend on the mode run when Spark asks for the streaming or batch reader.

PySpark's lookup of Python data sources, at a JVM's first registration, imports this module
in a process of its own only to read :meth:`GlobalTimeKafkaSource.name`: what a query needs
(the option table, the readers, pyarrow) is imported when Spark makes the source or asks for
its schema or a reader.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.errors import PySparkNotImplementedError
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    SimpleDataSourceStreamReader,
)

if TYPE_CHECKING:
    from pyspark.sql.types import StructType

    from datasource.options import KafkaSourceOptions


class GlobalTimeKafkaSource(DataSource):
    """Kafka records with a replay-stable global time column ``gt``."""

    def __init__(self, options: dict[str, str]) -> None:
        from datasource.options import KafkaSourceOptions

        super().__init__(options)
        self.parsed: KafkaSourceOptions = KafkaSourceOptions.parse(options)

    @classmethod
    def name(cls) -> str:
        return "gtkafka"

    def schema(self) -> StructType:
        from datasource.schema import source_schema

        return source_schema(self.parsed.include_headers)

    def _check_schema(self, schema: StructType) -> None:
        from datasource.schema import check_user_schema

        check_user_schema(schema, self.schema())

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """Executor mode's reader; with ``readMode=driver`` PySpark's "not implemented",
        on which Spark asks for :meth:`simpleStreamReader` instead."""
        from datasource.stream_reader import GlobalTimeKafkaStreamReader

        self._check_schema(schema)
        if self.parsed.read_mode == "driver":
            raise PySparkNotImplementedError(
                errorClass="NOT_IMPLEMENTED", messageParameters={"feature": "streamReader"}
            )
        return GlobalTimeKafkaStreamReader(self.parsed, schema)

    def simpleStreamReader(self, schema: StructType) -> SimpleDataSourceStreamReader:
        """The driver's reader of ``readMode=driver`` (:mod:`datasource.driver_reader`)."""
        from datasource.driver_reader import DriverKafkaStreamReader

        self._check_schema(schema)
        return DriverKafkaStreamReader(self.parsed, schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        from datasource.batch_reader import GlobalTimeKafkaBatchReader

        self._check_schema(schema)
        return GlobalTimeKafkaBatchReader(self.parsed, schema)
