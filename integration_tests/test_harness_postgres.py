"""harness.postgres's crash and pause reach every server process.

PostgreSQL's children (each session's backend, the checkpointer, the WAL writer...) are each
the leader of a process group and session of their own (``setsid`` in
``InitPostmasterChild``), so signalling the postmaster's group reaches the postmaster only:
a session's backend then outlives a "crash" long enough to commit a transaction, and keeps
answering while the server is "paused".
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.postgres import PostgresServer

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PostgresServer]:
    """A server of this module's own: these tests crash and pause it."""
    s = PostgresServer(tmp_path_factory.mktemp("postgres-harness"))
    s.start_on_free_port()
    try:
        yield s
    finally:
        s.stop()
        s.remove()


def state_of(pid: int) -> str | None:
    """The process's state letter (``T`` stopped), None once it is gone (or a zombie: it
    exited and waits to be reaped by init, its parent being dead)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    state = stat[stat.rindex(")") + 2]
    return None if state == "Z" else state


def test_pause_stops_a_sessions_backend_and_resume_continues_it(server: PostgresServer) -> None:
    with server.connect() as conn:
        backend = int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])
        server.pause()
        try:
            assert state_of(backend) == "T", "the session's backend still runs while paused"
        finally:
            server.resume()
        assert state_of(backend) not in ("T", None)
        assert conn.execute("SELECT 1").fetchone() == (1,)


def test_stop_kills_a_sessions_backend_with_the_server(server: PostgresServer) -> None:
    conn = server.connect(autocommit=False)
    backend = int(conn.execute("SELECT pg_backend_pid()").fetchone()[0])
    server.stop()
    try:
        assert state_of(backend) is None, "the session's backend outlived the crash"
    finally:
        conn.close()
        server.start()
    with server.connect() as again:
        assert again.execute("SELECT 1").fetchone() == (1,)
