"""The coordinator's ``metrics_port``: checked once, served on loopback until ``close()``,
and fed by the watched query's batches only."""

from __future__ import annotations

import urllib.error
import urllib.request
from dataclasses import replace
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from state.coordinator import SnapshotCoordinator
from state.errors import ConfigError
from tests.coordinator_fakes import FakeQuery, batch, fake_spark


@pytest.mark.parametrize("port", [-1, 65536, True, "9464"])
def test_a_bad_metrics_port_is_refused_naming_it(tmp_path: Path, port: object) -> None:
    with pytest.raises(ConfigError) as err:
        SnapshotCoordinator(None, "p1", "memory://metrics-bad", tmp_path / "cp", metrics_port=port)  # type: ignore[arg-type]
    assert err.value.option == "metrics_port"


def _scrape(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_the_endpoint_serves_the_watched_querys_batches_until_closed(tmp_path: Path) -> None:
    coord = SnapshotCoordinator(
        fake_spark(),
        "p1",
        "memory://metrics-served",
        tmp_path / "cp",
        snapshot_period="1h",
        metrics_port=0,
        metrics_address="127.0.0.1",
    )
    port = coord.metrics_port
    assert port is not None and port > 0
    try:
        coord.watch(FakeQuery("q-1"))  # type: ignore[arg-type]
        mine = replace(batch(0, query_id="q-1"), latest={"offsets": {"t": {"0": 130}}})
        other = replace(
            batch(0, query_id="q-other"), latest={"offsets": {"t": {"0": 999}}}, duration_ms=7000
        )
        coord.on_batch_completed(mine)
        coord.on_batch_completed(other)
        got = _scrape(port)
    finally:
        coord.close()
    behind = (
        "gtbarrier_source_offsets_behind",
        (("partition", "0"), ("pipeline", "p1"), ("topic", "t")),
    )
    assert got[behind] == 30  # 130 - the batch's end 100; the other query's batch is not ours
    assert got[("gtbarrier_microbatch_duration_seconds_count", (("pipeline", "p1"),))] == 1
    assert got[("gtbarrier_snapshots_total", (("outcome", "accepted"), ("pipeline", "p1")))] == 0
    assert coord.metrics_port is None
    with pytest.raises(OSError):
        urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5)


def _probe(port: int, path: str) -> tuple[int, str]:
    """``(status, body)`` of a GET of ``path``; an HTTP error's status and body too."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_healthz_answers_while_ready_follows_the_watched_query(tmp_path: Path) -> None:
    coord = SnapshotCoordinator(
        fake_spark(),
        "p1",
        "memory://metrics-probes",
        tmp_path / "cp",
        snapshot_period="1h",
        metrics_port=0,
        metrics_address="127.0.0.1",
    )
    port = coord.metrics_port
    assert port is not None
    try:
        assert _probe(port, "/healthz") == (200, "ok\n")
        status, body = _probe(port, "/ready")
        assert (status, body) == (503, "not ready: no query is running\n")
        query = FakeQuery("q-1")
        coord.watch(query)  # type: ignore[arg-type]
        status, body = _probe(port, "/ready")
        assert status == 200 and body.startswith("ready: last heard from the query"), body
        query.isActive = False  # the query ended (failed, or stopped)
        assert _probe(port, "/ready") == (503, "not ready: no query is running\n")
        assert _probe(port, "/healthz") == (200, "ok\n")
        # the probes are not metrics: /metrics still answers with the families
        assert any(name == "gtbarrier_gt_last" for name, _ in _scrape(port))
    finally:
        coord.close()
