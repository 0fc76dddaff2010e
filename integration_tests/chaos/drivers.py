"""One run of the chaos driver program (a *driver life*): its process, its own ZooKeeper
proxy (so that one driver can be cut off from ZooKeeper while others are not), its stop
and session files, and what it printed."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
import time
from pathlib import Path
from typing import Any

from harness.driver import DriverProcess, DriverRunner
from harness.fault_proxy import FaultProxy
from harness.pids import ProcessInfo, python_workers
from integration_tests.chaos.job import DriverJob
from integration_tests.chaos.servers import ChaosServers

PROGRAM = Path(__file__).with_name("driver_program.py")


class DriverLife:
    """A driver program started for one round (see the module docstring)."""

    def __init__(
        self,
        runner: DriverRunner,
        servers: ChaosServers,
        job: DriverJob,
        label: str,
        *,
        fault_env: str | None = None,
    ) -> None:
        assert servers.zk is not None
        self.label = label
        self.fault_env = fault_env
        self.zk_proxy = FaultProxy("127.0.0.1", servers.zk.port).start()
        work = Path(job.workdir) / label
        work.mkdir(parents=True, exist_ok=True)
        self.job = dataclasses.replace(
            job,
            zookeeper_hosts=servers.zookeeper_hosts(self.zk_proxy.port),
            workdir=str(work),
            stop_path=str(work / "stop"),
            session_path=str(work / "session.json"),
        )
        job_path = work / "job.json"
        self.job.save(job_path)
        env: dict[str, str] = {"GTBARRIER_METRICS": str(work / "commits.jsonl")}
        if fault_env:
            env["GTBARRIER_FAULT"] = fault_env
        self.started_at = time.monotonic()
        self.proc: DriverProcess = runner.run(PROGRAM, str(job_path), env=env)
        self.killed_by_us = False

    # --- state ------------------------------------------------------------------------

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def running(self) -> bool:
        return self.proc.running

    @property
    def returncode(self) -> int | None:
        return self.proc.returncode

    @property
    def sigkilled(self) -> bool:
        return self.proc.returncode == -signal.SIGKILL

    def events(self) -> list[dict[str, Any]]:
        out = []
        for line in self.proc.output().splitlines():
            if line.startswith('{"event"'):
                with contextlib.suppress(ValueError):
                    out.append(json.loads(line))
        return out

    def queries_started(self) -> int:
        """How many times the supervised run started the query (1 + resets)."""
        return sum(1 for e in self.events() if e["event"] == "started")

    def commits(self) -> int:
        """Batches this driver's sink committed so far (delivered, dropped as a replay, or
        empty: its commits' metrics, ``GTBARRIER_METRICS``)."""
        path = Path(self.job.workdir) / "commits.jsonl"
        try:
            return len(path.read_text().splitlines())
        except OSError:
            return 0

    def failure(self) -> str | None:
        """The error of a supervised run that gave up, if it did."""
        for e in self.events():
            if e["event"] == "failed":
                return str(e.get("error"))
        return None

    def session(self) -> tuple[int, bytes] | None:
        """The driver's ZooKeeper session id and password, once it wrote them."""
        path = Path(self.job.session_path)
        try:
            raw = json.loads(path.read_text())
        except (OSError, ValueError):
            return None
        return int(raw["session_id"]), bytes.fromhex(raw["password"])

    def python_workers(self, extra_roots: list[int] | None = None) -> list[ProcessInfo]:
        """Spark's Python workers of this driver (and under ``extra_roots``, e.g. the
        standalone workers whose executors run its tasks)."""
        return python_workers([self.pid, *(extra_roots or [])])

    # --- ending it --------------------------------------------------------------------

    def kill(self) -> None:
        """SIGKILL the driver program and its JVM (its process group)."""
        self.killed_by_us = True
        self.proc.kill()

    def stop(self, timeout: float) -> int | None:
        """Ask the driver to stop its query and exit; SIGTERM/SIGKILL after ``timeout``."""
        if self.proc.running:
            Path(self.job.stop_path).touch()
            try:
                self.proc.wait(timeout)
            except TimeoutError:
                self.proc.terminate(grace=10)
        self.close()
        return self.proc.returncode

    def close(self) -> None:
        self.zk_proxy.stop()
