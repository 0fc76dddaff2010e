r"""A reference HTTP receiver for ``consumer=http`` (Starlette on uvicorn, SQLite storage).

    gtbarrier receiver --port 8080 --dir /var/lib/receiver
    python -m gtbarrier.http_receiver --port 8080 --dir /var/lib/receiver   # the same

``POST /<stream>`` stores the request body as one bundle of stream ``<stream>`` (the URL
path), keyed by the ``X-Gtbarrier-Bundle-Id`` header, in one SQLite transaction, before it
answers ``200 {"bundle_id", "stored": true}``. A bundle id it already has is answered
``200 {"stored": false}`` without storing it again, so a re-delivered bundle is never
duplicated. ``GET /<stream>/last`` answers ``{"bundle_id", "gt"}`` of the highest stored
bundle, or ``404``. ``GET /<stream>/bundles`` lists what is stored (for tests and demos).

Secured (``consumer.http.token``, ``consumer.http.caFile`` on the sink's side)::

    gtbarrier receiver --port 8443 --dir /var/lib/receiver \
        --tls-cert /etc/receiver/cert.pem --tls-key /etc/receiver/key.pem \
        --token-file /run/secrets/receiver-token

``--tls-cert``/``--tls-key`` serve HTTPS (PEM files; the certificate may carry its chain).
A bearer token is required: ``--token-file PATH`` (the file's content, one trailing line
break dropped) or ``--token VALUE`` (a value or a secret reference such as
``${env:RECEIVER_TOKEN}``; a value on the command line is visible to every user of the
host) makes every request but ``GET /_health`` carry ``Authorization: Bearer <token>``: one
without it, or with another token, is answered ``401`` with ``WWW-Authenticate: Bearer``
and logged (method, path, client, never a token), and nothing is stored. Without either the
receiver does not start, unless ``--insecure-no-token`` says to serve every client (for
local tests and demos only; it logs a warning).

A request body larger than ``--max-body-bytes`` (default 64 MiB, ample for a bundle of
a few hundred thousand rows; raise it for larger micro-batches) is answered ``413`` and
nothing is stored; at most that many bytes of a body are held in memory. The token is
checked first: an unauthenticated body is read and dropped, never held.

Each stream keeps its newest ``--keep-bundles`` bundles (default 10000; 0 keeps every
one): storing a bundle deletes, in the same transaction, the stream's bundles older than
that. The newest is never deleted, so ``GET /<stream>/last`` always answers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hmac
import logging
import os
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from gtbarrier.help_text import plain_help
from state.errors import SecretReferenceError
from state.secrets import has_reference, resolve

log = logging.getLogger("gtbarrier.receiver")

DB_NAME = "receiver.sqlite3"
DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024
"""``--max-body-bytes``'s default: a bundle is one micro-batch in one request."""
DEFAULT_KEEP_BUNDLES = 10_000
"""``--keep-bundles``'s default: a stream's history stays bounded, enough to inspect."""
NO_TOKEN = "--insecure-no-token"
OPEN_PATHS = frozenset({"/_health"})
"""Paths served without the token: they say nothing of what is stored."""
SCHEMA = """
CREATE TABLE IF NOT EXISTS bundles (
    stream       TEXT    NOT NULL,
    bundle_id    INTEGER NOT NULL,
    gt           INTEGER NOT NULL,
    pipeline     TEXT,
    rows         INTEGER,
    content_type TEXT,
    body         BLOB    NOT NULL,
    received_at  REAL    NOT NULL,
    PRIMARY KEY (stream, bundle_id)
)
"""


