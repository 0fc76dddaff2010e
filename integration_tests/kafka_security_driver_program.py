"""A driver program for the Kafka security tests (run by the ``driver`` fixture).

gtkafka -> barrier, Trigger.AvailableNow, ``maxOffsetsPerTrigger`` 500. The options of
each side come as JSON in ``$GTB_SECURITY_OPTIONS`` (``{"source": {...}, "sink": {...}}``),
not on the command line, which the harness logs: they hold the SASL password. Exits 0
when the query ends, 1 with the error on stderr when it fails; a fault injected with
GTBARRIER_FAULT kills it (and its JVM) with SIGKILL.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--pipeline", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--checkpoint", required=True)
    args = parser.parse_args()
    given = json.loads(os.environ["GTB_SECURITY_OPTIONS"])

    from pyspark.sql import SparkSession

    import gtbarrier
    from harness.spark import local_spark_conf

    workdir = Path(tempfile.mkdtemp(prefix="kafka-security-driver-", dir=Path.cwd()))
    builder = SparkSession.builder
    for key, value in {**local_spark_conf(workdir), "spark.master": "local[2]"}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    gtbarrier.register_all(spark)

    ids = {"pipeline.id": args.pipeline, "state.uri": args.state}
    df = (
        spark.readStream.format("gtkafka")
        .options(**ids)
        .option("kafka.bootstrap.servers", args.bootstrap)
        .options(**given["source"])
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "500")
        .load()
    )
    query = (
        df.select("key", "value", "partition", "gt")
        .writeStream.format("barrier")
        .options(**ids)
        .options(**given["sink"])
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    print(f"STARTED query {query.id} run {query.runId}", flush=True)
    try:
        query.awaitTermination()
    except Exception as err:
        print(f"QUERY FAILED: {err}", file=sys.stderr, flush=True)
        return 1
    finally:
        spark.stop()
    print("QUERY FINISHED", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
