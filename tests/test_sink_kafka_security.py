"""TLS, SASL and secrets of the sink's Kafka clients: the kafka consumer's producer and
readers (``consumer.kafka.*``) and the dead-letter topic's producer
(``errors.deadLetter.kafka.*``), through the conversion every Kafka client shares
(:mod:`state.kafka_settings`).

Checked when the options are parsed, typed as kafka-python wants them, a secret reference
kept in the options and their pickle and resolved only where a client is made, and a
password shown as a fingerprint in reprs, pool keys and errors.
"""

from __future__ import annotations

import pickle
import uuid
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest

from sink.consumers import open_consumer
from sink.consumers.kafka.kafka_consumer import KafkaTopicConsumer
from sink.consumers.kafka.kafka_kind import topic_partitions
from sink.consumers.kafka.kafka_options import KafkaTopicSettings, producer_config
from sink.dead_letters.dead_letter_topic import DeadLetterTopic
from sink.faults import FaultInjector
from sink.options import SinkOptions
from state.errors import ConfigError, SecretReferenceError
from state.kafka_redaction import Secret
from state.stores import open_store

SECRET = "pw-marker-0e6a"
OTHER = "pw-marker-other-93b1"
ENV = "GTB_TEST_SINK_KAFKA_PW"
REFERENCE = "${env:" + ENV + "}"
CONSUMER = "consumer.kafka."
DEAD = "errors.deadLetter.kafka."
PREFIXES = (CONSUMER, DEAD)

BASE = {
    "pipeline.id": "p1",
    "consumer": "kafka",
    "consumer.kafka.bootstrap.servers": "127.0.0.1:9",
    "consumer.topic": "out",
}
DEAD_LETTERS = {
    "errors.tolerance": "all",
    "errors.deadLetter.path": "file:///tmp/gtb-dl",
    "errors.deadLetter.topic": "dlq",
    "errors.deadLetter.kafka.bootstrap.servers": "127.0.0.1:9",
}


def sasl(prefix: str, password: str = SECRET) -> dict[str, str]:
    return {
        prefix + "security.protocol": "SASL_SSL",
        prefix + "sasl.mechanism": "SCRAM-SHA-512",
        prefix + "sasl.plain.username": "app",
        prefix + "sasl.plain.password": password,
        prefix + "ssl.cafile": "/etc/kafka/ca.pem",
        prefix + "ssl.check.hostname": "false",
    }


def parse(**extra: str) -> SinkOptions:
    return SinkOptions.parse(
        {**BASE, **DEAD_LETTERS, "state.uri": f"memory://{uuid.uuid4().hex}", **extra}
    )


def error_of(**extra: str) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse(**extra)
    assert SECRET not in str(info.value)
    return info.value


# --- checked when parsed -----------------------------------------------------------------------


@pytest.mark.parametrize("prefix", PREFIXES)
def test_tls_and_sasl_settings_are_checked_when_the_options_are_parsed(prefix: str) -> None:
    given = sasl(prefix)
    err = error_of(**{k: v for k, v in given.items() if k != prefix + "security.protocol"})
    assert err.option == prefix + "security.protocol" and "SASL_SSL or SASL_PLAINTEXT" in str(err)
    err = error_of(**{**given, prefix + "security.protocol": "SASL_PLAINTEXT"})
    assert err.option == prefix + "security.protocol" and "SSL or SASL_SSL" in str(err)
    err = error_of(**{k: v for k, v in given.items() if k != prefix + "sasl.plain.password"})
    assert err.option == prefix + "sasl.plain.password" and "SCRAM-SHA-512" in str(err)
    err = error_of(**{k: v for k, v in given.items() if k != prefix + "sasl.mechanism"})
    assert err.option == prefix + "sasl.mechanism"
    err = error_of(**{**given, prefix + "ssl.check.hostname": "maybe"})
    assert err.option == prefix + "ssl.check.hostname" and "true or false" in str(err)
    err = error_of(**{**given, prefix + "sasl.plain.pasword": SECRET})  # misspelt
    assert prefix + "sasl.plain.pasword" in str(err)


@pytest.mark.parametrize("prefix", PREFIXES)
def test_a_jaas_config_is_taken_and_a_broken_one_is_refused_unseen(prefix: str) -> None:
    given = {k: v for k, v in sasl(prefix).items() if ".sasl.plain." not in k}
    jaas = (
        "org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="app" password="{SECRET}"'
    )
    parse(**given, **{prefix + "sasl.jaas.config": jaas})
    err = error_of(**given, **{prefix + "sasl.jaas.config": jaas.replace('username="app"', "")})
    assert err.option == prefix + "sasl.jaas.config"


# --- typed ---------------------------------------------------------------------------------------


def test_the_producer_and_the_readers_get_typed_values(monkeypatch: pytest.MonkeyPatch) -> None:
    o = parse(**sasl(CONSUMER), **{"consumer.kafka.linger.ms": "7"})
    assert isinstance(o.settings, KafkaTopicSettings)
    config = producer_config(o.settings, 30.0, "p1")
    assert config["ssl_check_hostname"] is False  # not the truthy string "false"
    assert config["linger_ms"] == 7
    readers = Clients(monkeypatch)
    with pytest.raises(Captured):
        topic_partitions(o.settings, 5.0)
    assert readers.readers[0]["ssl_check_hostname"] is False
    assert readers.readers[0]["sasl_plain_password"] == SECRET


# --- secret references ---------------------------------------------------------------------


