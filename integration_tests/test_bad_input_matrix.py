"""Bad input against real servers (the matrix is docs/bad-input.md).

Each test shows (1) the error names the option or server, the value and what was
expected, (2) it comes before data moves where that is possible (nothing persisted,
staged, in flight or delivered), and (3) that after fixing the input and running again
the consumer holds every record exactly once. Cases that need no server are in
tests/test_bad_input_matrix.py; cases already covered elsewhere are referenced there.

The Spark cases share the session's SparkSession; the others run the barrier in-process.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.dataset as ds
import pytest

from datasource.options import KafkaSourceOptions
from datasource.schema import source_schema
from datasource.stream_reader import GlobalTimeKafkaStreamReader
from gtbarrier import SnapshotCoordinator
from harness.ports import free_port
from harness.receiver import Receiver
from sink.barrier import Barrier
from sink.consumers import open_consumer
from sink.consumers.kafka.kafka_rows import H_BUNDLE, H_INDEX
from sink.faults import FaultInjector
from sink.options import SinkOptions
from state.errors import ConfigError, DeliveryFailed, StoreConfigError, StoreUnavailable
from state.layout import PipelineLayout
from state.stores import open_store
from tests.sink_helpers import Pipeline, gt_batch

QUERY_TIMEOUT = 180.0


# --- helpers ------------------------------------------------------------------------------


def gtkafka(spark: Any, kafka: Any, topic: str, pipeline: str, state: str, **extra: str) -> Any:
    """The query under test: gtkafka -> (key, value, gt)."""
    options = {
        "kafka.bootstrap.servers": kafka.bootstrap,
        "subscribe": topic,
        "startingOffsets": "earliest",
        "pipeline.id": pipeline,
        "state.uri": state,
        "kafkaConsumer.pollTimeoutMs": "30000",
        **extra,
    }
    df = spark.readStream.format("gtkafka").options(**options).load()
    return df.select("key", "value", "gt")


def start(df: Any, sink: dict[str, str], checkpoint: Path, **trigger: Any) -> Any:
    return (
        df.writeStream.format("barrier")
        .options(**sink)
        .option("checkpointLocation", str(checkpoint))
        .trigger(**(trigger or {"availableNow": True}))
        .start()
    )


def run_to_end(df: Any, sink: dict[str, str], checkpoint: Path) -> None:
    query = start(df, sink, checkpoint)
    try:
        assert query.awaitTermination(QUERY_TIMEOUT), "the query did not finish"
    finally:
        if query.isActive:
            query.stop()


def failure_of(query: Any, timeout: float = QUERY_TIMEOUT) -> str:
    """The text of the failure that ends ``query`` (which must fail within ``timeout``)."""
    from pyspark.errors import StreamingQueryException

    try:
        with pytest.raises(StreamingQueryException) as info:
            query.awaitTermination(timeout)
    finally:
        if query.isActive:
            query.stop()
    return str(info.value)


def values(directory: Path) -> list[int]:
    """The values a reader of a file consumer's directory sees, sorted (dupes kept)."""
    if not directory.exists() or not list(directory.glob("bundle-*.parquet")):
        return []
    table = ds.dataset(str(directory), format="parquet").to_table(columns=["value"])
    return sorted(int(v) for v in table.column("value").to_pylist())


def staged_parts(directory: Path) -> list[Path]:
    return sorted((directory / "_staging").rglob("*.parquet"))


def produce(kafka: Any, topic: str, n: int, partitions: int) -> None:
    kafka.produce(topic, [(None, b"%d" % i, None, i % partitions) for i in range(n)], batch_size=50)


def wait_for(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout:g}s waiting for {what}"
        time.sleep(0.1)


# --- the source, in a query -----------------------------------------------------------------


