"""Driver programs: a Python program (a Spark application, say) in a killable subprocess.

    runner = DriverRunner(workdir)
    proc = runner.run(script_path, "--pipeline", "p1", env={"X": "1"})
    ...
    proc.kill()                      # SIGKILL: the driver and its Spark JVM
    assert proc.wait(30) == -signal.SIGKILL
    print(proc.output())             # stdout and stderr, interleaved
    runner.close()                   # stops whatever still runs

The program runs with the repository root on ``PYTHONPATH`` and ``PYSPARK_PYTHON`` set
to this interpreter, in its own process group, with its output in a file that is
registered with :mod:`harness.logs` (so a failing test shows it) until :meth:`close`.
"""

from __future__ import annotations

import itertools
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from harness.logs import register_log, tail, unregister_log
from harness.process import DEFAULT_GRACE, ManagedProcess, repo_env


class DriverProcess:
    """A driver program started by :class:`DriverRunner`."""

    def __init__(self, proc: ManagedProcess, log_name: str) -> None:
        self._proc = proc
        self.log_name = log_name
        self.output_path = proc.log_path

    @property
    def pid(self) -> int:
        return self._proc.pid

    @property
    def returncode(self) -> int | None:
        """The exit code (negative signal number if killed), None while running."""
        return self._proc.returncode

    @property
    def running(self) -> bool:
        return self._proc.running

    def kill(self) -> None:
        """SIGKILL the driver and everything in its process group (its Spark JVM)."""
        self._proc.kill()

    def terminate(self, grace: float = DEFAULT_GRACE) -> int | None:
        """SIGTERM, then SIGKILL after ``grace`` seconds."""
        return self._proc.stop(grace)

    def wait(self, timeout: float) -> int:
        """Wait for the driver to exit; its exit code. Raises TimeoutError naming the script."""
        deadline = time.monotonic() + timeout
        while (code := self._proc.returncode) is None:
            if time.monotonic() >= deadline:
                raise TimeoutError(
                    f"driver {self._proc.argv[1:]} (pid {self.pid}) still running after "
                    f"{timeout:.0f}s; last output:\n{tail(self.output_path, 40)}"
                )
            time.sleep(0.05)
        return code

    def output(self) -> str:
        """Everything the driver wrote to stdout and stderr so far."""
        return self.output_path.read_text(errors="replace")


class DriverRunner:
    """Starts driver programs; :meth:`close` stops every one still running (the ``driver``
    fixture calls it at teardown)."""

    def __init__(self, workdir: Path) -> None:
        self.workdir = workdir
        self._procs: list[DriverProcess] = []
        self._counter = itertools.count(1)

    def run(
        self,
        script: str | Path,
        *args: str,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> DriverProcess:
        """Start ``python script *args``; ``script`` is the path of a Python file.

        It runs in ``cwd`` (default: the runner's directory); ``env`` is added to
        :func:`~harness.process.repo_env`, and may replace its ``PYTHONPATH`` (to run
        another tree of the project, say).
        """
        path = Path(script)
        if not path.is_file():
            raise FileNotFoundError(f"driver script {path} does not exist")
        n = next(self._counter)
        proc = ManagedProcess(
            f"driver-{n}",
            [sys.executable, str(path.resolve()), *args],
            log_path=self.workdir / f"driver-{n}.out",
            cwd=self.workdir if cwd is None else cwd,
            env=repo_env(env),
        )
        proc.start()
        driver = DriverProcess(proc, f"driver-{n} ({path.name}, pid {proc.pid}) output")
        register_log(driver.log_name, proc.log_path)
        self._procs.append(driver)
        return driver

    def run_code(
        self, code: str, *args: str, env: Mapping[str, str] | None = None
    ) -> DriverProcess:
        """Write ``code`` to a file in the test's directory and run it as a driver."""
        path = self.workdir / f"driver_script_{len(self._procs) + 1}.py"
        path.write_text(code)
        return self.run(path, *args, env=env)

    def close(self) -> None:
        for d in self._procs:
            d.terminate(grace=5.0)
            unregister_log(d.log_name)
