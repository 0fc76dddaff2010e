"""Unsecured JWS tokens for SASL OAUTHBEARER, as Kafka's own test mode takes them
(``OAuthBearerUnsecuredJws``): a header ``{"alg":"none"}``, claims ``sub``, ``iat``,
``exp`` and an optional ``scope``, and an empty signature.

The token providers below are what the tests name by reference
(``kafka.sasl.oauth.token.provider=harness.oauth_tokens:valid_token``): each client makes
its own where it is made, Spark's executors included. :data:`PRINCIPAL` is the user the
test gateway (:mod:`harness.kafka_gateway`) knows. Every token made in this process is
kept (:func:`issued_tokens`), for tests that check no token shows in a log.
"""

from __future__ import annotations

import base64
import json
import threading
import time

PRINCIPAL = "gtbarrier"
"""The principal of :func:`valid_token` and :func:`expired_token`."""
LIFETIME_S = 3600.0
VALID_TOKEN = "harness.oauth_tokens:valid_token"
EXPIRED_TOKEN = "harness.oauth_tokens:expired_token"
STRANGER_TOKEN = "harness.oauth_tokens:stranger_token"

_issued: list[str] = []
_lock = threading.Lock()


def _b64(data: dict[str, object]) -> str:
    text = json.dumps(data, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(text).decode().rstrip("=")


def unsecured_jws(
    subject: str, *, expires: float, scope: str | None = None, now: float | None = None
) -> str:
    """An unsigned token for ``subject`` that expires at ``expires`` (seconds since the
    epoch), issued at ``now`` (default: the clock)."""
    claims: dict[str, object] = {
        "sub": subject,
        "iat": time.time() if now is None else now,
        "exp": expires,
    }
    if scope is not None:
        claims["scope"] = scope
    token = f"{_b64({'alg': 'none'})}.{_b64(claims)}."
    with _lock:
        _issued.append(token)
    return token


def issued_tokens() -> list[str]:
    """Every token this process made so far."""
    with _lock:
        return list(_issued)


def valid_token() -> str:
    """A token of :data:`PRINCIPAL` valid for an hour."""
    return unsecured_jws(PRINCIPAL, expires=time.time() + LIFETIME_S)


def expired_token() -> str:
    """A token of :data:`PRINCIPAL` that expired a minute ago."""
    now = time.time()
    return unsecured_jws(PRINCIPAL, expires=now - 60, now=now - LIFETIME_S)


def stranger_token() -> str:
    """A valid token of a principal the gateway does not know."""
    return unsecured_jws("mallory", expires=time.time() + LIFETIME_S)
