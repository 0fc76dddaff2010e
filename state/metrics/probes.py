"""The probes beside ``/metrics``, for a kubelet or a load balancer.

``/healthz`` answers 200 ``ok`` while the process serves; ``/ready`` answers 200 or 503
with a one-line reason, from the readiness function the server is given (the driver's:
:mod:`state.coordinator.readiness`), and 404 without one, as for ``gtbarrier exporter``.
The probes read nothing with the process's credentials and show no metric, so they answer
without basic authentication (a kubelet's probe sends none), over the same TLS; client
certificates, when required, hold for them too. Needs no ``prometheus_client``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from state.secrets import redact

if TYPE_CHECKING:
    from collections.abc import Iterable
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

__all__ = ["HEALTHZ", "READY", "Readiness", "probes_app"]

log = logging.getLogger("gtbarrier.metrics")


@dataclass(frozen=True)
class Readiness:
    """What ``/ready`` answers: ``ready``, and ``reason``, one short line for its body."""

    ready: bool
    reason: str


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
