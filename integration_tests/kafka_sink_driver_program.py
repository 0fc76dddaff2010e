"""A driver program for the kafka consumer's fault tests (run by the ``driver`` fixture).

gtkafka with ``includeHeaders=true`` -> ``key, value, headers, gt`` -> barrier with
``consumer=kafka``: a pipeline that passes its input's headers on, as one reading another
gtbarrier pipeline's output does. Exits 0 when the query ends (Trigger.AvailableNow), 1
with the error on stderr when it fails; a fault injected with GTBARRIER_FAULT kills it
(and its JVM) with SIGKILL.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--out-topic", required=True)
    parser.add_argument("--pipeline", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--max-offsets", default="1000")
    args = parser.parse_args()

    from pyspark.sql import SparkSession

    import gtbarrier
    from harness.spark import local_spark_conf

    workdir = Path(tempfile.mkdtemp(prefix="kafka-sink-driver-", dir=Path.cwd()))
    builder = SparkSession.builder
    for key, value in local_spark_conf(workdir).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    gtbarrier.register_all(spark)

    df = (
        spark.readStream.format("gtkafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .option("includeHeaders", "true")
        .option("pipeline.id", args.pipeline)
        .option("state.uri", args.state)
        .option("maxOffsetsPerTrigger", args.max_offsets)
        .load()
    )
    query = (
        df.select("key", "value", "headers", "gt")
        .writeStream.format("barrier")
        .option("pipeline.id", args.pipeline)
        .option("state.uri", args.state)
        .option("consumer", "kafka")
        .option("consumer.kafka.bootstrap.servers", args.bootstrap)
        .option("consumer.topic", args.out_topic)
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
