"""Reading a pipeline's state for the metrics, at each scrape, and serving ``/metrics``.

:class:`StoreFacts` is what the state store holds (the barrier state, the epoch log up to
``GT_last``, the batch records); epoch and batch records never change once written, so a
:class:`StateReader` reads each one once and only lists the new ones afterwards.
:class:`PipelineCollector` is a ``prometheus_client`` collector that calls a read
function at each scrape and turns its :class:`PipelineReading` into metric families
(:func:`~state.coordinator.metric_families.metric_families`); :class:`MetricsServer` serves it
on a port from a thread of its own. The driver (the coordinator's ``metrics_port``) and
``gtbarrier exporter`` both use them, each with its own read function.

Each scrape makes the process read with its credentials (S3 listings, ZooKeeper reads), so
the endpoint listens on ``127.0.0.1`` unless given another address, and
:class:`MetricsAccess` adds HTTPS (a certificate and key; client certificates required
when a client CA is given) and basic authentication (a user and a password that may be a
secret reference, compared in constant time).

Beside ``/metrics`` it answers two probes, for a kubelet or a load balancer: ``/healthz``
(200 ``ok`` while the process serves) and ``/ready`` (200 or 503 with a one-line reason,
from the readiness function it is given; 404 without one, as for ``gtbarrier
exporter``). The probes read nothing with the process's credentials and show no metric,
so they answer without basic authentication (a kubelet's probe sends none), over the
same TLS; client certificates, when required, hold for them too.
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector

from state.coordinator.metric_families import (
    EpochFacts,
    PipelineReading,
    ProgressWatch,
    metric_families,
    scrape_families,
)
from state.coordinator.metrics_access import (
    COORDINATOR_NAMES,
    DEFAULT_ADDRESS,
    EXPORTER_NAMES,
    AccessNames,
    MetricsAccess,
    basic_auth_app,
)
from state.coordinator.readiness import Readiness
from state.errors import ConfigError, GtBarrierError
from state.lag import Lag
from state.layout import PipelineLayout
from state.protocol.barrier_state import load_barrier_state
from state.protocol.batch_records import batch_record_keys, read_batch_record_at
from state.protocol.epoch_log import EpochLog
from state.records.barrier import BarrierState
from state.records.floor import FloorRecord
from state.records.source_offset import Frontier
from state.secrets import redact
from state.stores import StateStore

if TYPE_CHECKING:
    from collections.abc import Iterable
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

__all__ = [
    "COORDINATOR_NAMES",
    "DEFAULT_ADDRESS",
    "EXPORTER_NAMES",
    "AccessNames",
    "MetricsAccess",
    "MetricsServer",
    "PipelineCollector",
    "StateReader",
    "StoreFacts",
]

log = logging.getLogger("gtbarrier.metrics")

HANDLER_TIMEOUT = 30.0
"""Seconds a connection may take to send its request (a TLS handshake included)."""

HEALTHZ = "/healthz"
"""The liveness probe's path: 200 while the process serves."""
READY = "/ready"
"""The readiness probe's path: 200 or 503 with the reason (404 without a readiness)."""


def probes_app(metrics: WSGIApplication, ready: Callable[[], Readiness] | None) -> WSGIApplication:
    """``metrics`` (every other path) with the probes :data:`HEALTHZ` and :data:`READY` in
    front of it; ``ready`` decides :data:`READY`. A readiness that raises answers 503
    with the error's type, logged with its text, secrets masked."""

    def answer(start_response: StartResponse, status: str, text: str) -> list[bytes]:
        body = text.encode()
        start_response(
            status,
            [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))],
        )
        return [body]

    def app(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "")
        if path == HEALTHZ:
            return answer(start_response, "200 OK", "ok\n")
        if path != READY:
            return metrics(environ, start_response)
        if ready is None:
            return answer(start_response, "404 Not Found", "no readiness here: no query runs\n")
        try:
            decided = ready()
        except Exception as err:
            log.warning(
                "gtbarrier metrics: the readiness check failed: %s: %s",
                type(err).__name__,
                redact(str(err)),
            )
            return answer(
                start_response, "503 Service Unavailable", f"not ready: {type(err).__name__}\n"
            )
        if decided.ready:
            return answer(start_response, "200 OK", f"{decided.reason}\n")
        return answer(start_response, "503 Service Unavailable", f"not ready: {decided.reason}\n")

    return app


