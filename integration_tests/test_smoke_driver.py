"""Smoke test: the ``driver`` fixture runs a program that a test can SIGKILL, children too."""

from __future__ import annotations

import signal
import textwrap
from pathlib import Path

import pytest

from harness.driver import DriverRunner
from harness.process import wait_until

pytestmark = pytest.mark.timeout(60)

SLEEPER = textwrap.dedent(
    """
    import os, subprocess, sys, time
    child = subprocess.Popen(["sleep", "300"])  # like PySpark's JVM: same process group
    print(f"child {child.pid} args {sys.argv[1:]} env {os.environ['GTB_X']}", flush=True)
    import datasource, state  # the repository is on PYTHONPATH
    time.sleep(300)
    """
)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def test_kill_ends_the_driver_and_its_children(driver: DriverRunner) -> None:
    proc = driver.run_code(SLEEPER, "a", "b", env={"GTB_X": "x1"})
    line = wait_until(
        lambda: next((x for x in proc.output().splitlines() if x.startswith("child ")), None),
        timeout=30,
        what="the driver to start its child",
    )
    child = int(line.split()[1])
    assert line.endswith("args ['a', 'b'] env x1")
    assert proc.running and _alive(child)
    proc.kill()
    assert proc.wait(10) == -signal.SIGKILL
    assert proc.returncode == -signal.SIGKILL
    wait_until(lambda: not _alive(child), timeout=10, what=f"child {child} to die")


def test_wait_times_out_naming_the_driver(driver: DriverRunner) -> None:
    proc = driver.run_code("import time\nprint('sleeping', flush=True)\ntime.sleep(300)\n")
    with pytest.raises(TimeoutError, match="still running"):
        proc.wait(0.5)
    assert proc.terminate(grace=5) == -signal.SIGTERM
