"""Two drivers for one pipeline at once, with real processes: the older is fenced, also
with every run claim and marker deleted.

Each driver runs ``integration_tests/sink_driver_program.py`` in its own process group
(the ``driver`` fixture); ``Chain`` runs them, ``killed`` waits for one that a fault
injected with ``GTBARRIER_FAULT`` (docs/sink.md) killed (test_sink_liveness.py uses both).
The driver SIGKILLed at every protocol step, with a write task that fails once, the
checkpoint deleted and the consumer raising, is one chain in test_sink_dead_letters.py.
"""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from harness.process import wait_until
from integration_tests.sink_helpers import FileChainState, read_bundles
from integration_tests.test_sink_pipeline import check_exactly_once_in_gt_order, produce_numbered
from state.layout import PipelineLayout
from state.stores import open_store

PROGRAM = Path(__file__).with_name("sink_driver_program.py")
DRIVER_TIMEOUT = 180.0


class Chain(FileChainState):
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


def killed(proc: Any) -> None:
    code = proc.wait(DRIVER_TIMEOUT)
    assert code == -signal.SIGKILL, f"driver exited {code}, not killed:\n{proc.output()[-3000:]}"


@pytest.mark.slow
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
    # every claim and marker gone (pruned, or deleted by hand): the first driver is fenced
    # by the generation it started at, which Spark pickled with its sink at its first
    # commit and hands to every commit of the run
    barrier = f"{c.layout.root}/barrier/"
    assert c.store.list(f"{barrier}runs/") == []  # this release writes none
    c.store.delete_many(c.store.list(barrier + "claims/"))
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
