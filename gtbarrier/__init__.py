"""gtbarrier: exactly-once from Kafka through Spark Structured Streaming to any consumer.

    from gtbarrier import register_all
    register_all(spark)          # the gtkafka source and the barrier sink

This package is the composition root: it depends on ``datasource`` (the ``gtkafka``
source), ``sink`` (the ``barrier`` sink) and, through them, ``state``; none of them
depends on it at import time (``datasource.register_all``, the older spelling of
:func:`register_all`, imports it when called).
"""

from __future__ import annotations

from typing import Any

import datasource
import sink

__all__ = ["register_all"]


def register_all(spark: Any) -> None:
    """Register ``gtkafka`` and ``barrier`` with ``spark`` and set
    ``spark.sql.streaming.noDataMicroBatches.enabled=false``: a no-data batch has no
    epoch, so its output is not replay-stable and the barrier refuses it
    (docs/PROTOCOL.md, "Batch records")."""
    datasource.register(spark)
    sink.register(spark)
