"""The demo job (``make demo`` runs ``python -m demo``) end to end, in ``--small`` mode, on
the standalone cluster fixture. It kills its driver with SIGKILL part-way, deletes the
checkpoint, recovers from the snapshot and must print a verification table with no
duplicates, nothing missing and equal stateful results (the table is read, not only the
exit code). Also in local mode with its state on Azurite (``--state-store azure``). The same
demo in local mode is run and checked the same way by notebook 02's
test (integration_tests/test_notebooks.py), which is why it has no test of its own here."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from demo.runner import SMALL_EVENTS
from harness.driver import DriverRunner
from integration_tests.demo_checks import check_demo_output

pytestmark = pytest.mark.slow

RUN_DEMO = "from demo.runner import main\nraise SystemExit(main())\n"


def run_demo(driver: DriverRunner, workdir: Path, servers: list[str], *extra: str) -> str:
    proc = driver.run_code(RUN_DEMO, "--small", "--workdir", str(workdir), *servers, *extra)
    code = proc.wait(540)
    out = proc.output()
    assert code == 0, out[-6000:]
    return out


def check_table(out: str, workdir: Path) -> dict[str, str]:
    table = check_demo_output(out, SMALL_EVENTS)
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


@pytest.mark.timeout(600)
def test_demo_small_with_its_state_on_azure_blob_storage(
    driver: DriverRunner, servers: list[str], azurite_server: Any, tmp_path: Path
) -> None:
    """The demo in local mode with ``state.uri=az://...`` on Azurite: the source, the sink
    and the coordinator (its snapshots, the recovery after the driver's SIGKILL) on the
    Azure store, verified by the same table."""
    workdir = tmp_path / "demo"
    out = run_demo(
        driver,
        workdir,
        servers,
        "--state-store",
        "azure",
        "--azure-endpoint",
        azurite_server.endpoint,
    )
    check_table(out, workdir)
    assert "state: az://" in out
