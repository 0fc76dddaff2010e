"""Zero-call registration of the ``barrier`` sink (see :mod:`pyspark_gtkafka`).

The sink needs ``spark.sql.streaming.noDataMicroBatches.enabled=false``, which only a
session can set: ``gtbarrier.register_all(spark)`` sets it; without that call, set it
yourself (``spark.conf.set(...)`` or ``--conf``), or the query's first write task fails
with an error that names it.
"""

from sink.data_source import BarrierSink as DefaultSource

__all__ = ["DefaultSource"]
