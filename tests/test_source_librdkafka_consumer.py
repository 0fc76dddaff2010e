"""``kafkaConsumer.client=confluent``: its option checks, the translation of kafka-python
settings into librdkafka's, and of librdkafka's errors into kafka-python's.

Reads with it run against the broker in the integration tests: the source suite takes
the ``read_client`` fixture, and runs once with each client.
"""

from __future__ import annotations

from typing import Any

import kafka.errors as kerr
import pytest
from confluent_kafka import KafkaError

from datasource import librdkafka_consumer
from datasource.consumer_pool import PoolKey
from datasource.librdkafka_consumer import GROUP_ID, kafka_error, librdkafka_config
from datasource.options import KafkaSourceOptions
from state.errors import ConfigError

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "orders"}
CONFLUENT = {**BASE, "kafkaConsumer.client": "confluent"}


def error_of(raw: dict[str, str]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        KafkaSourceOptions.parse(raw)
    return info.value


def test_the_client_defaults_to_kafka_python_and_is_a_choice() -> None:
    assert KafkaSourceOptions.parse(BASE).client == "kafka-python"
    assert KafkaSourceOptions.parse({**BASE, "kafkaConsumer.client": "CONFLUENT"}).client == (
        "confluent"
    )
    text = str(error_of({**BASE, "kafkaConsumer.client": "librdkafka"}))
    assert "kafkaConsumer.client" in text and "librdkafka" in text
    assert "kafka-python" in text and "confluent" in text


def test_headers_are_refused_with_librdkafka() -> None:
    text = str(error_of({**CONFLUENT, "includeHeaders": "true"}))
    assert "includeHeaders" in text and "true" in text
    assert "kafkaConsumer.client=kafka-python" in text and "UTF-8" in text
    assert KafkaSourceOptions.parse({**CONFLUENT, "includeHeaders": "false"}).client == (
        "confluent"
    )


@pytest.mark.parametrize(
    ("setting", "value"),
    [("kafka.api.version", "2.8.0"), ("kafka.proxy.url", "http://proxy.example:3128")],
)
def test_settings_without_a_librdkafka_equivalent_are_refused(setting: str, value: str) -> None:
    assert KafkaSourceOptions.parse({**BASE, setting: value}).client == "kafka-python"
    text = str(error_of({**CONFLUENT, setting: value}))
    assert setting in text and "kafkaConsumer.client=kafka-python" in text
    assert value not in text  # a value is never shown: it could be a secret


def test_a_receive_limit_below_the_fetch_size_is_refused() -> None:
    text = str(error_of({**CONFLUENT, "kafka.receive.message.max.bytes": "4096"}))
    assert "kafka.receive.message.max.bytes" in text and "4096" in text
    assert "52429312" in text  # kafka.fetch.max.bytes' default + 512


def test_a_missing_package_is_named_with_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(librdkafka_consumer, "installed", lambda: False)
    text = str(error_of(CONFLUENT))
    assert "kafkaConsumer.client" in text and "confluent" in text
    assert "gtbarrier[fast]" in text


def options(**kafka: str) -> KafkaSourceOptions:
    return KafkaSourceOptions.parse(
        {**CONFLUENT, **{f"kafka.{k}": v for k, v in kafka.items()}, "pipeline.id": "p1"}
    )


def test_settings_are_translated_and_gtkafkas_own_are_fixed() -> None:
    config = librdkafka_config(
        options(
            **{
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512",
                "sasl.plain.username": "reader",
                "sasl.plain.password": "s3cret",
                "ssl.cafile": "/etc/ca.pem",
                "ssl.check.hostname": "false",
                "fetch.max.bytes": "1048576",
                "max.partition.fetch.bytes": "262144",
                "session.timeout.ms": "10000",  # a group setting: not passed on
            }
        ).consumer_config()
    )
    assert config["bootstrap.servers"] == "127.0.0.1:9092"
    assert config["client.id"] == "gtkafka-p1"
    assert (config["security.protocol"], config["sasl.mechanism"]) == ("SASL_SSL", "SCRAM-SHA-512")
    assert (config["sasl.username"], config["sasl.password"]) == ("reader", "s3cret")
    assert type(config["sasl.password"]) is str  # the text, not the Secret wrapper
    assert config["ssl.ca.location"] == "/etc/ca.pem"
    assert config["ssl.endpoint.identification.algorithm"] == "none"
    assert config["fetch.max.bytes"] == 1048576
    assert config["max.partition.fetch.bytes"] == 262144
    assert "session.timeout.ms" not in config
    # replayable reads: no offset reset, no commits, no group joined, no topic created
    assert config["auto.offset.reset"] == "error"
    assert config["enable.auto.commit"] is False and config["enable.auto.offset.store"] is False
    assert config["group.id"] == GROUP_ID
    assert config["allow.auto.create.topics"] is False
    # prefetch bounded to two fetches of the partition; periodic metadata refresh off
    assert config["queued.max.messages.kbytes"] == 1024  # at least 1 MB
    assert config["topic.metadata.refresh.interval.ms"] == -1
    assert config["fetch.queue.backoff.ms"] == 20


def test_every_translated_setting_is_a_librdkafka_property() -> None:
    """librdkafka refuses unknown properties when a consumer is made: each translation
    is made here into a real consumer's configuration (no broker is contacted)."""
    from confluent_kafka import Consumer

    for arg, (name, convert) in librdkafka_consumer._TRANSLATED.items():
        sample: Any = {
            "security.protocol": "PLAINTEXT",
            "isolation.level": "read_committed",
            "sasl.mechanism": "PLAIN",
            "receive.message.max.bytes": 100_000_000,
        }.get(name, convert(1_000) if convert in (int, bool) else convert("x"))
        if name.startswith(("ssl.", "sasl.kerberos")):
            continue  # need files or a SASL protocol to be accepted; translated above
        Consumer(librdkafka_config({**options().consumer_config(), arg: sample})).close()
        assert name in librdkafka_config({**options().consumer_config(), arg: sample})


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        (KafkaError._AUTO_OFFSET_RESET, kerr.OffsetOutOfRangeError),
        (KafkaError.OFFSET_OUT_OF_RANGE, kerr.OffsetOutOfRangeError),
        (KafkaError.TOPIC_AUTHORIZATION_FAILED, kerr.TopicAuthorizationFailedError),
        (KafkaError.NOT_LEADER_FOR_PARTITION, kerr.NotLeaderForPartitionError),
        (KafkaError._AUTHENTICATION, kerr.SaslAuthenticationFailedError),
        (KafkaError._SSL, kerr.KafkaConnectionError),
        (KafkaError._TIMED_OUT, kerr.KafkaTimeoutError),
        (KafkaError._TRANSPORT, kerr.KafkaConnectionError),
        (KafkaError._ALL_BROKERS_DOWN, kerr.KafkaConnectionError),
    ],
)
def test_librdkafka_errors_become_kafka_pythons(code: int, expected: type[Exception]) -> None:
    err = kafka_error(KafkaError(code, "what librdkafka says"))
    assert type(err) is expected
    assert "what librdkafka says" in str(err)


def test_other_local_errors_keep_librdkafkas_name() -> None:
    err = kafka_error(KafkaError(KafkaError._STATE, "odd state"))
    assert type(err) is kerr.KafkaError and "_STATE" in str(err) and "odd state" in str(err)


def test_pool_keys_tell_the_clients_apart() -> None:
    args = ("h:1", {"client_id": "x"}, "t", 0)
    assert PoolKey.of(*args) != PoolKey.of(*args, client="confluent")
    assert PoolKey.of(*args, client="confluent") == PoolKey.of(*args, client="confluent")
