"""The pure parts of the test harness's Kafka gateway (harness/kafka_gateway.py).

Frame and request-header parsing, the SCRAM server (RFC 5802 with SHA-256 per RFC 7677 and
SHA-512), PLAIN (RFC 4616), what is allowed before authentication, and the rewriting of
the addresses a broker advertises. The SCRAM server is checked against the RFC 7677 test
vector and against kafka-python's own SCRAM client, so that a gateway that agreed only
with itself would fail here.
"""

from __future__ import annotations

import base64
import struct

import pytest

from harness.kafka_gateway import (
    API_VERSIONS,
    FETCH,
    METADATA,
    SASL_AUTHENTICATE,
    SASL_HANDSHAKE,
    AuthenticationFailed,
    FrameError,
    ScramCredential,
    ScramServer,
    allowed_before_authentication,
    check_plain,
    frame_size,
    parse_request_header,
    rewrite_addresses,
)

# RFC 7677, section 3: SCRAM-SHA-256 with user "user", password "pencil".
RFC7677_CLIENT_FIRST = b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO"
RFC7677_SERVER_NONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0"
RFC7677_SALT = base64.b64decode("W22ZaJ0SNY7soEsUEjb6gQ==")
RFC7677_SERVER_FIRST = (
    b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
)
RFC7677_CLIENT_FINAL = (
    b"c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
    b"p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
)
RFC7677_SERVER_FINAL = b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="


def rfc7677_server() -> ScramServer:
    credential = ScramCredential.derive(
        "pencil", mechanism="SCRAM-SHA-256", salt=RFC7677_SALT, iterations=4096
    )
    return ScramServer(
        "SCRAM-SHA-256",
        lambda user: credential if user == "user" else None,
        nonce=lambda: RFC7677_SERVER_NONCE,
    )


def request(api_key: int, version: int, correlation_id: int, client_id: str | None) -> bytes:
    """A request frame (without its size) with header v1: the fields every version starts with."""
    cid = (
        b"\xff\xff" if client_id is None else struct.pack(">h", len(client_id)) + client_id.encode()
    )
    return struct.pack(">hhi", api_key, version, correlation_id) + cid + b"body"


# --- frames ---------------------------------------------------------------------------


def test_a_request_header_gives_api_key_version_correlation_id_and_client_id() -> None:
    header = parse_request_header(request(METADATA, 12, 42, "gtkafka-orders"))
    assert (header.api_key, header.api_version, header.correlation_id) == (METADATA, 12, 42)
    assert header.client_id == "gtkafka-orders"
    assert parse_request_header(request(FETCH, 4, 1, None)).client_id is None


@pytest.mark.parametrize(
    "frame",
    [
        b"",
        b"\x00\x03\x00",
        request(METADATA, 1, 1, "abc")[:10],
        b"\x00\x03\x00\x01\x00\x00\x00\x01\x00\x09ab",
    ],
)
def test_a_truncated_request_header_is_a_frame_error(frame: bytes) -> None:
    with pytest.raises(FrameError, match="request header"):
        parse_request_header(frame)


def test_a_frame_size_must_be_positive_and_within_the_limit() -> None:
    assert frame_size(struct.pack(">i", 100), limit=1 << 20) == 100
    with pytest.raises(FrameError, match="size -1"):
        frame_size(struct.pack(">i", -1), limit=1 << 20)
    # a TLS ClientHello read as a Kafka size: refused, not a 369 MB allocation
    with pytest.raises(FrameError, match="at most 1048576"):
        frame_size(b"\x16\x03\x01\x02", limit=1 << 20)


def test_before_authentication_only_api_versions_and_the_sasl_requests_pass() -> None:
    allowed = {k for k in range(0, 100) if allowed_before_authentication(k)}
    assert allowed == {API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE}


# --- SCRAM ----------------------------------------------------------------------------


def test_scram_sha_256_server_matches_the_rfc_7677_example() -> None:
    server = rfc7677_server()
    assert server.first(RFC7677_CLIENT_FIRST) == RFC7677_SERVER_FIRST
    assert server.final(RFC7677_CLIENT_FINAL) == RFC7677_SERVER_FINAL
    assert server.principal == "user"


def test_scram_refuses_a_wrong_proof_an_unknown_user_and_a_changed_nonce() -> None:
    wrong_proof = RFC7677_CLIENT_FINAL[:-8] + b"AAAAAAA="
    server = rfc7677_server()
    server.first(RFC7677_CLIENT_FIRST)
    with pytest.raises(AuthenticationFailed, match="proof"):
        server.final(wrong_proof)
    assert server.principal is None

    with pytest.raises(AuthenticationFailed, match="unknown user"):
        rfc7677_server().first(b"n,,n=mallory,r=abc")

    server = rfc7677_server()
    server.first(RFC7677_CLIENT_FIRST)
    with pytest.raises(AuthenticationFailed, match="nonce"):
        server.final(RFC7677_CLIENT_FINAL.replace(b"$k0", b"$k1"))