class BundleDb:
    """Bundles in SQLite (WAL, synchronous=FULL): each insert is one durable transaction,
    which also deletes the stream's bundles older than its newest ``keep_bundles`` (0:
    none deleted)."""

    def __init__(self, directory: str, keep_bundles: int = DEFAULT_KEEP_BUNDLES) -> None:
        if keep_bundles < 0:
            raise ValueError(f"keep_bundles {keep_bundles}: expected 0 (keep all) or more")
        self.keep_bundles = keep_bundles
        os.makedirs(directory, exist_ok=True)
        self.path = os.path.join(directory, DB_NAME)
        self._lock = threading.Lock()
        self._conn = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._conn.execute("PRAGMA journal_mode=WAL")
        self._conn.execute("PRAGMA synchronous=FULL")
        self._conn.execute(SCHEMA)

    def store(
        self, stream: str, bundle_id: int, gt: int, meta: dict[str, Any], body: bytes
    ) -> bool:
        """Insert the bundle unless present; True if it was stored now."""
        with self._lock:
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                stored = self._insert(stream, bundle_id, gt, meta, body)
                if stored and self.keep_bundles:
                    self._prune(stream)
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise
            self._conn.execute("COMMIT")
            return stored

    def _insert(
        self, stream: str, bundle_id: int, gt: int, meta: dict[str, Any], body: bytes
    ) -> bool:
        cur = self._conn.execute(
            "INSERT OR IGNORE INTO bundles "
            "(stream, bundle_id, gt, pipeline, rows, content_type, body, received_at) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (
                stream,
                bundle_id,
                gt,
                meta.get("pipeline"),
                meta.get("rows"),
                meta.get("content_type"),
                body,
                time.time(),
            ),
        )
        return cur.rowcount == 1

    def _prune(self, stream: str) -> None:
        """Delete the stream's bundles below its ``keep_bundles``-th newest (by bundle id,
        as ``last`` orders them: the newest stays whatever the setting)."""
        self._conn.execute(
            "DELETE FROM bundles WHERE stream = ? AND bundle_id < ("
            "SELECT bundle_id FROM bundles WHERE stream = ? "
            "ORDER BY bundle_id DESC LIMIT 1 OFFSET ?)",
            (stream, stream, self.keep_bundles - 1),
        )

    def last(self, stream: str) -> tuple[int, int] | None:
        with self._lock:
            row = self._conn.execute(
                "SELECT bundle_id, gt FROM bundles WHERE stream = ? "
                "ORDER BY bundle_id DESC LIMIT 1",
                (stream,),
            ).fetchone()
        return None if row is None else (int(row[0]), int(row[1]))

    def listing(self, stream: str) -> list[dict[str, Any]]:
        with self._lock:
            rows = self._conn.execute(
                "SELECT bundle_id, gt, rows, content_type, length(body) FROM bundles "
                "WHERE stream = ? ORDER BY bundle_id",
                (stream,),
            ).fetchall()
        keys = ("bundle_id", "gt", "rows", "content_type", "bytes")
        return [dict(zip(keys, r, strict=True)) for r in rows]

    def close(self) -> None:
        with self._lock:
            self._conn.close()


class DroppedConnection(Response):
    """Start a response and stop: uvicorn closes the connection without an answer."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-length", b"64")],
            }
        )


class BearerToken:
    """ASGI middleware: every HTTP request but those of :data:`OPEN_PATHS` must carry
    ``Authorization: Bearer <token>``; any other is answered 401 before the app sees it.

    The request's body is read to its end first (and dropped): a client still sending a
    bundle when the answer comes could otherwise see its connection reset instead of the
    401, which the sink would take for a delivery that may have been stored."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self._expected = f"Bearer {token}".encode()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in OPEN_PATHS:
            await self.app(scope, receive, send)
            return
        given = dict(scope["headers"]).get(b"authorization")
        if given is not None and hmac.compare_digest(given, self._expected):
            await self.app(scope, receive, send)
            return
        message: Message = {"more_body": True}
        while message.get("more_body", False):
            message = await receive()
            if message["type"] != "http.request":
                break
        why = "no bearer token" if given is None else "a bearer token that is not accepted"
        client = scope.get("client") or ("?", 0)
        log.warning(
            "receiver: refused %s %s from %s: %s (HTTP 401)",
            scope["method"],
            scope["path"],
            client[0],
            why,
        )
        error = "invalid_request" if given is None else "invalid_token"
        response = JSONResponse(
            {"error": f"{why}: send Authorization: Bearer <the receiver's token>"},
            401,
            headers={"WWW-Authenticate": f'Bearer realm="gtbarrier receiver", error="{error}"'},
        )
        await response(scope, receive, send)


class _TooLarge(Exception):
    """A request body over the limit (raised and caught within :class:`BodyLimit`);
    ``read_whole``: the body's last part was read already."""

    def __init__(self, *, read_whole: bool) -> None:
        super().__init__()
        self.read_whole = read_whole


