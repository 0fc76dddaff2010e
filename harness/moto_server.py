"""moto's S3 server with atomic conditional writes.

    python -m harness.moto_server -H HOST -p PORT

**Why not plain ``python -m moto.server``.** moto 5.2 implements ``If-None-Match`` and
``If-Match`` on ``PutObject``, but checks the condition and stores the object in two
steps without a lock, on a threaded server: two concurrent conditional PUTs to one key
can both pass the check. Real S3 (and MinIO) decide atomically. So
:class:`~harness.s3.S3Server` runs moto's own WSGI application through this module,
which serialises the *processing* of mutating requests (PUT, POST, DELETE) behind one
lock, after their bodies have been read. Reads stay concurrent. Everything else is
moto's server unchanged.
"""

from __future__ import annotations

import argparse
import io
import os
import threading
from collections.abc import Callable, Iterable
from typing import Any

from harness.ports import LOOPBACK


class SerializedWrites:
    """WSGI middleware: process mutating requests one at a time (see the module docstring)."""

    MUTATING = frozenset({"PUT", "POST", "DELETE"})

    def __init__(self, app: Callable[..., Iterable[bytes]]) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(
        self, environ: dict[str, Any], start_response: Callable[..., Any]
    ) -> Iterable[bytes]:
        if environ.get("REQUEST_METHOD") not in self.MUTATING:
            return self.app(environ, start_response)
        length = (environ.get("CONTENT_LENGTH") or "").strip()
        stream = environ["wsgi.input"]
        if length:
            body = stream.read(int(length))
            if len(body) != int(length):  # the client went away mid-upload: S3 stores nothing
                start_response("400 Bad Request", [("Content-Type", "text/plain")])
                return [b"IncompleteBody: the request body ended early\n"]
        elif environ.get("wsgi.input_terminated"):  # chunked, de-chunked by werkzeug
            body = stream.read()
        else:
            body = b""
        environ["wsgi.input"] = io.BytesIO(body)
        environ["CONTENT_LENGTH"] = str(len(body))
        with self.lock:  # the body is in memory: a slow client cannot hold the lock
            result = self.app(environ, start_response)
            try:
                return [b"".join(result)]
            finally:
                close = getattr(result, "close", None)
                if close is not None:
                    close()


def serve(argv: list[str] | None = None) -> None:
    """Run moto's S3 server with :class:`SerializedWrites` (``-H host -p port``)."""
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import run_simple

    parser = argparse.ArgumentParser(description=serve.__doc__)
    parser.add_argument("-H", "--host", default=LOOPBACK)
    parser.add_argument("-p", "--port", type=int, required=True)
    args = parser.parse_args(argv)
    os.environ.setdefault("MOTO_PORT", str(args.port))
    app = SerializedWrites(DomainDispatcherApplication(create_backend_app))
    run_simple(args.host, args.port, app, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    serve()
