"""Liveness: an in-flight bundle whose staged parts are gone.

The driver is SIGKILLed right after recording bundle 2 in flight; then the bundle's staged
parts are deleted for real, by path (what a zombie driver's cleanup did with a barrier
state read before a new owner claimed the pipeline; see tests/test_sink_barrier.py for
that race, now closed). The consumer never got bundle 2, so nothing can deliver it again:
every restart must stop with an error that says what is lost and names the way out, and
the way out (``gtbarrier.resolve_lost_inflight``, only with ``acknowledge_loss=True``; the
same from the shell, ``gtbarrier resolve-lost``) must let the pipeline continue with
everything else delivered exactly once and the loss reported.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from gtbarrier.cli import main as gtbarrier_cli
from integration_tests.sink_helpers import read_bundles
from integration_tests.test_sink_faults import DRIVER_TIMEOUT, Chain, killed
from integration_tests.test_sink_pipeline import expected_survivors, produce_numbered
from state.errors import StateError

pytestmark = [pytest.mark.slow]


def epoch_records(c: Chain, epoch: int, partitions: int) -> set[tuple[int, int]]:
    """``(partition, offset)`` of the input records epoch ``epoch`` read (the epoch log)."""
    record, _ = c.store.get_json(c.layout.epoch(epoch))
    start, end = record["start"]["offsets"][c.topic], record["end"]["offsets"][c.topic]
    return {
        (p, o) for p in range(partitions) for o in range(start.get(str(p), 0), end.get(str(p), 0))
    }


def delivered_keys(c: Chain) -> list[tuple[int, int, int]]:
    """``(epoch, partition, offset)`` of every delivered item, in delivery order."""
    gt = read_bundles(c.out).column("gt").combine_chunks()
    return list(
        zip(
            gt.field("epoch").to_pylist(),
            gt.field("partition").to_pylist(),
            gt.field("offset").to_pylist(),
            strict=True,
        )
    )


def lose_bundle_2(c: Chain) -> Any:
    """SIGKILL right after bundle 2 is recorded in flight, then delete its staged parts."""
    killed(c.run("cp", fault="after_inflight:2"))
    assert c.progress() == (1, 2)
    inflight = c.state().inflight
    assert inflight is not None and inflight.locations
    for location in inflight.locations:
        (c.out / location).unlink()
    return inflight


@pytest.mark.timeout(900)
def test_lost_parts_of_an_inflight_bundle_are_recomputed_by_the_replay(
    driver: Any, kafka: Any, tmp_path: Path
) -> None:
    n, partitions = 4_000, 2  # 4 epochs of 1000 records
    topic = kafka.create_topic(partitions=partitions)
    produce_numbered(kafka, topic, n, partitions)
    c = Chain(driver, kafka, tmp_path, "recomputed", topic)
    lose_bundle_2(c)

    restart = c.run("cp")
    assert restart.wait(DRIVER_TIMEOUT) == 0, restart.output()[-3000:]
    assert c.progress() == (3, None)
    assert c.bundle_files() == [0, 1, 2, 3] and c.pointer() == 3
    assert c.state().skipped == ()
    keys = delivered_keys(c)
    assert keys == sorted(keys), "items are not in gt order"
    delivered = [(p, o) for _, p, o in keys]
    assert len(delivered) == len(set(delivered)), "duplicate items"
    assert set(delivered) == expected_survivors(n, partitions)
    assert c.staged() == []


def commit_in_checkpoint(checkpoint: Path) -> None:
    """Record the checkpoint's last planned batch as committed, as if Spark had finished it
    (so no restart recomputes it)."""
    offsets = max(int(p.name) for p in (checkpoint / "offsets").iterdir() if p.name.isdigit())
    commits = sorted(int(p.name) for p in (checkpoint / "commits").iterdir() if p.name.isdigit())
    assert commits and commits[-1] == offsets - 1, (offsets, commits)
    (checkpoint / "commits" / str(offsets)).write_bytes(
        (checkpoint / "commits" / str(commits[-1])).read_bytes()
    )


@pytest.mark.timeout(900)
def test_lost_parts_of_an_inflight_bundle_need_an_acknowledged_loss(
    driver: Any, kafka: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    n, partitions = 4_000, 2  # 4 epochs of 1000 records
    topic = kafka.create_topic(partitions=partitions)
    produce_numbered(kafka, topic, n, partitions)
    c = Chain(driver, kafka, tmp_path, "lost", topic)

    # 1. bundle 2's parts are gone, and the checkpoint says its batch was committed
    inflight = lose_bundle_2(c)
    commit_in_checkpoint(tmp_path / "cp")

    # 2. every restart stops at bundle 2, saying what is lost and how to get past it
    for _ in range(2):
        restart = c.run("cp")
        assert restart.wait(DRIVER_TIMEOUT) == 1, restart.output()[-3000:]
        out = restart.output()
        for expected in (
            "in-flight bundle 2",
            f"{inflight.rows} rows",
            f"{len(inflight.locations)} of its {len(inflight.locations)} staged part(s) are gone",
            "gtbarrier.resolve_lost_inflight(",
            "bundle_id=2, acknowledge_loss=True",
            f"gtbarrier resolve-lost --pipeline {c.pipeline} --bundle 2 --acknowledge-loss",
        ):
            assert expected in out, f"{expected!r} not in:\n{out[-3000:]}"
        assert c.progress() == (1, 2)

    from gtbarrier import resolve_lost_inflight

    options = {
        "pipeline.id": c.pipeline,
        "state.uri": c.state_uri,
        "consumer": "file",
        "consumer.path": str(c.out),
    }
    # 3. the way out: without acknowledge_loss it only reports
    report = resolve_lost_inflight(options, bundle_id=2)
    assert not report.applied and c.progress() == (1, 2)
    assert (report.bundle_id, report.epoch, report.rows) == (2, 2, inflight.rows)
    assert report.parts_missing == inflight.locations and report.consumer_last == 1
    assert "acknowledge_loss=True" in report.describe()
    with pytest.raises(StateError, match="bundle 2 is in flight, not bundle 3"):
        resolve_lost_inflight(options, bundle_id=3, acknowledge_loss=True)
    assert c.progress() == (1, 2)
    # ... and so does the command, which skips the bundle with --acknowledge-loss
    cli = [
        "resolve-lost",
        f"--pipeline={c.pipeline}",
        f"--state-uri={c.state_uri}",
        "--option=consumer=file",
        f"--option=consumer.path={c.out}",
        "--bundle=2",
        "--json",
    ]
    assert gtbarrier_cli(cli) == 0
    reported = json.loads(capsys.readouterr().out)
    assert (reported["bundle"], reported["rows"], reported["applied"]) == (2, inflight.rows, False)
    assert c.progress() == (1, 2)
    assert gtbarrier_cli([*cli, "--bundle=3", "--acknowledge-loss"]) == 1
    assert "bundle 2 is in flight, not bundle 3" in capsys.readouterr().err
    assert gtbarrier_cli([*cli, "--acknowledge-loss"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["applied"] and c.progress() == (2, None)
    [skipped] = c.state().skipped
    assert (skipped.bundle_id, skipped.rows, skipped.parts_missing) == (
        2,
        inflight.rows,
        inflight.locations,
    )

    # 4. the pipeline goes on: everything but bundle 2 exactly once, in gt order
    final = c.run("cp")
    assert final.wait(DRIVER_TIMEOUT) == 0, final.output()[-3000:]
    assert c.progress() == (3, None)
    assert c.bundle_files() == [0, 1, 3] and c.pointer() == 3
    keys = delivered_keys(c)
    assert keys == sorted(keys), "items are not in gt order"
    delivered = [(p, o) for _, p, o in keys]
    assert len(delivered) == len(set(delivered)), "duplicate items"
    lost = expected_survivors(n, partitions) & epoch_records(c, 2, partitions)
    assert len(lost) == inflight.rows
    assert set(delivered) == expected_survivors(n, partitions) - lost
    assert c.staged() == []
