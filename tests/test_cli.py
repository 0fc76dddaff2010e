"""The operator CLI (gtbarrier.cli): arguments, output, and each command against a
memory:// pipeline written by the real barrier protocol (servers: integration_tests)."""

from __future__ import annotations

import json
from typing import Any

import pyarrow as pa
import pytest

from gtbarrier.cli import build_parser, main
from gtbarrier.cli.common import UsageError, parse_options
from gtbarrier.cli.output import Result, Table, cell, render, render_table
from sink.faults import FaultInjector, InjectedFault
from state.protocol.epoch_log import EpochLog
from state.records.source_offset import SourceOffset
from tests.sink_helpers import Pipeline, gt_batch

T = "orders"


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    data: dict[str, Any] = json.loads(out)
    return data


# --- arguments and output ---------------------------------------------------------


def test_options_parse_as_name_value_pairs() -> None:
    assert parse_options(["s3.endpoint=http://h:1", "a=b=c"]) == {
        "s3.endpoint": "http://h:1",
        "a": "b=c",
    }
    with pytest.raises(UsageError, match="expected NAME=VALUE"):
        parse_options(["novalue"])


def test_every_command_takes_json_and_the_parser_needs_a_command() -> None:
    parser = build_parser()
    for command in ("status", "epochs", "sweep"):
        args = parser.parse_args(
            [command, "--pipeline", "p", "--state-uri", "memory://x", "--json"]
        )
        assert args.json and args.command == command
    with pytest.raises(SystemExit) as exit_:
        parser.parse_args([])
    assert exit_.value.code == 2


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["status", "--state-uri", "memory://x"], "--pipeline is required"),
        (["status", "--pipeline", "p"], "--state-uri is required"),
        (["status", "--pipeline", "p", "--state-uri", "ftp://x"], "option 'state.uri'"),
        (
            ["epochs", "--pipeline", "p", "--state-uri", "memory://x", "--from", "3", "--to", "1"],
            "--from 3 is after --to 1",
        ),
        (
            ["status", "--pipeline", "p", "--state-uri", "memory://x", "--option", "x=1"],
            "unknown option(s) 'x'",
        ),
        (
            ["status", "--pipeline", "nobody", "--state-uri", "memory://cli-empty"],
            "pipeline 'nobody' not found in memory://cli-empty",
        ),
        (
            ["sweep", "--pipeline", "p", "--state-uri", "memory://x", "--delete"],
            "--delete needs --zookeeper HOSTS",
        ),
    ],
)
def test_bad_arguments_and_missing_pipelines_exit_2_with_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith(f"gtbarrier {argv[0]}: error: ")
    assert message in err


def test_tables_align_columns_and_cells_read_naturally() -> None:
    table = Table("t", ("a", "bb"), ((1, None), (True, 12345)))
    assert render(Result({}, (table,)), as_json=False).splitlines() == [
        "t",
        "  a    bb",
        "  ---  ------",
        "  1    -",
        "  yes  12,345",
    ]
    assert cell({"b": 1, "a": [2]}) == '{"a":[2],"b":1}' and cell(2.25) == "2.2"
    assert render(Result({}, (Table("e", ("x",), ()),)), as_json=False) == "e\n  (none)"
    assert json.loads(render(Result({"k": 1}, (table,)), as_json=True)) == {"k": 1}
    fields = Table.fields("f", [("GT_last", 3), ("owner", "run-a")])
    assert render_table(fields).splitlines() == ["f", "  GT_last  3", "  owner    run-a"]


# --- the commands against a pipeline ------------------------------------------------


class _CrashAfterInflight(FaultInjector):
    def at(self, step: str, n: int | None) -> None:
        if step == "after_inflight":
            raise InjectedFault("crash")


@pytest.fixture
def pipeline() -> Pipeline:
    """Epochs 0-2 recorded; bundle 0 delivered; bundle 1 in flight (a crash); a part
    staged by a run that died before its commit."""
    p = Pipeline()
    log = EpochLog(p.store, p.layout)
    start = log.create_start(SourceOffset(0, {(T, 0): 0, (T, 1): 0}))
    ends = [{(T, 0): 2, (T, 1): 1}, {(T, 0): 4, (T, 1): 1}, {(T, 0): 5, (T, 1): 3}]
    for k, end in enumerate(ends):
        start = log.record(start, SourceOffset(k + 1, end))
    p.record_batch(0, epoch=0)
    p.barrier().commit([p.write(0, [gt_batch(0, 0, [0, 1])])], 0)
    p.record_batch(1, epoch=1)
    with pytest.raises(InjectedFault):
        p.barrier(faults=_CrashAfterInflight()).commit([p.write(1, [gt_batch(1, 0, [2, 3])])], 1)
    p.write(5, [gt_batch(2, 0, [4])], run_id="run-dead", partition=3)
    return p


def _args(p: Pipeline) -> list[str]:
    return ["--pipeline", p.options.pipeline_id, "--state-uri", p.options.store.uri]


