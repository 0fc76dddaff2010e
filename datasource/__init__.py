"""gtkafka: the replayable Kafka source of gtbarrier.

    from gtbarrier import register_all
    register_all(spark)                  # gtkafka and the barrier sink
    df = (spark.readStream.format("gtkafka")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "orders")
          .option("pipeline.id", "orders-to-billing")
          .option("state.uri", "s3://bucket/gtbarrier")
          .load())

See docs/source.md for the options, the columns and the guarantees.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from datasource.source import GlobalTimeKafkaSource

if TYPE_CHECKING:
    from datasource.options import KafkaSourceOptions

__all__ = ["GlobalTimeKafkaSource", "KafkaSourceOptions", "register"]


def register(spark: Any) -> None:
    """Register ``gtkafka`` (alone) with ``spark``."""
    spark.dataSource.register(GlobalTimeKafkaSource)


def __getattr__(name: str) -> Any:
    # Lazy: PySpark's data source lookup imports this package only for the source's class.
    if name == "KafkaSourceOptions":
        from datasource.options import KafkaSourceOptions

        return KafkaSourceOptions
    raise AttributeError(f"module 'datasource' has no attribute {name!r}")