@dataclass(frozen=True)
class StoreFacts:
    """What the state store holds for the metrics.

    ``barrier``: None if it was never written. ``epochs``: the recorded epochs at or
    below ``GT_last``. ``batches_per_epoch``: how many batch records read each epoch.
    ``planned``: where the newest planned epoch ends (the source's start before any),
    per partition; None before the source started. ``floor``: where the pruned epoch log
    begins (None: nothing pruned); ``epochs`` and ``batches_per_epoch`` hold only what
    lies at or above it, the floor's counts the rest. ``planned_epoch``: the newest
    recorded epoch (None: none).
    """

    barrier: BarrierState | None
    epochs: tuple[EpochFacts, ...]
    batches_per_epoch: dict[int, int]
    planned: Frontier | None
    floor: FloorRecord | None = None
    planned_epoch: int | None = None


class StateReader:
    """Reads :class:`StoreFacts` from ``store``; immutable records are read once."""

    def __init__(self, store: StateStore, layout: PipelineLayout) -> None:
        self.store = store
        self.layout = layout
        self._epochs: dict[int, tuple[EpochFacts, Frontier]] = {}
        self._batches: dict[str, int] = {}

    def read(self) -> StoreFacts:
        held = load_barrier_state(self.store, self.layout)
        state, version = held.state, held.version
        epoch_log = EpochLog(self.store, self.layout)
        floor = epoch_log.floor()
        lowest = 0 if floor is None else floor.epoch
        # below the floor: counted by the floor, and no longer remembered here
        self._epochs = {n: facts for n, facts in self._epochs.items() if n >= lowest}
        self._batches = {k: e for k, e in self._batches.items() if e >= lowest}
        numbers = [n for n in epoch_log.epoch_numbers() if n >= lowest]
        unread = epoch_log.read_epochs(n for n in numbers if n not in self._epochs)
        for n, record in unread.items():
            start, end = dict(record.start.offsets), dict(record.end.offsets)
            self._epochs[n] = (EpochFacts(n, Lag.between(start, end).total), end)
        keys = batch_record_keys(self.store, self.layout)
        for key in keys:
            if key not in self._batches:
                batch = read_batch_record_at(self.store, key)
                if batch is not None and batch.epoch >= lowest:
                    self._batches[key] = batch.epoch
        present = set(keys)
        per_epoch = Counter(e for k, e in self._batches.items() if k in present)
        if floor is not None and floor.segments:
            for batch in epoch_log.compacted_batches(floor):
                key = self.layout.batch(batch.query_id, batch.batch_id)
                if key not in present and batch.epoch >= lowest:
                    per_epoch[batch.epoch] += 1
        known = [n for n in numbers if n in self._epochs]
        planned: Frontier | None
        if known:
            planned = self._epochs[known[-1]][1]
        else:
            origin = epoch_log.start()
            planned = None if origin is None else dict(origin.offsets)
        return StoreFacts(
            barrier=None if version is None else state,
            epochs=tuple(self._epochs[n][0] for n in known if n <= state.progress),
            batches_per_epoch=dict(per_epoch),
            planned=planned,
            floor=floor,
            planned_epoch=max(numbers) if numbers else None,
        )


