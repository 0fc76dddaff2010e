"""Supervised runs (``coord.run``) against a consumer that fails: an HTTP endpoint that is down.

The barrier sink delivers to the reference receiver (``python -m gtbarrier.http_receiver``); while
it is not running every delivery fails, the query fails, and ``run()`` recovers and
restarts it with backoff. Without ZooKeeper: the resume point lives in the store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from gtbarrier import SnapshotCoordinator
from harness.coordinator_program import produce
from harness.receiver import Receiver
from integration_tests.coordinator_support import check_keyed_bundles, start_pipeline
from state.errors import ResetAttemptsExhausted

pytestmark = pytest.mark.slow

FAILING = {"delivery.maxRetries": "1", "delivery.retryBackoffMs": "100", "ack.timeoutMs": "3000"}


def _coordinator(spark: Any, s3: Any, tmp_path: Path, pipeline: str) -> SnapshotCoordinator:
    return SnapshotCoordinator(
        spark,
        pipeline_id=pipeline,
        state_uri=s3.uri("gtb"),
        checkpoint_location=tmp_path / "cp",
        state_options=s3.options(),
        snapshot_period="500ms",
    )


def _builder(  # noqa: PLR0917
    spark: Any,
    kafka: Any,
    s3: Any,
    topic: str,
    pipeline: str,
    url: str,
    tmp_path: Path,
    attempts: list[int],
    before: Any = None,
) -> Any:
    def build(coord: SnapshotCoordinator) -> Any:
        attempts.append(coord.fencing_token)
        if before is not None:
            before(len(attempts))
        return start_pipeline(
            spark,
            "keyed",
            bootstrap=kafka.bootstrap,
            topic=topic,
            pipeline=pipeline,
            state_uri=s3.uri("gtb"),
            checkpoint=tmp_path / "cp",
            token=coord.fencing_token,
            max_offsets=300,
            store_options=s3.options(),
            sink={"consumer": "http", "consumer.url": url, **FAILING},
        )

    return build


@pytest.mark.timeout(300)
def test_run_restarts_until_the_consumer_recovers(
    spark: Any,
    kafka: Any,
    s3: Any,
    receiver: Receiver,
    tmp_path: Path,
) -> None:
    topic = kafka.create_topic(partitions=2)
    produce(kafka, topic, 0, 900)
    attempts: list[int] = []

    def heal(attempt: int) -> None:
        if attempt == 3:  # the consumer comes back before the third start
            receiver.start()

    build = _builder(
        spark, kafka, s3, topic, "run-heals", f"{receiver.url}/keyed", tmp_path, attempts, heal
    )
    with _coordinator(spark, s3, tmp_path, "run-heals") as coord:
        q = coord.run(build, max_consecutive_reset_attempts=3, backoff="200ms")
        assert not q.isActive and q.exception() is None
        assert len(attempts) == 3
        assert coord.status()["gt_last"] == 2
    bundles = [
        (bid, pa.ipc.open_stream(body).read_all().to_pylist())
        for bid, body in receiver.bodies("keyed")
    ]
    assert [b for b, _ in bundles] == [0, 1, 2]
    check_keyed_bundles(bundles, 900)


@pytest.mark.timeout(300)
def test_run_gives_up_when_the_consumer_never_recovers(
    spark: Any, kafka: Any, s3: Any, tmp_path: Path
) -> None:
    topic = kafka.create_topic(partitions=2)
    produce(kafka, topic, 0, 300)
    url = "http://127.0.0.1:9/keyed"  # discard port: nothing answers
    attempts: list[int] = []
    build = _builder(spark, kafka, s3, topic, "run-dead", url, tmp_path, attempts)
    with _coordinator(spark, s3, tmp_path, "run-dead") as coord:
        with pytest.raises(ResetAttemptsExhausted) as info:
            coord.run(build, max_consecutive_reset_attempts=2, backoff="200ms")
        assert len(attempts) == 3  # the first start and two resets
        assert coord.status()["gt_last"] in (None, -1)  # nothing was ever delivered
    msg = str(info.value)
    assert "failed 3 consecutive time(s)" in msg and "max_consecutive_reset_attempts=2" in msg
    assert "DeliveryFailed" in msg and "127.0.0.1:9" in msg  # names the consumer that is down
