"""Faults with real processes: drivers SIGKILLed at every protocol step, a write task that
fails once, the consumer raising, the checkpoint deleted, and two drivers at once.

Each driver runs ``integration_tests/sink_driver_program.py`` in its own process group
(the ``driver`` fixture); faults are injected with ``GTBARRIER_FAULT`` (docs/sink.md).
After every fault the query is restarted and, at the end, the consumer must hold every
surviving input record exactly once, in gt order.
"""

from __future__ import annotations

import json
import shutil
import signal
from pathlib import Path
from typing import Any

import pytest

from harness.process import wait_until
from integration_tests.sink_helpers import read_bundles
from integration_tests.test_sink_pipeline import check_exactly_once_in_gt_order, produce_numbered
from state.layout import PipelineLayout
from state.protocol.barrier_state import read_barrier_state
from state.records.barrier import BarrierState, Owner
from state.stores import open_store

PROGRAM = Path(__file__).with_name("sink_driver_program.py")
DRIVER_TIMEOUT = 180.0


class Chain:
    """One pipeline into a file consumer, run by successive driver processes."""

    def __init__(self, driver: Any, kafka: Any, tmp_path: Path, pipeline: str, topic: str) -> None:
        self.driver = driver
        self.kafka = kafka
        self.topic = topic
        self.pipeline = pipeline
        self.state_uri = f"file://{tmp_path}/state"
        self.out = tmp_path / "out"
        self.tmp_path = tmp_path
        self.store = open_store(self.state_uri)
        self.layout = PipelineLayout(pipeline)

    def run(
        self,
        checkpoint: str,
        *extra: str,
        fault: str | None = None,
        options: dict[str, str] | None = None,
    ) -> Any:
        args = [
            "--bootstrap",
            self.kafka.bootstrap,
            "--topic",
            self.topic,
            "--pipeline",
            self.pipeline,
            "--state",
            self.state_uri,
            "--checkpoint",
            str(self.tmp_path / checkpoint),
            "--max-offsets",
            "1000",
            "--sink-option",
            "consumer=file",
            "--sink-option",
            f"consumer.path={self.out}",
            *extra,
        ]
        for key, value in (options or {}).items():
            args += ["--sink-option", f"{key}={value}"]
        env = {"GTBARRIER_FAULT": fault} if fault else None
        return self.driver.run(PROGRAM, *args, env=env)

    def state(self) -> BarrierState:
        return read_barrier_state(self.store, self.layout)

    def progress(self) -> tuple[int, int | None]:
        """``(GT_last, the in-flight bundle's id or None)``."""
        s = self.state()
        return s.gt_last, None if s.inflight is None else s.inflight.bundle_id

    def owner(self) -> Owner:
        owner = self.state().owner
        assert owner is not None, "no driver claimed the pipeline yet"
        return owner

    def pointer(self) -> int | None:
        path = self.out / "_last_bundle.json"
        return json.loads(path.read_text())["bundle_id"] if path.exists() else None

    def bundle_files(self) -> list[int]:
        return sorted(int(p.name[7:19]) for p in self.out.glob("bundle-*.parquet"))

    def staged(self) -> list[Path]:
        return sorted((self.out / "_staging").rglob("*.parquet"))


