"""demo.progress (the JSON-lines log), demo.runner's tracker, demo.plot (the figure),
demo.pipeline's job file."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from demo.pipeline import DemoJob
from demo.plot import plot_run
from demo.progress import ProgressTail, ProgressWriter, read_events
from demo.runner import Tracker


def test_tail_returns_only_complete_new_lines(tmp_path: Path) -> None:
    path = tmp_path / "p.jsonl"
    tail = ProgressTail(path)
    assert list(tail.new()) == []
    ProgressWriter(path, driver=1).emit("batch", batch_id=0)
    with open(path, "a") as f:
        f.write('{"t": 1, "driver": 2, "ev')  # a line still being written
    assert [e["batch_id"] for e in tail.new()] == [0]
    with open(path, "a") as f:
        f.write('ent": "kill"}\n')
    assert [e["event"] for e in tail.new()] == ["kill"]
    assert list(tail.new()) == []
    assert [e["event"] for e in read_events(path)] == ["batch", "kill"]


def synthetic_run() -> list[dict[str, Any]]:
    """Two drivers: batches, snapshots, a kill at GT_last 3, replayed epochs dropped."""
    ev: list[dict[str, Any]] = []
    t = 1000.0
    for b in range(4):
        t += 2
        ev += [
            {
                "t": t - 0.1,
                "driver": 1,
                "event": "commit",
                "batch_id": b,
                "epoch": b,
                "action": "delivered",
                "rows": 100,
            },
            {"t": t, "driver": 1, "event": "gt_last", "gt_last": b},
            {
                "t": t,
                "driver": 1,
                "event": "batch",
                "batch_id": b,
                "epoch": b,
                "rows": 500,
                "duration_ms": 1500,
                "offsets": 500 * (b + 1),
                "watermark": None,
            },
        ]
        if b == 1:
            ev.append(
                {
                    "t": t + 0.5,
                    "driver": 1,
                    "event": "snapshot",
                    "epoch": 1,
                    "batch_id": 1,
                    "snapshot_id": 1,
                }
            )
    ev.append({"t": t + 1, "driver": 0, "event": "kill", "pid": 1, "gt_last": 3})
    t += 10
    for b in range(2, 6):
        t += 2
        action = "dropped" if b <= 3 else "delivered"
        ev += [
            {
                "t": t,
                "driver": 2,
                "event": "commit",
                "batch_id": b,
                "epoch": b,
                "action": action,
                "rows": 100,
            },
            {
                "t": t,
                "driver": 2,
                "event": "batch",
                "batch_id": b,
                "epoch": b,
                "rows": 500,
                "duration_ms": 1200,
                "offsets": 500 * (b + 1),
                "watermark": None,
            },
        ]
        if action == "delivered":
            ev.append({"t": t, "driver": 2, "event": "gt_last", "gt_last": b})
    return ev


def test_tracker_follows_gt_last_snapshots_and_delivered_records() -> None:
    track = Tracker()
    for e in synthetic_run():
        track.add(e)
    assert track.gt_last == {1: 3, 2: 5}
    assert track.delivered_records(1) == 2000
    assert [s["epoch"] for s in track.snapshots[1]] == [1]
    assert track.commits[(2, 2)]["action"] == "dropped"
    first = track.first(2, "commit", action="delivered")
    assert first is not None and first["epoch"] == 4


def test_plot_writes_a_png(tmp_path: Path) -> None:
    path = plot_run(synthetic_run(), tmp_path / "fig" / "demo.png", total_records=3000)
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000


def test_plot_refuses_an_empty_run(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no progress events"):
        plot_run([], tmp_path / "x.png", total_records=0)


def test_job_file_round_trip_and_options(tmp_path: Path) -> None:
    job = DemoJob(
        pipeline_id="p-1",
        topic="t",
        bootstrap="127.0.0.1:1",
        state_uri="s3://b/g",
        s3_options={"s3.endpoint": "http://127.0.0.1:2"},
        zookeeper_hosts="127.0.0.1:3",
        checkpoint="/tmp/cp",
        consumer="http",
        consumer_url="http://127.0.0.1:4/s",
    )
    job.save(tmp_path / "job.json")
    again = DemoJob.load(tmp_path / "job.json")
    assert again == job
    sink = again.sink_options(fencing_token=7)
    assert sink["consumer.url"] == "http://127.0.0.1:4/s" and "consumer.path" not in sink
    assert sink["fencing.token"] == "7" and sink["s3.endpoint"] == "http://127.0.0.1:2"
    source = again.source_options()
    assert source["pipeline.id"] == sink["pipeline.id"] == "p-1"
    assert source["startingOffsets"] == "earliest"
    assert json.loads((tmp_path / "job.json").read_text())["consumer"] == "http"


def test_runner_arguments() -> None:
    from demo.runner import DEFAULT_EVENTS, SMALL_EVENTS, parse_args

    assert parse_args(["--small"]).events == SMALL_EVENTS
    assert parse_args([]).events == DEFAULT_EVENTS
    args = parse_args(
        ["--small", "--events", "123", "--conf", "spark.x=1", "--master", "spark://127.0.0.1:7077"]
    )
    assert (args.events, args.conf, args.master) == (123, ["spark.x=1"], "spark://127.0.0.1:7077")
    assert args.workdir.is_absolute()
    for bad in (["--crash-at", "0.99"], ["--conf", "novalue"], ["--consumer", "kafka"]):
        with pytest.raises(SystemExit):
            parse_args(bad)
