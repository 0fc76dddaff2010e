"""The reference HTTP receiver (``python -m gtbarrier.http_receiver``) as a local server,
and readers of what it stored."""

from __future__ import annotations

import json
import sqlite3
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow as pa

from harness.logs import register_log
from harness.ports import LOOPBACK, free_port, port_open
from harness.process import REPO_ROOT, ManagedProcess, repo_env, wait_until


class Receiver:
    """``python -m gtbarrier.http_receiver`` on a free port, storing into ``directory``; its log is
    registered (:mod:`harness.logs`) from :meth:`start` on, under :attr:`log_name`."""

    def __init__(self, directory: Path, log_dir: Path, *extra_args: str) -> None:
        self.directory = directory
        self.port = free_port()
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.proc = ManagedProcess(
            f"receiver-{self.port}",
            [
                sys.executable,
                "-m",
                "gtbarrier.http_receiver",
                "--port",
                str(self.port),
                "--dir",
                str(directory),
                *extra_args,
            ],
            log_path=log_dir / f"receiver-{self.port}.log",
            cwd=REPO_ROOT,
            env=repo_env(),
        )
        self.log_name = f"receiver {self.port}"

    def start(self, *extra_args: str) -> Receiver:
        """Start (again, on the same port), with ``extra_args`` instead of the earlier ones."""
        if extra_args:
            self.proc.argv = [*self.proc.argv[:7], *extra_args]
        self.proc.start()
        register_log(self.log_name, self.proc.log_path)
        wait_until(lambda: port_open(self.port), timeout=30, what=f"receiver on {self.port}")
        return self

    def stop(self) -> None:
        self.proc.stop(grace=5)

    def bundles(self, stream: str) -> list[dict[str, Any]]:
        with urllib.request.urlopen(f"{self.url}/{stream}/bundles", timeout=10) as resp:
            return list(json.loads(resp.read()))

    def bodies(self, stream: str) -> list[tuple[int, bytes]]:
        """``(bundle_id, body)`` straight from the SQLite file, in bundle order."""
        conn = sqlite3.connect(self.directory / "receiver.sqlite3")
        try:
            rows = conn.execute(
                "SELECT bundle_id, body FROM bundles WHERE stream = ? ORDER BY bundle_id",
                ("/" + stream,),
            ).fetchall()
        finally:
            conn.close()
        return [(int(b), bytes(body)) for b, body in rows]

    def table(self, stream: str) -> pa.Table:
        """Every stored Arrow bundle of ``stream`` concatenated, in bundle order."""
        tables = [pa.ipc.open_stream(body).read_all() for _, body in self.bodies(stream)]
        return pa.concat_tables(tables)
