"""A reference HTTP receiver for ``consumer=http`` (Starlette on uvicorn, SQLite storage).

    gtbarrier receiver --port 8080 --dir /var/lib/receiver
    python -m gtbarrier.http_receiver --port 8080 --dir /var/lib/receiver   # the same

``POST /<stream>`` stores the request body as one bundle of stream ``<stream>`` (the URL
path), keyed by the ``X-Gtbarrier-Bundle-Id`` header, in one SQLite transaction, before it
answers ``200 {"bundle_id", "stored": true}``. A bundle id it already has is answered
``200 {"stored": false}`` without storing it again, so a re-delivered bundle is never
duplicated. ``GET /<stream>/last`` answers ``{"bundle_id", "gt"}`` of the highest stored
bundle, or ``404``. ``GET /<stream>/bundles`` lists what is stored (for tests and demos).

Fault injection for tests: ``--drop-after-store N`` stores bundle ``N`` and then drops the
connection without answering (once): the sink cannot tell whether it was stored.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sqlite3
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

DB_NAME = "receiver.sqlite3"
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
    """Bundles in SQLite (WAL, synchronous=FULL): each insert is one durable transaction."""

    def __init__(self, directory: str) -> None:
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


def create_app(directory: str, *, drop_after_store: int | None = None) -> Starlette:
    db = BundleDb(directory)
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
    return app


def main(argv: list[str] | None = None, *, prog: str = "python -m gtbarrier.http_receiver") -> None:
    parser = argparse.ArgumentParser(prog=prog, description=__doc__)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--dir", required=True, help="directory of the SQLite database")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument(
        "--drop-after-store",
        type=int,
        default=None,
        metavar="N",
        help="store bundle N, then drop the connection without answering (once)",
    )
    args = parser.parse_args(argv)
    import uvicorn

    app = create_app(args.dir, drop_after_store=args.drop_after_store)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
