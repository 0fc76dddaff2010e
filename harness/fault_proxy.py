"""A loopback TCP proxy that injects network faults between a client and a server.

Point a client at ``proxy.endpoint`` instead of the server; every connection is
forwarded to ``target`` unless a fault is armed. Faults are decided per *connection*
when it is accepted:

* ``RESET``: read the first bytes of the request, then reset the connection
  (``SO_LINGER`` 0). Nothing reaches the server.
* ``DROP_RESPONSE``: forward the request, wait for the server's final response (an
  interim ``100 Continue`` is passed on, so the client sends its body), then reset
  the client connection: the server *has* acted, the client cannot know it.
* ``DELAY``: forward both ways, but hold each chunk of the response for ``delay`` s.
* ``BLACKHOLE``: accept and read, never answer (the client runs into its read timeout).
* ``HTTP_503``: read the request (head and ``Content-Length`` body), answer
  ``503 Slow Down`` with S3's error body and close. Nothing reaches the server.
* ``HTTP_400``: the same, answering ``400 Bad Request`` with a storage error body (the
  refusal of a request the service does not support). Nothing reaches the server.
* ``HEAD_ONLY``: forward the request's head alone, then close both sides, the server's
  with an orderly FIN: what a server sees from a writer killed after its request head
  (a client waiting for ``100 Continue``, say). The server must store nothing.

``inject(kind, count=n)`` faults the next ``n`` connections (with ``method="POST"``, the next
``n`` whose request has that method; the fault is chosen when a connection's request
begins, not when it is accepted); ``always(kind)`` every new
connection until ``clear()``. Arming a fault closes the idle pass-through connections
that HTTP clients keep in their pools, so the next request opens a new connection and
meets the fault. ``stats()`` counts accepted and faulted connections.
"""

from __future__ import annotations

import contextlib
import enum
import selectors
import socket
import struct
import threading
import time
from collections import deque
from dataclasses import dataclass
from types import TracebackType

from harness.ports import LOOPBACK

_CHUNK = 65536
_TICK = 0.05
_HEAD = 16  # bytes enough for an HTTP method and the space after it
_SLOW_DOWN = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>SlowDown</Code>'
    b"<Message>Please reduce your request rate (fault proxy).</Message></Error>"
)
_NOT_SUPPORTED = (
    b'<?xml version="1.0" encoding="UTF-8"?>\n<Error><Code>FeatureNotSupported</Code>'
    b"<Message>This request is not supported here (fault proxy).</Message></Error>"
)


class Fault(enum.Enum):
    PASS = "pass"
    RESET = "reset"
    DROP_RESPONSE = "drop-response"
    DELAY = "delay"
    BLACKHOLE = "blackhole"
    HTTP_503 = "http-503"
    HTTP_400 = "http-400"
    HEAD_ONLY = "head-only"


#: The faults that answer in the server's place: status line, XML error body.
_ANSWERS = {
    Fault.HTTP_503: (b"503 Slow Down", _SLOW_DOWN),
    Fault.HTTP_400: (b"400 Bad Request", _NOT_SUPPORTED),
}


@dataclass(frozen=True)
class _Armed:
    kind: Fault
    delay: float = 0.0
    method: bytes | None = None  # only a connection whose request has this method


@dataclass(frozen=True)
class ProxyStats:
    accepted: int
    faulted: int
    by_kind: dict[str, int]


