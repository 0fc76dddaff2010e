"""The notebooks run top to bottom (nbclient, a fresh kernel each) against the harness's
Kafka, S3 and ZooKeeper, at a reduced size. They are stored with the outputs of a full run
(``make notebooks``); here each runs from a cleared copy, and the stored file is left as it
is (``tests/test_notebook_outputs.py`` checks the stored outputs).

Each notebook reads its parameters from the environment (``GTB_KAFKA_BOOTSTRAP``,
``GTB_S3_ENDPOINT``, ``GTB_ZK_HOSTS``, ``GTB_NOTEBOOK_EVENTS``, ...) and asserts what it
shows (every record exactly once, no duplicates through the barrier...), so a notebook
that runs to the end has passed its own checks."""

from __future__ import annotations

from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from harness.process import REPO_ROOT
from integration_tests.demo_checks import check_demo_output
from scripts.notebooks import clear

pytestmark = pytest.mark.slow

NOTEBOOKS = REPO_ROOT / "notebooks"


def execute(
    name: str, monkeypatch: pytest.MonkeyPatch, env: dict[str, str], cell_timeout: int = 480
) -> Any:
    path = NOTEBOOKS / name
    nb = nbformat.read(path, as_version=4)  # type: ignore[no-untyped-call]
    clear(nb)
    for key, value in env.items():
        monkeypatch.setenv(key, value)  # the kernel inherits this process's environment
    client = NotebookClient(
        nb,
        timeout=cell_timeout,
        kernel_name="python3",
        resources={"metadata": {"path": str(NOTEBOOKS)}},
    )
    client.execute()
    return nb


def text_of(nb: Any) -> str:
    parts = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            parts.append(out.get("text", ""))
            parts.append(str(out.get("data", {}).get("text/plain", "")))
    return "\n".join(parts)


@pytest.mark.timeout(300)
def test_01_quickstart(monkeypatch: pytest.MonkeyPatch, kafka_broker: Any) -> None:
    nb = execute(
        "01_quickstart.ipynb",
        monkeypatch,
        {"GTB_KAFKA_BOOTSTRAP": kafka_broker.bootstrap, "GTB_NOTEBOOK_EVENTS": "4000"},
    )
    out = text_of(nb)
    assert "4000 rows" in out and "_last_bundle.json" in out
    assert "rows in the consumer" in out


@pytest.mark.timeout(900)
def test_02_exactly_once_under_failure(
    monkeypatch: pytest.MonkeyPatch, kafka_broker: Any, s3_server: Any, zk: Any
) -> None:
    nb = execute(
        "02_exactly_once_under_failure.ipynb",
        monkeypatch,
        {
            "GTB_KAFKA_BOOTSTRAP": kafka_broker.bootstrap,
            "GTB_S3_ENDPOINT": s3_server.endpoint,
            "GTB_ZK_HOSTS": zk.hosts,
            "GTB_NOTEBOOK_EVENTS": "2000",
            "GTB_NOTEBOOK_DEMO_EVENTS": "2500",
        },
    )
    out = text_of(nb)
    # The demo in local mode, checked as integration_tests/test_demo.py checks it on the
    # standalone cluster.
    check_demo_output(out, 2500)
    assert "master=local[2]" in out
    images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) >= 2  # the duplicates chart and the demo's figure


@pytest.mark.timeout(1200)
def test_03_performance(monkeypatch: pytest.MonkeyPatch, kafka_broker: Any, s3_server: Any) -> None:
    nb = execute(
        "03_performance.ipynb",
        monkeypatch,
        {
            "GTB_KAFKA_BOOTSTRAP": kafka_broker.bootstrap,
            "GTB_S3_ENDPOINT": s3_server.endpoint,
            "GTB_NOTEBOOK_BENCH_SIZE": "tiny",
        },
        cell_timeout=1080,
    )
    out = text_of(nb)
    assert "=== gtbarrier benchmarks" in out and "FAILED" not in out
    images = [o for c in nb.cells for o in c.get("outputs", []) if "image/png" in o.get("data", {})]
    assert len(images) == 2  # the ratios and the scaling curves
