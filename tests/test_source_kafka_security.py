"""gtkafka's TLS and SASL settings (``kafka.security.protocol``, ``kafka.ssl.*``,
``kafka.sasl.*``, ``kafka.sasl.jaas.config``): checked on the driver before any client is
made, secrets never shown, secret references resolved where a client is created, and
every client the source creates given them.
"""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from datasource.consumer_pool import PoolKey
from datasource.group_commit import commit_to_group
from datasource.offset_reader import OffsetReader
from datasource.options import KafkaSourceOptions
from gtbarrier.cli.kafka_ends import source_options
from state.errors import ConfigError, SecretReferenceError

SECRET = "pw-marker-5be1"
BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "orders"}
SASL_SSL = {
    "kafka.security.protocol": "SASL_SSL",
    "kafka.sasl.mechanism": "SCRAM-SHA-512",
    "kafka.sasl.plain.username": "app",
    "kafka.sasl.plain.password": SECRET,
    "kafka.ssl.cafile": "/etc/kafka/ca.pem",
}
SECURITY_ARGS = {
    "security_protocol": "SASL_SSL",
    "sasl_mechanism": "SCRAM-SHA-512",
    "sasl_plain_username": "app",
    "sasl_plain_password": SECRET,
    "ssl_cafile": "/etc/kafka/ca.pem",
}


def parse(**extra: str) -> KafkaSourceOptions:
    return KafkaSourceOptions.parse({**BASE, **extra})