def test_status_shows_gt_last_in_flight_owner_and_epochs(
    pipeline: Pipeline, capsys: pytest.CaptureFixture[str]
) -> None:
    data = run_json(capsys, "status", *_args(pipeline))
    barrier = data["barrier"]
    assert barrier["gt_last"] == 0
    assert barrier["inflight"]["bundle_id"] == 1 and barrier["inflight"]["rows"] == 2
    assert barrier["owner"]["run_id"] == "run-a" and barrier["owner"]["generation"] == 1
    assert data["epochs"]["recorded"] == 3 and data["epochs"]["last_recorded"] == 2
    assert [e["records"] for e in data["epochs"]["newest"]] == [3, 2, 3]
    assert [e["acknowledged"] for e in data["epochs"]["newest"]] == [True, False, False]
    assert data["resume_point"] is None and data["lag"] is None

    code, out, _ = run_cli(capsys, "status", *_args(pipeline))
    assert code == 0
    assert "in-flight bundle               1 (batch 1, 2 rows, 1 part(s))" in out
    assert "orders[0:2-4]" in out  # epoch 1 moved partition 0 only


def test_epochs_range(pipeline: Pipeline, capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(capsys, "epochs", *_args(pipeline), "--from", "1")
    assert [e["epoch"] for e in data["epochs"]] == [1, 2]
    assert data["epochs"][1]["start"] == {T: {"0": 4, "1": 1}}
    assert data["epochs"][1]["end"] == {T: {"0": 5, "1": 3}}
    assert [
        e["epoch"] for e in run_json(capsys, "epochs", *_args(pipeline), "--newest", "1")["epochs"]
    ] == [2]


def test_sweep_lists_leftovers_keeps_the_in_flight_bundle_and_deletes_only_when_told(
    pipeline: Pipeline, capsys: pytest.CaptureFixture[str]
) -> None:
    http = ["--option", "consumer=http", "--option", "consumer.url=http://127.0.0.1:9/b"]
    data = run_json(capsys, "sweep", *_args(pipeline), *http)
    found = {f["run_id"]: f for f in data["found"]}
    assert set(found) == {"run-a", "run-dead"}
    assert found["run-a"]["in_flight"] and found["run-a"]["batch_id"] == 1
    assert not found["run-dead"]["in_flight"] and found["run-dead"]["batch_id"] == 5
    assert data["leftovers"] == 1 and data["deleted"] == []
    assert len(pipeline.staged()) == 2

    data = run_json(capsys, "sweep", *_args(pipeline), *http, "--delete", "--force")
    assert data["deleted"] == [found["run-dead"]["location"]]
    assert pipeline.staged() == [found["run-a"]["location"]]
    assert pipeline.inflight().locations == (found["run-a"]["location"],)


def test_sweep_finds_a_file_consumers_temp_files(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    p = Pipeline()
    p.record_batch(0, epoch=0)
    p.barrier().commit([p.write(0, [pa.record_batch({"v": [1]})], has_gt=False)], 0)
    (tmp_path / ".tmp-abc").write_bytes(b"x")
    file_opts = ["--option", "consumer=file", "--option", f"consumer.path={tmp_path}"]
    data = run_json(capsys, "sweep", *_args(p), *file_opts, "--delete", "--force")
    assert [f["location"] for f in data["found"]] == [".tmp-abc"]
    assert data["deleted"] == [".tmp-abc"] and not (tmp_path / ".tmp-abc").exists()


def test_sweep_delete_takes_the_pipeline_and_refuses_a_newer_driver(
    pipeline: Pipeline, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from gtbarrier.cli import sweep
    from state.protocol.barrier_state import BarrierStateStore
    from state.protocol.fencing import read_token, take_token

    http = ["--option", "consumer=http", "--option", "consumer.url=http://127.0.0.1:9/b"]
    before = read_token(pipeline.store, pipeline.layout)
    run_json(capsys, "sweep", *_args(pipeline), *http, "--delete", "--force")
    owner = pipeline.owner()
    assert owner.token == before + 1 and owner.driver is not None
    assert owner.driver.startswith("gtbarrier-sweep:")

    # a driver that takes a newer token and claims between the sweep's token and its claim
    def then_a_driver_starts(
        store: Any, layout: Any, *, identifier: str = "", coordinator: bool = True
    ) -> int:
        token = take_token(store, layout, identifier=identifier, coordinator=coordinator)
        newer = take_token(store, layout)
        BarrierStateStore(store, layout).claim_driver(newer, driver="host:1:d")
        return token

    monkeypatch.setattr(sweep, "take_token", then_a_driver_starts)
    staged = pipeline.staged()
    assert main(["sweep", *_args(pipeline), *http, "--delete", "--force"]) == 2
    assert "a driver took pipeline 'p1'" in capsys.readouterr().err
    assert pipeline.owner().driver == "host:1:d" and pipeline.staged() == staged
