"""The package as a user gets it: a wheel built with ``python -m build --wheel`` from the
tree, installed (not editable) into a fresh virtualenv with its dependencies from the
package index pip is set up with, running the README quickstart against the test servers
with no registration call (so both data sources register by themselves), and the
``gtbarrier`` console script.

The README quickstart writes to the file consumer, which needs no extra, so the
virtualenv has none of them (no starlette, uvicorn, psycopg, pyiceberg, deltalake,
prometheus_client or matplotlib): the quickstart also shows that the core imports none.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import zipfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from harness.process import REPO_ROOT
from integration_tests.sink_helpers import read_bundles

#: What the plugin needs at run time: its packages and the two modules PySpark finds.
RUNTIME_PACKAGES = frozenset({"datasource", "sink", "state", "gtbarrier"})
RUNTIME_MODULES = frozenset({"pyspark_gtkafka.py", "pyspark_barrier.py"})
#: The README quickstart's consumer (file) needs no extra.
QUICKSTART_EXTRAS: tuple[str, ...] = ()
INSTALL_TIMEOUT = 900.0
RUN_TIMEOUT = 300.0
PIPELINE = "orders-to-billing"
RECORDS = 50
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


def tree_files() -> list[str]:
    """The checkout's files as a clone has them (tracked, or new and not ignored)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "-z"],
        cwd=REPO_ROOT,
        check=True,
        capture_output=True,
        timeout=60,
    ).stdout.decode()
    return [name for name in listed.split("\0") if name and (REPO_ROOT / name).is_file()]


def build_wheel(workdir: Path) -> Path:
    """``python -m build --wheel`` of a copy of the whole tree, tests and harness included
    (the checkout stays clean; what the wheel leaves out is then the build's choice)."""
    src = workdir / "src"
    for name in tree_files():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / name, src / name)
    dist = workdir / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(src)],
        check=False,
        capture_output=True,
        text=True,
        timeout=INSTALL_TIMEOUT,
        env=clean_env(),
    )
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    [wheel] = dist.glob("gtbarrier-*.whl")
    return wheel


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built once per session."""
    return build_wheel(tmp_path_factory.mktemp("wheel"))


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


def requirement(wheel: Path) -> str:
    """The wheel with the quickstart's extras, as ``pip install`` takes it."""
    return f"{wheel}[{','.join(QUICKSTART_EXTRAS)}]" if QUICKSTART_EXTRAS else str(wheel)


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
def test_the_wheel_holds_the_runtime_packages_and_nothing_else(wheel: Path) -> None:
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        entry_points = next(n for n in names if n.endswith("entry_points.txt"))
        assert "gtbarrier = gtbarrier.cli:run" in zf.read(entry_points).decode()
    top = {n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}
    assert top == RUNTIME_PACKAGES | RUNTIME_MODULES, (
        f"the wheel's top-level entries {sorted(top)}: the runtime is "
        f"{sorted(RUNTIME_PACKAGES | RUNTIME_MODULES)} (no tests, harness, demo, benchmarks)"
    )
    for package in RUNTIME_PACKAGES:
        shipped = {n for n in names if n.startswith(f"{package}/") and n.endswith(".py")}
        in_tree = {
            p.relative_to(REPO_ROOT).as_posix()
            for p in (REPO_ROOT / package).rglob("*.py")
            if "__pycache__" not in p.parts
        }
        assert shipped == in_tree, f"{package}: missing from the wheel {sorted(in_tree - shipped)}"
        assert f"{package}/py.typed" in names


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_the_wheel_installs_and_the_readme_quickstart_runs_without_registration(
    kafka: Any, venv: Path, wheel: Path, tmp_path: Path
) -> None:
    python = venv / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", requirement(wheel)],
        check=True,
        timeout=INSTALL_TIMEOUT,
        env=clean_env(venv),
    )

    topic = kafka.create_topic(partitions=2)
    kafka.produce_values(topic, [f"order-{i}".encode() for i in range(RECORDS)])
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
        + "loaded = sorted({'starlette', 'uvicorn', 'psycopg', 'pyiceberg', 'deltalake',"
        + " 'matplotlib', 'prometheus_client'}"
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
    values = read_bundles(out).column("value").to_pylist()
    delivered = Counter(v.decode() if isinstance(v, bytes) else str(v) for v in values)
    assert delivered == Counter(f"order-{i}" for i in range(RECORDS))  # each exactly once
    # the sink's summary (state.log_summary): a process's first is logged at once
    assert "bundle(s) delivered (" in proc.stderr, proc.stderr

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
