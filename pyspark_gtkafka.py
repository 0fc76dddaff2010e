"""Zero-call registration of the ``gtkafka`` source.

PySpark imports every top-level module named ``pyspark_*`` on the Python path the first
time a session of the JVM looks up a Python data source, and registers its
``DefaultSource`` under ``DefaultSource.name()``. So, with gtbarrier installed where the
JVM's Python runs, ``spark.readStream.format("gtkafka")`` works without
``gtbarrier.register_all(spark)``. The lookup runs once per JVM: a module that becomes
importable later (installed, or put on ``PYTHONPATH`` after the first lookup) is not seen
until the JVM restarts.
"""

from datasource.source import GlobalTimeKafkaSource as DefaultSource

__all__ = ["DefaultSource"]
