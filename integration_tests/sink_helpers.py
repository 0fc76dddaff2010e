"""Support for the sink's integration tests: the reference receiver as a server, readers."""

from __future__ import annotations

import json
import sqlite3
import sys
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.dataset as ds
import pytest

from integration_tests.fixtures.logs import register_log, unregister_log
from integration_tests.fixtures.process import REPO_ROOT, ManagedProcess, repo_env, wait_until
from integration_tests.ports import LOOPBACK, free_port, port_open


class Receiver:
    """``python -m sink.receiver`` on a free port, storing into ``directory``."""

    def __init__(self, directory: Path, log_dir: Path, *extra_args: str) -> None:
        self.directory = directory
        self.port = free_port()
        self.url = f"http://{LOOPBACK}:{self.port}"
        self.proc = ManagedProcess(
            f"receiver-{self.port}",
            [sys.executable, "-m", "sink.receiver", "--port", str(self.port),
             "--dir", str(directory), *extra_args],
            log_path=log_dir / f"receiver-{self.port}.log",
            cwd=REPO_ROOT,
            env=repo_env(),
        )
        self.log_name = f"receiver {self.port}"

    def start(self, *extra_args: str) -> Receiver:
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


@pytest.fixture
def receiver(tmp_path: Path) -> Iterator[Receiver]:
    """A reference receiver (not started: call ``.start(*args)``), stopped at teardown."""
    r = Receiver(tmp_path / "receiver", tmp_path)
    try:
        yield r
    finally:
        r.stop()
        unregister_log(r.log_name)


def read_bundles(directory: Path | str, **kwargs: Any) -> pa.Table:
    """What a reader of a file consumer's directory sees (``_``/``.`` names skipped)."""
    return ds.dataset(str(directory), format="parquet", **kwargs).to_table()
