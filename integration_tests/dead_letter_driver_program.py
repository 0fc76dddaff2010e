"""A driver program for the dead-letter tests (run by the ``driver`` fixture).

gtkafka -> ``key``, ``value``, ``note`` (``"n<number>"``, or text with a NUL character for
the numbers in ``--nul``, the bytes ``ff 6e``, not UTF-8, for those in ``--bad-utf8``) and
``gt`` (null for the numbers in ``--null-gt``: a poison row for every consumer), with
``--partition N=P,...`` also ``partition`` (P for number N, null for the others: for
consumer=kafka) -> barrier. Every record reaches the sink; the sink's options decide what
is refused and where it goes. Exits 0 when the query ends (Trigger.AvailableNow), 1 with
the error on stderr when it fails; a fault injected with GTBARRIER_FAULT kills it.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any


def numbers(text: str) -> list[int]:
    return [int(n) for n in text.split(",") if n.strip()]


def output_columns(args: argparse.Namespace) -> list[Any]:
    """``key``, ``value``, ``note``, ``gt`` and, with ``--partition``, ``partition``."""
    from pyspark.sql import functions as sf

    number = sf.col("value").cast("string").cast("long")
    null_gt, nul, bad_utf8 = numbers(args.null_gt), numbers(args.nul), numbers(args.bad_utf8)
    gt = sf.col("gt")
    if null_gt:
        gt = sf.when(number.isin(null_gt), sf.lit(None)).otherwise(sf.col("gt"))
    note = sf.concat(sf.lit("n"), number.cast("string"))
    if nul:
        note = sf.when(number.isin(nul), sf.concat(sf.lit("bad\u0000"), note)).otherwise(note)
    if bad_utf8:  # CAST(binary AS STRING) keeps the bytes as they are
        raw = sf.unhex(sf.lit("FF6E")).cast("string")
        note = sf.when(number.isin(bad_utf8), raw).otherwise(note)
    columns = [sf.col("key"), sf.col("value"), note.alias("note"), gt.alias("gt")]
    if args.partition:
        chosen = dict(pair.split("=", 1) for pair in args.partition.split(","))
        partition = sf.lit(None).cast("int")
        for n, p in chosen.items():
            partition = sf.when(number == int(n), sf.lit(int(p))).otherwise(partition)
        columns.append(partition.alias("partition"))
    return columns


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--pipeline", required=True)
    parser.add_argument("--state", required=True)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--max-offsets", default="1000")
    parser.add_argument("--null-gt", default="", help="numbers whose gt is null")
    parser.add_argument("--nul", default="", help="numbers whose note holds a NUL character")
    parser.add_argument(
        "--bad-utf8", default="", help="numbers whose note is the bytes ff 6e (not UTF-8)"
    )
    parser.add_argument(
        "--partition", default="", help="N=P,...: a partition column, P for number N, else null"
    )
    parser.add_argument("--sink-option", action="append", default=[], metavar="KEY=VALUE")
    args = parser.parse_args()

    from harness.driver_program import program_session, run_query

    spark = program_session("dead-letter-driver", master="local[2,2]")

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
    columns = output_columns(args)
    out = df.select(*columns)
    sink_options = dict(o.split("=", 1) for o in args.sink_option)
    query = (
        out.writeStream.format("barrier")
        .option("pipeline.id", args.pipeline)
        .option("state.uri", args.state)
        .options(**sink_options)
        .option("checkpointLocation", args.checkpoint)
        .trigger(availableNow=True)
        .start()
    )
    return run_query(spark, query)


if __name__ == "__main__":
    sys.exit(main())
