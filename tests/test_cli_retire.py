"""``gtbarrier retire`` on a ``file://`` store written by the real barrier protocol: the
dry run changes nothing, ``--yes`` deletes every key of the pipeline and no other's, and
the refusals exit 2 with one line (ZooKeeper: integration_tests/test_retire.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gtbarrier.cli import main
from sink.faults import FaultInjector, InjectedFault
from state.protocol.epoch_log import EpochLog
from state.protocol.fencing import read_token, take_token
from state.records.source_offset import SourceOffset
from tests.sink_helpers import Pipeline, gt_batch, sink_options

T = "orders"


class _CrashAfterInflight(FaultInjector):
    def at(self, step: str, n: int | None) -> None:
        if step == "after_inflight":
            raise InjectedFault("crash")


def written_pipeline(state_uri: str, pipeline_id: str) -> Pipeline:
    """Epochs 0-1, bundle 0 delivered, bundle 1 in flight, a dead run's staged part, a
    driver's token, a resume point and a snapshot kept in the store."""
    p = Pipeline(sink_options(**{"state.uri": state_uri, "pipeline.id": pipeline_id}))
    log = EpochLog(p.store, p.layout)
    start = log.create_start(SourceOffset(0, {(T, 0): 0}))
    for k, end in enumerate((2, 4)):
        start = log.record(start, SourceOffset(k + 1, {(T, 0): end}))
    take_token(p.store, p.layout, identifier="host:1:driver")
    p.record_batch(0, epoch=0)
    p.barrier().commit([p.write(0, [gt_batch(0, 0, [0, 1])])], 0)
    p.record_batch(1, epoch=1)
    with pytest.raises(InjectedFault):
        p.barrier(faults=_CrashAfterInflight()).commit([p.write(1, [gt_batch(1, 0, [2, 3])])], 1)
    p.write(5, [gt_batch(2, 0, [4])], run_id="run-dead", partition=3)
    p.store.create_json(p.layout.resume_point, {"written": "by a test"})
    p.store.create_json(p.layout.snapshot(1) + "manifest.json", {"written": "by a test"})
    return p


@pytest.fixture
def pipelines(tmp_path: Path) -> tuple[Pipeline, Pipeline]:
    """``p1`` to retire and ``p10`` beside it in the same store (a prefix of its name)."""
    uri = f"file://{tmp_path}/state"
    return written_pipeline(uri, "p1"), written_pipeline(uri, "p10")


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def retire_json(capsys: pytest.CaptureFixture[str], p: Pipeline, *argv: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, "retire", *_args(p), *argv, "--json")
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


def _args(p: Pipeline) -> list[str]:
    return ["--pipeline", p.options.pipeline_id, "--state-uri", p.options.store.uri]


def test_the_dry_run_lists_every_key_of_the_pipeline_and_changes_nothing(
    pipelines: tuple[Pipeline, Pipeline], capsys: pytest.CaptureFixture[str]
) -> None:
    p, other = pipelines
    keys = p.store.list("p1/")
    assert len(keys) > 8 and not [k for k in keys if k.startswith("p10/")]
    data = retire_json(capsys, p)
    assert data["keys"] == keys and data["deleted"] is False and data["znodes"] == []
    groups = {g["what"]: g["count"] for g in data["key_groups"]}
    assert groups["barrier state"] == 1 and groups["driver record"] == 1
    assert groups["epoch log"] == 2 and groups["batch records"] == 2
    assert groups["staged parts"] >= 2 and groups["snapshots"] == 1
    assert groups["resume point"] == 1 and groups["source start and floor"] == 1
    assert sum(groups.values()) == len(keys)
    assert p.store.list("p1/") == keys and read_token(p.store, p.layout) == 1

    code, out, err = run_cli(capsys, "retire", *_args(p))
    assert code == 0, err
    assert f"retire p1: {len(keys)} key(s) would be deleted (nothing deleted; --yes deletes)" in out
    assert "epoch log" in out and "p1/epochs/" in out
    assert p.store.list("p1/") == keys and other.store.list("p10/")


def test_yes_takes_the_pipeline_then_deletes_every_key_of_it_and_no_other(
    pipelines: tuple[Pipeline, Pipeline], capsys: pytest.CaptureFixture[str]
) -> None:
    p, other = pipelines
    keys, others = p.store.list("p1/"), other.store.list("p10/")
    data = retire_json(capsys, p, "--force", "--yes")
    assert data["deleted"] is True and data["fencing_token"] == 2
    assert set(keys) <= set(data["keys"])
    assert p.store.list("p1/") == [] and other.store.list("p10/") == others

    code, out, err = run_cli(capsys, "retire", *_args(other), "--force", "--yes")
    assert code == 0, err
    assert f"retire p10: {len(others)} key(s) deleted" in out
    assert other.store.list("") == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--pipeline", "nope"], "pipeline 'nope' not found in file://"),
        (["--pipeline", "p1", "--yes"], "--yes needs --zookeeper HOSTS"),
        (["--pipeline", "p1", "--force", "--yes", "--option", "x=1"], "unknown option(s) 'x'"),
    ],
)
def test_a_missing_pipeline_and_a_yes_without_a_check_exit_2_with_one_line(
    pipelines: tuple[Pipeline, Pipeline],
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    p = pipelines[0]
    keys = p.store.list("")
    code, out, err = run_cli(capsys, "retire", "--state-uri", p.options.store.uri, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("gtbarrier retire: error: ")
    assert message in err
    assert p.store.list("") == keys


def test_a_driver_that_takes_the_pipeline_meanwhile_makes_retire_refuse(
    pipelines: tuple[Pipeline, Pipeline],
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gtbarrier.cli import sweep
    from state.protocol.barrier_state import BarrierStateStore

    p = pipelines[0]

    def then_a_driver_starts(
        store: Any, layout: Any, *, identifier: str = "", coordinator: bool = True
    ) -> int:
        token = take_token(store, layout, identifier=identifier, coordinator=coordinator)
        newer = take_token(store, layout)
        BarrierStateStore(store, layout).claim_driver(newer, driver="host:1:d")
        return token

    monkeypatch.setattr(sweep, "take_token", then_a_driver_starts)
    keys = p.store.list("p1/")
    code, _, err = run_cli(capsys, "retire", *_args(p), "--force", "--yes")
    assert code == 2
    assert "a driver took pipeline 'p1'" in err and "nothing deleted" in err
    assert p.store.list("p1/") == keys and p.owner().driver == "host:1:d"
