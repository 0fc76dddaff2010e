"""The one conversion of ``<prefix>*`` options into kafka-python arguments
(:mod:`state.kafka_settings`), shared by every Kafka client gtbarrier makes: the source's
consumers (``kafka.*``), the kafka consumer's producer and readers (``consumer.kafka.*``)
and the dead-letter topic's producer (``errors.deadLetter.kafka.*``).
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Mapping
from typing import Any

import pytest
from kafka import KafkaConsumer, KafkaProducer

from state.errors import ConfigError, SecretReferenceError, UnknownOptionError
from state.kafka_redaction import RedactSecrets, Secret
from state.kafka_settings import check_security, is_secret, kafka_arguments, resolve_secrets

SECRET = "pw-marker-41d7"
PREFIX = "consumer.kafka."
SASL = {
    "security.protocol": "SASL_SSL",
    "sasl.mechanism": "SCRAM-SHA-512",
    "sasl.plain.username": "app",
    "sasl.plain.password": SECRET,
    "ssl.cafile": "/etc/kafka/ca.pem",
}


def producer(settings: Mapping[str, str], **kwargs: Any) -> dict[str, Any]:
    return kafka_arguments(
        settings,
        prefix=kwargs.pop("prefix", PREFIX),
        defaults=KafkaProducer.DEFAULT_CONFIG,
        client="producer",
        where="barrier",
        **kwargs,
    )


def error_of(settings: Mapping[str, str], **kwargs: Any) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        producer(settings, **kwargs)
    assert SECRET not in str(info.value)
    return info.value


# --- types, names, refusals ----------------------------------------------------------------


def test_values_take_the_type_of_the_clients_default() -> None:
    args = producer(
        {
            "linger.ms": " 5 ",
            "ssl.check.hostname": "false",
            "metrics.enabled": "TRUE",
            "api.version": "2.8.0",
            "retries": "3",
            "compression.type": "gzip",
            "security.protocol": "ssl",
        }
    )
    assert args == {
        "linger_ms": 5,
        "ssl_check_hostname": False,
        "metrics_enabled": True,
        "api_version": (2, 8, 0),
        "retries": 3,
        "compression_type": "gzip",
        "security_protocol": "SSL",
    }
    assert type(args["retries"]) is int  # kafka-python's default is inf, a float
    consumer = kafka_arguments(
        {"check.crcs": "false", "max.poll.records": "7"},
        prefix="kafka.",
        defaults=KafkaConsumer.DEFAULT_CONFIG,
        client="consumer",
        where="gtkafka",
    )
    assert consumer == {"check_crcs": False, "max_poll_records": 7}


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("ssl.check.hostname", "maybe", "true or false"),
        ("linger.ms", "soon", "an integer"),
        ("api.version", "latest", "a broker version such as 2.8.0"),
    ],
)
def test_a_value_of_the_wrong_type_names_the_option(name: str, value: str, expected: str) -> None:
    err = error_of({name: value})
    assert err.option == PREFIX + name and expected in str(err) and repr(value) in str(err)


def test_librdkafka_names_are_aliases() -> None:
    args = producer(
        {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "PLAIN",
            "ssl.ca.location": "/ca.pem",
            "sasl.username": "app",
            "sasl.password": SECRET,
        }
    )
    assert args["ssl_cafile"] == "/ca.pem" and args["sasl_plain_username"] == "app"
    assert args["sasl_plain_password"] == SECRET
    assert isinstance(args["sasl_plain_password"], Secret)


def test_unknown_settings_are_named_with_the_prefix_and_never_show_their_value() -> None:
    """A misspelt password setting must not print the password."""
    with pytest.raises(UnknownOptionError) as info:
        producer({"sasl.plain.pasword": SECRET, "linger.msec": "5"})
    text = str(info.value)
    assert "'consumer.kafka.sasl.plain.pasword'" in text
    assert "'consumer.kafka.linger.msec'" in text
    assert "kafka-python producer settings" in text
    assert "consumer.kafka.linger.ms" in text  # what is accepted
    assert SECRET not in text


def test_settings_that_take_python_objects_and_refused_ones_are_named() -> None:
    for name in ("partitioner", "selector", "ssl.context"):
        err = error_of({name: "x"})
        assert err.option == PREFIX + name and "Python object" in str(err)
    err = error_of({"acks": "1"}, refused={"acks": "the sink always uses acks=all"})
    assert err.option == "consumer.kafka.acks"
    assert "not to be set: the sink always uses acks=all" in str(err)
    with pytest.raises(UnknownOptionError) as info:
        producer({"nope": "1"}, refused={"acks": "owned"})
    assert "consumer.kafka.acks" not in str(info.value)  # refused: not offered as known


# --- TLS and SASL ----------------------------------------------------------------------------


@pytest.mark.parametrize("prefix", ["kafka.", "consumer.kafka.", "errors.deadLetter.kafka."])
def test_tls_and_sasl_checks_name_the_option_under_its_prefix(prefix: str) -> None:
    def refused(settings: Mapping[str, str]) -> ConfigError:
        return error_of(settings, prefix=prefix)

    err = refused({k: v for k, v in SASL.items() if k != "security.protocol"})
    assert err.option == prefix + "security.protocol" and "SASL_SSL or SASL_PLAINTEXT" in str(err)
    err = refused({**SASL, "security.protocol": "SASL_PLAINTEXT"})
    assert err.option == prefix + "security.protocol" and "SSL or SASL_SSL" in str(err)
    assert prefix + "ssl.cafile" in str(err)
    err = refused({**SASL, "security.protocol": "TLS"})
    assert "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL" in str(err)
    err = refused({**SASL, "sasl.mechanism": "SCRAM-SHA-1"})
    assert err.option == prefix + "sasl.mechanism"
    err = refused({k: v for k, v in SASL.items() if k != "sasl.mechanism"})
    assert err.option == prefix + "sasl.mechanism" and "SASL_SSL" in str(err)
    err = refused({k: v for k, v in SASL.items() if k != "sasl.plain.password"})
    assert err.option == prefix + "sasl.plain.password"
    assert f"(or {prefix}sasl.jaas.config)" in str(err)


def test_check_security_alone_defaults_to_the_sources_names() -> None:
    with pytest.raises(ConfigError) as info:
        check_security({"sasl_mechanism": "PLAIN"}, "gtkafka")
    assert info.value.option == "kafka.security.protocol"
    assert "kafka.sasl.mechanism" in str(info.value)


def test_a_jaas_config_gives_the_user_and_password_and_is_never_shown() -> None:
    base = {"security.protocol": "SASL_SSL", "sasl.mechanism": "SCRAM-SHA-256"}
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="app" password="{SECRET}";'
    )
    args = producer({**base, "sasl.jaas.config": jaas})
    assert args["sasl_plain_username"] == "app" and args["sasl_plain_password"] == SECRET
    assert isinstance(args["sasl_plain_password"], Secret) and "sasl_jaas_config" not in args
    err = error_of({**base, "sasl.jaas.config": jaas, "sasl.plain.username": "b"})
    assert err.option == "consumer.kafka.sasl.jaas.config" and "not both" in str(err)
    assert "consumer.kafka.sasl.plain.username/password" in str(err)
    err = error_of({**base, "sasl.jaas.config": jaas.replace("Scram", "Krb5")})
    assert "<secret " in str(err)


# --- secrets -----------------------------------------------------------------------------------


def test_secret_settings() -> None:
    for name in ("sasl.plain.password", "sasl.password", "ssl.password", "ssl.key.password"):
        assert is_secret(name), name
    assert is_secret("sasl.jaas.config")
    assert not is_secret("sasl.plain.username") and not is_secret("ssl.cafile")


def test_a_secret_is_its_text_but_shows_a_fingerprint() -> None:
    secret = Secret(SECRET)
    assert secret == SECRET and str.__str__(secret) == SECRET
    assert SECRET not in repr(secret) and repr(secret).startswith("<secret ")
    assert repr(Secret("other")) != repr(secret) and repr(Secret(SECRET)) == repr(secret)
    assert SECRET not in repr({"sasl_plain_password": secret})
    copy = pickle.loads(pickle.dumps(secret))
    assert isinstance(copy, Secret) and copy == SECRET


def test_references_are_kept_by_the_conversion_and_resolved_by_resolve_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GTB_TEST_KAFKA_PW", SECRET)
    monkeypatch.setenv("GTB_TEST_KAFKA_CA", "/etc/kafka/ca.pem")
    args = producer(
        {
            **SASL,
            "sasl.plain.password": "${env:GTB_TEST_KAFKA_PW}",
            "ssl.cafile": "${env:GTB_TEST_KAFKA_CA}",
        }
    )
    assert args["sasl_plain_password"] == "${env:GTB_TEST_KAFKA_PW}"  # pickled as given
    resolved = resolve_secrets(args, "barrier", PREFIX)
    assert resolved["sasl_plain_password"] == SECRET
    assert isinstance(resolved["sasl_plain_password"], Secret)
    assert resolved["ssl_cafile"] == "/etc/kafka/ca.pem"
    assert args["sasl_plain_password"] == "${env:GTB_TEST_KAFKA_PW}"  # not changed in place
    monkeypatch.delenv("GTB_TEST_KAFKA_PW")
    with pytest.raises(SecretReferenceError) as info:
        resolve_secrets(args, "barrier", "errors.deadLetter.kafka.")
    assert info.value.option == "errors.deadLetter.kafka.sasl.plain.password"
    assert "GTB_TEST_KAFKA_PW" in str(info.value)


@pytest.mark.parametrize(
    "secret",
    ["pw-marker-8a3f", "pw-é'marker\"-8a3f", "pw\\back-8a3f"],
    ids=["plain", "quotes", "bs"],
)
def test_kafka_pythons_debug_records_never_show_a_secret_a_client_was_given(
    secret: str, caplog: pytest.LogCaptureFixture
) -> None:
    """kafka-python 3 logs every request it sends at DEBUG (a SASL PLAIN authentication's
    password among them) and the bytes on the wire: a secret resolved for a client is taken
    out of those records, as text or as it shows in a bytes repr."""
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="kafka")  # the CLI quiets it in-process
    resolve_secrets({"sasl_plain_username": "app", "sasl_plain_password": secret}, "gtkafka")
    raw = b"app\x00app\x00" + secret.encode()
    connection = logging.getLogger("kafka.net.connection")
    parser = logging.getLogger("kafka.protocol.parser")
    connection.debug(
        "%s Request %d: %s", "<conn>", 3, f"SaslAuthenticateRequest(auth_bytes={raw!r})"
    )
    parser.debug("%s Send: %r", "node=1", bytearray(b"\x00\x17" + raw))
    parser.debug("%s Send: %r", "node=1", b"'\"" + raw)  # a repr escaping both quotes
    connection.debug("password %s", secret)
    messages = [r.getMessage() for r in caplog.records]
    assert len(messages) == 4
    for message in messages:
        assert secret not in message and "<secret " in message, message
        assert repr(secret.encode())[2:-1] not in message
    assert "SaslAuthenticateRequest(auth_bytes=" in messages[0]  # the rest stays readable


def test_the_kafka_filter_forgets_no_secret_after_many_others() -> None:
    """A worker that made clients with more than a hundred secrets (rotations, many
    pipelines) still redacts the first one."""
    redact = RedactSecrets()
    first = "first-kafka-secret-in-use-91ab"
    redact.add(first)
    for n in range(150):
        redact.add(f"rotated-kafka-secret-{n:03d}-5f0e")
    shown = redact.redact(f"password {first} and rotated-kafka-secret-000-5f0e")
    assert first not in shown and "rotated-kafka-secret-000-5f0e" not in shown
    assert shown.count("<secret ") == 2, shown
