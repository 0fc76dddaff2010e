"""A driver program that uses gtbarrier without any registration call.

gtkafka -> barrier (file consumer), Trigger.AvailableNow, in a fresh SparkSession: the
data sources come from PySpark's discovery of ``pyspark_gtkafka`` / ``pyspark_barrier``.
``--no-data-setting set`` puts ``spark.sql.streaming.noDataMicroBatches.enabled=false``
in the session's configuration (what a user does instead of ``register_all``); ``unset``
leaves it out, and the query must fail naming it. Exits 0 when the query ends, 1 with
``QUERY FAILED: ...`` on stderr when it fails. Sink options (``--sink-option K=V``) and
source options (``--source-option K=V``) are passed through.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

NO_DATA = "spark.sql.streaming.noDataMicroBatches.enabled"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--pipeline", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--no-data-setting", choices=("set", "unset"), default="set")
    parser.add_argument("--max-offsets", default="1000")
    parser.add_argument("--sink-option", action="append", default=[], metavar="K=V")
    parser.add_argument("--source-option", action="append", default=[], metavar="K=V")
    args = parser.parse_args()

    from pyspark.sql import SparkSession

    from harness.driver_program import run_query
    from harness.spark import local_spark_conf

    assert "gtbarrier" not in sys.modules and "datasource" not in sys.modules
    workdir = Path(tempfile.mkdtemp(prefix="zero-call-", dir=Path.cwd()))
    builder = SparkSession.builder
    for key, value in local_spark_conf(workdir).items():
        builder = builder.config(key, value)
    if args.no_data_setting == "set":
        builder = builder.config(NO_DATA, "false")
    spark = builder.getOrCreate()

    ids = {"pipeline.id": args.pipeline, "state.uri": args.state}
    df = (
        spark.readStream.format("gtkafka")
        .options(**ids)
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", args.max_offsets)
        .options(**dict(o.split("=", 1) for o in args.source_option))
        .load()
    )
    query = (
        df.select("key", "value", "gt")
        .writeStream.format("barrier")
        .options(**ids)
        .option("consumer.path", args.out)
        .options(**dict(o.split("=", 1) for o in args.sink_option))
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    return run_query(spark, query)


if __name__ == "__main__":
    sys.exit(main())
