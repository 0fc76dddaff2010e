"""A loopback TCP proxy that speaks just enough of the Kafka protocol to tamper with answers.

Point a Kafka client at ``proxy.bootstrap`` instead of the broker. Every connection is
forwarded to the broker; the proxy reads the request headers (``api_key``,
``api_version``, ``correlation_id``) going one way and matches each response, by its
correlation id, coming back. Before a response is passed on:

* a Metadata response (api key 3) and a FindCoordinator response (api key 10, which
  librdkafka's consumers ask for even when they never join their group) are rewritten so
  that every broker they name is the proxy itself, so the client keeps talking through
  the proxy;
* ``on_response(api_key, api_version, payload)`` may return an :class:`Action`: hold the
  response for ``delay`` seconds (later responses of that connection wait behind it, as
  Kafka answers in order), or replace the payload. :class:`HoldResponses` is such a hook
  for slow answers of one kind (Produce, Fetch).

``payload`` is the response frame without its 4-byte size: the response header (the
correlation id and, for flexible versions, tagged fields) and the body, as kafka-python's
``Response.decode(payload, version=v, header=True)`` reads it. The helpers
:func:`decode_metadata`/:func:`encode_metadata` do that for Metadata responses.

Faults are armed by the hook itself (a closure with a counter, say); the proxy only
counts what it saw in :attr:`KafkaProxy.seen` (responses per api key).
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any

from harness.ports import LOOPBACK

PRODUCE, FETCH, LIST_OFFSETS, METADATA, FIND_COORDINATOR = 0, 1, 2, 3, 10
_HEADER = struct.Struct(">hhi")  # request: api_key, api_version, correlation_id
_SIZE = struct.Struct(">i")


@dataclass(frozen=True)
class Action:
    """What to do with one response: wait ``delay`` s, then send ``payload`` (or the original)."""

    delay: float = 0.0
    payload: bytes | None = None


OnResponse = Callable[[int, int, bytes], Action | None]


class HoldResponses:
    """A hook: hold the next ``count`` responses of ``api_key`` back ``delay`` s each
    (:meth:`arm` sets ``count``, 0 ends it early); ``delayed`` counts those held."""

    def __init__(self, api_key: int, delay: float, count: int = 0) -> None:
        self.api_key = api_key
        self.delay = delay
        self.remaining = count
        self.delayed = 0
        self._lock = threading.Lock()

    def arm(self, count: int) -> None:
        with self._lock:
            self.remaining = count

    def __call__(self, api_key: int, api_version: int, payload: bytes) -> Action | None:
        if api_key != self.api_key:
            return None
        with self._lock:
            if self.remaining <= 0:
                return None
            self.remaining -= 1
            self.delayed += 1
        return Action(delay=self.delay)


def decode_metadata(payload: bytes, version: int) -> Any:
    """A Metadata response frame (header + body) as kafka-python's ``MetadataResponse``."""
    from kafka.protocol.metadata import MetadataResponse

    return MetadataResponse.decode(payload, version=version, header=True)


def encode_metadata(response: Any) -> bytes:
    """The frame (header + body, no size prefix) of a decoded ``MetadataResponse``, in
    the version it was decoded with (``encode(version=...)`` fails on a response header)."""
    return bytes(response.encode(header=True))


def hide_partition(payload: bytes, version: int, topic: str, partition: int) -> bytes | None:
    """The Metadata response without ``topic``'s ``partition``; ``None`` if it is not listed."""
    response = decode_metadata(payload, version)
    for t in response.topics:
        if t.name == topic and any(p.partition_index == partition for p in t.partitions):
            t.partitions = [p for p in t.partitions if p.partition_index != partition]
            return encode_metadata(response)
    return None


