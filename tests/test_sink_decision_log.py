"""The barrier's decisions as log lines (sink.barrier's logger): one line each for a
delivered bundle (DEBUG: the pipeline's summary counts it at INFO), a batch dropped as
replayed, a resolved in-flight bundle and a fence."""

from __future__ import annotations

import json
import logging

import pytest

from sink.barrier import Barrier
from sink.faults import FaultInjector, InjectedFault
from state.errors import PipelineFenced
from state.log_format import JsonFormatter
from state.worker_logging import LEVEL_ENV, worker_log_level
from tests.sink_helpers import Pipeline, gt_batch

LOGGER = "sink.barrier"


def lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == LOGGER]


def test_delivered_and_dropped_bundles_are_one_line_each(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger=LOGGER)
    p = Pipeline()
    p.record_batch(0, epoch=1)
    p.barrier().commit([p.write(0, [gt_batch(1, 0, [0, 1])])], 0)
    p.record_batch(7, epoch=1)
    p.barrier().commit([p.write(7, [gt_batch(1, 0, [0, 1])], has_gt=False)], 7)
    delivered, dropped = [r for r in caplog.records if r.name == LOGGER]
    assert delivered.levelno == logging.DEBUG and dropped.levelno == logging.INFO
    said = delivered.getMessage()
    assert said.startswith("barrier: pipeline ")
    assert "bundle 1 (batch 0, 2 rows) delivered to " in said and "GT_last=1" in said
    assert "batch 7 dropped as replayed: bundle 1 (2 rows)" in dropped.getMessage()
    line = json.loads(JsonFormatter().format(delivered))
    assert (line["pipeline"], line["batch"], line["epoch"], line["bundle"]) == ("p1", 0, 1, 1)
    assert line["event"] == "bundle_delivered" and line["query"]
    assert line["figures"]["rows"] == 2 and line["figures"]["seconds"] > 0


def test_resolved_in_flight_bundle_and_fence_are_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Crash(FaultInjector):
        def at(self, step: str, n: int | None) -> None:
            if step == "after_inflight":
                raise InjectedFault("crash")

    p = Pipeline()
    p.record_batch(0, epoch=1)
    crashing: Barrier = p.barrier(faults=Crash())
    with pytest.raises(InjectedFault):
        crashing.commit([p.write(0, [gt_batch(1, 0, [0, 1])])], 0)
    caplog.set_level(logging.INFO, logger=LOGGER)
    p.run_id = "run-b"
    p.barrier().commit([p.write(0, [gt_batch(1, 0, [0, 1])])], 0)
    resolved = lines(caplog)[0]
    assert "in-flight bundle 1 (batch 0, 2 rows) resolved: delivered again; GT_last=1" in resolved

    caplog.clear()
    p.record_batch(1, epoch=2)
    with pytest.raises(PipelineFenced):
        p.barrier().commit([p.write(1, [gt_batch(2, 0, [2])], run_id="run-a")], 1)
    [fenced] = [r for r in caplog.records if r.name == LOGGER]
    assert fenced.levelno == logging.WARNING and "is a zombie and stops" in fenced.getMessage()


@pytest.mark.parametrize(
    ("value", "level"),
    [(None, logging.INFO), ("warning", logging.WARNING), ("OFF", None), ("nonsense", logging.INFO)],
)
def test_worker_log_level_from_the_environment(
    monkeypatch: pytest.MonkeyPatch, value: str | None, level: int | None
) -> None:
    if value is None:
        monkeypatch.delenv(LEVEL_ENV, raising=False)
    else:
        monkeypatch.setenv(LEVEL_ENV, value)
    assert worker_log_level() == level
