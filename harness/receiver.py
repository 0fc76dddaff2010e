"""The reference HTTP receiver (``python -m gtbarrier.http_receiver``) as a local server,
and readers of what it stored.

``Receiver(directory, log_dir)`` runs it without a token (``--insecure-no-token``);
``Receiver(directory, log_dir, tls=make_tls_files(...), token="...")`` runs it secured:
HTTPS with that certificate (``.url`` is ``https://``; ``.tls.ca`` signs it) and the
bearer token required of every request (given in a file, ``--token-file``, so that it is
not on the command line). Its own readers send the token and trust the CA.
"""

from __future__ import annotations

import json
import sqlite3
import ssl
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pyarrow as pa

from harness.kafka_gateway import TlsFiles
from harness.logs import register_log
from harness.ports import LOOPBACK, free_port, port_open
from harness.process import REPO_ROOT, ManagedProcess, repo_env, wait_until


class Receiver:
    """``python -m gtbarrier.http_receiver`` on a free port, storing into ``directory``; its log is
    registered (:mod:`harness.logs`) from :meth:`start` on, under :attr:`log_name`."""

    def __init__(
        self,
        directory: Path,
        log_dir: Path,
        *extra_args: str,
        tls: TlsFiles | None = None,
        token: str | None = None,
    ) -> None:
        self.directory = directory
        self.port = free_port()
        self.tls = tls
        self.token = token
        self.url = f"{'https' if tls else 'http'}://{LOOPBACK}:{self.port}"
        # base_argv is the receiver's whole command line without extra arguments (the chaos
        # run cuts the extra ones off there).
        self.base_argv = [
            sys.executable,
            "-m",
            "gtbarrier.http_receiver",
            "--port",
            str(self.port),
            "--dir",
            str(directory),
        ]
        if tls is not None:
            self.base_argv += ["--tls-cert", str(tls.cert), "--tls-key", str(tls.key)]
        if token is None:
            # the receiver requires a token unless told otherwise: a plain one is for tests
            self.base_argv.append("--insecure-no-token")
        else:
            token_file = log_dir / f"receiver-{self.port}.token"
            token_file.touch(mode=0o600)
            token_file.write_text(token + "\n")
            self.base_argv += ["--token-file", str(token_file)]
        self.proc = ManagedProcess(
            f"receiver-{self.port}",
            [*self.base_argv, *extra_args],
            log_path=log_dir / f"receiver-{self.port}.log",
            cwd=REPO_ROOT,
            env=repo_env(),
        )
        self.log_name = f"receiver {self.port}"

    def start(self, *extra_args: str) -> Receiver:
        """Start (again, on the same port), with ``extra_args`` instead of the earlier ones."""
        if extra_args:
            self.proc.argv = [*self.base_argv, *extra_args]
        self.proc.start()
        register_log(self.log_name, self.proc.log_path)
        wait_until(lambda: port_open(self.port), timeout=30, what=f"receiver on {self.port}")
        return self

    def stop(self) -> None:
        self.proc.stop(grace=5)

    def request(self, path: str, *, token: str | None = None) -> Any:
        """GET ``path`` as a client of this receiver (``token``: the receiver's own if it
        has one); the open response (raises ``urllib.error.HTTPError`` on 4xx/5xx)."""
        headers = {}
        if (token := token or self.token) is not None:
            headers["Authorization"] = f"Bearer {token}"
        context = None
        if self.tls is not None:
            context = ssl.create_default_context(cafile=str(self.tls.ca))
        req = urllib.request.Request(f"{self.url}{path}", headers=headers)
        return urllib.request.urlopen(req, timeout=10, context=context)

    def bundles(self, stream: str) -> list[dict[str, Any]]:
        with self.request(f"/{stream}/bundles") as resp:
            return list(json.loads(resp.read()))

    def log_text(self) -> str:
        """What the receiver logged so far."""
        path = self.proc.log_path
        return path.read_text(errors="replace") if path.exists() else ""

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
