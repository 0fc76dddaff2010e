"""SASL OAUTHBEARER for every Kafka client gtbarrier makes: a token provider named by
reference (``<prefix>sasl.oauth.token.provider=module:callable``), checked when the options
are parsed and made where each client is made, and AWS MSK IAM
(``<prefix>sasl.mechanism=AWS_MSK_IAM``) as OAUTHBEARER with the built-in provider, which
signs with ``aws-msk-iam-sasl-signer-python`` (locally: fake credentials, no network).
"""

from __future__ import annotations

import base64
import logging
import pickle
import sys
import types
from collections.abc import Iterator, Mapping
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from kafka import KafkaProducer
from kafka.net.sasl.oauth import AbstractTokenProvider

from datasource.options import KafkaSourceOptions
from sink.consumers.kafka.kafka_options import client_arguments, parse_settings
from state.errors import ConfigError
from state.kafka_settings import kafka_arguments, resolve_secrets
from state.options import Options

MODULE = "gtb_test_token_providers"
TOKEN = "tok-marker-5e1c.payload.sig"
OAUTH = {"security.protocol": "SASL_SSL", "sasl.mechanism": "OAUTHBEARER"}
FAKE_KEY_ID = "AKIAGTBTESTFAKEKEY01"


class FixedProvider(AbstractTokenProvider):  # type: ignore[misc]
    """A user's provider instance: kafka-python calls ``token()`` at each authentication."""

    def token(self) -> str:
        return TOKEN + "-instance"


@pytest.fixture(autouse=True)
def providers() -> Iterator[types.ModuleType]:
    """An importable module of token providers, as a user's package would hold them."""
    module = types.ModuleType(MODULE)
    calls: list[int] = []

    def token() -> str:
        calls.append(1)
        return f"{TOKEN}-{len(calls)}"

    module.token = token  # type: ignore[attr-defined]
    module.calls = calls  # type: ignore[attr-defined]
    module.instance = FixedProvider  # type: ignore[attr-defined]
    module.not_callable = "a string"  # type: ignore[attr-defined]
    module.bad_result = lambda: 42  # type: ignore[attr-defined]
    sys.modules[MODULE] = module
    yield module
    del sys.modules[MODULE]


def producer(settings: Mapping[str, str], prefix: str = "consumer.kafka.") -> dict[str, Any]:
    return kafka_arguments(
        settings,
        prefix=prefix,
        defaults=KafkaProducer.DEFAULT_CONFIG,
        client="producer",
        where="barrier",
    )


def source(**settings: str) -> KafkaSourceOptions:
    return KafkaSourceOptions.parse(
        {
            "kafka.bootstrap.servers": "127.0.0.1:9",
            "subscribe": "orders",
            **{"kafka." + k: v for k, v in settings.items()},
        }
    )


