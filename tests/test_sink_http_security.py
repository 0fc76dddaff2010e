"""``consumer=http`` with a bearer token and a private CA, and the reference receiver's
token check, without a server: options, the client's requests through a fake pool, the
receiver's ASGI app called in-process, its command line."""

from __future__ import annotations

import pickle
from pathlib import Path
from typing import Any

import pytest

from gtbarrier.http_receiver import create_app, receiver_options
from sink.bundle import Bundle
from sink.consumers.http import HttpConsumer, HttpSettings
from sink.faults import FaultInjector
from sink.options import SinkOptions
from sink.staging import StoreStaging
from state.errors import ConfigError, DeliveryFailed, SecretReferenceError
from state.layout import PipelineLayout
from state.stores import open_store
from tests.test_sink_receiver import call, post, status_and_json

TOKEN = "tok-3f9a1c"
TOKEN_ENV = "GTB_TEST_HTTP_TOKEN"
BASE = {
    "pipeline.id": "p",
    "state.uri": "memory://http-security",
    "consumer": "http",
    "consumer.url": "https://receiver.internal:8443/orders",
}


def parse(**extra: str) -> SinkOptions:
    return SinkOptions.parse({**BASE, **extra})


def settings(**extra: str) -> HttpSettings:
    found = parse(**extra).settings
    assert isinstance(found, HttpSettings)
    return found


# --- options ---------------------------------------------------------------------------


def test_token_and_ca_file_are_http_options() -> None:
    s = settings(**{"consumer.http.token": f"${{env:{TOKEN_ENV}}}", "consumer.http.caFile": "/ca"})
    assert s.token == f"${{env:{TOKEN_ENV}}}" and s.ca_file == "/ca"
    assert settings().token is None and settings().ca_file is None
    with pytest.raises(ConfigError, match="not to be set with consumer=file"):
        SinkOptions.parse(
            {
                "pipeline.id": "p",
                "state.uri": "memory://x",
                "consumer.path": "/data",
                "consumer.http.token": "t",
            }
        )


def test_a_literal_token_is_never_shown() -> None:
    options = parse(**{"consumer.http.token": TOKEN})
    assert TOKEN not in repr(options) and TOKEN not in repr(options.settings)
    assert pickle.loads(pickle.dumps(options)) == options


