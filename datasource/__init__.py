"""gtkafka: the replayable Kafka source of gtbarrier.

    from datasource import register_all
    register_all(spark)
    df = (spark.readStream.format("gtkafka")
          .option("kafka.bootstrap.servers", "127.0.0.1:9092")
          .option("subscribe", "orders")
          .option("pipeline.id", "orders-to-billing")
          .option("state.uri", "s3://bucket/gtbarrier")
          .load())

See docs/source.md for the options, the columns and the guarantees.
"""

from __future__ import annotations

import importlib
from typing import Any

from datasource.options import KafkaSourceOptions
from datasource.source import GlobalTimeKafkaSource

__all__ = ["GlobalTimeKafkaSource", "KafkaSourceOptions", "register_all"]


def register_all(spark: Any) -> None:
    """Register ``gtkafka`` (and the ``barrier`` sink, if installed) with ``spark``.

    Also sets ``spark.sql.streaming.noDataMicroBatches.enabled=false``: a no-data batch
    has no epoch, so its output is not replay-stable and the barrier refuses it
    (docs/PROTOCOL.md, "Batch records").
    """
    spark.dataSource.register(GlobalTimeKafkaSource)
    try:
        sink = importlib.import_module("sink")
    except ModuleNotFoundError as err:
        if err.name != "sink":
            raise
        sink = None
    barrier = getattr(sink, "BarrierSink", None)
    if barrier is not None:
        spark.dataSource.register(barrier)
    spark.conf.set("spark.sql.streaming.noDataMicroBatches.enabled", "false")
