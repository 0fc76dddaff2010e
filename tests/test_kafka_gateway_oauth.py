"""The test gateway's SASL OAUTHBEARER (harness/kafka_gateway.py): unsecured JWS tokens
as Kafka's own test mode takes them (``OAuthBearerUnsecuredJws``: header
``{"alg":"none"}``, claims ``sub``, ``exp``, optional ``scope``), the client's initial
message as RFC 7628 frames it, checked against kafka-python's own OAUTHBEARER client."""

from __future__ import annotations

import base64
import json

import pytest
from kafka.net.sasl.oauth import AbstractTokenProvider, SaslMechanismOAuth

from harness.kafka_gateway import AuthenticationFailed, check_oauthbearer
from harness.oauth_tokens import unsecured_jws

NOW = 1_800_000_000.0
USERS = ("gtbarrier",)


def b64(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


def message(token: str) -> bytes:
    """The initial client response kafka-python sends, made by kafka-python itself."""

    class Given(AbstractTokenProvider):  # type: ignore[misc]
        def token(self) -> str:
            return token

    return bytes(SaslMechanismOAuth(sasl_oauth_token_provider=Given()).auth_bytes())


def test_an_unsecured_jws_has_a_none_header_and_the_claims() -> None:
    token = unsecured_jws("gtbarrier", expires=NOW + 60, scope="read write", now=NOW)
    header, payload, signature = token.split(".")
    pad = "=="
    assert json.loads(base64.urlsafe_b64decode(header + pad)) == {"alg": "none"}
    claims = json.loads(base64.urlsafe_b64decode(payload + pad))
    assert claims == {"sub": "gtbarrier", "iat": NOW, "exp": NOW + 60, "scope": "read write"}
    assert signature == ""


def test_a_valid_token_of_a_known_principal_authenticates_it() -> None:
    token = unsecured_jws("gtbarrier", expires=NOW + 60, now=NOW)
    assert check_oauthbearer(message(token), USERS, now=NOW) == "gtbarrier"


@pytest.mark.parametrize(
    ("token", "why"),
    [
        (unsecured_jws("gtbarrier", expires=NOW - 1, now=NOW - 60), "expired"),
        (unsecured_jws("mallory", expires=NOW + 60, now=NOW), "unknown principal"),
        (f"{b64({'alg': 'HS256'})}.{b64({'sub': 'gtbarrier', 'exp': NOW + 60})}.", "alg"),
        (f"{b64({'alg': 'none'})}.{b64({'exp': NOW + 60})}.", "sub"),
        (f"{b64({'alg': 'none'})}.{b64({'sub': 'gtbarrier'})}.", "exp"),
        ("not-a-jws", "three"),
    ],
    ids=["expired", "stranger", "signed", "no-sub", "no-exp", "garbage"],
)
def test_a_bad_token_is_refused_saying_why(token: str, why: str) -> None:
    with pytest.raises(AuthenticationFailed) as info:
        check_oauthbearer(message(token), USERS, now=NOW)
    assert why in str(info.value)


def test_a_message_without_a_bearer_token_is_refused() -> None:
    with pytest.raises(AuthenticationFailed):
        check_oauthbearer(b"n,,\x01host=x\x01\x01", USERS, now=NOW)
    with pytest.raises(AuthenticationFailed):
        check_oauthbearer(b"\x01", USERS, now=NOW)