class PipelineCollector(Collector):
    """Reads the pipeline with ``read`` at each scrape and yields its metric families,
    with ``gtbarrier_up`` and ``gtbarrier_scrape_errors_total``
    (:func:`~state.coordinator.metric_families.scrape_families`).

    A read that fails with a gtbarrier error (a store or ZooKeeper that cannot be
    reached) yields only those two, ``up`` 0 and the error counted, and logs one warning,
    its text without secrets; any other error too, logged with its traceback, secrets
    masked as in every log record.
    """

    def __init__(
        self,
        read: Callable[[], PipelineReading],
        *,
        pipeline: str,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._read = read
        self._pipeline = pipeline
        self._clock = clock
        self._lock = threading.Lock()
        self._errors: Counter[str] = Counter()
        self._watch = ProgressWatch()

    def collect(self) -> Iterator[Any]:
        with self._lock:  # one read at a time: scrapes may overlap
            try:
                reading = self._read()
            except GtBarrierError as err:
                log.warning(
                    "gtbarrier metrics: could not read the pipeline: %s: %s",
                    type(err).__name__,
                    redact(str(err)),
                )
                self._errors[type(err).__name__] += 1
                yield from scrape_families(self._pipeline, up=False, errors=self._errors)
                return
            except Exception as err:
                # Not left to the HTTP server, which prints the traceback unmasked: a log
                # record has every secret given to a client masked (state.secrets).
                log.exception("gtbarrier metrics: reading the pipeline failed unexpectedly")
                self._errors[type(err).__name__] += 1
                yield from scrape_families(self._pipeline, up=False, errors=self._errors)
                return
            now = self._clock()
            progress = None
            if reading.barrier is not None:
                inflight = reading.barrier.inflight
                progress = self._watch.observe(
                    progress=reading.barrier.progress,
                    inflight=None if inflight is None else inflight.epoch,
                    now=now,
                )
            yield from metric_families(reading, now, progress)
            yield from scrape_families(self._pipeline, up=True, errors=self._errors)

    def describe(self) -> Sequence[Any]:
        # Nothing is read when the collector is registered: only at a scrape.
        return []


class _QuietHandler(WSGIRequestHandler):
    """No access log on stderr; a bounded wait for each connection's request."""

    timeout = HANDLER_TIMEOUT

    def log_message(self, format: str, *args: Any) -> None:
        return


class _Server(ThreadingWSGIServer):
    def handle_error(self, request: Any, client_address: Any) -> None:
        # A failed TLS handshake (no client certificate, plain HTTP on the TLS port) ends
        # that connection only; logged without the traceback socketserver would print.
        failure = sys.exc_info()[1]
        log.info(
            "gtbarrier metrics: a connection from %s failed: %s: %s",
            client_address[0],
            type(failure).__name__,
            redact(str(failure)),
        )


class _Server6(_Server):
    address_family = socket.AF_INET6


class MetricsServer:
    """``/metrics`` of ``collector`` on ``address:port`` (0: a free port; default
    ``127.0.0.1``), from a daemon thread, until :meth:`stop`; over HTTPS and behind basic
    authentication as ``access`` says; the probes beside it (:func:`probes_app`, ``ready``
    deciding ``/ready``). Each connection is served on a thread of its own, its TLS
    handshake there too, so a client that stalls holds up no other."""

    def __init__(  # noqa: PLR0913 - keyword-only after the address, each named at the call
        self,
        collector: Collector,
        port: int,
        address: str = DEFAULT_ADDRESS,
        *,
        access: MetricsAccess | None = None,
        ready: Callable[[], Readiness] | None = None,
        option: str = "metrics_port",
        where: str = "",
    ) -> None:
        if not 0 <= port <= 65535:
            raise ConfigError(option, port, "a port 0-65535 (0: a free one)", where=where)
        access = access or MetricsAccess()
        context = access.ssl_context()
        credentials = access.credentials()
        self.registry = CollectorRegistry(auto_describe=False)
        self.registry.register(collector)
        app: WSGIApplication = make_wsgi_app(self.registry)
        if credentials is not None:
            app = basic_auth_app(app, *credentials)
        app = probes_app(app, ready)
        server_class = _Server6 if ":" in address else _Server
        try:
            server = make_server(address, port, app, server_class, handler_class=_QuietHandler)
        except OSError as err:
            raise ConfigError(
                option,
                port,
                f"a port this process can listen on at {address} ({err.strerror or err})",
                where=where,
            ) from err
        if context is not None:
            server.socket = context.wrap_socket(
                server.socket, server_side=True, do_handshake_on_connect=False
            )
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, name="gtbarrier-metrics", daemon=True
        )
        self._thread.start()
        self.address = address
        self.access = access

    @property
    def port(self) -> int:
        """The bound port (the one chosen when 0 was asked for)."""
        return int(self._server.server_port)

    @property
    def url(self) -> str:
        host = "127.0.0.1" if self.address in ("", "0.0.0.0") else self.address
        if ":" in host:
            host = f"[{host}]"
        scheme = "https" if self.access.tls else "http"
        return f"{scheme}://{host}:{self.port}/metrics"

    def stop(self) -> None:
        """Stop serving and release the port (idempotent)."""
        if self._thread.is_alive():
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()
