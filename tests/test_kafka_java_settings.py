"""Java-only Kafka settings pasted from a Spark job: each is refused with what to use instead
(a JKS store: the commands that convert it to PEM), or mapped where kafka-python has the
same setting (``ssl.endpoint.identification.algorithm``), for every Kafka client alike: the
source (``kafka.``), the kafka consumer (``consumer.kafka.``) and the dead-letter topic
(``errors.deadLetter.kafka.``)."""

from __future__ import annotations

import re
import ssl
import subprocess
import uuid
from pathlib import Path
from typing import Any

import pytest

from datasource.options import KafkaSourceOptions
from sink.consumers.kafka.kafka_options import KafkaTopicSettings, client_arguments
from sink.options import SinkOptions
from state.errors import ConfigError
from state.kafka_java_settings import JAVA_ONLY, java_only_hint

SECRET = "pw-marker-77c3"
SOURCE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "orders"}
SINK = {
    "pipeline.id": "p1",
    "consumer": "kafka",
    "consumer.kafka.bootstrap.servers": "127.0.0.1:9",
    "consumer.topic": "out",
    "errors.tolerance": "all",
    "errors.deadLetter.path": "file:///tmp/gtb-dl",
    "errors.deadLetter.topic": "dlq",
    "errors.deadLetter.kafka.bootstrap.servers": "127.0.0.1:9",
}
PREFIXES = ("kafka.", "consumer.kafka.", "errors.deadLetter.kafka.")


def parse(prefix: str, settings: dict[str, str]) -> Any:
    given = {prefix + k: v for k, v in settings.items()}
    if prefix == "kafka.":
        return KafkaSourceOptions.parse({**SOURCE, **given})
    return SinkOptions.parse({**SINK, "state.uri": f"memory://{uuid.uuid4().hex}", **given})


