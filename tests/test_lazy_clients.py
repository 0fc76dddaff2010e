"""What the Python processes Spark starts for a query import.

PySpark's lookup of Python data sources (at a JVM's first registration) imports every
``pyspark_*`` module in a process of its own to read ``DefaultSource.name()``: it imports
the two data source classes and nothing a query needs (no pyarrow, no option tables). The
planners and the workers import the sink and the source, the consumer registry with every
consumer's kind among them, but no client library (S3, HTTP, Kafka, PostgreSQL, Iceberg,
ZooKeeper) nor the code of a store or consumer that uses one: that is imported where the
store or the consumer is used."""

from __future__ import annotations

import json
from typing import Any

from harness.process import run_python

CLIENTS = (
    "boto3",
    "botocore",
    "urllib3",
    "kafka",
    "psycopg",
    "pyiceberg",
    "deltalake",
    "kazoo",
    "state.stores.s3_store",
    "sink.consumers.kafka.kafka_consumer",
    "sink.consumers.postgres.postgres_consumer",
    "sink.consumers.iceberg.iceberg_consumer",
    "sink.consumers.delta.delta_consumer",
    "sink.consumers.delta.delta_table",
)

QUERY_ONLY = (
    "pyarrow",
    "numpy",
    "sink.options",
    "sink.consumers.registry",
    "sink.writer",
    "datasource.options",
    "datasource.stream_reader",
    "datasource.batch_reader",
)

LOOKUP = f"""
import json, pickle, sys
import pyspark_barrier, pyspark_gtkafka
sources = [pyspark_barrier.DefaultSource, pyspark_gtkafka.DefaultSource]
names = [source.name() for source in sources]
assert all(pickle.loads(pickle.dumps(source)) is source for source in sources)
print(json.dumps([names, sorted(set(sys.modules) & set({QUERY_ONLY!r}))]))
"""

QUERY = f"""
import json, sys
import pyspark_barrier, pyspark_gtkafka
import sink.writer, datasource.stream_reader, datasource.batch_reader, datasource.partition_reader
sink = pyspark_barrier.DefaultSource(
    {{"pipeline.id": "p1", "state.uri": "memory://p1", "consumer.path": "/nowhere/out"}}
)
assert sink.sink_options.consumer == "file"
print(json.dumps(sorted(set(sys.modules) & set({CLIENTS!r} + {QUERY_ONLY!r}))))
"""


def _run(code: str) -> Any:
    proc = run_python("-c", code)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_the_data_source_lookup_imports_only_the_two_sources() -> None:
    names, loaded = _run(LOOKUP)
    assert names == ["barrier", "gtkafka"]
    assert loaded == []


def test_a_query_s_processes_import_no_client() -> None:
    loaded = _run(QUERY)
    assert not set(loaded) & set(CLIENTS), loaded
    assert {"pyarrow", "sink.consumers.registry", "sink.writer"} <= set(loaded)
