"""``gtkafka``: the replayable Kafka source, as a ``pyspark.sql.datasource.DataSource``.

Options are parsed once, here in the constructor, which Spark runs at ``load()``: an
unknown, malformed or conflicting option fails there, before any data moves. Checks that
depend on the mode run when Spark asks for the streaming or batch reader.
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader
from pyspark.sql.types import StructType

from datasource.batch_reader import GlobalTimeKafkaBatchReader
from datasource.options import KafkaSourceOptions
from datasource.schema import source_schema
from datasource.stream_reader import GlobalTimeKafkaStreamReader
from datasource.subscription import WHERE
from state.errors import ConfigError


class GlobalTimeKafkaSource(DataSource):
    """Kafka records with a replay-stable global time column ``gt``."""

    def __init__(self, options: dict[str, str]) -> None:
        super().__init__(options)
        self.parsed = KafkaSourceOptions.parse(options)

    @classmethod
    def name(cls) -> str:
        return "gtkafka"

    def schema(self) -> StructType:
        return source_schema(self.parsed.include_headers)

    def _check_schema(self, schema: StructType) -> None:
        expected = source_schema(self.parsed.include_headers)
        if schema != expected:
            raise ConfigError(
                "schema",
                schema.simpleString(),
                f"no user-specified schema, or exactly {expected.simpleString()}",
                where=WHERE,
            )

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        self._check_schema(schema)
        return GlobalTimeKafkaStreamReader(self.parsed, schema)

    def reader(self, schema: StructType) -> DataSourceReader:
        self._check_schema(schema)
        return GlobalTimeKafkaBatchReader(self.parsed, schema)