def error_of(prefix: str, settings: dict[str, str]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse(prefix, settings)
    assert SECRET not in str(info.value)
    return info.value


SSL = {"security.protocol": "SSL"}


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize(
    "name", ["ssl.truststore.location", "ssl.truststore.password", "ssl.truststore.type"]
)
def test_a_truststore_is_refused_with_the_pem_conversion(prefix: str, name: str) -> None:
    value = SECRET if name.endswith("password") else "JKS"
    err = error_of(prefix, {**SSL, name: value})
    assert err.option == prefix + name
    text = str(err)
    assert f"{prefix}ssl.cafile" in text
    assert "keytool -exportcert -rfc" in text and "openssl pkcs12" in text


@pytest.mark.parametrize("prefix", PREFIXES)
@pytest.mark.parametrize(
    "name", ["ssl.keystore.location", "ssl.keystore.password", "ssl.keystore.type"]
)
def test_a_keystore_is_refused_with_the_pem_conversion(prefix: str, name: str) -> None:
    value = SECRET if name.endswith("password") else "/etc/kafka/client.jks"
    err = error_of(prefix, {**SSL, name: value})
    assert err.option == prefix + name
    text = str(err)
    assert f"{prefix}ssl.certfile" in text and f"{prefix}ssl.keyfile" in text
    assert f"{prefix}ssl.password" in text and "openssl pkcs12" in text


@pytest.mark.parametrize("prefix", PREFIXES)
def test_java_tls_engine_settings_say_what_to_do(prefix: str) -> None:
    err = error_of(prefix, {**SSL, "ssl.enabled.protocols": "TLSv1.2"})
    assert err.option == prefix + "ssl.enabled.protocols" and "leave it out" in str(err)
    err = error_of(prefix, {**SSL, "ssl.cipher.suites": "TLS_AES_128_GCM_SHA256"})
    assert f"{prefix}ssl.ciphers" in str(err)


def source_check_hostname(settings: dict[str, str]) -> Any:
    return parse("kafka.", settings).consumer_config().get("ssl_check_hostname")


def producer_check_hostname(prefix: str, settings: dict[str, str]) -> Any:
    o = parse(prefix, settings)
    config = o.settings.config if prefix == "consumer.kafka." else o.errors.kafka
    topic = KafkaTopicSettings(
        bootstrap="127.0.0.1:9", topic="t", config=config, option_prefix=prefix
    )
    return client_arguments(topic).get("ssl_check_hostname")


@pytest.mark.parametrize("prefix", PREFIXES)
def test_endpoint_identification_maps_to_the_hostname_check(prefix: str) -> None:
    def check(value: str) -> Any:
        given = {**SSL, "ssl.endpoint.identification.algorithm": value}
        if prefix == "kafka.":
            return source_check_hostname(given)
        return producer_check_hostname(prefix, given)

    assert check("") is False
    assert check("HTTPS") is True
    err = error_of(prefix, {**SSL, "ssl.endpoint.identification.algorithm": "dns"})
    assert err.option == prefix + "ssl.endpoint.identification.algorithm"
    assert f"{prefix}ssl.check.hostname" in str(err)
    both = {**SSL, "ssl.endpoint.identification.algorithm": "", "ssl.check.hostname": "true"}
    err = error_of(prefix, both)
    assert "not both" in str(err)


@pytest.mark.parametrize("prefix", PREFIXES)
def test_a_jaas_login_module_gtkafka_has_no_use_for_names_its_equivalent(prefix: str) -> None:
    sasl = {"security.protocol": "SASL_SSL", "sasl.mechanism": "GSSAPI"}
    kerberos = f'com.sun.security.auth.module.Krb5LoginModule required keyTab="{SECRET}";'
    err = error_of(prefix, {**sasl, "sasl.jaas.config": kerberos})
    assert err.option == prefix + "sasl.jaas.config"
    assert f"{prefix}sasl.kerberos.service.name" in str(err) and "kinit" in str(err)


def test_every_java_only_setting_has_a_hint_naming_options_under_the_client_s_prefix() -> None:
    for name in JAVA_ONLY:
        hint = java_only_hint("errors.deadLetter.kafka.", name)
        assert hint.startswith("not to be set: it is a setting of Java's Kafka client; ")
        assert "{p}" not in hint
        named = re.findall(r"[\w.]*\b(?:ssl|sasl)\.[a-z][\w.]*[a-z]", hint)
        bare = [n for n in named if not n.startswith("errors.deadLetter.kafka.")]
        assert bare == [], (name, bare)


def run(command: str, cwd: Path) -> None:
    subprocess.run(command, shell=True, check=True, capture_output=True, cwd=cwd)


def test_the_commands_of_the_hint_turn_a_jks_truststore_into_a_pem_python_trusts(
    tmp_path: Path,
) -> None:
    """The commands of the truststore hint, run as written (their placeholders filled in),
    on a JKS truststore made by keytool (the JDK Spark runs on), give a PEM file that
    Python's ssl module loads as CA certificates: what ``ssl.cafile`` takes."""
    store = "-storepass changeit -keypass changeit"
    run(
        f"keytool -genkeypair -alias ca -keyalg RSA -dname CN=test-ca -keystore ca.p12 {store}",
        tmp_path,
    )
    run("keytool -exportcert -alias ca -keystore ca.p12 -storepass changeit -file ca.der", tmp_path)
    run(
        "keytool -importcert -noprompt -alias ca -file ca.der -keystore truststore.jks "
        "-storetype JKS -storepass changeit",
        tmp_path,
    )
    hint = java_only_hint("kafka.", "ssl.truststore.location")
    commands = [c for c in hint.split("`") if c.startswith(("keytool ", "openssl "))]
    assert len(commands) == 3, hint  # one certificate; or every one, in two steps
    made = 0
    for command in commands:
        run(command.replace("<alias>", "ca").replace("<password>", "changeit"), tmp_path)
        pem = tmp_path / "ca.pem"
        if "ca.pem" in command:
            assert "BEGIN CERTIFICATE" in pem.read_text()
            ssl.create_default_context().load_verify_locations(cafile=str(pem))
            pem.unlink()
            made += 1
    assert made == 2