def test_a_reference_stays_a_reference_in_the_pickled_options(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    options = parse(**{"consumer.http.token": f"${{env:{TOKEN_ENV}}}"})
    assert TOKEN.encode() not in pickle.dumps(options)


# --- the client ------------------------------------------------------------------------


class FakeResponse:
    def __init__(self, status: int, data: bytes = b"{}") -> None:
        self.status = status
        self.data = data


class FakePool:
    """Answers every request with ``status``; records method, url and headers."""

    def __init__(self, status: int, data: bytes = b"{}") -> None:
        self.status, self.data = status, data
        self.requests: list[tuple[str, str, dict[str, str]]] = []

    def request(self, method: str, url: str, **kw: Any) -> FakeResponse:
        self.requests.append((method, url, dict(kw.get("headers") or {})))
        return FakeResponse(self.status, self.data)

    def clear(self) -> None:
        pass


def client(pool: FakePool, **extra: str) -> HttpConsumer:
    options = parse(**extra)
    store = open_store(options.store)
    consumer = HttpConsumer(
        settings(**extra),
        StoreStaging(store, PipelineLayout("p")),
        FaultInjector(),
        ack_timeout=5.0,
    )
    consumer.pool = pool  # type: ignore[assignment]
    return consumer


def empty_bundle(bundle_id: int = 3) -> Bundle:
    return Bundle(
        pipeline_id="p",
        epoch=bundle_id,
        query_id="q",
        batch_id=0,
        parts=(),
        has_gt=True,
        ordered=True,
    )


def test_every_request_carries_the_resolved_token(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    pool = FakePool(200, b'{"bundle_id": 2, "gt": 2}')
    consumer = client(pool, **{"consumer.http.token": f"${{env:{TOKEN_ENV}}}"})
    consumer.deliver(empty_bundle())
    last = consumer.last_bundle()
    assert last is not None and last.bundle_id == 2
    assert [(m, h["Authorization"]) for m, _, h in pool.requests] == [
        ("POST", f"Bearer {TOKEN}"),
        ("GET", f"Bearer {TOKEN}"),
    ]
    assert TOKEN not in consumer.describe()


def test_no_token_no_authorization_header() -> None:
    pool = FakePool(200)
    client(pool).deliver(empty_bundle())
    assert "Authorization" not in pool.requests[0][2]


@pytest.mark.parametrize("status", [401, 403])
@pytest.mark.parametrize("given", [None, TOKEN, f"${{env:{TOKEN_ENV}}}"])
def test_a_refused_token_is_a_configuration_error_naming_the_option(
    status: int, given: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    extra = {} if given is None else {"consumer.http.token": given}
    # a receiver that echoes the token it was sent must not get it into the message either
    echoed = "no token" if given is None else f"bad token {TOKEN}"
    pool = FakePool(status, f'{{"error": "{echoed}"}}'.encode())
    consumer = client(pool, **extra)
    for attempt in (lambda: consumer.deliver(empty_bundle()), consumer.last_bundle):
        with pytest.raises(ConfigError) as info:
            attempt()
        err = info.value
        assert err.option == "consumer.http.token" and not err.retriable
        assert not isinstance(err, DeliveryFailed)
        text = str(err)
        assert f"HTTP {status}" in text and BASE["consumer.url"] in text
        assert TOKEN not in text and TOKEN not in repr(err)
        if given is not None and given.startswith("${"):
            assert given in text  # the reference is no secret: it says where the token is


def test_an_unresolvable_token_reference_names_the_option(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TOKEN_ENV, raising=False)
    with pytest.raises(SecretReferenceError) as info:
        client(FakePool(200), **{"consumer.http.token": f"${{env:{TOKEN_ENV}}}"})
    assert info.value.option == "consumer.http.token"


def test_a_token_with_whitespace_is_refused_without_showing_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(TOKEN_ENV, "two words")
    with pytest.raises(ConfigError) as info:
        client(FakePool(200), **{"consumer.http.token": f"${{env:{TOKEN_ENV}}}"})
    assert info.value.option == "consumer.http.token" and "two words" not in str(info.value)


def test_a_ca_file_that_is_not_a_readable_file_names_the_option(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.pem")
    with pytest.raises(ConfigError) as info:
        client(FakePool(200), **{"consumer.http.caFile": missing})
    assert info.value.option == "consumer.http.caFile" and missing in str(info.value)


# --- the receiver's token check ------------------------------------------------------------


def test_the_receiver_refuses_a_request_without_the_token_with_401(tmp_path: Path) -> None:
    app = create_app(str(tmp_path), token=TOKEN)
    sent = post(app, "orders", 1)
    status, body = status_and_json(sent)
    assert status == 401 and "bearer token" in body["error"].lower()
    headers = dict(sent[0]["headers"])
    assert headers[b"www-authenticate"].startswith(b"Bearer")
    assert status_and_json(call(app, "GET", "/orders/last"))[0] == 401
    assert status_and_json(call(app, "GET", "/orders/bundles"))[0] == 401
    wrong = call(app, "GET", "/orders/last", headers={"Authorization": "Bearer nope"})
    assert status_and_json(wrong)[0] == 401
    basic = call(app, "GET", "/orders/last", headers={"Authorization": f"Basic {TOKEN}"})
    assert status_and_json(basic)[0] == 401
    assert status_and_json(call(app, "GET", "/_health"))[0] == 200  # says nothing
    # nothing was stored by the refused POST
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert status_and_json(call(app, "GET", "/orders/last", headers=auth))[0] == 404
    for message in sent:
        assert TOKEN.encode() not in message.get("body", b"")


def test_the_receiver_takes_a_request_with_the_token(tmp_path: Path) -> None:
    app = create_app(str(tmp_path), token=TOKEN)
    headers = {
        "Authorization": f"Bearer {TOKEN}",
        "X-Gtbarrier-Bundle-Id": "1",
        "X-Gtbarrier-Gt": "1",
    }
    assert status_and_json(call(app, "POST", "/orders", b"x", headers)) == (
        200,
        {"bundle_id": 1, "stored": True},
    )
    auth = {"Authorization": f"Bearer {TOKEN}"}
    assert status_and_json(call(app, "GET", "/orders/last", headers=auth)) == (
        200,
        {"bundle_id": 1, "gt": 1},
    )


def test_receiver_command_line_token_and_tls(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = ["--port", "8443", "--dir", str(tmp_path / "db")]
    assert receiver_options([*base, "--insecure-no-token"]).token is None
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN + "\n")
    assert receiver_options([*base, "--token-file", str(token_file)]).token == TOKEN
    monkeypatch.setenv(TOKEN_ENV, TOKEN)
    from_env = receiver_options([*base, "--token", f"${{env:{TOKEN_ENV}}}"])
    assert from_env.token == TOKEN and TOKEN not in repr(from_env)
    tls = receiver_options(
        [*base, "--tls-cert", "/c.pem", "--tls-key", "/k.pem", "--token-file", str(token_file)]
    )
    assert (tls.tls_cert, tls.tls_key) == ("/c.pem", "/k.pem")
    for bad in (
        [*base, "--tls-cert", "/c.pem"],  # a certificate without its key
        [*base, "--token", "a", "--token-file", str(token_file)],
        [*base, "--token-file", str(tmp_path / "missing")],
        base,  # no token, and no --insecure-no-token
        [*base, "--token", "a", "--insecure-no-token"],
    ):
        with pytest.raises(SystemExit):
            receiver_options(bad)
