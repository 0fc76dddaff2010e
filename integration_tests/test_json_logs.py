"""The JSON log format, end to end: a driver program runs gtkafka -> barrier (file
consumer, ``Trigger.AvailableNow``) with ``GTBARRIER_LOG_FORMAT=json`` in its environment,
which Spark's Python workers on the driver inherit; every line gtbarrier writes to the
driver's stderr is then one JSON object, with the pipeline and the epoch: the per-epoch
and per-bundle lines at DEBUG, the summaries at INFO."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from integration_tests.sink_helpers import read_bundles

PROGRAM = Path(__file__).with_name("zero_call_program.py")
DRIVER_TIMEOUT = 300.0
OURS = ("gtbarrier", "datasource", "sink", "state")


@pytest.mark.timeout(420)
def test_the_driver_log_is_json_with_pipeline_and_epoch(
    driver: Any, kafka: Any, tmp_path: Path
) -> None:
    topic = kafka.create_topic(partitions=2)
    kafka.produce_values(topic, [str(i).encode() for i in range(200)])
    pipeline, out = "json-logs", tmp_path / "out"
    proc = driver.run(
        PROGRAM,
        *("--bootstrap", kafka.bootstrap, "--topic", topic, "--pipeline", pipeline),
        *("--state", f"file://{tmp_path}/state", "--out", str(out)),
        *("--checkpoint", str(tmp_path / "cp"), "--max-offsets", "100"),
        env={
            "GTBARRIER_LOG_FORMAT": "json",
            "GTBARRIER_LOG_LEVEL": "DEBUG",
            # a summary per event: what each process did is all in the log when it ends
            "GTBARRIER_LOG_SUMMARY_SECONDS": "0",
        },
    )
    assert proc.wait(DRIVER_TIMEOUT) == 0, proc.output()
    assert read_bundles(out).num_rows == 200

    # Spark's own lines (log4j) are text; gtbarrier's are JSON objects, each on its line
    lines = [json.loads(t) for t in proc.output().splitlines() if t.startswith('{"time"')]
    ours = [line for line in lines if line["logger"].split(".")[0] in OURS]
    assert ours, proc.output()
    text = [t for t in proc.output().splitlines() if "gtkafka: pipeline " in t]
    assert text and all(t.startswith('{"time"') for t in text), text
    planned = [line for line in ours if line["event"] == "epoch_planned"]
    delivered = [line for line in ours if line["event"] == "bundle_delivered"]
    assert [(x["pipeline"], x["epoch"], x["level"]) for x in planned] == [
        (pipeline, e, "DEBUG") for e in range(2)
    ]
    assert [(x["pipeline"], x["epoch"], x["bundle"]) for x in delivered] == [
        (pipeline, e, e) for e in range(2)
    ]
    assert all(x["figures"]["rows"] == 100 and x["query"] for x in delivered)
    summaries = [line for line in ours if line["event"] == "summary"]
    assert summaries and all(
        x["level"] == "INFO" and x["pipeline"] == pipeline and x["epoch"] is not None
        for x in summaries
    )
    figures = [x["figures"] for x in summaries]
    assert sum(f["epochs_planned"] for f in figures) == 2
    assert sum(f["bundles_delivered"] for f in figures) == 2
