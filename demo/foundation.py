"""The foundation demo: every real part gtbarrier runs on, end to end, in one process.

1. starts a Tansu Kafka broker, moto's S3 server and a ZooKeeper server on free
   loopback ports (the same launchers the integration tests use);
2. creates a topic and produces JSON orders to it in batches with kafka-python;
3. shows Tansu's end-offset defect (ListOffsets vs. a fetch's high watermark);
4. reads the topic back with Spark (local[2]) through gtbarrier's ``gtkafka`` source
   (a batch read), aggregates it, and checks every order arrived exactly once;
5. stores a summary in S3 through gtbarrier's ``s3://`` state store with a
   conditional create (a second create of the same key is refused);
6. records a pointer to that summary (key + ETag) in a ZooKeeper znode;
7. stops everything and prints what it did.

It is honest about its scope: the exactly-once streaming job (gtkafka -> barrier sink
with snapshots, killed drivers and replays) is the main demo job that replaces this one.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from collections import Counter
from contextlib import ExitStack
from pathlib import Path
from typing import Any

from integration_tests.fixtures.kafka import KafkaBroker, KafkaHelper
from integration_tests.fixtures.process import REPO_ROOT, repo_env
from integration_tests.fixtures.s3 import S3Server
from integration_tests.fixtures.spark import local_spark_conf
from integration_tests.fixtures.zookeeper import ZooKeeperServer
from state.errors import KeyExists
from state.store import StoreConfig, open_store

TOPIC = "orders"
BUCKET = "gtbarrier-demo"
ZNODE = "/gtbarrier/demo/foundation/summary"
CUSTOMERS = [f"customer-{i:02d}" for i in range(12)]


def say(message: str) -> None:
    print(f"[demo {time.strftime('%H:%M:%S')}] {message}", flush=True)


def make_orders(n: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    return [
        {"order_id": i, "customer": rng.choice(CUSTOMERS), "amount_cents": rng.randint(100, 99_999)}
        for i in range(n)
    ]


def start_spark(workdir: Path) -> Any:
    from pyspark.sql import SparkSession

    # Python workers inherit the JVM's environment, which inherits ours.
    os.environ.update(
        repo_env({"PYSPARK_PYTHON": sys.executable, "PYSPARK_DRIVER_PYTHON": sys.executable})
    )
    builder = SparkSession.builder
    for key, value in local_spark_conf(workdir).items():
        builder = builder.config(key, value)
    spark = builder.appName("gtbarrier-foundation-demo").getOrCreate()
    spark.sparkContext.setLogLevel("WARN")
    from datasource import register_all

    register_all(spark)
    return spark


def run(args: argparse.Namespace) -> dict[str, Any]:
    workdir: Path = args.workdir
    workdir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"workdir": str(workdir)}
    with ExitStack() as stack:
        # 1. servers ------------------------------------------------------------------
        t0 = time.monotonic()
        (workdir / "kafka").mkdir(exist_ok=True)
        broker = KafkaBroker(workdir / "kafka")
        stack.callback(broker.stop)
        broker.start_on_free_port()
        s3 = S3Server(workdir / "s3")
        stack.callback(s3.stop)
        s3.start()
        zk = ZooKeeperServer(workdir / "zookeeper")
        stack.callback(zk.stop)
        zk.start_on_free_port()
        say(
            f"servers up in {time.monotonic() - t0:.1f}s: Kafka (Tansu, pid {broker.pid}) at "
            f"{broker.bootstrap}, S3 (moto, pid {s3.pid}) at {s3.endpoint}, ZooKeeper "
            f"(pid {zk.pid}) at {zk.hosts}; logs in {workdir}"
        )

        # 2. produce --------------------------------------------------------------------
        kafka = KafkaHelper(broker, "demo")
        stack.callback(kafka.close)
        kafka.create_topic(partitions=args.partitions, name=TOPIC)
        orders = make_orders(args.records, args.seed)
        t0 = time.monotonic()
        metadata = kafka.produce(
            TOPIC,
            [(o["customer"].encode(), json.dumps(o).encode(), None, None) for o in orders],
            batch_size=1000,
        )
        rate = len(orders) / (time.monotonic() - t0)
        per_partition = Counter(m.partition for m in metadata)
        say(
            f"produced {len(orders):,} orders to '{TOPIC}' ({args.partitions} partitions, keyed "
            f"by customer) in batches of 1000 at {rate:,.0f} records/s: "
            f"{dict(sorted(per_partition.items()))}"
        )
        report["produced"] = len(orders)
        report["produce_rate"] = round(rate)

        # 3. the end-offset defect --------------------------------------------------------
        ends = kafka.end_offsets(TOPIC)
        consumer = kafka.consumer()
        try:
            from kafka import TopicPartition

            listed = consumer.end_offsets([TopicPartition(TOPIC, p) for p in ends])
        finally:
            consumer.close()
        listed_by_p = {tp.partition: off for tp, off in listed.items()}
        say(
            f"end offsets: ListOffsets says {dict(sorted(listed_by_p.items()))}, a fetch's high "
            f"watermark says {ends} (Tansu answers the last *batch*'s base offset + 1; "
            "gtbarrier takes the larger)"
        )
        if ends != dict(per_partition):
            raise AssertionError(f"end offsets {ends} != records produced {dict(per_partition)}")

        # 4. Spark reads it back through gtkafka -------------------------------------------
        t0 = time.monotonic()
        spark = start_spark(workdir / "spark")
        stack.callback(spark.stop)
        from pyspark.sql import functions as F  # noqa: N812 - the usual PySpark alias

        raw = (
            spark.read.format("gtkafka")
            .option("kafka.bootstrap.servers", broker.bootstrap)
            .option("subscribe", TOPIC)
            .option("startingOffsets", "earliest")
            .option("endingOffsets", "latest")
            .load()
        )
        parsed = raw.select(
            "partition",
            "offset",
            F.from_json(
                F.col("value").cast("string"), "order_id LONG, customer STRING, amount_cents LONG"
            ).alias("o"),
        ).select("partition", "offset", "o.*")
        totals = {
            r["customer"]: (r["orders"], r["cents"])
            for r in parsed.groupBy("customer")
            .agg(F.count("*").alias("orders"), F.sum("amount_cents").alias("cents"))
            .collect()
        }
        stats = parsed.agg(
            F.count("*").alias("rows"), F.countDistinct("order_id").alias("distinct")
        ).collect()[0]
        expected: dict[str, tuple[int, int]] = {}
        for o in orders:
            n, c = expected.get(o["customer"], (0, 0))
            expected[o["customer"]] = (n + 1, c + o["amount_cents"])
        if stats["rows"] != len(orders) or stats["distinct"] != len(orders):
            raise AssertionError(
                f"Spark read {stats['rows']} rows ({stats['distinct']} distinct "
                f"orders); {len(orders)} were produced"
            )
        if totals != expected:
            raise AssertionError(f"per-customer totals differ: spark {totals} != {expected}")
        say(
            f"Spark (local[2]) read {stats['rows']:,} rows through the gtkafka source in "
            f"{time.monotonic() - t0:.1f}s (incl. session start): every order exactly once, "
            f"totals of all {len(totals)} customers match"
        )
        top = sorted(totals.items(), key=lambda kv: -kv[1][1])[:3]
        for customer, (n, cents) in top:
            say(f"    {customer}: {n} orders, {cents / 100:,.2f} total")

        # 5. S3 through the state store -------------------------------------------------------
        s3.client().create_bucket(Bucket=BUCKET)
        store = open_store(StoreConfig(f"s3://{BUCKET}/foundation", s3.settings()))
        stack.callback(store.close)
        summary = {
            "topic": TOPIC,
            "records": len(orders),
            "end_offsets": {str(p): o for p, o in sorted(ends.items())},
            "customers": {c: {"orders": n, "cents": s} for c, (n, s) in sorted(totals.items())},
        }
        etag = store.create_json("summary.json", summary)
        try:
            store.create_json("summary.json", {"someone": "else"})
        except KeyExists:
            refused = True
        else:
            refused = False
        if not refused:
            raise AssertionError("a second conditional create of summary.json succeeded")
        stored, version = store.get_json("summary.json")
        if stored != summary or version != etag:
            raise AssertionError("S3 returned a different summary than the one stored")
        say(
            f"stored the summary at s3://{BUCKET}/foundation/summary.json (ETag {etag}) with a "
            "conditional create; a second create of the same key was refused (KeyExists)"
        )

        # 6. ZooKeeper ------------------------------------------------------------------------
        client = zk.client()
        stack.callback(client.close)
        stack.callback(client.stop)
        pointer = {"uri": f"s3://{BUCKET}/foundation/summary.json", "etag": etag}
        client.create(ZNODE, json.dumps(pointer).encode(), makepath=True)
        data, stat = client.get(ZNODE)
        if json.loads(data) != pointer:
            raise AssertionError(f"znode {ZNODE} holds {data!r}")
        say(f"wrote znode {ZNODE} -> {pointer} (version {stat.version}, zxid {stat.czxid})")
        report.update(spark_rows=stats["rows"], s3_etag=etag, znode=ZNODE)
    say("stopped Spark, ZooKeeper, S3 and Kafka")
    return report


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m demo", description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5000, help="orders to produce")
    parser.add_argument("--partitions", type=int, default=4, help="partitions of the topic")
    parser.add_argument("--seed", type=int, default=7, help="random seed of the orders")
    parser.add_argument(
        "--workdir",
        type=Path,
        default=REPO_ROOT / "demo-output" / time.strftime("foundation-%Y%m%d-%H%M%S"),
        help="where server data and logs go (default: demo-output/foundation-<time>)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    say("gtbarrier foundation demo: real Kafka (Tansu), S3 (moto), ZooKeeper and Spark")
    t0 = time.monotonic()
    report = run(args)
    say(f"done in {time.monotonic() - t0:.1f}s: {json.dumps(report)}")
    say(
        "what this shows: the servers, the batched producer, the end-offset rule, the gtkafka "
        "batch read, the S3 store's conditional writes and ZooKeeper all work here. The "
        "exactly-once streaming job (gtkafka -> barrier sink, snapshots, failures) is the "
        "main demo job that replaces this foundation demo."
    )
    return 0
