"""A driver program for the sink's fault tests (run by the ``driver`` fixture).

gtkafka -> drop every value that is a multiple of 3 -> barrier. Exits 0 when the query
ends (Trigger.AvailableNow) or is stopped, 1 with the error on stderr when it fails; a
fault injected with GTBARRIER_FAULT kills it (and its JVM) with SIGKILL.
"""

from __future__ import annotations

import argparse
import sys


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--pipeline", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--max-offsets", default="1000")
    parser.add_argument("--master", default="local[2,2]")  # task retries allowed
    parser.add_argument("--interval", default="", help="processing-time trigger; else AvailableNow")
    parser.add_argument("--sink-option", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()

    from pyspark.sql import functions as sf

    from harness.driver_program import program_session, run_query

    spark = program_session("sink-driver", master=args.master)

    df = (
        spark.readStream.format("gtkafka")
        .option("kafka.bootstrap.servers", args.bootstrap)
        .option("subscribe", args.topic)
        .option("startingOffsets", "earliest")
        .option("pipeline.id", args.pipeline)
        .option("state.uri", args.state)
        .option("maxOffsetsPerTrigger", args.max_offsets)
        .load()
    )
    number = sf.col("value").cast("string").cast("long")
    out = df.where(number % 3 != 0).select("key", "value", "gt")
    sink_options = dict(o.split("=", 1) for o in args.sink_option)
    writer = (
        out.writeStream.format("barrier")
        .option("pipeline.id", args.pipeline)
        .option("state.uri", args.state)
        .options(**sink_options)
        .option("checkpointLocation", args.checkpoint)
    )
    writer = (
        writer.trigger(processingTime=f"{args.interval} seconds")
        if args.interval
        else writer.trigger(availableNow=True)
    )
    query = writer.start()
    return run_query(spark, query)


if __name__ == "__main__":
    sys.exit(main())
