"""The package as a user gets it: a wheel, installed (not editable) into a fresh
virtualenv with its dependencies from the package index, running the README quickstart
against the test servers with no registration call, and the ``gtbarrier`` console script.

The virtualenv has none of the extras (no starlette, uvicorn, psycopg, pyiceberg,
prometheus_client or matplotlib), so the quickstart also shows that the core imports none
of them.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.process import REPO_ROOT
from integration_tests.sink_helpers import read_bundles

SOURCES = ("datasource", "sink", "state", "gtbarrier")
FILES = ("pyproject.toml", "README.md", "pyspark_gtkafka.py", "pyspark_barrier.py")
INSTALL_TIMEOUT = 900.0
RUN_TIMEOUT = 300.0
PIPELINE = "orders-to-billing"
# Settings for a local Spark on a shared machine (what `spark-submit --conf` would pass).
SUBMIT_ARGS = (
    "--master local[2] --conf spark.ui.enabled=false --conf spark.driver.host=127.0.0.1 "
    "--conf spark.driver.bindAddress=127.0.0.1 --conf spark.sql.shuffle.partitions=2 "
    "--driver-memory 1g pyspark-shell"
)


def quickstart_code() -> str:
    """The README's first quickstart block (the one without the coordinator)."""
    readme = (REPO_ROOT / "README.md").read_text()
    section = readme[readme.index("## Quickstart") :]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "README.md: no python block under ## Quickstart"
    code = match.group(1)
    assert "register_all" not in code, "the quickstart must work without a registration call"
    return code


def build_wheel(tmp_path: Path) -> Path:
    """``pip wheel --no-deps`` of a copy of the sources (the checkout stays clean)."""
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in SOURCES:
        shutil.copytree(REPO_ROOT / name, src / name, ignore=ignore)
    for name in FILES:
        shutil.copy2(REPO_ROOT / name, src / name)
    dist = tmp_path / "dist"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(dist), str(src)],
        check=True,
        timeout=INSTALL_TIMEOUT,
        env=clean_env(),
    )
    [wheel] = dist.glob("gtbarrier-*.whl")
    return wheel


def clean_env(venv: Path | None = None) -> dict[str, str]:
    """This environment without the checkout on the path and without the test venv."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON", "VIRTUAL_ENV")
    }
    if venv is not None:
        env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
        env["VIRTUAL_ENV"] = str(venv)
    return env


@pytest.fixture
def venv(tmp_path: Path) -> Iterator[Path]:
    """A fresh virtualenv (about 900 MB once pyspark is in), deleted after the test."""
    path = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True, timeout=120)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_wheel_installs_and_the_readme_quickstart_runs_without_registration(
    kafka: Any, venv: Path, tmp_path: Path
) -> None:
    wheel = build_wheel(tmp_path)
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(n for n in names if n.endswith("entry_points.txt"))
        assert "gtbarrier = gtbarrier.cli:main" in zf.read(entry_points).decode()
    assert {"pyspark_gtkafka.py", "pyspark_barrier.py", "gtbarrier/cli/__init__.py"} <= names
    assert not any(n.startswith(("harness/", "tests/", "integration_tests/")) for n in names)

    python = venv / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", str(wheel)],
        check=True,
        timeout=INSTALL_TIMEOUT,
        env=clean_env(venv),
    )

    topic = kafka.create_topic(partitions=2)
    kafka.produce_values(topic, [str(i).encode() for i in range(50)])
    state, out, cp = tmp_path / "state", tmp_path / "billing", tmp_path / "cp"
    code = (
        quickstart_code()
        .replace("127.0.0.1:9092", kafka.bootstrap)
        .replace('"orders"', repr(topic))
        .replace("/tmp/gtbarrier-state", str(state))
        .replace("/tmp/billing", str(out))
        .replace("/tmp/cp", str(cp))
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    script = run_dir / "quickstart.py"
    script.write_text(
        code
        + "\nq.processAllAvailable()\nq.stop()\n"
        + "import gtbarrier, sys\n"
        + "loaded = sorted({'starlette', 'uvicorn', 'psycopg', 'pyiceberg', 'matplotlib',"
        + " 'prometheus_client'}"
        + " & {m.split('.')[0] for m in sys.modules})\n"
        + "print('GTBARRIER FROM', gtbarrier.__file__, 'OPTIONAL LOADED', loaded)\n"
        + "spark.stop()\n"
    )
    env = {
        **clean_env(venv),
        "PYSPARK_PYTHON": str(python),
        "PYSPARK_SUBMIT_ARGS": SUBMIT_ARGS,
        "SPARK_LOCAL_IP": "127.0.0.1",
    }
    proc = subprocess.run(
        [str(python), str(script)],
        cwd=run_dir,
        env=env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"GTBARRIER FROM {venv}" in proc.stdout, proc.stdout
    assert "OPTIONAL LOADED []" in proc.stdout, proc.stdout
    assert read_bundles(out).num_rows == 50
    assert "delivered to file consumer" in proc.stderr  # the sink's decision log

    cli = venv / "bin" / "gtbarrier"
    version = subprocess.run(
        [str(cli), "--version"],
        env=clean_env(venv),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"gtbarrier {wheel.name.split('-')[1]}"

    status = subprocess.run(
        [str(cli), "status", "--pipeline", PIPELINE, "--state-uri", f"file://{state}", "--json"],
        cwd=run_dir,
        env=clean_env(venv),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert status.returncode == 0, status.stderr
    data = json.loads(status.stdout)
    assert data["barrier"]["gt_last"] == data["epochs"]["last_recorded"] >= 0

    receiver = subprocess.run(
        [str(cli), "receiver", "--port", "1", "--dir", str(tmp_path / "r")],
        env=clean_env(venv),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert receiver.returncode == 2
    assert "pip install 'gtbarrier[receiver]'" in receiver.stderr

    exporter = subprocess.run(
        [str(cli), "exporter", "--pipeline", PIPELINE, "--state-uri", f"file://{state}"],
        env=clean_env(venv),
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    assert exporter.returncode == 2
    assert "pip install 'gtbarrier[metrics]'" in exporter.stderr