class BodyLimit:
    """ASGI middleware: a request body of more than ``limit`` bytes is answered 413 before
    the app sees it, whether its length is declared or it comes chunked.

    The body is read into memory up to ``limit`` bytes and then handed to the app whole;
    beyond it the rest is read and dropped, so that a client still sending sees the 413
    rather than a reset connection (which the sink would take for a bundle that may have
    been stored)."""

    def __init__(self, app: ASGIApp, limit: int) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"")
        try:
            if declared.isdigit() and int(declared) > self.limit:
                raise _TooLarge(read_whole=False)
            chunks = await self._read(receive)
        except _TooLarge as too_large:
            if not too_large.read_whole:
                await self._drain(receive)
            await self._refuse(scope, receive, send)
            return
        replayed = False

        async def replay() -> Message:
            nonlocal replayed
            if not replayed:
                replayed = True
                return {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()  # after the body: the disconnect, when it comes

        await self.app(scope, replay, send)

    async def _read(self, receive: Receive) -> list[bytes]:
        chunks: list[bytes] = []
        size = 0
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return chunks
            body = message.get("body", b"")
            more = bool(message.get("more_body", False))
            size += len(body)
            if size > self.limit:
                raise _TooLarge(read_whole=not more)
            chunks.append(body)
            if not more:
                return chunks

    @staticmethod
    async def _drain(receive: Receive) -> None:
        """Read the rest of a body and drop it (after a part whose ``more_body`` was set:
        one more ``receive`` on a finished body would wait for the client to leave)."""
        message: Message = {"more_body": True}
        while message.get("more_body", False):
            message = await receive()
            if message["type"] != "http.request":
                return

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        client = scope.get("client") or ("?", 0)
        log.warning(
            "receiver: refused %s %s from %s: a body over %d bytes (HTTP 413)",
            scope["method"],
            scope["path"],
            client[0],
            self.limit,
        )
        response = JSONResponse(
            {
                "error": f"the request body is larger than this receiver accepts "
                f"({self.limit} bytes, its --max-body-bytes)"
            },
            413,
        )
        await response(scope, receive, send)


def create_app(
    directory: str,
    *,
    drop_after_store: int | None = None,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    keep_bundles: int = DEFAULT_KEEP_BUNDLES,
) -> ASGIApp:
    """The receiver storing into ``directory``; a body over ``max_body_bytes`` is answered
    413 (:class:`BodyLimit`); with ``token``, every request but ``GET /_health`` must carry
    it as a bearer token (:class:`BearerToken`), checked before the body's size. Each
    stream keeps its newest ``keep_bundles`` bundles (0: all)."""
    db = BundleDb(directory, keep_bundles)
    pending_drop = {drop_after_store} if drop_after_store is not None else set()

    def stream_of(request: Request) -> str:
        return "/" + str(request.path_params.get("stream", "")).strip("/")

    async def post_bundle(request: Request) -> Response:
        header = request.headers.get("x-gtbarrier-bundle-id")
        if header is None or not header.lstrip("-").isdigit():
            return JSONResponse(
                {"error": "the X-Gtbarrier-Bundle-Id header (an integer) is required"}, 400
            )
        bundle_id = int(header)
        gt = int(request.headers.get("x-gtbarrier-gt", bundle_id))
        body = await request.body()
        meta = {
            "pipeline": request.headers.get("x-gtbarrier-pipeline"),
            "rows": int(request.headers.get("x-gtbarrier-rows", "0")),
            "content_type": request.headers.get("content-type"),
        }
        stored = await asyncio.to_thread(db.store, stream_of(request), bundle_id, gt, meta, body)
        if stored and bundle_id in pending_drop:
            pending_drop.discard(bundle_id)
            return DroppedConnection()
        return JSONResponse({"bundle_id": bundle_id, "stored": stored})

    async def get_last(request: Request) -> Response:
        last = await asyncio.to_thread(db.last, stream_of(request))
        if last is None:
            return JSONResponse({"bundle_id": None, "gt": None}, 404)
        return JSONResponse({"bundle_id": last[0], "gt": last[1]})

    async def get_bundles(request: Request) -> Response:
        return JSONResponse(await asyncio.to_thread(db.listing, stream_of(request)))

    async def health(request: Request) -> Response:
        return JSONResponse({"ok": True})

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        db.close()

    app = Starlette(
        routes=[
            Route("/_health", health, methods=["GET"]),
            Route("/{stream:path}/last", get_last, methods=["GET"]),
            Route("/{stream:path}/bundles", get_bundles, methods=["GET"]),
            Route("/last", get_last, methods=["GET"]),
            Route("/bundles", get_bundles, methods=["GET"]),
            Route("/{stream:path}", post_bundle, methods=["POST"]),
            Route("/", post_bundle, methods=["POST"]),
        ],
        lifespan=lifespan,
    )
    limited = BodyLimit(app, max_body_bytes)
    return limited if token is None else BearerToken(limited, token)


@dataclass(frozen=True)
class ReceiverOptions:
    """The receiver's command line, parsed; the token resolved (never shown)."""

    port: int
    dir: str
    host: str = "127.0.0.1"
    drop_after_store: int | None = None
    token: str | None = field(default=None, repr=False)
    tls_cert: str | None = None
    tls_key: str | None = None
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    keep_bundles: int = DEFAULT_KEEP_BUNDLES


def _parser(prog: str) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=prog,
        description=plain_help(__doc__),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dir", required=True, help="directory of the SQLite database")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--tls-cert", metavar="PEM", help="serve HTTPS with this certificate")
    parser.add_argument("--tls-key", metavar="PEM", help="the certificate's private key")
    token = parser.add_mutually_exclusive_group()
    token.add_argument(
        "--token",
        metavar="TOKEN",
        help="require this bearer token of every request (a value or a secret reference, "
        "${env:NAME} or ${file:/path}; a value here is visible to every user of the host)",
    )
    token.add_argument(
        "--token-file",
        metavar="PATH",
        help="require the bearer token held in this file (one trailing line break dropped)",
    )
    token.add_argument(
        NO_TOKEN,
        action="store_true",
        help="serve every client without a token (local tests and demos only)",
    )
    parser.add_argument(
        "--max-body-bytes",
        type=int,
        default=DEFAULT_MAX_BODY_BYTES,
        metavar="N",
        help="answer 413 to a request body larger than N bytes "
        f"(default {DEFAULT_MAX_BODY_BYTES}, 64 MiB)",
    )
    parser.add_argument(
        "--keep-bundles",
        type=int,
        default=DEFAULT_KEEP_BUNDLES,
        metavar="N",
        help="keep each stream's newest N bundles, deleting older ones as new ones are "
        f"stored; the newest is always kept (default {DEFAULT_KEEP_BUNDLES}; 0 keeps all)",
    )
    parser.add_argument(
        "--drop-after-store",
        type=int,
        default=None,
        metavar="N",
        # A fault for the tests (integration_tests/chaos): store bundle N, then drop the
        # connection without answering, once, so the sink cannot tell whether it was
        # stored. Not an operator's option, so not in --help.
        help=argparse.SUPPRESS,
    )
    return parser


