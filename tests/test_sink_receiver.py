"""The reference receiver's storage and ASGI app, called in-process (no server)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from gtbarrier.http_receiver import BundleDb, create_app


def call(
    app: Any, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> list[dict[str, Any]]:
    """Run one request through the ASGI app; the messages it sent."""
    sent: list[dict[str, Any]] = []
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": "",
        "server": ("127.0.0.1", 80),
        "client": ("127.0.0.1", 1234),
        "headers": [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()],
    }
    chunks = [{"type": "http.request", "body": body, "more_body": False}]

    async def receive() -> dict[str, Any]:
        return chunks.pop(0) if chunks else {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    asyncio.run(app(scope, receive, send))
    return sent


def status_and_json(sent: list[dict[str, Any]]) -> tuple[int, Any]:
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return sent[0]["status"], json.loads(body)


def post(app: Any, stream: str, bundle_id: int, body: bytes = b"x") -> list[dict[str, Any]]:
    return call(
        app,
        "POST",
        f"/{stream}",
        body,
        {
            "X-Gtbarrier-Bundle-Id": str(bundle_id),
            "X-Gtbarrier-Gt": str(bundle_id),
            "X-Gtbarrier-Rows": "1",
            "Content-Type": "application/x-ndjson",
        },
    )


def test_db_stores_each_bundle_once(tmp_path: Path) -> None:
    db = BundleDb(str(tmp_path))
    assert db.last("/s") is None
    assert db.store("/s", 3, 3, {"rows": 2}, b"a")
    assert not db.store("/s", 3, 3, {"rows": 2}, b"b")  # a duplicate id is not stored
    assert db.store("/s", 4, 4, {}, b"c")
    assert db.store("/other", 9, 9, {}, b"d")
    assert db.last("/s") == (4, 4)
    assert [b["bundle_id"] for b in db.listing("/s")] == [3, 4]
    db.close()
    again = BundleDb(str(tmp_path))  # durable across restarts
    assert again.last("/s") == (4, 4)
    again.close()


def test_app_posts_dedups_and_answers_last(tmp_path: Path) -> None:
    app = create_app(str(tmp_path))
    assert status_and_json(call(app, "GET", "/orders/last"))[0] == 404
    assert status_and_json(post(app, "orders", 1)) == (200, {"bundle_id": 1, "stored": True})
    assert status_and_json(post(app, "orders", 1)) == (200, {"bundle_id": 1, "stored": False})
    assert status_and_json(call(app, "GET", "/orders/last")) == (200, {"bundle_id": 1, "gt": 1})
    status, listing = status_and_json(call(app, "GET", "/orders/bundles"))
    assert status == 200 and [b["bundle_id"] for b in listing] == [1]
    status, error = status_and_json(call(app, "POST", "/orders", b"x"))
    assert status == 400 and "X-Gtbarrier-Bundle-Id" in error["error"]


def test_drop_after_store_stores_then_answers_nothing_once(tmp_path: Path) -> None:
    app = create_app(str(tmp_path), drop_after_store=2)
    post(app, "s", 1)
    dropped = post(app, "s", 2)
    assert [m["type"] for m in dropped] == ["http.response.start"]  # no body: uvicorn closes
    assert status_and_json(call(app, "GET", "/s/last")) == (200, {"bundle_id": 2, "gt": 2})
    assert status_and_json(post(app, "s", 2)) == (200, {"bundle_id": 2, "stored": False})


def test_the_history_keeps_the_newest_bundles_of_each_stream(tmp_path: Path) -> None:
    db = BundleDb(str(tmp_path), keep_bundles=3)
    for bundle_id in range(1, 8):
        assert db.store("/s", bundle_id, bundle_id, {}, b"x")
        assert db.last("/s") == (bundle_id, bundle_id)  # the newest is never deleted
    assert db.store("/other", 1, 1, {}, b"y")
    assert [b["bundle_id"] for b in db.listing("/s")] == [5, 6, 7]
    assert [b["bundle_id"] for b in db.listing("/other")] == [1]
    assert not db.store("/s", 7, 7, {}, b"x")  # a re-delivery is still recognised
    db.close()

    one = BundleDb(str(tmp_path), keep_bundles=1)
    assert one.store("/s", 8, 8, {}, b"x")
    assert [b["bundle_id"] for b in one.listing("/s")] == [8] and one.last("/s") == (8, 8)
    one.close()

    every = BundleDb(str(tmp_path / "all"), keep_bundles=0)
    for bundle_id in range(20):
        every.store("/s", bundle_id, bundle_id, {}, b"x")
    assert len(every.listing("/s")) == 20
    every.close()


def test_keep_bundles_defaults_to_ten_thousand_and_reaches_the_app(tmp_path: Path) -> None:
    from gtbarrier.http_receiver import DEFAULT_KEEP_BUNDLES, receiver_options

    base = ["--port", "1", "--dir", str(tmp_path), "--insecure-no-token"]
    assert DEFAULT_KEEP_BUNDLES == 10_000
    assert receiver_options(base).keep_bundles == DEFAULT_KEEP_BUNDLES
    assert receiver_options([*base, "--keep-bundles", "0"]).keep_bundles == 0
    with pytest.raises(SystemExit) as exit_:
        receiver_options([*base, "--keep-bundles", "-1"])
    assert exit_.value.code == 2

    app = create_app(str(tmp_path), keep_bundles=2)
    for bundle_id in (1, 2, 3):
        post(app, "orders", bundle_id)
    status, listing = status_and_json(call(app, "GET", "/orders/bundles"))
    assert status == 200 and [b["bundle_id"] for b in listing] == [2, 3]
    assert status_and_json(call(app, "GET", "/orders/last")) == (200, {"bundle_id": 3, "gt": 3})