def error_of(**extra: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse(**extra)
    return info.value


def test_sasl_ssl_settings_reach_the_consumer_config() -> None:
    config = parse(**SASL_SSL).consumer_config()
    assert {k: config[k] for k in SECURITY_ARGS} == SECURITY_ARGS


def test_security_protocol_and_mechanism_are_normalised_and_checked() -> None:
    o = parse(**{"kafka.security.protocol": "ssl"})
    assert o.kafka["security_protocol"] == "SSL"
    err = error_of(**{"kafka.security.protocol": "TLS"})
    assert err.option == "kafka.security.protocol"
    assert "PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL" in str(err)
    err = error_of(**{**SASL_SSL, "kafka.sasl.mechanism": "SCRAM-SHA-1"})
    assert err.option == "kafka.sasl.mechanism" and "SCRAM-SHA-512" in str(err)


def test_sasl_needs_a_mechanism_and_plain_or_scram_need_a_user_and_password() -> None:
    no_mechanism = {k: v for k, v in SASL_SSL.items() if k != "kafka.sasl.mechanism"}
    err = error_of(**no_mechanism)
    assert err.option == "kafka.sasl.mechanism" and "SASL_SSL" in str(err)
    no_password = {k: v for k, v in SASL_SSL.items() if k != "kafka.sasl.plain.password"}
    err = error_of(**no_password)
    assert err.option == "kafka.sasl.plain.password" and "SCRAM-SHA-512" in str(err)


def test_sasl_or_ssl_settings_without_the_protocol_that_uses_them_are_refused() -> None:
    """They would be ignored: the client would connect in plaintext, without them."""
    err = error_of(**{k: v for k, v in SASL_SSL.items() if k != "kafka.security.protocol"})
    assert err.option == "kafka.security.protocol" and "SASL_SSL or SASL_PLAINTEXT" in str(err)
    assert SECRET not in str(err)
    err = error_of(
        **{"kafka.security.protocol": "SASL_PLAINTEXT", **_sasl(), "kafka.ssl.cafile": "/ca"}
    )
    assert err.option == "kafka.security.protocol" and "SSL or SASL_SSL" in str(err)


def _sasl() -> dict[str, str]:
    return {k: v for k, v in SASL_SSL.items() if k.startswith("kafka.sasl.")}


def test_jaas_config_as_spark_takes_it_gives_the_user_and_password() -> None:
    for module in (
        "org.apache.kafka.common.security.plain.PlainLoginModule",
        "org.apache.kafka.common.security.scram.ScramLoginModule",
    ):
        jaas = f'{module} required username="app" password="{SECRET}";'
        o = parse(
            **{
                "kafka.security.protocol": "SASL_SSL",
                "kafka.sasl.mechanism": "PLAIN" if "plain" in module else "SCRAM-SHA-256",
                "kafka.sasl.jaas.config": jaas,
            }
        )
        config = o.consumer_config()
        assert config["sasl_plain_username"] == "app"
        assert config["sasl_plain_password"] == SECRET
        assert "sasl_jaas_config" not in config


def test_a_jaas_config_gtkafka_cannot_use_is_refused_without_showing_it() -> None:
    base = {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "PLAIN"}
    custom = f'com.example.TokenLoginModule required token="{SECRET}";'
    err = error_of(**base, **{"kafka.sasl.jaas.config": custom})
    assert err.option == "kafka.sasl.jaas.config" and "PlainLoginModule" in str(err)
    assert SECRET not in str(err)
    kerberos = f'com.sun.security.auth.module.Krb5LoginModule required keyTab="{SECRET}";'
    err = error_of(**base, **{"kafka.sasl.jaas.config": kerberos})
    assert err.option == "kafka.sasl.jaas.config" and "kinit" in str(err)
    assert SECRET not in str(err)
    broken = f'org.apache.kafka.common.security.plain.PlainLoginModule required password="{SECRET}'
    err = error_of(**base, **{"kafka.sasl.jaas.config": broken})
    assert err.option == "kafka.sasl.jaas.config" and SECRET not in str(err)
    both = {
        "kafka.sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
        f'required username="a" password="{SECRET}";',
        "kafka.sasl.plain.username": "b",
    }
    err = error_of(**base, **both)
    assert "not both" in str(err) and SECRET not in str(err)


def test_secrets_are_not_shown_by_the_options_the_config_or_a_pool_key() -> None:
    o = parse(**SASL_SSL)
    config = o.consumer_config()
    key = PoolKey.of(o.bootstrap_servers, config, "orders", 0)
    for text in (repr(o), str(o), repr(config), repr(key), str(key)):
        assert SECRET not in text
    assert config["sasl_plain_password"] == SECRET  # the client still gets it
    other = PoolKey.of(o.bootstrap_servers, {**config, "sasl_plain_password": "other"}, "orders", 0)
    assert other != key  # consumers of different credentials are not interchangeable
    assert pickle.loads(pickle.dumps(o)) == o


def test_a_secret_reference_is_kept_in_the_options_and_resolved_for_the_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("GTB_KAFKA_PW", SECRET)
    o = parse(**{**SASL_SSL, "kafka.sasl.plain.password": "${env:GTB_KAFKA_PW}"})
    assert o.kafka["sasl_plain_password"] == "${env:GTB_KAFKA_PW}"  # planned, checkpointed
    assert o.consumer_config()["sasl_plain_password"] == SECRET
    monkeypatch.delenv("GTB_KAFKA_PW")
    with pytest.raises(SecretReferenceError) as info:
        o.consumer_config()
    assert info.value.option == "kafka.sasl.plain.password" and "GTB_KAFKA_PW" in str(info.value)


# --- every client the source creates gets the settings -------------------------------


class Captured(Exception):
    """Raised by the fake factory: the client's arguments, and no network."""

    def __init__(self, config: dict[str, Any]) -> None:
        super().__init__("captured")
        self.config = config


def capture(**config: Any) -> Any:
    raise Captured(config)


def captured_security(call: Any) -> dict[str, Any]:
    with pytest.raises(Exception) as info:
        call()
    cause: BaseException | None = info.value
    while cause is not None and not isinstance(cause, Captured):
        cause = cause.__cause__ or cause.__context__
    assert isinstance(cause, Captured), f"no client was created: {info.value!r}"
    return {k: cause.config.get(k) for k in SECURITY_ARGS}


def test_the_driver_side_reader_gets_the_settings() -> None:
    o = parse(**SASL_SSL, **{"fetchOffset.numRetries": "0"})
    reader = OffsetReader(o, consumer_factory=capture)
    assert captured_security(reader.topic_partitions) == SECURITY_ARGS


def test_the_group_commit_gets_the_settings() -> None:
    o = parse(**SASL_SSL, **{"fetchOffset.numRetries": "0"})
    call = lambda: commit_to_group(o, "g", {("orders", 0): 1}, consumer_factory=capture)  # noqa: E731
    assert captured_security(call) == SECURITY_ARGS


def test_the_executors_range_reader_gets_the_settings() -> None:
    from datasource.offsets import OffsetRange
    from datasource.range_reader import RangeReader

    o = parse(**SASL_SSL)
    reader = RangeReader(o, OffsetRange("orders", 0, 0, 10), consumer_factory=capture)
    assert captured_security(lambda: reader._create(o.consumer_config())) == SECURITY_ARGS


def test_the_cli_lag_reader_takes_the_kafka_options() -> None:
    o = source_options("127.0.0.1:9092", ["orders"], {**SASL_SSL, "s3.endpoint": "http://x"})
    assert {k: o.consumer_config()[k] for k in SECURITY_ARGS} == SECURITY_ARGS