@pytest.mark.parametrize(
    "message",
    [b"p=tls-unique,,n=user,r=x", b"n,,r=x", b"n,,n=user", b"n,a=admin,n=user,r=x", b"garbage"],
)
def test_scram_refuses_channel_binding_authzid_and_malformed_first_messages(
    message: bytes,
) -> None:
    with pytest.raises(AuthenticationFailed):
        rfc7677_server().first(message)


def test_scram_decodes_escaped_user_names() -> None:
    credential = ScramCredential.derive("pw", mechanism="SCRAM-SHA-512", salt=b"s" * 16)
    seen: list[str] = []

    def lookup(user: str) -> ScramCredential | None:
        seen.append(user)
        return credential

    ScramServer("SCRAM-SHA-512", lookup).first(b"n,,n=a=2Cb=3Dc,r=nonce")
    assert seen == ["a,b=c"]


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_server_authenticates_kafka_pythons_own_scram_client(mechanism: str) -> None:
    from kafka.net.sasl.scram import ScramClient

    credential = ScramCredential.derive("s3cret-pw", mechanism=mechanism, salt=b"0123456789abcdef")
    server = ScramServer(mechanism, lambda user: credential if user == "alice" else None)
    client = ScramClient("alice", "s3cret-pw", mechanism)
    client.process_server_first_message(server.first(client.first_message()))
    client.process_server_final_message(server.final(client.final_message()))  # checks v=
    assert server.principal == "alice"

    liar = ScramClient("alice", "not-the-password", mechanism)
    server = ScramServer(mechanism, lambda user: credential)
    liar.process_server_first_message(server.first(liar.first_message()))
    with pytest.raises(AuthenticationFailed):
        server.final(liar.final_message())


def test_a_derived_credential_keeps_no_password() -> None:
    credential = ScramCredential.derive("pencil-marker", mechanism="SCRAM-SHA-512")
    assert "pencil-marker" not in repr(credential)
    assert len(credential.salt) >= 16 and credential.iterations >= 4096


# --- PLAIN ----------------------------------------------------------------------------


def test_plain_accepts_the_right_password_with_or_without_an_authzid() -> None:
    users = {"alice": "s3cret"}
    assert check_plain(b"\x00alice\x00s3cret", users) == "alice"
    assert check_plain(b"alice\x00alice\x00s3cret", users) == "alice"


@pytest.mark.parametrize(
    "token",
    [
        b"\x00alice\x00wrong",
        b"\x00bob\x00s3cret",
        b"admin\x00alice\x00s3cret",
        b"alice:s3cret",
        b"",
    ],
)
def test_plain_refuses_wrong_passwords_unknown_users_other_authzids_and_garbage(
    token: bytes,
) -> None:
    with pytest.raises(AuthenticationFailed) as caught:
        check_plain(token, {"alice": "s3cret"})
    assert "s3cret" not in str(caught.value)


# --- advertised addresses -------------------------------------------------------------


def test_metadata_and_find_coordinator_answers_advertise_the_gateway() -> None:
    from kafka.protocol.metadata import FindCoordinatorResponse, MetadataResponse

    for version in (1, 9, 12):
        meta = MetadataResponse(
            throttle_time_ms=0,
            brokers=[
                MetadataResponse.MetadataResponseBroker(
                    node_id=1, host="10.0.0.9", port=9092, rack=None
                )
            ],
            cluster_id="c",
            controller_id=1,
            topics=[],
            version=version,
        )
        meta.with_header(correlation_id=5)
        frame = bytes(meta.encode(header=True))
        out = MetadataResponse.decode(
            rewrite_addresses(METADATA, version, frame, "127.0.0.1", 4321),
            version=version,
            header=True,
        )
        assert [(b.host, b.port) for b in out.brokers] == [("127.0.0.1", 4321)]
        assert out.header.correlation_id == 5

    old = FindCoordinatorResponse(error_code=0, node_id=1, host="10.0.0.9", port=9092, version=2)
    old.with_header(correlation_id=6)
    out = FindCoordinatorResponse.decode(
        rewrite_addresses(10, 2, bytes(old.encode(header=True)), "127.0.0.1", 4321),
        version=2,
        header=True,
    )
    assert (out.host, out.port) == ("127.0.0.1", 4321)

    new = FindCoordinatorResponse(
        coordinators=[
            FindCoordinatorResponse.Coordinator(key="g", node_id=1, host="10.0.0.9", port=9092)
        ],
        version=4,
    )
    new.with_header(correlation_id=7)
    out = FindCoordinatorResponse.decode(
        rewrite_addresses(10, 4, bytes(new.encode(header=True)), "127.0.0.1", 4321),
        version=4,
        header=True,
    )
    assert [(c.host, c.port) for c in out.coordinators] == [("127.0.0.1", 4321)]


def test_other_answers_pass_unchanged() -> None:
    frame = b"\x00\x00\x00\x09anything"
    assert rewrite_addresses(FETCH, 11, frame, "127.0.0.1", 1) is frame