# --- the reference, checked before any data moves ------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("no_colon_here", "module:callable"),
        (f"{MODULE}:", "module:callable"),
        (":token", "module:callable"),
        ("gtb_no_such_module_e41:token", "an importable module"),
        (f"{MODULE}:missing", "names no attribute"),
        (f"{MODULE}:not_callable", "not a callable"),
    ],
    ids=["no-colon", "no-callable", "no-module", "module-missing", "no-attribute", "not-callable"],
)
def test_a_bad_token_provider_reference_is_refused_naming_option_value_and_expectation(
    value: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as info:
        producer({**OAUTH, "sasl.oauth.token.provider": value})
    assert info.value.option == "consumer.kafka.sasl.oauth.token.provider"
    assert value in str(info.value)
    assert expected in str(info.value)


def test_a_token_provider_without_oauthbearer_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        producer(
            {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "PLAIN",
                "sasl.plain.username": "app",
                "sasl.plain.password": "pw-9d2a",
                "sasl.oauth.token.provider": f"{MODULE}:token",
            }
        )
    assert info.value.option == "consumer.kafka.sasl.oauth.token.provider"
    assert "OAUTHBEARER" in str(info.value)


def test_oauthbearer_without_a_token_provider_is_refused_naming_the_option() -> None:
    with pytest.raises(ConfigError) as info:
        source(**OAUTH)
    assert info.value.option == "kafka.sasl.oauth.token.provider"
    assert "module:callable" in str(info.value)


# --- made where each client is made ---------------------------------------------------------


def test_the_source_options_carry_the_reference_and_each_client_gets_a_provider(
    providers: types.ModuleType,
) -> None:
    options = source(**OAUTH, **{"sasl.oauth.token.provider": f"{MODULE}:token"})
    pickled = pickle.dumps(options)
    assert f"{MODULE}:token".encode() in pickled
    assert b"AbstractTokenProvider" not in pickled
    assert providers.calls == []  # nothing is called while the options are parsed
    config = options.consumer_config()
    provider = config["sasl_oauth_token_provider"]
    assert isinstance(provider, AbstractTokenProvider)
    assert config["sasl_mechanism"] == "OAUTHBEARER"
    # a string provider is asked again at each authentication (a token expires)
    assert provider.token() == f"{TOKEN}-1"
    assert provider.token() == f"{TOKEN}-2"
    # the pool keys consumers by the repr of their settings: the same for every client
    assert repr(options.consumer_config()) == repr(config)
    assert TOKEN not in repr(config)


def test_a_callable_that_makes_a_provider_instance_is_used_as_it_is() -> None:
    options = source(**OAUTH, **{"sasl.oauth.token.provider": f"{MODULE}:instance"})
    provider = options.consumer_config()["sasl_oauth_token_provider"]
    assert provider.token() == TOKEN + "-instance"


def test_a_callable_with_another_result_fails_where_the_client_is_made() -> None:
    options = source(**OAUTH, **{"sasl.oauth.token.provider": f"{MODULE}:bad_result"})
    provider = options.consumer_config()["sasl_oauth_token_provider"]
    with pytest.raises(ConfigError) as info:
        provider.token()
    assert info.value.option == "kafka.sasl.oauth.token.provider"
    assert "a token string or" in str(info.value)


def test_the_kafka_consumer_and_its_dead_letter_topic_resolve_the_reference() -> None:
    given = {
        "consumer": "kafka",
        "consumer.topic": "out",
        "consumer.kafka.bootstrap.servers": "127.0.0.1:9",
        **{"consumer.kafka." + k: v for k, v in OAUTH.items()},
        "consumer.kafka.sasl.oauth.token.provider": f"{MODULE}:token",
    }
    settings = parse_settings(Options(given, where="barrier"))
    assert dict(settings.config)["sasl.oauth.token.provider"] == f"{MODULE}:token"
    arguments = client_arguments(settings)
    assert isinstance(arguments["sasl_oauth_token_provider"], AbstractTokenProvider)
    assert arguments["sasl_oauth_token_provider"].token().startswith(TOKEN)


def test_tokens_never_show_in_kafka_pythons_log_records(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="kafka")
    options = source(**OAUTH, **{"sasl.oauth.token.provider": f"{MODULE}:token"})
    token = options.consumer_config()["sasl_oauth_token_provider"].token()
    auth = f"n,,\x01auth=Bearer {token}\x01\x01".encode()
    logging.getLogger("kafka.net.connection").debug(
        "Request 3: %s", f"SaslAuthenticateRequest(auth_bytes={auth!r})"
    )
    logging.getLogger("kafka.protocol.parser").debug("Send: %r", auth)
    assert len(caplog.records) == 2
    for record in caplog.records:
        assert token not in record.getMessage()


# --- AWS MSK IAM ----------------------------------------------------------------------------


@pytest.fixture
def aws(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Fake static credentials: the signer signs locally, nothing goes over the network."""
    for name in ("AWS_REGION", "AWS_DEFAULT_REGION", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", FAKE_KEY_ID)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "fake-secret-key-for-signing-only")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")


def signed_url(token: str) -> Any:
    return urlparse(base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode())


def test_aws_msk_iam_is_oauthbearer_with_the_signers_token(aws: None) -> None:
    options = source(
        **{
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "AWS_MSK_IAM",
            "sasl.aws.region": "eu-west-1",
        }
    )
    assert FAKE_KEY_ID.encode() not in pickle.dumps(options)
    config = options.consumer_config()
    assert config["sasl_mechanism"] == "OAUTHBEARER"
    assert "sasl_aws_region" not in config  # not a kafka-python argument
    token = config["sasl_oauth_token_provider"].token()
    url = signed_url(token)
    assert url.hostname == "kafka.eu-west-1.amazonaws.com"
    query = parse_qs(url.query)
    assert query["Action"] == ["kafka-cluster:Connect"]
    assert query["X-Amz-Credential"][0].startswith(FAKE_KEY_ID + "/")
    assert "/eu-west-1/kafka-cluster/" in query["X-Amz-Credential"][0]
    assert query["X-Amz-Signature"]
    # the token is kept until it is about to expire
    assert config["sasl_oauth_token_provider"].token() == token


def test_aws_msk_iam_takes_the_region_from_the_environment_where_the_client_is_made(
    aws: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    options = source(**{"security.protocol": "SASL_SSL", "sasl.mechanism": "AWS_MSK_IAM"})
    monkeypatch.setenv("AWS_REGION", "ap-south-2")
    token = options.consumer_config()["sasl_oauth_token_provider"].token()
    assert signed_url(token).hostname == "kafka.ap-south-2.amazonaws.com"


def test_aws_msk_iam_without_a_region_fails_naming_the_option(aws: None) -> None:
    options = source(**{"security.protocol": "SASL_SSL", "sasl.mechanism": "AWS_MSK_IAM"})
    with pytest.raises(ConfigError) as info:
        options.consumer_config()["sasl_oauth_token_provider"].token()
    assert info.value.option == "kafka.sasl.aws.region"
    assert "AWS_REGION" in str(info.value)


@pytest.mark.parametrize(
    ("extra", "option", "expected"),
    [
        (
            {"sasl.oauth.token.provider": f"{MODULE}:token"},
            "kafka.sasl.oauth.token.provider",
            "AWS_MSK_IAM brings its own",
        ),
        ({"sasl.aws.region": "eu west 1"}, "kafka.sasl.aws.region", "an AWS region"),
    ],
    ids=["own-provider", "bad-region"],
)
def test_aws_msk_iam_refuses_another_provider_and_a_malformed_region(
    aws: None, extra: dict[str, str], option: str, expected: str
) -> None:
    with pytest.raises(ConfigError) as info:
        source(**{"security.protocol": "SASL_SSL", "sasl.mechanism": "AWS_MSK_IAM", **extra})
    assert info.value.option == option
    assert expected in str(info.value)


def test_a_region_without_aws_msk_iam_is_refused() -> None:
    with pytest.raises(ConfigError) as info:
        source(
            **OAUTH,
            **{"sasl.oauth.token.provider": f"{MODULE}:token"},
            **{"sasl.aws.region": "eu-west-1"},
        )
    assert info.value.option == "kafka.sasl.aws.region"
    assert "AWS_MSK_IAM" in str(info.value)


def test_resolve_secrets_leaves_the_given_arguments_unchanged() -> None:
    args = producer({**OAUTH, "sasl.oauth.token.provider": f"{MODULE}:token"})
    assert args["sasl_oauth_token_provider"] == f"{MODULE}:token"
    resolved = resolve_secrets(args, "barrier", "consumer.kafka.")
    assert isinstance(resolved["sasl_oauth_token_provider"], AbstractTokenProvider)
    assert args["sasl_oauth_token_provider"] == f"{MODULE}:token"