def killed(proc: Any) -> None:
    code = proc.wait(DRIVER_TIMEOUT)
    assert code == -signal.SIGKILL, f"driver exited {code}, not killed:\n{proc.output()[-3000:]}"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_sigkill_at_every_protocol_step_then_restart_is_exactly_once(
    driver: Any, kafka: Any, tmp_path: Path
) -> None:
    n, partitions = 8_000, 2  # 8 epochs of 1000 records
    topic = kafka.create_topic(partitions=partitions)
    produce_numbered(kafka, topic, n, partitions)
    c = Chain(driver, kafka, tmp_path, "chain", topic)

    # 1. batch 0: a write task fails on its first attempt and is retried; then the driver
    #    dies before bundle 1 is recorded in flight
    killed(c.run("cp1", fault="write_fail:0,before_inflight:1"))
    assert c.progress() == (0, None)
    assert c.bundle_files() == [0] and c.pointer() == 0
    assert not [p for p in c.staged() if "/000000000000/" in str(p)]  # failed attempt cleaned

    # 2. the checkpoint is lost: a new one replays epoch 0 (dropped), delivers 1, and dies
    #    right after recording bundle 2 in flight
    shutil.rmtree(tmp_path / "cp1")
    killed(c.run("cp2", fault="after_inflight:2"))
    assert c.progress() == (1, 2)
    assert c.bundle_files() == [0, 1]

    # 3. bundle 2 is delivered again (the consumer never got it); bundle 3 reaches the
    #    consumer, which dies before its pointer moves (before the ack)
    killed(c.run("cp2", fault="after_deliver:3"))
    assert c.progress() == (2, 3)
    assert c.bundle_files() == [0, 1, 2, 3] and c.pointer() == 2

    # 4. dies after the consumer acknowledged bundle 4, before GT_last moves
    killed(c.run("cp2", fault="after_ack:4"))
    assert c.progress() == (3, 4) and c.pointer() == 4

    # 5. bundle 4 is found at the consumer (not sent again); dies after GT_last moved to 5
    #    but before Spark wrote its commit log: Spark will replay batch 5
    killed(c.run("cp2", fault="after_gt_last:5"))
    assert c.progress() == (5, None) and c.pointer() == 5
    assert (tmp_path / "cp2" / "commits" / "4").exists()
    assert not (tmp_path / "cp2" / "commits" / "5").exists()

    # 6. the consumer raises on bundle 6, the retries are spent, the query fails
    failing = c.run(
        "cp2",
        fault="deliver_error:6",
        options={"delivery.maxRetries": "1", "delivery.retryBackoffMs": "10"},
    )
    assert failing.wait(DRIVER_TIMEOUT) == 1
    assert "injected fault deliver_error:6" in failing.output()
    assert c.progress() == (5, 6)

    # 7. restart without faults, to the end
    final = c.run("cp2")
    assert final.wait(DRIVER_TIMEOUT) == 0, final.output()[-3000:]
    assert c.progress() == (7, None)
    assert c.bundle_files() == list(range(8)) and c.pointer() == 7
    check_exactly_once_in_gt_order(read_bundles(c.out), n, partitions)
    assert c.staged() == []
    assert c.owner().generation == 7  # every run claimed the pipeline once


@pytest.mark.timeout(600)
def test_two_drivers_at_once_the_older_is_fenced(driver: Any, kafka: Any, tmp_path: Path) -> None:
    partitions = 2
    topic = kafka.create_topic(partitions=partitions)
    produce_numbered(kafka, topic, 4000, partitions)
    c = Chain(driver, kafka, tmp_path, "twins", topic)
    first = c.run("cp-a", "--interval", "1")
    wait_until(
        lambda: (c.pointer() or -1) >= 1,
        timeout=DRIVER_TIMEOUT,
        what="the first driver to deliver two bundles",
    )
    owner_a = c.owner()
    # a second driver for the same pipeline, elsewhere (its own checkpoint): it replays
    # from the start, its first commit claims the pipeline
    second = c.run("cp-b", "--interval", "1")
    wait_until(
        lambda: c.owner().generation == 2,
        timeout=DRIVER_TIMEOUT,
        what="the second driver to claim the pipeline",
    )
    assert c.owner().run_id != owner_a.run_id
    # more input: the first driver's next commit finds itself fenced
    kafka.produce(
        topic,
        ((b"k%d" % i, b"%d" % i, None, i % partitions) for i in range(4000, 8000)),
        batch_size=2000,
    )
    assert first.wait(DRIVER_TIMEOUT) == 1
    out = first.output()
    assert "PipelineFenced" in out and "is a zombie" in out, out[-3000:]
    expected = len([i for i in range(8000) if i % 3])
    wait_until(
        lambda: c.out.exists() and read_bundles(c.out).num_rows >= expected,
        timeout=DRIVER_TIMEOUT,
        what="the second driver to deliver everything",
    )
    second.terminate()
    check_exactly_once_in_gt_order(read_bundles(c.out), 8000, partitions)
    assert c.owner().generation == 2 and c.state().inflight is None