@pytest.mark.parametrize("prefix", PREFIXES)
def test_a_reference_is_kept_in_the_parsed_options_and_their_pickle(
    prefix: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, SECRET)
    o = parse(**sasl(prefix, REFERENCE))
    settings = o.settings.config if prefix == CONSUMER else o.errors.kafka  # type: ignore[attr-defined]
    assert ("sasl.plain.password", REFERENCE) in settings
    data = pickle.dumps(o)
    assert REFERENCE.encode() in data and SECRET.encode() not in data
    assert pickle.loads(data) == o
    monkeypatch.delenv(ENV)
    parse(**sasl(prefix, REFERENCE))  # parsing never resolves: the variable may be elsewhere


class Captured(Exception):
    """Raised by a fake client factory: no network."""


class FakeProducer:
    def __init__(self, config: dict[str, Any]) -> None:
        self.config = config

    def init_transactions(self) -> None:
        pass

    def close(self, timeout: float | None = None) -> None:
        pass


class Clients:
    """kafka-python's KafkaProducer and KafkaConsumer replaced: the producers made (fakes)
    and the readers' arguments (each reader refused with :class:`Captured`)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import kafka

        self.producers: list[dict[str, Any]] = []
        self.readers: list[dict[str, Any]] = []
        producers, readers = self.producers, self.readers

        class Producer(FakeProducer):
            DEFAULT_CONFIG = kafka.KafkaProducer.DEFAULT_CONFIG

            def __init__(self, **config: Any) -> None:
                producers.append(config)
                super().__init__(config)

        class Reader:
            DEFAULT_CONFIG = kafka.KafkaConsumer.DEFAULT_CONFIG

            def __init__(self, **config: Any) -> None:
                readers.append(config)
                raise Captured

        monkeypatch.setattr(kafka, "KafkaProducer", Producer)
        monkeypatch.setattr(kafka, "KafkaConsumer", Reader)


@pytest.fixture
def clients(monkeypatch: pytest.MonkeyPatch) -> Iterator[Clients]:
    yield Clients(monkeypatch)


def kafka_consumer(o: SinkOptions) -> KafkaTopicConsumer:
    assert o.store is not None
    consumer = open_consumer(o, open_store(o.store), FaultInjector())
    assert isinstance(consumer, KafkaTopicConsumer)
    return consumer


def test_the_kafka_consumers_producer_and_tail_scan_resolve_the_reference_where_made(
    monkeypatch: pytest.MonkeyPatch, clients: Clients
) -> None:
    o = parse(**sasl(CONSUMER, REFERENCE))
    monkeypatch.setenv(ENV, SECRET)
    consumer = kafka_consumer(o)
    with pytest.raises(Captured):
        consumer.last_bundle()  # a new producer fences, then the tail scan's reader
    (made,) = clients.producers
    assert made["sasl_plain_password"] == SECRET and isinstance(made["sasl_plain_password"], Secret)
    assert made["ssl_check_hostname"] is False
    assert clients.readers[0]["sasl_plain_password"] == SECRET
    assert clients.readers[0]["security_protocol"] == "SASL_SSL"
    consumer.close()
    monkeypatch.delenv(ENV)
    with pytest.raises(SecretReferenceError) as info:
        kafka_consumer(o)
    assert info.value.option == "consumer.kafka.sasl.plain.password" and ENV in str(info.value)


def test_the_dead_letter_producer_resolves_its_reference_where_made(
    monkeypatch: pytest.MonkeyPatch, clients: Clients
) -> None:
    o = parse(**sasl(DEAD, REFERENCE))
    errors = o.errors
    assert errors.topic is not None and errors.bootstrap is not None
    topic = DeadLetterTopic(errors.bootstrap, errors.topic, errors.kafka, 5.0)
    monkeypatch.setenv(ENV, SECRET)
    with pytest.raises(Captured):
        topic.ensure("p1", 3, lambda: pa.table({"value": [b"x"]}))
    (made,) = clients.producers
    assert made["sasl_plain_password"] == SECRET and made["ssl_check_hostname"] is False
    assert made["transactional_id"] == "gtbarrier.p1.dead-letters"
    assert clients.readers[0]["sasl_plain_password"] == SECRET
    monkeypatch.delenv(ENV)
    with pytest.raises(SecretReferenceError) as info:
        topic.ensure("p1", 3, lambda: pa.table({"value": [b"x"]}))
    assert info.value.option == "errors.deadLetter.kafka.sasl.plain.password"


# --- never shown ---------------------------------------------------------------------------


def test_a_literal_password_shows_as_a_fingerprint_in_reprs_and_pool_keys(
    clients: Clients,
) -> None:
    o = parse(**sasl(CONSUMER), **sasl(DEAD))
    consumer = kafka_consumer(o)
    texts = [repr(o), str(o), repr(o.settings), repr(o.errors), repr(consumer.config)]
    texts += [repr(consumer._pool_key), str(consumer._pool_key)]
    errors = o.errors
    assert errors.topic is not None and errors.bootstrap is not None
    texts.append(repr(DeadLetterTopic(errors.bootstrap, errors.topic, errors.kafka)))
    for text in texts:
        assert SECRET not in text and "<secret " in text, text
    assert consumer.config["sasl_plain_password"] == SECRET  # the client still gets it
    other = kafka_consumer(parse(**sasl(CONSUMER, OTHER)))
    assert other._pool_key != consumer._pool_key  # other credentials: another producer
