"""The TLS/SASL gateway in front of Tansu, with kafka-python's own SSL and SASL code.

Each secured endpoint serves a client that has its settings, refuses one that lacks them
(or has a wrong password, or does not trust the CA), advertises only itself, and logs who
authenticated, never a password.
"""

from __future__ import annotations

from typing import Any

import pytest
from kafka import KafkaConsumer, TopicPartition
from kafka.errors import KafkaError

from harness.kafka import KafkaHelper
from harness.kafka_gateway import KafkaGateway
from harness.process import wait_until

ENDPOINTS = ("kafka_tls", "kafka_sasl_plain", "kafka_sasl_scram")
QUICK = {
    "request_timeout_ms": 5000,
    "bootstrap_timeout_ms": 5000,
}


def consumer(gateway: KafkaGateway, **settings: Any) -> KafkaConsumer:
    return KafkaConsumer(
        bootstrap_servers=gateway.bootstrap,
        group_id=None,
        enable_auto_commit=False,
        client_id=settings.pop("client_id", "gateway-test"),
        **{**QUICK, **settings},
    )


def closed(gateway: KafkaGateway, client_id: str) -> list[dict[str, Any]]:
    return [e for e in gateway.events("closed") if e["client_id"] == client_id]


@pytest.fixture(params=ENDPOINTS)
def gateway(request: pytest.FixtureRequest) -> KafkaGateway:
    found: KafkaGateway = request.getfixturevalue(request.param)
    return found


def test_a_client_with_the_settings_reads_through_the_gateway_which_advertises_itself(
    gateway: KafkaGateway, kafka: KafkaHelper
) -> None:
    topic = kafka.create_topic(partitions=2)
    kafka.produce_values(topic, [b"a", b"b", b"c"], partition=1)
    c = consumer(gateway, client_id="reader-1", **gateway.client_settings())
    try:
        assert c.partitions_for_topic(topic) == {0, 1}
        brokers = {(b.host, b.port) for b in c._client.cluster.brokers()}
        assert brokers == {("127.0.0.1", gateway.port)}
        tp = TopicPartition(topic, 1)
        c.assign([tp])
        c.seek(tp, 0)
        seen: list[bytes] = []
        for _ in range(50):
            seen += [r.value for r in c.poll(timeout_ms=200).get(tp, [])]
            if len(seen) >= 3:
                break
        assert seen == [b"a", b"b", b"c"]
    finally:
        c.close()
    authenticated = [e for e in gateway.events("authenticated") if e.get("client_id") == "reader-1"]
    assert authenticated, "the gateway logged no authentication of reader-1"
    if gateway.mechanism is not None:
        assert authenticated and {e["principal"] for e in authenticated} == {gateway.user}
        assert {e["mechanism"] for e in authenticated} == {gateway.mechanism}
    # the gateway logs a connection's requests when it sees the client close it
    wait_until(
        lambda: any(e["apis"].get("1") for e in closed(gateway, "reader-1")),
        timeout=10,
        what="a Fetch of reader-1 logged by the gateway",
    )
    text = gateway.events_path.read_text() + (
        gateway.log_path.read_text() if gateway.log_path else ""
    )
    assert gateway.password not in text


def test_a_client_without_the_settings_is_refused(gateway: KafkaGateway) -> None:
    before = len(gateway.events("refused"))
    with pytest.raises(KafkaError):
        c = consumer(gateway, client_id="no-settings")
        try:
            c.topics()
        finally:
            c.close()
    refused = gateway.events("refused")[before:]
    assert refused, "the gateway logged no refusal"
    reasons = " ".join(e["reason"] for e in refused)
    assert ("TLS handshake failed" in reasons) if gateway.tls else ("before SASL" in reasons)


@pytest.mark.parametrize("endpoint", ["kafka_sasl_plain", "kafka_sasl_scram"])
def test_a_wrong_password_is_refused_without_showing_it(
    endpoint: str, request: pytest.FixtureRequest
) -> None:
    gateway: KafkaGateway = request.getfixturevalue(endpoint)
    wrong = "wrong-password-marker-31"
    with pytest.raises(KafkaError) as caught:
        c = consumer(gateway, client_id="liar", **gateway.client_settings(password=wrong))
        try:
            c.topics()
        finally:
            c.close()
    assert wrong not in str(caught.value) and gateway.password not in str(caught.value)
    refused = [e for e in gateway.events("refused") if e.get("client_id") == "liar"]
    assert refused and "authentication failed" in refused[-1]["reason"]
    assert wrong not in gateway.events_path.read_text()


@pytest.mark.parametrize("endpoint", ["kafka_tls", "kafka_sasl_plain"])
def test_a_tls_client_that_does_not_trust_the_ca_is_refused(
    endpoint: str, request: pytest.FixtureRequest
) -> None:
    gateway: KafkaGateway = request.getfixturevalue(endpoint)
    settings = gateway.client_settings()
    del settings["ssl_cafile"]  # the system's CAs: the test CA is not among them
    with pytest.raises(KafkaError):
        c = consumer(gateway, client_id="no-ca", **settings)
        try:
            c.topics()
        finally:
            c.close()