def receiver_options(
    argv: list[str] | None, *, prog: str = "python -m gtbarrier.http_receiver"
) -> ReceiverOptions:
    """Parse the command line; exits (argparse's way, status 2) naming the argument when
    it is wrong. The token is read or resolved here and never shown."""
    parser = _parser(prog)
    args = parser.parse_args(argv)
    if (args.tls_cert is None) != (args.tls_key is None):
        parser.error("--tls-cert and --tls-key go together: the certificate and its key")
    token: str | None = None
    if args.token_file is not None:
        try:
            token = resolve(f"${{file:{os.path.abspath(args.token_file)}}}", option="--token-file")
        except SecretReferenceError as err:
            parser.error(str(err))
    elif args.token is not None:
        try:
            token = (
                resolve(args.token, option="--token") if has_reference(args.token) else args.token
            )
        except SecretReferenceError as err:
            parser.error(str(err))
    if token is not None and (not token or any(c.isspace() for c in token)):
        parser.error("the bearer token must be non-empty, without spaces or line breaks")
    if token is None and not args.insecure_no_token:
        parser.error(
            "no bearer token: give --token-file PATH or --token VALUE (every request but "
            f"GET /_health must then carry it), or {NO_TOKEN} to serve every client "
            "without one (local tests and demos only)"
        )
    if args.max_body_bytes < 1:
        parser.error(f"--max-body-bytes {args.max_body_bytes}: expected a positive number of bytes")
    if args.keep_bundles < 0:
        parser.error(
            f"--keep-bundles {args.keep_bundles}: expected a number of bundles, 0 to keep all"
        )
    return ReceiverOptions(
        port=args.port,
        dir=args.dir,
        host=args.host,
        drop_after_store=args.drop_after_store,
        token=token,
        tls_cert=args.tls_cert,
        tls_key=args.tls_key,
        max_body_bytes=args.max_body_bytes,
        keep_bundles=args.keep_bundles,
    )


def main(argv: list[str] | None = None, *, prog: str = "python -m gtbarrier.http_receiver") -> None:
    options = receiver_options(argv, prog=prog)
    import uvicorn

    # The refusals' lines (uvicorn configures only its own loggers).
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    if options.token is None:
        log.warning(
            "receiver: serving every client without a bearer token (%s): "
            "for local tests and demos only",
            NO_TOKEN,
        )
    app = create_app(
        options.dir,
        drop_after_store=options.drop_after_store,
        token=options.token,
        max_body_bytes=options.max_body_bytes,
        keep_bundles=options.keep_bundles,
    )
    uvicorn.run(
        app,
        host=options.host,
        port=options.port,
        log_level="warning",
        access_log=False,
        ssl_certfile=options.tls_cert,
        ssl_keyfile=options.tls_key,
    )


if __name__ == "__main__":
    main()