@pytest.mark.timeout(300)
def test_topic_deleted_mid_stream_fails_then_is_skipped_with_fail_on_data_loss_false(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    """S14/S15. The running query fails at its next latestOffset, before an epoch is
    recorded; with failOnDataLoss=false the same checkpoint goes on without the topic."""
    topic = kafka.create_topic(partitions=2)
    produce(kafka, topic, 100, 2)
    state, out, checkpoint = f"file://{tmp_path}/state", tmp_path / "out", tmp_path / "cp"
    sink = {"pipeline.id": "deleted", "state.uri": state, "consumer.path": str(out)}
    query = start(
        gtkafka(spark, kafka, topic, "deleted", state),
        sink,
        checkpoint,
        processingTime="500 milliseconds",
    )
    wait_for((out / "_last_bundle.json").exists, QUERY_TIMEOUT, "the first bundle")
    admin = kafka.admin()
    try:
        admin.delete_topics([topic])
        wait_for(lambda: topic not in admin.list_topics(), 30, f"{topic} to be deleted")
    finally:
        admin.close()

    text = failure_of(query, 90)
    assert "DataLossError" in text and "failOnDataLoss=false" in text
    assert f"{topic}-0, {topic}-1 no longer exist on Kafka at {kafka.bootstrap}" in text
    store, layout = open_store(state), PipelineLayout("deleted")
    # only the epoch that was read: the failing one was not recorded
    assert store.list(layout.epochs_prefix) == [layout.epoch(0)]
    assert values(out) == list(range(100))

    run_to_end(
        gtkafka(spark, kafka, topic, "deleted", state, failOnDataLoss="false"), sink, checkpoint
    )
    # the vanished partitions keep their offsets: no new epoch, nothing to read
    assert store.list(layout.epochs_prefix) == [layout.epoch(0)]
    assert values(out) == list(range(100))  # nothing lost, nothing twice


@pytest.mark.timeout(300)
def test_starting_offsets_past_the_end_fail_at_start_then_the_fixed_option_is_used(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    """S11. Before the fix the start was persisted and the first batch failed with "offsets
    went backwards ... (topic recreated or truncated)"; fixing the option changed nothing,
    because the persisted start wins."""
    topic = kafka.create_topic(partitions=1)
    produce(kafka, topic, 30, 1)
    state, out, checkpoint = f"file://{tmp_path}/state", tmp_path / "out", tmp_path / "cp"
    sink = {"pipeline.id": "past-end", "state.uri": state, "consumer.path": str(out)}
    bad = f'{{"{topic}": {{"0": 500}}}}'
    query = start(
        gtkafka(spark, kafka, topic, "past-end", state, startingOffsets=bad), sink, checkpoint
    )
    text = failure_of(query)
    assert f"option 'startingOffsets' = '{bad}' is invalid" in text
    assert f"{topic}-0 = 500 > end 30" in text
    assert open_store(state).list() == [] and values(out) == []

    fixed = f'{{"{topic}": {{"0": 10}}}}'
    run_to_end(
        gtkafka(spark, kafka, topic, "past-end", state, startingOffsets=fixed), sink, checkpoint
    )
    assert values(out) == list(range(10, 30))


@pytest.mark.timeout(300)
def test_checkpoint_of_another_source_fails_before_reading_then_a_new_checkpoint_works(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    """S17. A checkpoint written by a query reading Spark's rate source."""
    checkpoint = tmp_path / "cp"
    rate = (
        spark.readStream.format("rate")
        .option("rowsPerSecond", "50")
        .load()
        .writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .start()
    )
    try:
        wait_for(lambda: (rate.lastProgress or {}).get("batchId", -1) >= 1, 60, "rate batches")
    finally:
        rate.stop()
    topic = kafka.create_topic(partitions=1)
    produce(kafka, topic, 20, 1)
    state, out = f"file://{tmp_path}/state", tmp_path / "out"
    sink = {"pipeline.id": "other", "state.uri": state, "consumer.path": str(out)}

    text = failure_of(start(gtkafka(spark, kafka, topic, "other", state), sink, checkpoint))
    assert "MalformedOffset" in text
    assert "checkpointLocation holds an offset of another source" in text
    assert "new checkpointLocation" in text
    assert open_store(state).list() == [] and values(out) == []

    run_to_end(gtkafka(spark, kafka, topic, "other", state), sink, tmp_path / "cp-new")
    assert values(out) == list(range(20))


# --- the sink, in a query ------------------------------------------------------------------


@pytest.mark.timeout(300)
def test_pipeline_id_mismatch_between_source_and_sink_fails_the_first_commit(
    spark: Any, kafka: Any, tmp_path: Path
) -> None:
    """K13. Spark aborts the failed batch (its staged parts are deleted); the fixed sink on
    the same checkpoint replays that batch and delivers it once."""
    topic = kafka.create_topic(partitions=2)
    produce(kafka, topic, 50, 2)
    state, out, checkpoint = f"file://{tmp_path}/state", tmp_path / "out", tmp_path / "cp"
    sink = {"pipeline.id": "sink-side", "state.uri": state, "consumer.path": str(out)}

    text = failure_of(start(gtkafka(spark, kafka, topic, "source-side", state), sink, checkpoint))
    assert "has no batch record" in text
    assert f"pipeline.id='sink-side', state.uri='{state}'" in text
    assert values(out) == [] and not (out / "_last_bundle.json").exists()
    assert staged_parts(out) == []
    assert open_store(state).list("sink-side/") == []  # nothing claimed, nothing in flight

    run_to_end(
        gtkafka(spark, kafka, topic, "source-side", state),
        {**sink, "pipeline.id": "source-side"},
        checkpoint,
    )
    assert values(out) == list(range(50))


# --- consumers and stores, without Spark ----------------------------------------------------


def _barrier(p: Pipeline) -> Barrier:
    return Barrier(p.options, p.store, p.consumer, p.staging, FaultInjector())


def _use(p: Pipeline, options: SinkOptions) -> None:
    """Point ``p`` at ``options`` (a restart of the driver with fixed options)."""
    p.options = options
    p.consumer = open_consumer(options, p.store)  # type: ignore[assignment]
    p.staging = p.consumer.staging


@pytest.mark.timeout(180)
@pytest.mark.parametrize("kind", ["kafka", "http"])
def test_unreachable_consumer_fails_in_bounded_time_then_delivers_once(
    kind: str, kafka: Any, receiver: Receiver, tmp_path: Path
) -> None:
    """K09/K10. Delivery fails after (delivery.maxRetries + 1) attempts of at most
    ack.timeoutMs each, plus the backoffs; the bundle stays in flight, nothing reaches the
    consumer; once the server is reachable the restarted driver delivers it once."""
    uri = f"memory://unreachable-{uuid.uuid4().hex}"
    base = {
        "pipeline.id": "p1",
        "state.uri": uri,
        "consumer": kind,
        "ack.timeoutMs": "2000",
        "delivery.maxRetries": "1",
        "delivery.retryBackoffMs": "100",
    }
    topic = kafka.create_topic(partitions=2)
    if kind == "kafka":
        dead = f"127.0.0.1:{free_port()}"
        broken = {"consumer.kafka.bootstrap.servers": dead, "consumer.topic": topic}
        fixed = {**broken, "consumer.kafka.bootstrap.servers": kafka.bootstrap}
    else:
        dead = receiver.url  # not started yet
        broken = fixed = {"consumer.url": f"{receiver.url}/s"}
    p = Pipeline(SinkOptions.parse({**base, **broken}))
    _use(p, p.options)
    rows = [gt_batch(1, 0, range(40))], [gt_batch(1, 1, range(25))]
    p.record_batch(0, 1)
    msgs = [p.write(0, part, partition=i) for i, part in enumerate(rows)]
    started = time.monotonic()
    with pytest.raises(DeliveryFailed) as info:
        _barrier(p).commit(msgs, 0)
    elapsed = time.monotonic() - started
    assert dead in str(info.value) and f"{kind} consumer" in str(info.value)
    assert elapsed < 2 * 2.0 + 10  # two attempts of ack.timeoutMs, backoff and slack
    inflight = p.state().inflight
    assert inflight is not None and inflight.bundle_id == 1 and p.state().gt_last == -1

    if kind == "http":
        receiver.start()
    else:
        assert all(off == 0 for off in kafka.end_offsets(topic).values())
    _use(p, SinkOptions.parse({**base, **fixed}))
    p.run_id = "run-b"  # the restarted driver replays batch 0
    msgs = [p.write(0, part, partition=i) for i, part in enumerate(rows)]
    outcome = _barrier(p).commit(msgs, 0)
    assert (outcome.recovered, outcome.action) == (1, "dropped")
    if kind == "http":
        assert [(b["bundle_id"], b["rows"]) for b in receiver.bundles("s")] == [(1, 65)]
    else:
        items = [dict(r.headers) for r in kafka.consume_all(topic)]
        assert sorted(int(h[H_INDEX]) for h in items) == list(range(65))
        assert {h[H_BUNDLE] for h in items} == {b"1"}


@pytest.mark.timeout(120)
def test_s3_consumer_with_a_missing_bucket_fails_in_the_write_task(s3: Any) -> None:
    """K11. Named as consumer.path, before any commit; the fixed path delivers once."""
    missing = f"s3://gtb-missing-{uuid.uuid4().hex[:8]}/out"
    base = {
        "pipeline.id": "p1",
        "state.uri": f"memory://s3c-{uuid.uuid4().hex}",
        "consumer": "s3",
        **s3.options(),
    }
    p = Pipeline(SinkOptions.parse({**base, "consumer.path": missing}))
    p.record_batch(0, 1)
    with pytest.raises(ConfigError) as info:
        p.write(0, [gt_batch(1, 0, range(10))])
    assert info.value.option == "consumer.path" and repr(missing) in str(info.value)
    assert "was not found at " + s3.endpoint in str(info.value)
    assert p.store.list() == [p.layout.batch(p.query_id, 0)]  # nothing in flight

    _use(p, SinkOptions.parse({**base, "consumer.path": s3.uri("out")}))
    outcome = _barrier(p).commit([p.write(0, [gt_batch(1, 0, range(10))])], 0)
    assert outcome.action == "delivered" and outcome.rows == 10
    keys = [o["Key"] for o in s3.client().list_objects_v2(Bucket=s3.bucket)["Contents"]]
    assert "out/bundle-000000000001.parquet" in keys


@pytest.mark.timeout(120)
def test_missing_state_bucket_is_named_by_the_source_and_the_coordinator(
    s3: Any, tmp_path: Path
) -> None:
    """T05. A missing bucket is not retried: the source fails at its first store read
    (before it asks Kafka anything), the coordinator at recover()."""
    uri = f"s3://gtb-missing-{uuid.uuid4().hex[:8]}/state"
    options = KafkaSourceOptions.parse(
        {
            "kafka.bootstrap.servers": f"127.0.0.1:{free_port()}",
            "subscribe": "t",
            "pipeline.id": "p1",
            "state.uri": uri,
            **s3.options(),
        }
    )
    started = time.monotonic()
    with pytest.raises(StoreConfigError) as info:
        GlobalTimeKafkaStreamReader(options, source_schema(False)).initialOffset()
    assert time.monotonic() - started < 10
    bucket = uri.split("/")[2]
    assert info.value.option == "state.uri" and repr(uri) in str(info.value)
    assert f"bucket '{bucket}' was not found at {s3.endpoint}" in str(info.value)
    coord = SnapshotCoordinator(
        None, "p1", uri, tmp_path / "cp", state_options=s3.options(), reset_timeout="20s"
    )
    started = time.monotonic()
    with pytest.raises(StoreConfigError, match=f"bucket '{bucket}' was not found"):
        coord.recover()
    assert time.monotonic() - started < 10
    coord.close()
    assert not (tmp_path / "cp").exists()


@pytest.mark.timeout(60)
def test_unreachable_s3_state_store_is_named_by_source_and_sink_in_bounded_time(
    tmp_path: Path,
) -> None:
    """T06 (the coordinator's case is test_coordinator_modes.py). Bounded by
    s3.retryDeadline per store call; the source's epoch log and the barrier retry a store
    call up to 6 times within 30 s (docs/bad-input.md, "Found and left")."""
    endpoint = f"http://127.0.0.1:{free_port()}"
    s3 = {
        "s3.endpoint": endpoint,
        "s3.accessKeyId": "x",
        "s3.secretAccessKey": "y",
        "s3.region": "us-east-1",
        "s3.retryDeadline": "500ms",
    }
    options = KafkaSourceOptions.parse(
        {
            "kafka.bootstrap.servers": f"127.0.0.1:{free_port()}",
            "subscribe": "t",
            "pipeline.id": "p1",
            "state.uri": "s3://gtb-state/x",
            **s3,
        }
    )
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as info:
        GlobalTimeKafkaStreamReader(options, source_schema(False)).initialOffset()
    assert time.monotonic() - started < 20
    assert "s3://gtb-state/x" in str(info.value) and endpoint in str(info.value)

    out = tmp_path / "out"
    p = Pipeline(
        SinkOptions.parse(
            {"pipeline.id": "p1", "state.uri": "s3://gtb-state/x", "consumer.path": str(out), **s3}
        )
    )
    _use(p, p.options)
    msgs = [p.write(0, [gt_batch(1, 0, range(5))])]  # file staging: no store request
    started = time.monotonic()
    with pytest.raises(StoreUnavailable) as info:
        _barrier(p).commit(msgs, 0)
    assert time.monotonic() - started < 20
    assert "s3://gtb-state/x" in str(info.value) and endpoint in str(info.value)
    assert values(out) == []


# --- the coordinator ------------------------------------------------------------------------


@pytest.mark.timeout(120)
def test_missing_zookeeper_chroot_is_created(zk: Any, tmp_path: Path) -> None:
    """C05. Not an error: the coordinator creates a missing chroot (kazoo alone would fail
    every call with NoNode) and keeps the lock and the resume point under it."""
    hosts = f"{zk.hosts}/missing/deeper"
    client = zk.client()
    assert client.exists("/missing") is None
    with SnapshotCoordinator(
        None,
        "p1",
        f"file://{tmp_path}/state",
        tmp_path / "cp",
        zookeeper_hosts=hosts,
        reset_timeout="30s",
    ) as coord:
        assert coord.recover().action == "keep"
        assert coord.fencing_token == 1
        assert client.get_children("/missing/deeper/gtbarrier/p1/driver")  # the lock
        assert coord.resume_point() is None
