"""gtkafka -> Spark -> barrier, in the test's own SparkSession: stateless pipelines into every
consumer (exactly once, in gt order), aggregations against a batch query, bad input."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from harness.receiver import Receiver
from integration_tests.sink_helpers import read_bundles

QUERY_TIMEOUT = 600.0


def source(spark: Any, kafka: Any, topic: str, pipeline: str, state_uri: str, **extra: str) -> Any:
    opts = {
        "kafka.bootstrap.servers": kafka.bootstrap,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "pipeline.id": pipeline,
        "state.uri": state_uri,
        **extra,
    }
    return spark.readStream.format("gtkafka").options(**opts).load()


def run_available_now(
    df: Any, sink_options: dict[str, str], checkpoint: Path, output_mode: str = "append"
) -> Any:
    query = (
        df.writeStream.format("barrier")
        .options(**sink_options)
        .outputMode(output_mode)
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        finished = query.awaitTermination(QUERY_TIMEOUT)
    finally:
        if query.isActive:
            query.stop()
    if query.exception() is not None:
        raise query.exception()
    assert finished
    return query


def query_failure(df: Any, sink_options: dict[str, str], checkpoint: Path) -> str:
    from pyspark.errors import StreamingQueryException

    with pytest.raises(StreamingQueryException) as info:
        run_available_now(df, sink_options, checkpoint)
    return str(info.value)


def produce_numbered(kafka: Any, topic: str, n: int, partitions: int) -> None:
    kafka.produce(
        topic,
        ((b"k%d" % i, b"%d" % i, None, i % partitions) for i in range(n)),
        batch_size=5000,
    )


def expected_survivors(n: int, partitions: int) -> set[tuple[int, int]]:
    """(partition, offset) of records whose number is not a multiple of 3."""
    out = set()
    counters = [0] * partitions
    for i in range(n):
        p = i % partitions
        if i % 3:
            out.add((p, counters[p]))
        counters[p] += 1
    return out


def check_exactly_once_in_gt_order(table: pa.Table, n: int, partitions: int) -> None:
    gt = table.column("gt").combine_chunks()
    keys = list(
        zip(
            gt.field("epoch").to_pylist(),
            gt.field("topic").to_pylist(),
            gt.field("partition").to_pylist(),
            gt.field("offset").to_pylist(),
            strict=True,
        )
    )
    assert keys == sorted(keys), "items are not in gt order"
    pairs = [(k[2], k[3]) for k in keys]
    assert len(pairs) == len(set(pairs)), f"{len(pairs) - len(set(pairs))} duplicate item(s)"
    assert set(pairs) == expected_survivors(n, partitions)
    values = [int(v) for v in table.column("value").to_pylist()]
    assert all(v % 3 for v in values)


def stateless(df: Any) -> Any:
    from pyspark.sql import functions as sf

    return df.where(sf.col("value").cast("string").cast("long") % 3 != 0).select(
        "key", "value", "gt"
    )


@pytest.mark.timeout(300)
def test_stateless_pipeline_into_file_consumer_small(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    n, partitions = 20_000, 2
    topic = kafka.create_topic(partitions=partitions)
    produce_numbered(kafka, topic, n, partitions)
    state = f"file://{tmp_path}/state"
    df = source(spark, kafka, topic, "small", state, maxOffsetsPerTrigger="5000")
    out = tmp_path / "out"
    opts = {
        "pipeline.id": "small",
        "state.uri": state,
        "consumer": "file",
        "consumer.path": str(out),
    }
    query = run_available_now(stateless(df), opts, tmp_path / "cp")
    table = read_bundles(out)
    check_exactly_once_in_gt_order(table, n, partitions)
    # every bundle had 2 parts (one per Kafka partition), stitched into one file: Spark's
    # own Parquet reader reads them too, with row-group statistics
    back = spark.read.parquet(str(out))
    assert back.count() == table.num_rows
    assert back.where("gt.partition = 1 AND gt.offset = 4001").count() == 1
    names = sorted(p.name for p in out.iterdir() if not p.name.startswith(("_", ".")))
    assert names == [f"bundle-{e:012d}.parquet" for e in range(4)]
    pointer = json.loads((out / "_last_bundle.json").read_text())
    assert pointer["bundle_id"] == 3
    assert len(query.recentProgress) == 4


@pytest.mark.volume
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_stateless_pipeline_one_million_records_into_file_consumer(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    n, partitions = 1_000_000, 4
    topic = kafka.create_topic(partitions=partitions)
    t0 = time.monotonic()
    produce_numbered(kafka, topic, n, partitions)
    produced = time.monotonic() - t0
    state = f"file://{tmp_path}/state"
    df = source(spark, kafka, topic, "million", state, maxOffsetsPerTrigger="250000")
    out = tmp_path / "out"
    opts = {
        "pipeline.id": "million",
        "state.uri": state,
        "consumer": "file",
        "consumer.path": str(out),
    }
    t1 = time.monotonic()
    run_available_now(stateless(df), opts, tmp_path / "cp")
    ran = time.monotonic() - t1
    table = read_bundles(out)
    check_exactly_once_in_gt_order(table, n, partitions)
    print(
        f"1M records: produced in {produced:.1f}s, query ran {ran:.1f}s "
        f"({n / ran:,.0f} records/s), {table.num_rows} delivered"
    )


def s3_bundles(s3: Any, prefix: str) -> tuple[list[str], pa.Table]:
    import pyarrow.parquet as pq

    client = s3.client()
    pages = client.get_paginator("list_objects_v2").paginate(Bucket=s3.bucket, Prefix=prefix)
    keys = sorted(o["Key"] for page in pages for o in page.get("Contents", []))
    names = [k for k in keys if not k.rsplit("/", 1)[-1].startswith(("_", "."))]
    tables = [
        pq.read_table(pa.BufferReader(client.get_object(Bucket=s3.bucket, Key=k)["Body"].read()))
        for k in names
    ]
    return keys, pa.concat_tables(tables)


@pytest.mark.timeout(300)
def test_stateless_pipeline_into_s3_consumer(
    spark: Any, kafka: Any, s3: Any, tmp_path: Path
) -> None:
    n, partitions = 60_000, 2
    topic = kafka.create_topic(partitions=partitions)
    produce_numbered(kafka, topic, n, partitions)
    state = s3.uri("state")
    df = source(spark, kafka, topic, "to-s3", state, maxOffsetsPerTrigger="30000", **s3.options())
    opts = {
        "pipeline.id": "to-s3",
        "state.uri": state,
        "consumer": "s3",
        "consumer.path": s3.uri("out"),
        **s3.options(),
    }
    run_available_now(stateless(df), opts, tmp_path / "cp")
    keys, table = s3_bundles(s3, "out/")
    check_exactly_once_in_gt_order(table, n, partitions)
    assert "out/_last_bundle.json" in keys
    assert not [k for k in keys if k.startswith("out/_staging/")]  # promoted and cleaned


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_stateless_pipeline_into_kafka_consumer(spark: Any, kafka: Any, tmp_path: Path) -> None:
    from sink.consumers.kafka.kafka_rows import H_BUNDLE, H_INDEX

    n, partitions = 100_000, 2
    topic = kafka.create_topic(partitions=partitions)
    out_topic = kafka.create_topic(partitions=3)
    produce_numbered(kafka, topic, n, partitions)
    state = f"file://{tmp_path}/state"
    df = source(spark, kafka, topic, "to-kafka", state, maxOffsetsPerTrigger="25000")
    opts = {
        "pipeline.id": "to-kafka",
        "state.uri": state,
        "consumer": "kafka",
        "consumer.kafka.bootstrap.servers": kafka.bootstrap,
        "consumer.topic": out_topic,
    }
    run_available_now(stateless(df), opts, tmp_path / "cp")
    items = []
    for rec in kafka.consume_all(out_topic):
        h = dict(rec.headers)
        items.append((int(h[H_BUNDLE]), int(h[H_INDEX]), int(rec.value), rec.key))
    items.sort()
    numbers = [v for _, _, v, _ in items]
    assert len(numbers) == len(set(numbers)), "duplicates in the output topic"
    assert set(numbers) == {i for i in range(n) if i % 3}
    # (bundle, index) order is gt order: (partition, offset) = (i % 2, i // 2) ascends
    order = [(b, i % partitions, i // partitions) for b, _, i, _ in items]
    assert order == sorted(order)
    assert all(k == b"k%d" % v for _, _, v, k in items)


@pytest.mark.timeout(400)
def test_stateless_pipeline_into_http_consumer_unreachable_then_dropped_ack(
    spark: Any, kafka: Any, tmp_path: Path, receiver: Receiver
) -> None:
    """1. The receiver is down: the batch fails with a clear error, bundle 0 stays in
    flight. 2. Restarted with the receiver up, bundle 0 is delivered; the receiver stores
    bundle 1 and drops the connection; no retries: the query fails. 3. Restarted, the
    barrier learns from GET /last that bundle 1 arrived and goes on: exactly once."""
    n, partitions = 100_000, 2
    topic = kafka.create_topic(partitions=partitions)
    produce_numbered(kafka, topic, n, partitions)
    state = f"file://{tmp_path}/state"
    opts = {
        "pipeline.id": "to-http",
        "state.uri": state,
        "consumer": "http",
        "consumer.url": f"{receiver.url}/orders",
        "delivery.maxRetries": "1",
        "delivery.retryBackoffMs": "50",
    }

    def df() -> Any:
        return stateless(
            source(spark, kafka, topic, "to-http", state, maxOffsetsPerTrigger="25000")
        )

    text = query_failure(df(), opts, tmp_path / "cp")
    assert "cannot connect" in text and f"{receiver.url}/orders" in text
    assert "stays recorded in flight" in text

    receiver.start("--drop-after-store", "1")
    text = query_failure(df(), {**opts, "delivery.maxRetries": "0"}, tmp_path / "cp")
    assert "may have been stored" in text
    assert [b["bundle_id"] for b in receiver.bundles("orders")] == [0, 1]

    run_available_now(df(), opts, tmp_path / "cp")
    assert [b["bundle_id"] for b in receiver.bundles("orders")] == [0, 1, 2, 3]
    check_exactly_once_in_gt_order(receiver.table("orders"), n, partitions)


# --- stateful queries: the consumer's final content vs a batch query ---------------------


def produce_events(kafka: Any, topic: str, rows: list[tuple[int, int]], partitions: int) -> None:
    """Values ``"<key>,<event second>"``, row i to partition i % partitions."""
    kafka.produce(
        topic,
        ((None, b"%d,%d" % row, None, i % partitions) for i, row in enumerate(rows)),
        batch_size=1000,
    )


def parse_events(df: Any) -> Any:
    from pyspark.sql import functions as sf

    parts = sf.split(sf.col("value").cast("string"), ",")
    return df.select(
        parts.getItem(0).cast("int").alias("k"),
        sf.timestamp_seconds(parts.getItem(1).cast("long")).alias("event_time"),
    )


def windowed_counts(df: Any) -> Any:
    from pyspark.sql import functions as sf

    return (
        df.groupBy(sf.window("event_time", "10 seconds"), "k")
        .count()
        .select(sf.col("window.start").cast("long").alias("start"), "k", "count")
    )


@pytest.mark.timeout(300)
def test_windowed_aggregation_with_watermark_in_append_mode_equals_batch_query(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    partitions = 2
    topic = kafka.create_topic(partitions=partitions)
    events = [(i % 3, i // 10) for i in range(2000)]  # 200 s of event time, 10 events/s
    produce_events(kafka, topic, [*events, (0, 10_000)], partitions)  # + a watermark push
    state = f"file://{tmp_path}/state"
    out = tmp_path / "out"
    opts = {"pipeline.id": "windows", "state.uri": state, "consumer.path": str(out)}

    def query() -> Any:
        df = parse_events(source(spark, kafka, topic, "windows", state, maxOffsetsPerTrigger="700"))
        return windowed_counts(df.withWatermark("event_time", "30 seconds"))

    run_available_now(query(), opts, tmp_path / "cp")
    # no-data batches are off, so windows closed by the last watermark wait for more data
    kafka.produce(topic, [(None, b"1,10001", None, 0)])
    run_available_now(query(), opts, tmp_path / "cp")

    got = read_bundles(out).to_pylist()
    keys = [(r["start"], r["k"]) for r in got]
    assert len(keys) == len(set(keys)), "a window was delivered twice"
    batch = windowed_counts(
        parse_events(
            spark.read.format("gtkafka")
            .options(**{"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic})
            .load()
        )
    ).where("start < 10000")
    expected = {(r["start"], r["k"], r["count"]) for r in batch.collect()}
    assert len(expected) == 20 * 3
    assert {(r["start"], r["k"], r["count"]) for r in got} == expected


@pytest.mark.timeout(300)
def test_aggregation_in_complete_mode_equals_batch_query_and_update_mode_is_refused(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    """PySpark 4.3's Python sinks support append and complete mode only: Spark requires
    SupportsStreamingUpdateAsAppend for update mode, which its Python write builder lacks.
    In complete mode every bundle is the whole aggregate and the newest one is the result."""
    import pyarrow.parquet as pq
    from pyspark.errors import StreamingQueryException

    partitions = 2
    topic = kafka.create_topic(partitions=partitions)
    produce_events(kafka, topic, [(i % 7, i) for i in range(3000)], partitions)
    state = f"file://{tmp_path}/state"
    out = tmp_path / "out"
    opts = {"pipeline.id": "complete", "state.uri": state, "consumer.path": str(out)}

    def counts() -> Any:
        df = source(spark, kafka, topic, "complete", state, maxOffsetsPerTrigger="1000")
        return parse_events(df).groupBy("k").count()

    with pytest.raises(StreamingQueryException, match="does not support Update mode"):
        run_available_now(counts(), opts, tmp_path / "cp-update", output_mode="update")
    assert not out.exists() or not [p for p in out.iterdir() if p.name.startswith("bundle-")]

    run_available_now(counts(), opts, tmp_path / "cp", output_mode="complete")
    files = sorted(p for p in out.iterdir() if p.name.startswith("bundle-"))
    assert len(files) == 3  # 3000 records, 1000 per batch: one bundle per batch
    totals = [sum(r["count"] for r in pq.read_table(f).to_pylist()) for f in files]
    assert totals == [1000, 2000, 3000]  # each bundle is the aggregate so far
    final = {r["k"]: r["count"] for r in pq.read_table(files[-1]).to_pylist()}
    batch = (
        parse_events(
            spark.read.format("gtkafka")
            .options(**{"kafka.bootstrap.servers": kafka.bootstrap, "subscribe": topic})
            .load()
        )
        .groupBy("k")
        .count()
    )
    assert final == {r["k"]: r["count"] for r in batch.collect()}


# --- bad input ----------------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_bad_options_wrong_gt_type_and_unwritable_directory_fail_before_data_moves(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    from pyspark.sql import functions as sf

    topic = kafka.create_topic(partitions=1)
    produce_numbered(kafka, topic, 100, 1)
    state = f"file://{tmp_path}/state"
    df = source(spark, kafka, topic, "bad", state)
    out = tmp_path / "out"
    base = {"pipeline.id": "bad", "state.uri": state, "consumer.path": str(out)}

    text = query_failure(
        df.select("key", "value"), {**base, "consumer.url": "http://x"}, tmp_path / "cp1"
    )
    assert "option 'consumer.url'" in text and "not to be set with consumer=file" in text
    text = query_failure(
        df.select("key", "value"), {**base, "consumer.pth": "/x"}, tmp_path / "cp2"
    )
    assert "unknown option(s) 'consumer.pth'" in text

    text = query_failure(
        df.select("key", "value", sf.col("offset").cast("string").alias("gt")),
        base,
        tmp_path / "cp3",
    )
    assert "option 'gt' = 'string'" in text and "struct<epoch: bigint" in text

    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    text = query_failure(
        df.select("key", "value", "gt"),
        {**base, "consumer.path": str(blocker / "out")},
        tmp_path / "cp4",
    )
    assert f"consumer.path '{blocker / 'out'}' is not a writable directory" in text
    assert not out.exists()  # nothing was staged or delivered anywhere
