"""Serving ``/metrics``: a collector that reads the pipeline at each scrape, on a server of
its own.

:class:`PipelineCollector` is a ``prometheus_client`` collector that calls a read
function at each scrape and turns its :class:`~state.metrics.reading.PipelineReading`
into metric families (:func:`~state.metrics.families.metric_families`);
:class:`MetricsServer` serves it on a port from a thread of its own. The driver (the
coordinator's ``metrics_port``, :mod:`state.coordinator.driver_metrics`) and ``gtbarrier
exporter`` both use them, each with its own read function.

Each scrape makes the process read with its credentials (S3 listings, ZooKeeper reads), so
the endpoint listens on ``127.0.0.1`` unless given another address, and
:class:`~state.metrics.access.MetricsAccess` adds HTTPS (a certificate and key; client
certificates required when a client CA is given) and basic authentication (a user and a
password that may be a secret reference, compared in constant time). Beside ``/metrics``
it answers the probes ``/healthz`` and ``/ready`` (:mod:`state.metrics.probes`).
"""

from __future__ import annotations

import logging
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer
from prometheus_client.registry import Collector

from state.errors import ConfigError, GtBarrierError
from state.metrics.access import DEFAULT_ADDRESS, MetricsAccess, basic_auth_app
from state.metrics.families import ProgressWatch, metric_families, scrape_families
from state.metrics.probes import Readiness, probes_app
from state.metrics.reading import PipelineReading
from state.secrets import redact

if TYPE_CHECKING:
    from wsgiref.types import WSGIApplication

__all__ = ["HANDLER_TIMEOUT", "MetricsServer", "PipelineCollector"]

log = logging.getLogger("gtbarrier.metrics")

HANDLER_TIMEOUT = 30.0
"""Seconds a connection may take to send its request (a TLS handshake included)."""


class PipelineCollector(Collector):
    """Reads the pipeline with ``read`` at each scrape and yields its metric families,
    with ``gtbarrier_up`` and ``gtbarrier_scrape_errors_total``
    (:func:`~state.metrics.families.scrape_families`).

    A read that fails with a gtbarrier error (a store or ZooKeeper that cannot be
    reached) yields only those two, ``up`` 0 and the error counted, and logs one warning,
    its text without secrets; any other error too, logged with its traceback, secrets
    masked as in every log record. A reading that left a part out (its
    :attr:`~state.metrics.reading.PipelineReading.errors`: Kafka's ends not read) yields
    the families of what it read, ``up`` 0 and each error counted.
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
            # a part the reading could not read (Kafka's ends) is left out of it
            for error in reading.errors:
                self._errors[error] += 1
            now = self._clock()
            progress = None
            barrier = reading.facts.barrier
            if barrier is not None:
                inflight = barrier.inflight
                progress = self._watch.observe(
                    progress=barrier.progress,
                    inflight=None if inflight is None else inflight.epoch,
                    now=now,
                )
            yield from metric_families(reading, now, progress)
            yield from scrape_families(self._pipeline, up=not reading.errors, errors=self._errors)

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
