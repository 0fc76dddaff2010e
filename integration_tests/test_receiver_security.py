"""The reference receiver's secure defaults, against the real receiver process
(``python -m gtbarrier.http_receiver`` and ``gtbarrier receiver``):

* it does not start without a bearer token unless told so (``--insecure-no-token``, for
  local tests), naming the arguments that give one;
* a request body larger than ``--max-body-bytes`` is answered 413 and nothing is stored,
  whether its length is declared or it comes chunked; the token is checked first;
* ``consumer=http`` warns when it sends its token over ``http://`` (the token in clear
  text on the network), never showing the token; over ``https://`` it does not.
"""

from __future__ import annotations

import http.client
import json
import logging
import secrets
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gtbarrier import http_receiver
from harness.logs import unregister_log
from harness.ports import LOOPBACK, free_port, port_open
from harness.process import REPO_ROOT, repo_env
from harness.receiver import Receiver
from integration_tests.test_sink_http_tls import commit_epoch, pipeline
from tests.sink_helpers import gt_batch

pytestmark = pytest.mark.timeout(180)
LIMIT = 4096


@pytest.fixture
def receiver_token(tmp_path: Path) -> Iterator[Receiver]:
    """A reference receiver over plain HTTP requiring a random bearer token; not started."""
    r = Receiver(tmp_path / "receiver", tmp_path, token=secrets.token_urlsafe(24))
    try:
        yield r
    finally:
        r.stop()
        unregister_log(r.log_name)


# --- a token by default ------------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [["-m", "gtbarrier.http_receiver"], ["-m", "gtbarrier", "receiver"]],
    ids=["module", "cli"],
)
def test_the_receiver_does_not_start_without_a_token(command: list[str], tmp_path: Path) -> None:
    port = free_port()
    argv = [sys.executable, *command, "--port", str(port), "--dir", str(tmp_path / "r")]
    try:
        proc = subprocess.run(
            argv,
            cwd=REPO_ROOT,
            env=repo_env(),
            capture_output=True,
            text=True,
            timeout=15,
            check=False,
        )
    except subprocess.TimeoutExpired as err:
        raise AssertionError(
            f"the receiver served without a token (still running after {err.timeout}s)"
        ) from None
    assert proc.returncode == 2, proc.stderr
    for named in ("--token", "--token-file", "--insecure-no-token"):
        assert named in proc.stderr, proc.stderr
    assert not port_open(port)
    assert not (tmp_path / "r" / "receiver.sqlite3").exists()


def test_insecure_no_token_is_the_explicit_way_to_serve_without_one(tmp_path: Path) -> None:
    r = Receiver(tmp_path / "receiver", tmp_path)
    try:
        r.start("--insecure-no-token")
        assert "--insecure-no-token" in r.proc.argv
        status, _ = post(r, "/s", b"x", bundle_id=1)
        assert status == 200
        assert [b["bundle_id"] for b in r.bundles("s")] == [1]
        assert "without a bearer token" in r.log_text()
    finally:
        r.stop()
        unregister_log(r.log_name)


# --- the body's size ---------------------------------------------------------------------


def post(
    r: Receiver,
    path: str,
    body: bytes,
    *,
    bundle_id: int,
    token: str | None = None,
    chunked: bool = False,
) -> tuple[int, dict[str, object]]:
    """POST ``body`` to the receiver (``chunked``: without a Content-Length); the status
    and the JSON answer."""
    conn = http.client.HTTPConnection(LOOPBACK, r.port, timeout=20)
    headers = {"X-Gtbarrier-Bundle-Id": str(bundle_id)}
    if (token := token or r.token) is not None:
        headers["Authorization"] = f"Bearer {token}"
    try:
        if chunked:
            chunks = (body[i : i + 1000] for i in range(0, len(body), 1000))
            conn.request("POST", path, body=chunks, headers=headers, encode_chunked=True)
        else:
            conn.request("POST", path, body=body, headers=headers)
        resp = conn.getresponse()
        return resp.status, json.loads(resp.read() or b"{}")
    finally:
        conn.close()


def test_a_body_over_the_limit_is_answered_413_and_not_stored(receiver_token: Receiver) -> None:
    r = receiver_token.start("--max-body-bytes", str(LIMIT))
    status, answer = post(r, "/s", b"a" * (LIMIT + 1), bundle_id=1)
    assert status == 413, answer
    assert str(LIMIT) in str(answer["error"]) and "--max-body-bytes" in str(answer["error"])
    status, answer = post(r, "/s", b"b" * (LIMIT + 1000), bundle_id=2, chunked=True)
    assert status == 413, answer
    status, answer = post(r, "/s", b"c" * LIMIT, bundle_id=3, chunked=True)
    assert (status, answer.get("stored")) == (200, True), answer
    status, answer = post(r, "/s", b"d" * LIMIT, bundle_id=4)
    assert (status, answer.get("stored")) == (200, True), answer
    assert [b["bundle_id"] for b in r.bundles("s")] == [3, 4]
    assert [len(body) for _, body in r.bodies("s")] == [LIMIT, LIMIT]


def test_the_token_is_checked_before_the_size(receiver_token: Receiver) -> None:
    r = receiver_token.start("--max-body-bytes", str(LIMIT))
    status, _ = post(r, "/s", b"a" * (LIMIT + 1), bundle_id=1, token="not-the-token")
    assert status == 401
    assert r.bundles("s") == []


def test_the_body_limit_has_a_default_and_refuses_nonsense(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    base = ["--port", "1", "--dir", str(tmp_path), "--insecure-no-token"]
    default = getattr(http_receiver, "DEFAULT_MAX_BODY_BYTES", None)
    assert default == 64 * 1024 * 1024
    assert getattr(http_receiver.receiver_options(base), "max_body_bytes", None) == default
    assert http_receiver.receiver_options([*base, "--max-body-bytes", "10"]).max_body_bytes == 10
    with pytest.raises(SystemExit) as caught:
        http_receiver.receiver_options([*base, "--max-body-bytes", "0"])
    assert caught.value.code == 2
    assert "--max-body-bytes" in capsys.readouterr().err


# --- a token sent over http:// -------------------------------------------------------------


def test_the_sink_warns_when_it_sends_its_token_over_http(
    receiver_token: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    r = receiver_token.start()
    assert r.url.startswith("http://") and r.token is not None
    p = pipeline(r, "orders", **{"consumer.http.token": r.token})
    commit_epoch(p, 0, 1, [[gt_batch(1, 0, [0, 1])]])
    assert [b["bundle_id"] for b in r.bundles("orders")] == [1]
    warnings = [
        rec.getMessage()
        for rec in caplog.records
        if rec.levelno == logging.WARNING and "http://" in rec.getMessage()
    ]
    assert warnings, "no warning that the token goes over http://"
    assert "consumer.http.token" in warnings[0] and "https://" in warnings[0]
    assert all(r.token not in m for m in caplog.messages)


def test_the_sink_does_not_warn_over_https(
    receiver_tls: Receiver, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING)
    r = receiver_tls.start()
    assert r.tls is not None and r.token is not None
    p = pipeline(
        r, "orders", **{"consumer.http.token": r.token, "consumer.http.caFile": str(r.tls.ca)}
    )
    commit_epoch(p, 0, 1, [[gt_batch(1, 0, [0])]])
    assert [b["bundle_id"] for b in r.bundles("orders")] == [1]
    assert not [m for m in caplog.messages if "consumer.http.token" in m]
