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

    from harness.driver_program import program_session, run_query

    spark = program_session("kafka-sink-driver")

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
    return run_query(spark, query)


if __name__ == "__main__":
    sys.exit(main())
