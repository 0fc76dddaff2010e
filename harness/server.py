"""The base of every server the harness runs: a local process on a free loopback port,
or an external server named by an environment variable.

A local server owns one :class:`~harness.process.ManagedProcess`: :meth:`Server.start`
starts it and waits until :meth:`Server.ready`; :meth:`Server.stop` and
:meth:`Server.kill` end it by pid; a restart keeps the port. An external server
(:meth:`Server.external_at`, :meth:`Server.from_env`) is only talked to: ``start``,
``stop``, ``kill`` and ``pid`` raise, since the harness does not own its process.

    broker = KafkaBroker.from_env() or KafkaBroker(workdir)   # GTB_KAFKA_BOOTSTRAP
    if not broker.external:
        broker.start_on_free_port()
"""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import ClassVar, Self, TypeVar

from harness.logs import register_log
from harness.ports import free_port
from harness.process import ManagedProcess, ServerStartError, wait_until

# How Java, Rust (Tansu), Python and Go (SeaweedFS) servers report a port that another
# process holds.
_ADDRESS_IN_USE = (
    "Address already in use",
    "AddrInUse",
    "Address in use",
    "address already in use",
    "Port allocation failed",  # weed mini, checking its ports before it binds
)
PORT_ATTEMPTS = 3

S = TypeVar("S", bound="Server")


def is_port_conflict(err: BaseException) -> bool:
    """True if ``err`` (carrying the server's log tail) says its port was taken."""
    return any(marker in str(err) for marker in _ADDRESS_IN_USE)


class Server(ABC):
    """One server: local (a process this harness starts and stops by pid) or external."""

    NAME: ClassVar[str]  # what the server is, for messages: "Kafka broker (Tansu)"
    ENV: ClassVar[str]  # the environment variable that names an external server
    START_TIMEOUT: ClassVar[float] = 60.0

    def __init__(self, process: ManagedProcess | None) -> None:
        self._process = process

    # --- what a subclass says ------------------------------------------------------

    @property
    @abstractmethod
    def address(self) -> str:
        """Where clients connect (``host:port``, a URL, a ZooKeeper connect string)."""

    @classmethod
    @abstractmethod
    def external_at(cls, address: str) -> Self:
        """The server at ``address``, which the harness talks to but does not run."""

    @abstractmethod
    def ready(self) -> bool:
        """True once the server answers its clients (False while it cannot be reached)."""

    def _use_port(self, port: int) -> None:
        """Move the (stopped) local server to ``port``."""
        raise NotImplementedError(f"{self.NAME} cannot move to another port")

    # --- external servers ----------------------------------------------------------

    @classmethod
    def from_env(cls, var: str | None = None) -> Self | None:
        """The external server named by ``var`` (default :attr:`ENV`), checked to answer;
        None if the variable is unset or empty."""
        address = os.environ.get(var or cls.ENV, "").strip()
        if not address:
            return None
        server = cls.external_at(address)
        server.check_external(var or cls.ENV)
        return server

    def check_external(self, var: str) -> None:
        """Wait until the external server answers; raise naming ``var`` if it never does."""
        wait_until(
            self.ready,
            timeout=self.START_TIMEOUT,
            what=f"the external {self.NAME} at {self.address} ({var})",
        )

    @property
    def external(self) -> bool:
        return self._process is None

    def _owned(self) -> ManagedProcess:
        if self._process is None:
            raise RuntimeError(
                f"the {self.NAME} at {self.address} is external ({self.ENV}); "
                "the harness cannot start, stop or signal it"
            )
        return self._process

    # --- a local server's process --------------------------------------------------

    @property
    def log_path(self) -> Path | None:
        """The local server's log file (None for an external server)."""
        return None if self._process is None else self._process.log_path

    @property
    def pid(self) -> int:
        return self._owned().pid

    @property
    def running(self) -> bool:
        """True while the local process runs; always True for an external server."""
        return self._process is None or self._process.running

    def start(self, timeout: float | None = None) -> None:
        """Start the server (again, on the same port) and wait until it is :meth:`ready`."""
        proc = self._owned()
        proc.start()
        wait_until(
            self.ready,
            timeout=self.START_TIMEOUT if timeout is None else timeout,
            what=f"the {self.NAME} at {self.address}",
            process=proc,
        )

    def start_on_free_port(self) -> None:
        """The first start: like :meth:`start`, but another process can take the port
        between the probe (:func:`~harness.ports.free_port`) and the server's bind, so on
        "address in use" the server moves to a new port and starts again, up to
        ``PORT_ATTEMPTS`` times."""
        for attempt in range(1, PORT_ATTEMPTS + 1):
            try:
                self.start()
                return
            except ServerStartError as err:
                if attempt == PORT_ATTEMPTS or not is_port_conflict(err):
                    raise
                err.add_note(f"{self.NAME}: port taken, retrying on a new port")
                self._use_port(free_port())

    def stop(self) -> None:
        """Stop the server: SIGTERM to its process group, SIGKILL after a grace period."""
        self._owned().stop()

    def kill(self) -> None:
        """SIGKILL the server's process group at once."""
        self._owned().kill()


@contextmanager
def serving(server: S, log_name: str, *, fixture: str | None = None) -> Iterator[S]:
    """Run the local ``server`` for the ``with`` block: register its log (shown when a test
    using ``fixture`` fails, see :mod:`harness.logs`), start it on a free port, stop it
    at the end. An external server is yielded as it is."""
    if server.external:
        yield server
        return
    assert server.log_path is not None
    register_log(log_name, server.log_path, fixture=fixture)
    try:
        server.start_on_free_port()
        yield server
    finally:
        server.stop()
