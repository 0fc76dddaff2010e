"""``gtbarrier deadletters`` and the dead letters in ``gtbarrier status``, against a memory://
pipeline whose bundles the real barrier protocol committed with refused rows."""

from __future__ import annotations

from pathlib import Path

import pytest

from gtbarrier.cli import build_parser
from sink.dead_letters.dead_letter_format import dead_letter_name
from tests.sink_helpers import Pipeline
from tests.test_cli import run_cli, run_json
from tests.test_sink_dead_letters import crash_at, jsonl, note_batch


@pytest.fixture
def pipeline(tmp_path: Path) -> Pipeline:
    """Bundle 1 delivered with one refused row; bundle 2 (all of its 2 rows refused) wrote
    its dead letters, delivered nothing and is acknowledged; bundle 3 in flight (a crash)
    with one refused row."""
    p = Pipeline(jsonl(tmp_path))
    p.record_batch(0, epoch=1)
    p.barrier().commit([p.write(0, [note_batch(1, 0, [0, 1], bad=[1])])], 0)
    p.record_batch(1, epoch=2)
    p.barrier().commit([p.write(1, [note_batch(2, 0, [2, 3], bad=[2, 3])])], 1)
    p.record_batch(2, epoch=3)
    with pytest.raises(Exception, match="crash at after_inflight"):
        p.barrier(faults=crash_at("after_inflight")).commit(
            [p.write(2, [note_batch(3, 0, [4, 5], null_gt=[5])])], 2
        )
    return p


def args(p: Pipeline, tmp_path: Path) -> list[str]:
    return [
        "--pipeline",
        p.options.pipeline_id,
        "--state-uri",
        p.options.store.uri,
        "--dead-letters",
        f"file://{tmp_path}/dl",
    ]


def test_deadletters_lists_the_bundles_with_refused_rows(
    pipeline: Pipeline, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = run_json(capsys, "deadletters", *args(pipeline, tmp_path))
    assert data["dead_letters"] == f"file://{tmp_path}/dl" and data["gt_last"] == 2
    assert [(b["bundle_id"], b["rows"], b["acknowledged"]) for b in data["bundles"]] == [
        (1, 1, True),
        (2, 2, True),
        (3, 1, False),
    ]
    assert data["bundles"][0]["location"] == f"file://{tmp_path}/dl/{dead_letter_name(1)}"
    assert data["total_rows"] == 4
    code, out, _ = run_cli(capsys, "deadletters", *args(pipeline, tmp_path))
    assert code == 0
    assert "dead letters of pipeline p1 in file://" in out and "4 row(s) in 3 bundle(s)" in out
    assert "bundle  rows  size" in out


def test_deadletters_reads_one_bundle(
    pipeline: Pipeline, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = run_json(capsys, "deadletters", *args(pipeline, tmp_path), "--bundle", "2")
    assert data["bundle_id"] == 2 and data["rows"] == 2 and data["shown"] == 2
    first = data["items"][0]
    assert first["note"] == "caf\\xe9"  # bytes that are not UTF-8, escaped
    assert first["_gtb_bundle"] == 2 and first["_gtb_column"] == "note"
    assert "not valid UTF-8" in first["_gtb_reason"]
    assert first["gt"] == {"epoch": 2, "topic": "t", "partition": 0, "offset": 2}
    data = run_json(capsys, "deadletters", *args(pipeline, tmp_path), "--bundle", "3")
    assert data["items"][0]["gt"] is None and data["items"][0]["_gtb_column"] == "gt"
    limited = run_json(
        capsys, "deadletters", *args(pipeline, tmp_path), "--bundle", "2", "--limit", "1"
    )
    assert limited["shown"] == 1 and limited["rows"] == 2
    code, out, _ = run_cli(capsys, "deadletters", *args(pipeline, tmp_path), "--bundle", "1")
    assert code == 0 and "bundle 1: 1 refused row(s)" in out and "caf\\xe9" in out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--bundle", "9"], "bundle 9 has no dead letters in file://"),
        (["--limit", "-1"], "--limit -1: expected a number >= 0"),
    ],
)
def test_deadletters_bad_arguments_exit_2_naming_them(
    pipeline: Pipeline,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    code, _, err = run_cli(capsys, "deadletters", *args(pipeline, tmp_path), *extra)
    assert code == 2 and message in err


def test_deadletters_needs_the_destination(
    pipeline: Pipeline, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--pipeline", "p1", "--state-uri", pipeline.options.store.uri]
    code, _, err = run_cli(capsys, "deadletters", *base)
    assert code == 2 and "--dead-letters is required" in err
    code, _, err = run_cli(capsys, "deadletters", *base, "--dead-letters", "/tmp/dl")
    assert code == 2 and "--dead-letters '/tmp/dl'" in err and "file:///" in err


def test_status_counts_the_dead_letters_and_those_of_the_bundle_in_flight(
    pipeline: Pipeline, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = run_json(capsys, "status", *args(pipeline, tmp_path))
    assert data["barrier"]["inflight"]["dead_letter_rows"] == 1
    assert data["dead_letters"] == {
        "uri": f"file://{tmp_path}/dl",
        "bundles": 3,
        "rows": 4,
        "last_bundle": 3,
    }
    code, out, _ = run_cli(capsys, "status", *args(pipeline, tmp_path))
    assert code == 0
    assert "in-flight bundle               3 (batch 2, 1 rows, 1 part(s); 1 refused)" in out
    assert "dead letters                   4 row(s) in 3 bundle(s), newest 3" in out
    # without --dead-letters: the in-flight bundle's count only
    base = ["--pipeline", "p1", "--state-uri", pipeline.options.store.uri]
    assert run_json(capsys, "status", *base)["dead_letters"] is None


def test_the_parser_knows_the_command() -> None:
    parsed = build_parser().parse_args(
        ["deadletters", "--pipeline", "p", "--state-uri", "memory://x", "--json"]
    )
    assert parsed.command == "deadletters" and parsed.json
