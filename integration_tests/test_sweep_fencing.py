"""``gtbarrier sweep --delete`` against a driver that is still running, on real servers.

The state lives on SeaweedFS, the consumer is a file directory, and the sweep runs as the
operator runs it (``gtbarrier sweep ... --delete --zookeeper``). The driver here runs
without the coordinator, so it holds no ZooKeeper lock: the lock check finds no driver,
though one runs and has staged the parts of its next batch. The sweep must not make that
batch undeliverable: it takes a fencing token and claims the barrier before it deletes, so
the running driver's next commit is fenced before it records anything in flight, and the
replay of the batch by the next driver delivers it exactly once.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from harness.process import run_python
from sink.consumers.file import FileConsumer
from sink.faults import FaultInjector
from sink.options import SinkOptions
from sink.staging import FileStaging
from state.errors import PipelineFenced
from tests.sink_helpers import Pipeline, gt_batch


def file_pipeline(s3: Any, out: Path) -> tuple[Pipeline, dict[str, str]]:
    """A pipeline whose state is on SeaweedFS and whose consumer is ``out``."""
    raw = {
        "pipeline.id": "swept",
        "state.uri": s3.uri("state"),
        "consumer": "file",
        "consumer.path": str(out),
        **s3.options(),
    }
    p = Pipeline(SinkOptions.parse(raw))
    staging = FileStaging(str(out))
    p.staging = staging
    p.consumer = FileConsumer(str(out), staging, FaultInjector())  # type: ignore[assignment]
    return p, raw


def sweep(raw: dict[str, str], *args: str) -> dict[str, Any]:
    options = [
        item
        for name, value in raw.items()
        if name not in ("pipeline.id", "state.uri")
        for item in ("--option", f"{name}={value}")
    ]
    argv = ["--pipeline", raw["pipeline.id"], "--state-uri", raw["state.uri"], *options]
    done = run_python("-m", "gtbarrier", "sweep", *argv, *args, "--json")
    assert done.returncode == 0, done.stderr
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.mark.timeout(300)
def test_a_sweep_fences_a_running_driver_before_deleting_its_parts(
    s3: Any, zk: Any, tmp_path: Path
) -> None:
    out = tmp_path / "out"
    p, raw = file_pipeline(s3, out)
    p.record_batch(0, epoch=1)
    p.barrier().commit([p.write(0, [gt_batch(1, 0, [0, 1])])], 0)
    # the running driver (run-a) has staged batch 1 and is about to commit it
    p.record_batch(1, epoch=2)
    staged = p.write(1, [gt_batch(2, 0, [2, 3])])
    assert staged.part is not None

    swept = sweep(raw, "--delete", "--zookeeper", zk.hosts)
    assert staged.part.location in swept["deleted"]

    # run-a's commit is fenced before it records the batch in flight
    with pytest.raises(PipelineFenced):
        p.barrier().commit([staged], 1)
    assert p.state().inflight is None and p.state().gt_last == 1

    # the next driver replays batch 1: delivered once, nothing lost
    p.run_id = "run-b"
    replay = p.write(1, [gt_batch(2, 0, [2, 3])])
    assert p.barrier().commit([replay], 1).action == "delivered"
    assert p.state().gt_last == 2 and p.state().inflight is None
    values = sorted(
        v
        for f in sorted(out.glob("bundle-*.parquet"))
        for v in pq.read_table(f).column("value").to_pylist()
    )
    assert values == [b"0:0", b"0:1", b"0:2", b"0:3"]
