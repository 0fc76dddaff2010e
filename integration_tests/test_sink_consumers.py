"""The s3, http and kafka consumers under the real barrier protocol, against real servers.

No Spark here: write tasks are run in-process (tests/sink_helpers.Pipeline) and the
barrier state lives in memory://; the consumers talk to SeaweedFS, the reference receiver
and Tansu.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from harness.receiver import Receiver
from sink.consumers import open_consumer
from sink.consumers.base import Consumer
from sink.consumers.kafka.kafka_rows import H_BUNDLE, H_COUNT, H_INDEX
from sink.faults import FaultInjector, InjectedFault
from sink.options import SinkOptions
from state.errors import CommitStateUnknown, DeliveryFailed
from state.stores import open_store
from tests.sink_helpers import Pipeline, gt_batch

pytestmark = pytest.mark.timeout(180)


class CrashAt(FaultInjector):
    """Raise (instead of SIGKILL) at one step, once."""

    def __init__(self, step: str) -> None:
        super().__init__()
        self.step = step

    def armed(self, step: str, n: int | None) -> bool:
        return step == self.step

    def at(self, step: str, n: int | None) -> None:
        if step == self.step:
            self.step = "done"
            raise InjectedFault(f"crash at {step}:{n}")


def pipeline(**raw: str) -> Pipeline:
    p = Pipeline(SinkOptions.parse({"pipeline.id": "p1", "state.uri": "memory://c", **raw}))
    p.options = SinkOptions.parse(
        {"pipeline.id": "p1", "state.uri": f"memory://{p.query_id}", **raw}
    )
    p.store = open_store(p.options.store)
    p.consumer = open_consumer(p.options, p.store, FaultInjector())  # type: ignore[assignment]
    p.staging = p.consumer.staging
    return p


def consumer(p: Pipeline) -> Consumer:
    c = p.consumer
    assert isinstance(c, Consumer)
    return c


def commit_epoch(p: Pipeline, batch_id: int, epoch: int, parts: list[list[pa.RecordBatch]]) -> Any:
    p.record_batch(batch_id, epoch)
    msgs = [p.write(batch_id, batches, partition=i) for i, batches in enumerate(parts)]
    return p.barrier().commit(msgs, batch_id)


# --- s3 ------------------------------------------------------------------------------


def test_s3_consumer_promotes_parts_server_side(s3: Any) -> None:
    p = pipeline(consumer="s3", **{"consumer.path": s3.uri("out")}, **s3.options())
    single = commit_epoch(p, 0, 1, [[gt_batch(1, 0, [0, 1, 2])]])
    assert single.action == "delivered" and single.driver_bytes == 0
    several = commit_epoch(p, 1, 2, [[gt_batch(2, 1, [0])], [gt_batch(2, 0, [5, 6])]])
    assert several.rows == 3
    client = s3.client()
    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket=s3.bucket)["Contents"])
    assert keys == [
        "out/_last_bundle.json",
        "out/bundle-000000000001.parquet",
        "out/bundle-000000000002.parquet",
    ]
    body = client.get_object(Bucket=s3.bucket, Key="out/bundle-000000000002.parquet")["Body"]
    table = pq.read_table(pa.BufferReader(body.read()))
    assert [v.as_py() for v in table.column("value")] == [b"0:5", b"0:6", b"1:0"]
    pointer = json.loads(
        client.get_object(Bucket=s3.bucket, Key="out/_last_bundle.json")["Body"].read()
    )
    assert pointer["bundle_id"] == 2
    last = consumer(p).last_bundle()
    assert last is not None and last.bundle_id == 2


def test_s3_consumer_parts_layout_never_moves_items_through_the_driver(s3: Any) -> None:
    p = pipeline(
        consumer="s3",
        **{"consumer.path": s3.uri("out"), "consumer.s3.layout": "parts"},
        **s3.options(),
    )
    outcome = commit_epoch(p, 0, 4, [[gt_batch(4, 1, [0])], [gt_batch(4, 0, [5, 6])]])
    assert outcome.driver_bytes == 0
    client = s3.client()
    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket=s3.bucket)["Contents"])
    assert keys == [
        "out/_last_bundle.json",
        "out/bundle-000000000004-00000.parquet",
        "out/bundle-000000000004-00001.parquet",
    ]
    values = []
    for key in keys[1:]:
        body = client.get_object(Bucket=s3.bucket, Key=key)["Body"].read()
        values += [v.as_py() for v in pq.read_table(pa.BufferReader(body)).column("value")]
    assert values == [b"0:5", b"0:6", b"1:0"]  # object names sort in gt order


def test_s3_consumer_redelivery_after_crash_is_idempotent(s3: Any) -> None:
    p = pipeline(consumer="s3", **{"consumer.path": s3.uri("out")}, **s3.options())
    consumer(p).faults = CrashAt("after_deliver")
    with pytest.raises(InjectedFault):
        commit_epoch(p, 0, 1, [[gt_batch(1, 0, [0, 1])]])
    assert consumer(p).last_bundle() is None  # the data is there, the pointer is not
    consumer(p).faults = FaultInjector()
    p.run_id = "run-b"
    outcome = commit_epoch(p, 0, 1, [[gt_batch(1, 0, [0, 1])]])
    assert outcome.recovered == 1 and outcome.action == "dropped"
    client = s3.client()
    keys = sorted(o["Key"] for o in client.list_objects_v2(Bucket=s3.bucket)["Contents"])
    assert keys == ["out/_last_bundle.json", "out/bundle-000000000001.parquet"]


def big_batch(epoch: int, partition: int, n: int, size: int) -> pa.RecordBatch:
    """``gt_batch`` with incompressible values of ``size`` bytes."""
    import os

    batch = gt_batch(epoch, partition, range(n))
    values = pa.array([os.urandom(size) for _ in range(n)], pa.binary())
    return pa.RecordBatch.from_arrays([values, batch.column(1)], names=["value", "gt"])


def test_s3_consumer_stitches_large_parts_server_side(s3: Any) -> None:
    p = pipeline(consumer="s3", **{"consumer.path": s3.uri("out")}, **s3.options())
    parts = [[big_batch(1, 0, 1200, 5000)], [big_batch(1, 1, 1100, 5000)]]
    outcome = commit_epoch(p, 0, 1, parts)
    assert outcome.rows == 2300
    assert outcome.driver_bytes == 0  # UploadPartCopy of the bodies + a footer part
    client = s3.client()
    obj = client.get_object(Bucket=s3.bucket, Key="out/bundle-000000000001.parquet")
    table = pq.read_table(pa.BufferReader(obj["Body"].read()))
    expected = pa.concat_tables([pa.Table.from_batches(b) for b in parts])
    assert table.column("value").equals(expected.column("value"))
    assert (
        pq.ParquetFile(
            pa.BufferReader(
                client.get_object(Bucket=s3.bucket, Key="out/bundle-000000000001.parquet")[
                    "Body"
                ].read()
            )
        ).metadata.num_rows
        == 2300
    )


# --- http ----------------------------------------------------------------------------


def test_http_consumer_delivers_arrow_and_jsonl(receiver: Receiver) -> None:
    receiver.start()
    arrow = pipeline(consumer="http", **{"consumer.url": f"{receiver.url}/orders"})
    commit_epoch(arrow, 0, 1, [[gt_batch(1, 0, [0, 1])], [gt_batch(1, 1, [0])]])
    commit_epoch(arrow, 1, 2, [[gt_batch(2, 0, [2])]])
    table = receiver.table("orders")
    assert [v.as_py() for v in table.column("value")] == [b"0:0", b"0:1", b"1:0", b"0:2"]
    assert [b["bundle_id"] for b in receiver.bundles("orders")] == [1, 2]
    last = consumer(arrow).last_bundle()
    assert last is not None and (last.bundle_id, last.gt) == (2, 2)

    jsonl = pipeline(
        consumer="http", **{"consumer.url": f"{receiver.url}/lines", "consumer.format": "jsonl"}
    )
    assert consumer(jsonl).last_bundle() is None
    commit_epoch(jsonl, 0, 5, [[gt_batch(5, 0, [7])]])
    [(bundle_id, body)] = receiver.bodies("lines")
    row = json.loads(body)
    assert bundle_id == 5 and row["value"] == "MDo3"  # base64 of b"0:7"
    assert row["gt"] == {"epoch": 5, "topic": "t", "partition": 0, "offset": 7}


def test_http_dropped_connection_after_store_is_retried_without_duplicate(
    receiver: Receiver,
) -> None:
    receiver.start("--drop-after-store", "1")
    p = pipeline(
        consumer="http", **{"consumer.url": f"{receiver.url}/s", "delivery.retryBackoffMs": "50"}
    )
    outcome = commit_epoch(p, 0, 1, [[gt_batch(1, 0, [0, 1, 2])]])
    assert outcome.action == "delivered"
    assert [(b["bundle_id"], b["rows"]) for b in receiver.bundles("s")] == [(1, 3)]
    assert p.state().gt_last == 1


def test_http_unreachable_receiver_fails_and_loses_nothing(receiver: Receiver) -> None:
    p = pipeline(
        consumer="http",
        **{
            "consumer.url": f"{receiver.url}/s",
            "delivery.maxRetries": "1",
            "delivery.retryBackoffMs": "10",
        },
    )
    with pytest.raises(DeliveryFailed, match="cannot connect"):
        commit_epoch(p, 0, 1, [[gt_batch(1, 0, [0, 1])]])
    assert p.inflight().bundle_id == 1
    receiver.start()
    p.run_id = "run-b"
    outcome = commit_epoch(p, 0, 1, [[gt_batch(1, 0, [0, 1])]])
    assert outcome.recovered == 1
    assert [(b["bundle_id"], b["rows"]) for b in receiver.bundles("s")] == [(1, 2)]


def test_http_receiver_crash_after_store_then_recovery(receiver: Receiver) -> None:
    receiver.start("--drop-after-store", "1")
    p = pipeline(
        consumer="http", **{"consumer.url": f"{receiver.url}/s", "delivery.maxRetries": "0"}
    )
    with pytest.raises(CommitStateUnknown, match="may have been stored"):
        commit_epoch(p, 0, 1, [[gt_batch(1, 0, [0])]])
    # recovery (a new run) asks /last: the receiver has bundle 1, so it is not sent again
    p.run_id = "run-b"
    outcome = commit_epoch(p, 1, 2, [[gt_batch(2, 0, [1])]])
    assert outcome.recovered == 1
    assert [b["bundle_id"] for b in receiver.bundles("s")] == [1, 2]


# --- kafka ---------------------------------------------------------------------------


def kafka_pipeline(kafka: Any, topic: str) -> Pipeline:
    return pipeline(
        consumer="kafka",
        **{"consumer.kafka.bootstrap.servers": kafka.bootstrap, "consumer.topic": topic},
    )


def kafka_items(kafka: Any, topic: str) -> list[tuple[int, int, bytes]]:
    out = []
    for rec in kafka.consume_all(topic):
        h = dict(rec.headers)
        out.append((int(h[H_BUNDLE]), int(h[H_INDEX]), rec.value))
    return sorted(out)


def test_kafka_consumer_sends_items_with_bundle_headers(kafka: Any) -> None:
    topic = kafka.create_topic(partitions=2)
    p = kafka_pipeline(kafka, topic)
    assert consumer(p).last_bundle() is None
    commit_epoch(p, 0, 1, [[gt_batch(1, 0, range(300))], [gt_batch(1, 1, range(200))]])
    commit_epoch(p, 1, 2, [[gt_batch(2, 0, range(300, 310))]])
    items = kafka_items(kafka, topic)
    assert len(items) == 510
    assert [i for b, i, _ in items if b == 1] == list(range(500))
    assert [v for b, _, v in items if b == 1][:2] == [b"0:0", b"0:1"]
    rec = kafka.consume_all(topic)[0]
    assert dict(rec.headers)[H_COUNT] in (b"500", b"10")
    last = consumer(p).last_bundle()
    assert last is not None and last.bundle_id == 2


def test_kafka_half_delivered_bundle_is_completed_not_repeated(kafka: Any) -> None:
    topic = kafka.create_topic(partitions=3)
    p = kafka_pipeline(kafka, topic)
    commit_epoch(p, 0, 1, [[gt_batch(1, 0, range(50))]])
    consumer(p).faults = CrashAt("after_deliver")
    with pytest.raises(InjectedFault):
        commit_epoch(p, 1, 2, [[gt_batch(2, 0, range(1000))], [gt_batch(2, 1, range(1000))]])
    half = [x for x in kafka_items(kafka, topic) if x[0] == 2]
    assert 0 < len(half) < 2000
    last = consumer(p).last_bundle()
    assert last is not None and last.bundle_id == 1  # bundle 2 is incomplete
    # restart: the in-flight bundle 2 is completed from what is missing
    consumer(p).faults = FaultInjector()
    p.run_id = "run-b"
    outcome = commit_epoch(p, 2, 3, [[gt_batch(3, 0, [7])]])
    assert outcome.recovered == 2
    items = kafka_items(kafka, topic)
    assert [i for b, i, _ in items if b == 2] == list(range(2000))
    assert len(items) == 50 + 2000 + 1


def test_kafka_unreachable_broker_is_a_clear_error(tmp_path: Path) -> None:
    from harness.ports import free_port

    p = pipeline(
        consumer="kafka",
        **{
            "consumer.kafka.bootstrap.servers": f"127.0.0.1:{free_port()}",
            "consumer.topic": "t",
            "delivery.maxRetries": "0",
            "ack.timeoutMs": "2000",
        },
    )
    with pytest.raises((DeliveryFailed, CommitStateUnknown), match="kafka consumer t@127"):
        commit_epoch(p, 0, 1, [[gt_batch(1, 0, [0])]])
    assert p.inflight().bundle_id == 1
