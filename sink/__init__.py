"""The barrier sink ("barrier"): bundles, the acknowledge protocol and its consumers.

``gtbarrier.register_all(spark)`` registers it with the ``gtkafka`` source;
:func:`register` registers the sink alone.
"""

from typing import Any

import state.profiling  # noqa: F401 - first: dates this process's imports (benchmarks)
from sink.data_source import BarrierSink
from sink.session import NO_DATA_MICRO_BATCHES

__all__ = ["NO_DATA_MICRO_BATCHES", "BarrierSink", "register"]


def register(spark: Any) -> None:
    """Register ``barrier`` with ``spark`` and set ``NO_DATA_MICRO_BATCHES`` to false."""
    spark.dataSource.register(BarrierSink)
    spark.conf.set(NO_DATA_MICRO_BATCHES, "false")
