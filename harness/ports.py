"""Free loopback ports for the servers the harness starts.

The kernel picks a free ephemeral port for a socket bound to port 0; we close the
socket and hand the number to the server. Another process could take the port in
between; the server then fails to start, says so in its log, and
:meth:`harness.server.Server.start_on_free_port` moves it to a new port. Ports handed
out by this process are remembered, so two servers of one process never get the same one.
"""

from __future__ import annotations

import socket
import threading

LOOPBACK = "127.0.0.1"

_lock = threading.Lock()
_handed_out: set[int] = set()


def free_port() -> int:
    """A TCP port on 127.0.0.1 that is free now and not handed out before by this process."""
    with _lock:
        for _ in range(64):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                sock.bind((LOOPBACK, 0))
                port = int(sock.getsockname()[1])
            if port not in _handed_out:
                _handed_out.add(port)
                return port
    raise RuntimeError("no free loopback port found in 64 attempts")


def reserve_port(port: int) -> bool:
    """Hand out ``port`` if it is free now and not handed out before by this process."""
    with _lock:
        if port in _handed_out:
            return False
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((LOOPBACK, port))
            except OSError:
                return False
        _handed_out.add(port)
        return True


def port_open(port: int, host: str = LOOPBACK, timeout: float = 0.5) -> bool:
    """True if something accepts TCP connections on ``host:port``."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False
