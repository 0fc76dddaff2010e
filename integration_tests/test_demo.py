"""The demo job (``make demo`` runs ``python -m demo``) end to end, in ``--small`` mode: once
with Spark in local mode and once on the standalone cluster fixture. Each run kills its
driver with SIGKILL part-way, deletes the checkpoint, recovers from the snapshot and must
print a verification table with no duplicates, nothing missing and equal stateful results
(the table is read, not only the exit code)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from demo.runner import SMALL_EVENTS
from demo.verify import parse_table
from harness.driver import DriverRunner

pytestmark = pytest.mark.slow

RUN_DEMO = "from demo.runner import main\nraise SystemExit(main())\n"


def run_demo(driver: DriverRunner, workdir: Path, servers: list[str], *extra: str) -> str:
    proc = driver.run_code(RUN_DEMO, "--small", "--workdir", str(workdir), *servers, *extra)
    code = proc.wait(540)
    out = proc.output()
    assert code == 0, out[-6000:]
    return out


def check_table(out: str, workdir: Path) -> dict[str, str]:
    table = parse_table(out)
    assert table, f"no verification table in the output:\n{out[-4000:]}"
    assert table["records in"] == f"{SMALL_EVENTS:,}"
    assert table["duplicates"] == "0"
    assert table["missing"] == "0"
    assert table["in GT order"] == "yes"
    assert table["stateless results equal"] == "yes"
    assert table["stateful results equal"].startswith("yes ")
    assert table["verdict"] == "PASS"
    assert int(table["bundles delivered"]) >= 5
    assert table["recovery"].startswith("recover(): materialise")
    assert float(table["recovery time"].split()[0]) > 0
    # What it did, in the order it did it.
    steps = [
        "produced",
        "SIGKILL driver 1",
        "deleted its checkpoint directory",
        "coordinator.recover() -> materialise",
        "recovered: first new bundle",
        "end-of-stream heartbeats processed",
    ]
    positions = [out.find(s) for s in steps]
    assert all(p >= 0 for p in positions) and positions == sorted(positions), positions
    png = workdir / "demo.png"
    assert f"figure: {png}" in out
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    summary = json.loads((workdir / "summary.json").read_text())
    assert summary["ok"] is True and summary["table"]["duplicates"] == "0"
    return table


@pytest.fixture
def servers(kafka_broker: Any, s3_server: Any, zk: Any) -> list[str]:
    """The harness's Kafka, S3 and ZooKeeper (a fresh chroot), as demo arguments."""
    return [
        "--kafka",
        kafka_broker.bootstrap,
        "--s3-endpoint",
        s3_server.endpoint,
        "--zookeeper",
        zk.hosts,
    ]


@pytest.mark.timeout(600)
def test_demo_small_local_mode(driver: DriverRunner, servers: list[str], tmp_path: Path) -> None:
    workdir = tmp_path / "demo"
    out = run_demo(driver, workdir, servers)
    check_table(out, workdir)
    assert "master=local[2]" in out


@pytest.mark.timeout(600)
def test_demo_small_on_the_standalone_cluster(
    driver: DriverRunner, servers: list[str], spark_cluster: Any, tmp_path: Path
) -> None:
    conf = {k: v for k, v in spark_cluster.driver_conf().items() if k != "spark.master"}
    workdir = tmp_path / "demo"
    out = run_demo(
        driver,
        workdir,
        servers,
        "--master",
        spark_cluster.master_url,
        *[arg for k, v in conf.items() for arg in ("--conf", f"{k}={v}")],
    )
    check_table(out, workdir)
    assert f"master={spark_cluster.master_url}" in out