class FaultProxy:
    """See the module docstring. Use as a context manager or call ``start``/``stop``."""

    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((LOOPBACK, 0))
        self._listener.listen(64)
        self._listener.settimeout(_TICK)
        self.port = int(self._listener.getsockname()[1])
        self.endpoint = f"http://{LOOPBACK}:{self.port}"
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._queue: deque[_Armed] = deque()
        self._always: _Armed | None = None
        self._active: set[socket.socket] = set()
        self._threads: list[threading.Thread] = []
        self._accepted = 0
        self._faulted: dict[str, int] = {}
        self._acceptor = threading.Thread(target=self._accept_loop, name="fault-proxy", daemon=True)

    # --- control -------------------------------------------------------------------

    def start(self) -> FaultProxy:
        self._acceptor.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._acceptor.join(timeout=10)
        self.drop_all()
        for t in list(self._threads):
            t.join(timeout=10)
        self._listener.close()

    def __enter__(self) -> FaultProxy:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    def inject(
        self, kind: Fault, count: int = 1, *, delay: float = 0.0, method: str | None = None
    ) -> None:
        """Fault the next ``count`` connections with ``kind``; with ``method`` (``"POST"``),
        only connections whose first request has that method, so that a client's own
        background requests (an SDK fetching metadata) pass and leave the fault armed."""
        prefix = None if method is None else method.encode() + b" "
        with self._lock:
            self._queue.extend(_Armed(kind, delay, prefix) for _ in range(count))
        self.drop_all()

    def always(self, kind: Fault, *, delay: float = 0.0) -> None:
        """Fault every new connection with ``kind`` until :meth:`clear`."""
        with self._lock:
            self._always = _Armed(kind, delay)
        self.drop_all()

    def clear(self) -> None:
        """Disarm every fault; new connections pass through."""
        with self._lock:
            self._queue.clear()
            self._always = None
        self.drop_all()

    def pending(self) -> int:
        """Armed one-shot faults not yet used."""
        with self._lock:
            return len(self._queue)

    def drop_all(self) -> None:
        """Close every open client connection (pooled keep-alive ones included)."""
        with self._lock:
            socks = list(self._active)
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def stats(self) -> ProxyStats:
        with self._lock:
            return ProxyStats(self._accepted, sum(self._faulted.values()), dict(self._faulted))

    # --- forwarding ----------------------------------------------------------------

    def _next(self, head: bytes) -> _Armed:
        """The fault of a connection whose request begins with ``head``: the first armed
        one whose method it has (or that names none), else ``always``'s, else none."""
        with self._lock:
            armed = None
            for i, queued in enumerate(self._queue):
                if queued.method is None or head.startswith(queued.method):
                    armed = queued
                    del self._queue[i]
                    break
            armed = armed or self._always or _Armed(Fault.PASS)
            if armed.kind is not Fault.PASS:
                self._faulted[armed.kind.value] = self._faulted.get(armed.kind.value, 0) + 1
            return armed

    def _peek_head(self, client: socket.socket) -> bytes | None:
        """The first bytes of the client's request, left unread (None: it sent nothing)."""
        while not self._stop.is_set():
            try:
                data = client.recv(_HEAD, socket.MSG_PEEK)
            except TimeoutError:
                continue
            if not data:
                return None
            if b" " in data or len(data) >= _HEAD:
                return data
            time.sleep(0.001)  # part of the request line: wait for the rest of it
        return None

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                if self._stop.is_set():
                    return
                raise
            t = threading.Thread(target=self._serve, args=(client,), daemon=True)
            with self._lock:
                self._accepted += 1
                self._active.add(client)
                self._threads = [x for x in self._threads if x.is_alive()] + [t]
            t.start()

    def _serve(self, client: socket.socket) -> None:
        upstream: socket.socket | None = None
        try:
            client.settimeout(_TICK)
            # Decided on the request, not at accept: a fault for one method stays armed
            # until a connection of that method comes.
            head = self._peek_head(client)
            if head is None:
                return
            armed = self._next(head)
            if armed.kind is Fault.RESET:
                self._read_some(client)
                _reset(client)
                return
            answer = _ANSWERS.get(armed.kind)
            if answer is not None:
                self._answer(client, *answer)
                return
            if armed.kind is Fault.HEAD_ONLY:
                upstream = socket.create_connection(self.target, timeout=5)
                self._forward_head(client, upstream)
                return
            if armed.kind is Fault.BLACKHOLE:
                while not self._stop.is_set() and self._read_some(client) is not None:
                    pass
                return
            upstream = socket.create_connection(self.target, timeout=5)
            self._pump(client, upstream, armed)
        except OSError:
            return  # either side went away: that is the proxy's whole job
        finally:
            with self._lock:
                self._active.discard(client)
            for s in (client, upstream):
                if s is not None:
                    with contextlib.suppress(OSError):
                        s.close()

    def _forward_head(self, client: socket.socket, upstream: socket.socket) -> None:
        """Send the server the request's head (not a byte of its body), then end the
        request with a FIN and leave the client with a reset."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self._read_some(client)
            if chunk is None:
                return
            data += chunk
        head = data.partition(b"\r\n\r\n")[0]
        upstream.sendall(head + b"\r\n\r\n")
        upstream.shutdown(socket.SHUT_WR)
        # Wait for the server to take in the end of the request before going away.
        upstream.settimeout(2.0)
        with contextlib.suppress(OSError):
            while upstream.recv(_CHUNK):
                pass
        _reset(client)

    def _answer(self, client: socket.socket, status: bytes, payload: bytes) -> None:
        """Read one HTTP request (unless the client waits for ``100 Continue``), answer
        ``status`` with the XML error ``payload``."""
        data = b""
        while b"\r\n\r\n" not in data:
            chunk = self._read_some(client)
            if chunk is None:
                return
            data += chunk
        head, _, body = data.partition(b"\r\n\r\n")
        fields = {
            name.strip().lower(): value.strip()
            for name, _, value in (line.partition(b":") for line in head.split(b"\r\n")[1:])
        }
        if fields.get(b"expect", b"").lower() != b"100-continue":
            length = int(fields.get(b"content-length", b"0") or 0)
            while len(body) < length:
                chunk = self._read_some(client)
                if chunk is None:
                    return
                body += chunk
        client.sendall(
            b"HTTP/1.1 " + status + b"\r\nContent-Type: application/xml\r\n"
            b"Content-Length: "
            + str(len(payload)).encode()
            + b"\r\nConnection: close\r\n\r\n"
            + payload
        )

    def _read_some(self, sock: socket.socket) -> bytes | None:
        """The next bytes from ``sock`` (waiting while the proxy runs); None at EOF."""
        while not self._stop.is_set():
            try:
                data = sock.recv(_CHUNK)
            except TimeoutError:
                continue
            return data or None
        return None

    def _pump(self, client: socket.socket, upstream: socket.socket, armed: _Armed) -> None:
        client.setblocking(True)
        upstream.setblocking(True)
        with selectors.DefaultSelector() as sel:
            sel.register(client, selectors.EVENT_READ)
            sel.register(upstream, selectors.EVENT_READ)
            while not self._stop.is_set():
                for key, _ in sel.select(_TICK):
                    src = key.fileobj
                    assert isinstance(src, socket.socket)
                    data = src.recv(_CHUNK)
                    if not data:
                        return
                    if src is client:
                        upstream.sendall(data)
                        continue
                    if armed.kind is Fault.DROP_RESPONSE and not data.startswith(b"HTTP/1.1 100"):
                        _reset(client)  # the server has answered: the request took effect
                        return
                    if armed.kind is Fault.DELAY and self._stop.wait(armed.delay):
                        return
                    client.sendall(data)


def _reset(sock: socket.socket) -> None:
    """Close ``sock`` with a TCP RST instead of an orderly FIN."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()