class KafkaProxy:
    """See the module docstring. A context manager, or ``start()``/``stop()``."""

    def __init__(self, target: str, on_response: OnResponse | None = None) -> None:
        host, _, port = target.rpartition(":")
        self.target = (host, int(port))
        self.on_response = on_response
        self.seen: Counter[int] = Counter()
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((LOOPBACK, 0))
        self._listener.listen(64)
        self._listener.settimeout(0.1)
        self.port = int(self._listener.getsockname()[1])
        self.bootstrap = f"{LOOPBACK}:{self.port}"
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._sockets: set[socket.socket] = set()
        self._acceptor = threading.Thread(target=self._accept_loop, name="kafka-proxy", daemon=True)

    def start(self) -> KafkaProxy:
        self._acceptor.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        self._acceptor.join(timeout=5)
        self._listener.close()
        with self._lock:
            sockets, self._sockets = set(self._sockets), set()
        for sock in sockets:
            _close(sock)

    def close_connections(self) -> None:
        """Drop every open connection (clients reconnect through the proxy)."""
        with self._lock:
            sockets, self._sockets = set(self._sockets), set()
        for sock in sockets:
            _close(sock)

    def __enter__(self) -> KafkaProxy:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, err: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    # --- plumbing --------------------------------------------------------------------------

    def _accept_loop(self) -> None:
        while not self._stop.is_set():
            try:
                client, _ = self._listener.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=10)
            except OSError:
                _close(client)
                continue
            for sock in (client, upstream):
                sock.settimeout(None)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets.update((client, upstream))
            pending: dict[int, tuple[int, int]] = {}
            pending_lock = threading.Lock()
            threading.Thread(
                target=self._requests,
                args=(client, upstream, pending, pending_lock),
                name="kafka-proxy-requests",
                daemon=True,
            ).start()
            threading.Thread(
                target=self._responses,
                args=(upstream, client, pending, pending_lock),
                name="kafka-proxy-responses",
                daemon=True,
            ).start()

    def _requests(
        self,
        client: socket.socket,
        upstream: socket.socket,
        pending: dict[int, tuple[int, int]],
        lock: threading.Lock,
    ) -> None:
        try:
            while (frame := _read_frame(client)) is not None:
                api_key, api_version, correlation_id = _HEADER.unpack_from(frame)
                with lock:
                    pending[correlation_id] = (api_key, api_version)
                upstream.sendall(_SIZE.pack(len(frame)) + frame)
        except OSError:
            pass
        finally:
            _close(client, upstream)

    def _responses(
        self,
        upstream: socket.socket,
        client: socket.socket,
        pending: dict[int, tuple[int, int]],
        lock: threading.Lock,
    ) -> None:
        try:
            while (frame := _read_frame(upstream)) is not None:
                (correlation_id,) = _SIZE.unpack_from(frame)
                with lock:
                    api_key, api_version = pending.pop(correlation_id, (-1, -1))
                self.seen[api_key] += 1
                if api_key == METADATA:
                    frame = self._advertise_self(frame, api_version)
                elif api_key == FIND_COORDINATOR:
                    frame = self._coordinator_self(frame, api_version)
                action = self.on_response(api_key, api_version, frame) if self.on_response else None
                if action is not None:
                    if action.delay > 0:
                        time.sleep(action.delay)
                    if action.payload is not None:
                        frame = action.payload
                client.sendall(_SIZE.pack(len(frame)) + frame)
        except OSError:
            pass
        finally:
            _close(client, upstream)

    def _advertise_self(self, frame: bytes, version: int) -> bytes:
        response = decode_metadata(frame, version)
        for broker in response.brokers:
            broker.host, broker.port = LOOPBACK, self.port
        return encode_metadata(response)

    def _coordinator_self(self, frame: bytes, version: int) -> bytes:
        from kafka.protocol.metadata import FindCoordinatorResponse

        response = FindCoordinatorResponse.decode(frame, version=version, header=True)
        # v4 and later name one coordinator per key asked; earlier versions name one.
        for node in getattr(response, "coordinators", None) or [response]:
            if getattr(node, "host", None):
                node.host, node.port = LOOPBACK, self.port
        return bytes(response.encode(header=True))


def _read_exactly(sock: socket.socket, n: int) -> bytes | None:
    chunks: list[bytes] = []
    while n > 0:
        chunk = sock.recv(min(n, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def _read_frame(sock: socket.socket) -> bytes | None:
    """One size-prefixed Kafka frame without its size, or ``None`` at end of stream."""
    size = _read_exactly(sock, 4)
    if size is None:
        return None
    return _read_exactly(sock, _SIZE.unpack(size)[0])


def _close(*socks: socket.socket) -> None:
    for sock in socks:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_RDWR)
        with contextlib.suppress(OSError):
            sock.close()
