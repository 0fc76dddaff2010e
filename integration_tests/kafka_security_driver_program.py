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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--pipeline", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--checkpoint", required=True)
    args = parser.parse_args()
    given = json.loads(os.environ["GTB_SECURITY_OPTIONS"])

    from harness.driver_program import program_session, run_query

    spark = program_session("kafka-security-driver")

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
    return run_query(spark, query)


if __name__ == "__main__":
    sys.exit(main())
