"""A Kafka-protocol gateway that terminates TLS and SASL in front of a plaintext broker.

Tansu 0.6 (the tests' broker) can do neither for kafka-python clients: ``--cert`` and
``--key`` are refused together by its command line (and ``--cert`` alone leaves the
listener in plaintext), and ``--authentication`` offers SCRAM-SHA-512 only, whose exchange
then fails with ``NoSharedMechanism`` even for a user made with ``tansu user create``. So
the harness puts this gateway in front of it: clients connect to the gateway with their
own SSL and SASL code, and the gateway forwards their authenticated requests to the broker.

One gateway is one listener with one of the three set-ups the tests need:

* ``SSL``: TLS with a server certificate signed by a test CA; no SASL;
* ``SASL_SSL`` / ``SASL_PLAINTEXT``: SASL ``PLAIN`` (RFC 4616), ``SCRAM-SHA-256`` /
  ``SCRAM-SHA-512`` (RFC 5802, 7677) or ``OAUTHBEARER`` (RFC 7628) over TLS or not.
  OAUTHBEARER takes unsecured JWS tokens, as Kafka's own test mode does
  (``OAuthBearerUnsecuredJws``): header ``{"alg":"none"}``, an empty signature, a ``sub``
  claim that names a user of the users file (its password unused) and an ``exp`` claim in
  the future (:func:`check_oauthbearer`); :mod:`harness.oauth_tokens` makes them.

Per connection: the TLS handshake (a client that does not speak TLS is refused), then,
with SASL, only ApiVersions (forwarded), SaslHandshake v1 and SaslAuthenticate (answered
here) are served until the client has authenticated; any other request closes the
connection, as Kafka does. Once authenticated, frames pass both ways unchanged, but the
Metadata, FindCoordinator and DescribeCluster answers, which are rewritten to advertise
the gateway's own address so that clients never reach the broker around it.

Every event goes, one JSON object a line, to the events file: ``listening``,
``authenticated`` (peer, client id, mechanism, principal), ``request`` (the first request
of each api key an authenticated connection forwards, with its client id), ``refused``
(the reason: a failed TLS handshake, a request before authentication, a wrong
password...) and ``closed`` (the requests the connection made, per api key). No
password, proof or key is ever written there. Tests read it to see which client
authenticated and what it did.

Limits: SASL handshake v0 (raw tokens) and re-authentication (KIP-368) are refused
(session lifetime 0 tells clients not to re-authenticate); no client certificates (mTLS),
no SCRAM extensions, no ACLs; an unknown SCRAM user is refused at the first message; a
refused OAUTHBEARER token is answered at once with the authentication error (no RFC 7628
error challenge first).

Run it as ``python -m harness.kafka_gateway --upstream HOST:PORT --port N --events FILE
[--tls-cert F --tls-key F] [--sasl MECHANISM --users FILE]``; :class:`KafkaGateway` does
that as a :class:`~harness.server.Server`. :func:`make_tls_files` writes a CA and a
server certificate for 127.0.0.1/localhost with the ``cryptography`` package.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import datetime
import hashlib
import hmac
import json
import os
import secrets
import ssl
import struct
import sys
import time
from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kafka.net.sasl.oauth import AbstractTokenProvider

from harness.oauth_tokens import PRINCIPAL, VALID_TOKEN, valid_token
from harness.ports import LOOPBACK, free_port
from harness.process import REPO_ROOT, ManagedProcess, repo_env
from harness.server import Server

PRODUCE, FETCH, LIST_OFFSETS, METADATA, OFFSET_COMMIT = 0, 1, 2, 3, 8
FIND_COORDINATOR, SASL_HANDSHAKE, API_VERSIONS, SASL_AUTHENTICATE = 10, 17, 18, 36
DESCRIBE_CLUSTER = 60

# Kafka error codes the gateway answers with.
UNSUPPORTED_SASL_MECHANISM, ILLEGAL_SASL_STATE, UNSUPPORTED_VERSION = 33, 34, 35
SASL_AUTHENTICATION_FAILED = 58

MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER")
_SCRAM_HASHES = {"SCRAM-SHA-256": "sha256", "SCRAM-SHA-512": "sha512"}
SCRAM_ITERATIONS = 4096  # Kafka's minimum for SCRAM credentials
MAX_FRAME = 64 << 20  # far above any test's request; a TLS record read as a size is refused
HANDSHAKE_TIMEOUT_S = 10.0

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhih")  # api_key, api_version, correlation_id, client_id length


class FrameError(ValueError):
    """Bytes that are not a Kafka request frame."""


class AuthenticationFailed(Exception):
    """A SASL exchange that must not succeed; the message never holds a secret."""


# --- frames (pure) ------------------------------------------------------------------------


@dataclass(frozen=True)
class RequestHeader:
    """The fields every request header version starts with (v1 and v2 share them)."""

    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


def frame_size(prefix: bytes, *, limit: int = MAX_FRAME) -> int:
    """The size a 4-byte frame prefix announces; :class:`FrameError` unless in (0, limit]."""
    if len(prefix) != 4:
        raise FrameError(f"a frame size needs 4 bytes, got {len(prefix)}")
    (size,) = _SIZE.unpack(prefix)
    if size <= 0:
        raise FrameError(f"frame size {size}: expected a positive size")
    if size > limit:
        raise FrameError(f"frame size {size}: expected at most {limit} (not a Kafka client?)")
    return int(size)


def parse_request_header(frame: bytes) -> RequestHeader:
    """The header of a request frame (without its size prefix)."""
    if len(frame) < _HEADER.size:
        raise FrameError(f"request header: {len(frame)} byte(s), expected at least {_HEADER.size}")
    api_key, api_version, correlation_id, length = _HEADER.unpack_from(frame)
    client_id: str | None = None
    if length >= 0:
        end = _HEADER.size + length
        if len(frame) < end:
            raise FrameError(f"request header: client id of {length} byte(s) is cut short")
        client_id = frame[_HEADER.size : end].decode("utf-8", errors="replace")
    return RequestHeader(api_key, api_version, correlation_id, client_id)


def allowed_before_authentication(api_key: int) -> bool:
    """What Kafka serves on a SASL listener before authentication: the version check and
    the SASL exchange itself."""
    return api_key in (API_VERSIONS, SASL_HANDSHAKE, SASL_AUTHENTICATE)


def rewrite_addresses(api_key: int, api_version: int, frame: bytes, host: str, port: int) -> bytes:
    """``frame`` (a response without its size prefix) advertising ``host:port`` for every
    broker and coordinator, for the answers that carry addresses; others are returned as
    they are (the same object)."""
    if api_key == METADATA:
        from kafka.protocol.metadata import MetadataResponse

        meta = MetadataResponse.decode(frame, version=api_version, header=True)
        for broker in meta.brokers:
            broker.host, broker.port = host, port
        return bytes(meta.encode(header=True))
    if api_key == FIND_COORDINATOR:
        from kafka.protocol.metadata import FindCoordinatorResponse

        found = FindCoordinatorResponse.decode(frame, version=api_version, header=True)
        if api_version >= 4:
            for coordinator in found.coordinators:
                if coordinator.node_id >= 0:
                    coordinator.host, coordinator.port = host, port
        elif found.node_id >= 0:
            found.host, found.port = host, port
        return bytes(found.encode(header=True))
    if api_key == DESCRIBE_CLUSTER:
        from kafka.protocol.admin import DescribeClusterResponse

        cluster = DescribeClusterResponse.decode(frame, version=api_version, header=True)
        for broker in cluster.brokers:
            broker.host, broker.port = host, port
        return bytes(cluster.encode(header=True))
    return frame


# --- SASL (pure) --------------------------------------------------------------------------


def check_plain(token: bytes, users: Mapping[str, str]) -> str:
    """The user a PLAIN token (``authzid NUL authcid NUL passwd``) authenticates.

    An authorization id other than the user's own is refused (no impersonation).
    """
    parts = token.split(b"\x00")
    if len(parts) != 3:
        raise AuthenticationFailed("PLAIN: expected authzid NUL user NUL password")
    authzid, user, password = (p.decode("utf-8", errors="replace") for p in parts)
    if authzid and authzid != user:
        raise AuthenticationFailed(f"PLAIN: user {user!r} may not act as {authzid!r}")
    known = users.get(user)
    # compare_digest: as long for a wrong password as for a right one
    if known is None or not hmac.compare_digest(known.encode(), password.encode()):
        raise AuthenticationFailed(f"PLAIN: invalid user name or password for {user!r}")
    return user


def check_oauthbearer(message: bytes, users: Collection[str], *, now: float) -> str:
    """The principal an OAUTHBEARER initial client response (RFC 7628: ``n,[a=authzid],``
    then ``\\x01``-separated ``key=value`` pairs, ``auth=Bearer <token>`` among them)
    authenticates: its token an unsecured JWS whose ``sub`` is one of ``users`` and whose
    ``exp`` (seconds since the epoch) is after ``now``."""
    text = message.decode("utf-8", errors="replace")
    gs2, _, rest = text.partition("\x01")
    if not gs2.startswith("n,"):
        raise AuthenticationFailed("OAUTHBEARER: expected a GS2 header 'n,,' (no channel binding)")
    pairs = dict(p.split("=", 1) for p in rest.split("\x01") if "=" in p)
    auth = pairs.get("auth", "")
    if not auth.startswith("Bearer "):
        raise AuthenticationFailed("OAUTHBEARER: no 'auth=Bearer <token>' in the message")
    parts = auth.removeprefix("Bearer ").strip().split(".")
    if len(parts) != 3:
        raise AuthenticationFailed("OAUTHBEARER: a JWS has three dot-separated parts")
    try:
        header, claims = (json.loads(base64.urlsafe_b64decode(p + "==")) for p in parts[:2])
    except ValueError:
        raise AuthenticationFailed("OAUTHBEARER: a JWS part is not base64url JSON") from None
    if not isinstance(header, dict) or header.get("alg") != "none":
        raise AuthenticationFailed("OAUTHBEARER: expected an unsecured JWS (alg none)")
    if not isinstance(claims, dict) or not isinstance(claims.get("sub"), str):
        raise AuthenticationFailed("OAUTHBEARER: the token has no sub claim")
    expires = claims.get("exp")
    if not isinstance(expires, int | float):
        raise AuthenticationFailed("OAUTHBEARER: the token has no exp claim")
    principal = str(claims["sub"])
    if expires <= now:
        raise AuthenticationFailed(
            f"OAUTHBEARER: the token of {principal!r} expired {now - expires:.0f}s ago"
        )
    if principal not in users:
        raise AuthenticationFailed(f"OAUTHBEARER: unknown principal {principal!r}")
    return principal


@dataclass(frozen=True)
class ScramCredential:
    """What a SCRAM server stores for one user (RFC 5802 section 3): never the password."""

    salt: bytes
    iterations: int
    stored_key: bytes = field(repr=False)
    server_key: bytes = field(repr=False)

    @classmethod
    def derive(
        cls,
        password: str,
        *,
        mechanism: str,
        salt: bytes | None = None,
        iterations: int = SCRAM_ITERATIONS,
    ) -> ScramCredential:
        """SaltedPassword = Hi(password, salt, i); ClientKey = HMAC(SaltedPassword,
        "Client Key"); StoredKey = H(ClientKey); ServerKey = HMAC(SaltedPassword, "Server
        Key"). The password is used as given (no SASLprep: the tests' passwords are ASCII)."""
        name = _scram_hash(mechanism)
        salt = secrets.token_bytes(16) if salt is None else salt
        salted = hashlib.pbkdf2_hmac(name, password.encode("utf-8"), salt, iterations)
        client_key = hmac.digest(salted, b"Client Key", name)
        return cls(
            salt=salt,
            iterations=iterations,
            stored_key=hashlib.new(name, client_key).digest(),
            server_key=hmac.digest(salted, b"Server Key", name),
        )


def _scram_hash(mechanism: str) -> str:
    try:
        return _SCRAM_HASHES[mechanism]
    except KeyError:
        raise ValueError(
            f"SCRAM mechanism {mechanism!r}: expected one of {sorted(_SCRAM_HASHES)}"
        ) from None


def _attributes(message: str, what: str) -> list[tuple[str, str]]:
    """``a=1,b=2`` as ``[(a, 1), (b, 2)]``; every part must be ``letter=value``."""
    out: list[tuple[str, str]] = []
    for part in message.split(","):
        if len(part) < 2 or part[1] != "=" or not part[0].isalpha():
            raise AuthenticationFailed(f"SCRAM: malformed {what}")
        out.append((part[0], part[2:]))
    return out


def _user_name(escaped: str) -> str:
    """A SCRAM ``saslname``: ``=2C`` is ``,`` and ``=3D`` is ``=``; any other ``=`` is bad."""
    if "=" in escaped.replace("=2C", "").replace("=3D", ""):
        raise AuthenticationFailed("SCRAM: malformed user name")
    return escaped.replace("=2C", ",").replace("=3D", "=")


class ScramServer:
    """The server side of one SCRAM exchange (RFC 5802 section 5, without channel binding).

    ``first`` takes the client-first message and returns the server-first message,
    ``final`` takes the client-final message, checks the proof and returns the
    server-final message; :attr:`principal` is the user once ``final`` succeeded. Any
    failure raises :class:`AuthenticationFailed`, after which the exchange is over.
    """

    def __init__(
        self,
        mechanism: str,
        lookup: Callable[[str], ScramCredential | None],
        *,
        nonce: Callable[[], str] | None = None,
    ) -> None:
        self.mechanism = mechanism
        self._hash = _scram_hash(mechanism)
        self._lookup = lookup
        self._nonce = nonce or (lambda: base64.b64encode(secrets.token_bytes(18)).decode())
        self._user: str | None = None
        self._credential: ScramCredential | None = None
        self._client_first_bare = ""
        self._server_first = ""
        self._full_nonce = ""
        self.principal: str | None = None

    @property
    def started(self) -> bool:
        """The client-first message was taken (the next one is the client-final)."""
        return bool(self._server_first)

    def first(self, message: bytes) -> bytes:
        if self.started:
            raise AuthenticationFailed("SCRAM: a second client-first message")
        text = message.decode("utf-8", errors="replace")
        # gs2-header: "n" (no channel binding) or "y" (client could, server cannot), an
        # empty authzid (impersonation is refused), then the bare message.
        flag, sep, rest = text.partition(",")
        authzid, sep2, bare = rest.partition(",")
        if not sep or not sep2 or flag not in ("n", "y"):
            raise AuthenticationFailed("SCRAM: channel binding is not supported (gs2 flag)")
        if authzid:
            raise AuthenticationFailed("SCRAM: an authorization id is not supported")
        attrs = _attributes(bare, "client-first message")
        if len(attrs) < 2 or attrs[0][0] != "n" or attrs[1][0] != "r" or not attrs[1][1]:
            raise AuthenticationFailed("SCRAM: client-first message needs n= and r=")
        user = _user_name(attrs[0][1])
        credential = self._lookup(user)
        if credential is None:
            raise AuthenticationFailed(f"SCRAM: unknown user {user!r}")
        self._user, self._credential = user, credential
        self._client_first_bare = bare
        self._full_nonce = attrs[1][1] + self._nonce()
        salt = base64.b64encode(credential.salt).decode()
        self._server_first = f"r={self._full_nonce},s={salt},i={credential.iterations}"
        return self._server_first.encode()

    def final(self, message: bytes) -> bytes:
        credential = self._credential
        if credential is None:
            raise AuthenticationFailed("SCRAM: client-final message before client-first")
        self._credential = None  # one attempt per exchange
        text = message.decode("utf-8", errors="replace")
        without_proof, sep, proof_part = text.rpartition(",p=")
        if not sep:
            raise AuthenticationFailed("SCRAM: client-final message without a proof")
        attrs = dict(_attributes(without_proof, "client-final message"))
        # c= is base64 of the gs2 header; without channel binding "n,," or "y,,"
        if attrs.get("c") not in ("biws", "eSws"):
            raise AuthenticationFailed("SCRAM: channel binding data does not match")
        if attrs.get("r") != self._full_nonce:
            raise AuthenticationFailed("SCRAM: the nonce does not match the exchange's")
        try:
            proof = base64.b64decode(proof_part, validate=True)
        except ValueError:
            raise AuthenticationFailed("SCRAM: the proof is not base64") from None
        auth_message = f"{self._client_first_bare},{self._server_first},{without_proof}".encode()
        signature = hmac.digest(credential.stored_key, auth_message, self._hash)
        if len(proof) != len(signature):
            raise AuthenticationFailed("SCRAM: invalid proof")
        client_key = bytes(p ^ s for p, s in zip(proof, signature, strict=True))
        if not hmac.compare_digest(
            hashlib.new(self._hash, client_key).digest(), credential.stored_key
        ):
            raise AuthenticationFailed(f"SCRAM: invalid proof for user {self._user!r}")
        self.principal = self._user
        verifier = hmac.digest(credential.server_key, auth_message, self._hash)
        return b"v=" + base64.b64encode(verifier)


# --- TLS files ------------------------------------------------------------------------


@dataclass(frozen=True)
class TlsFiles:
    """A test CA and a server certificate (with its key) it signed, as PEM files."""

    ca: Path
    cert: Path
    key: Path


def make_tls_files(
    directory: Path, *, hosts: tuple[str, ...] = (LOOPBACK, "localhost")
) -> TlsFiles:
    """Write ``ca.pem``, ``server.pem`` and ``server-key.pem`` (mode 0600) for ``hosts``
    into ``directory``: a fresh CA valid for two days, a server certificate it signed."""
    import ipaddress

    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    valid = (now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=2))

    def name(cn: str) -> x509.Name:
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(name("gtbarrier test CA"))
        .issuer_name(name("gtbarrier test CA"))
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    alt_names: list[x509.GeneralName] = []
    for host in hosts:
        try:
            alt_names.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            alt_names.append(x509.DNSName(host))
    cert = (
        x509.CertificateBuilder()
        .subject_name(name(hosts[0]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(x509.SubjectAlternativeName(alt_names), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    files = TlsFiles(directory / "ca.pem", directory / "server.pem", directory / "server-key.pem")
    files.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files.key.touch(mode=0o600)
    files.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return files


def make_client_tls_files(directory: Path, *, name: str = "gtbarrier test client") -> TlsFiles:
    """Write ``ca.pem``, ``client.pem`` and ``client-key.pem`` (mode 0600) into
    ``directory``: a fresh CA valid for two days and a client certificate (``name``, for
    client authentication) it signed. ``.ca`` is what a server that requires client
    certificates trusts."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    directory.mkdir(parents=True, exist_ok=True)
    now = datetime.datetime.now(datetime.UTC)
    valid = (now - datetime.timedelta(minutes=5), now + datetime.timedelta(days=2))
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{name} CA")])
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    key = ec.generate_private_key(ec.SECP256R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)]))
        .issuer_name(ca.subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(valid[0])
        .not_valid_after(valid[1])
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False
        )
        .sign(ca_key, hashes.SHA256())
    )
    files = TlsFiles(directory / "ca.pem", directory / "client.pem", directory / "client-key.pem")
    files.ca.write_bytes(ca.public_bytes(serialization.Encoding.PEM))
    files.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    files.key.touch(mode=0o600)
    files.key.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return files


# --- the server -------------------------------------------------------------------------


@dataclass
class GatewayConfig:
    """One listener: where it forwards, TLS files, the SASL mechanism and its users."""

    upstream: tuple[str, int]
    port: int
    events: Path
    host: str = LOOPBACK
    tls: TlsFiles | None = None
    mechanism: str | None = None
    users: dict[str, str] = field(default_factory=dict, repr=False)


class Events:
    """The events file: one JSON object a line, flushed at once (tests read it live)."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = open(path, "a", encoding="utf-8")  # noqa: SIM115 - kept for the process

    def write(self, event: str, **fields: Any) -> None:
        self._file.write(json.dumps({"event": event, "t": round(time.time(), 3), **fields}) + "\n")
        self._file.flush()


async def _read_frame(reader: asyncio.StreamReader) -> bytes | None:
    """One frame without its size; None at a clean end of stream."""
    try:
        prefix = await reader.readexactly(4)
    except asyncio.IncompleteReadError as err:
        if err.partial:
            raise FrameError("the stream ended inside a frame size") from None
        return None
    return await reader.readexactly(frame_size(prefix))


def _send(writer: asyncio.StreamWriter, frame: bytes) -> None:
    writer.write(_SIZE.pack(len(frame)) + frame)


class Refused(Exception):
    """The connection is closed for the reason given (logged as a ``refused`` event)."""


@dataclass(frozen=True)
class Shared:
    """What every connection of the listener uses."""

    config: GatewayConfig
    events: Events
    scram: Mapping[str, ScramCredential]
    tls_context: ssl.SSLContext | None


class Connection:
    """One client connection: TLS, then SASL (if configured), then forwarding."""

    def __init__(
        self, shared: Shared, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.config = shared.config
        self.tls_context = shared.tls_context
        self.events = shared.events
        self.scram = shared.scram
        self.reader = reader
        self.writer = writer
        peer = writer.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        self.client_id: str | None = None
        self.principal: str | None = None
        self.mechanism: str | None = None
        self.apis: Counter[int] = Counter()
        self.upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None
        self.pending: dict[int, tuple[int, int]] = {}

    async def run(self) -> None:
        try:
            if self.tls_context is not None:
                await self._start_tls()
            if self.config.mechanism is not None:
                await self._authenticate()
            else:
                # TLS only: the handshake was the check; the event waits for the first
                # request, which names the client.
                self.principal = "ANONYMOUS"
            await self._forward()
        except Refused as err:
            self.events.write("refused", peer=self.peer, client_id=self.client_id, reason=str(err))
        except (FrameError, asyncio.IncompleteReadError, ConnectionError, ssl.SSLError) as err:
            self.events.write(
                "dropped", peer=self.peer, client_id=self.client_id, reason=type(err).__name__
            )
        finally:
            self.events.write(
                "closed",
                peer=self.peer,
                client_id=self.client_id,
                principal=self.principal,
                apis={str(k): v for k, v in sorted(self.apis.items())},
            )
            for writer in (self.writer, self.upstream[1] if self.upstream else None):
                if writer is not None:
                    with contextlib.suppress(Exception):
                        writer.close()

    async def _start_tls(self) -> None:
        assert self.tls_context is not None
        try:
            await self.writer.start_tls(self.tls_context, ssl_handshake_timeout=HANDSHAKE_TIMEOUT_S)
        except (ssl.SSLError, ConnectionError, TimeoutError, asyncio.IncompleteReadError) as err:
            # A plaintext Kafka request read as a TLS record ("wrong version number"), or a
            # client that does not trust the test CA (it aborts with an alert).
            reason = getattr(err, "reason", None) or type(err).__name__
            raise Refused(f"TLS handshake failed: {reason}") from None

    async def _upstream(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        if self.upstream is None:
            self.upstream = await asyncio.open_connection(*self.config.upstream)
        return self.upstream

    async def _round_trip(self, frame: bytes) -> bytes:
        """Forward one request and wait for its answer (only before forwarding starts)."""
        up_reader, up_writer = await self._upstream()
        _send(up_writer, frame)
        await up_writer.drain()
        answer = await _read_frame(up_reader)
        if answer is None:
            raise ConnectionError("the broker closed the connection")
        return answer

    async def _authenticate(self) -> None:
        mechanism = self.config.mechanism
        assert mechanism is not None
        scram: ScramServer | None = None
        while self.principal is None:
            frame = await _read_frame(self.reader)
            if frame is None:
                raise Refused("closed before authenticating")
            header = parse_request_header(frame)
            self.client_id = header.client_id
            self.apis[header.api_key] += 1
            if not allowed_before_authentication(header.api_key):
                raise Refused(
                    f"request api_key={header.api_key} before SASL authentication (expected "
                    "ApiVersions, SaslHandshake or SaslAuthenticate)"
                )
            if header.api_key == API_VERSIONS:
                _send(self.writer, await self._round_trip(frame))
            elif header.api_key == SASL_HANDSHAKE:
                scram = self._handshake(header, frame, mechanism)
            else:
                scram = self._sasl_step(header, frame, mechanism, scram)
            await self.writer.drain()

    def _handshake(self, header: RequestHeader, frame: bytes, mechanism: str) -> ScramServer | None:
        from kafka.protocol.sasl import SaslHandshakeRequest

        if header.api_version < 1:
            # v0 would carry the SASL tokens as raw frames; kafka-python uses v1
            self._answer_handshake(header, UNSUPPORTED_VERSION, mechanism)
            raise Refused("SaslHandshake v0 (raw SASL tokens) is not supported")
        request = SaslHandshakeRequest.decode(frame, version=header.api_version, header=True)
        if request.mechanism != mechanism:
            self._answer_handshake(header, UNSUPPORTED_SASL_MECHANISM, mechanism)
            raise Refused(f"SASL mechanism {request.mechanism!r}: expected {mechanism}")
        self._answer_handshake(header, 0, mechanism)
        self.mechanism = mechanism
        if mechanism in _SCRAM_HASHES:
            return ScramServer(mechanism, self.scram.get)
        return None

    def _answer_handshake(self, header: RequestHeader, error: int, mechanism: str) -> None:
        from kafka.protocol.sasl import SaslHandshakeResponse

        answer = SaslHandshakeResponse(
            error_code=error, mechanisms=[mechanism], version=max(0, min(1, header.api_version))
        )
        answer.with_header(correlation_id=header.correlation_id)
        _send(self.writer, bytes(answer.encode(header=True)))

    def _sasl_step(
        self, header: RequestHeader, frame: bytes, mechanism: str, scram: ScramServer | None
    ) -> ScramServer | None:
        from kafka.protocol.sasl import SaslAuthenticateRequest

        if self.mechanism is None:
            self._answer_authenticate(header, ILLEGAL_SASL_STATE, "SaslHandshake first", b"")
            raise Refused("SaslAuthenticate before SaslHandshake")
        request = SaslAuthenticateRequest.decode(frame, version=header.api_version, header=True)
        token = bytes(request.auth_bytes)
        try:
            if mechanism == "PLAIN":
                self.principal = check_plain(token, self.config.users)
                reply = b""
            elif mechanism == "OAUTHBEARER":
                self.principal = check_oauthbearer(token, self.config.users, now=time.time())
                reply = b""
            elif scram is not None and not scram.started:
                reply = scram.first(token)
            elif scram is not None:
                reply = scram.final(token)
                self.principal = scram.principal
            else:
                raise AuthenticationFailed("no SASL exchange in progress")
        except AuthenticationFailed as err:
            # Kafka's own wording, which names the mechanism and never the user's secret
            self._answer_authenticate(
                header,
                SASL_AUTHENTICATION_FAILED,
                "Authentication failed during authentication due to invalid credentials "
                f"with SASL mechanism {mechanism}",
                b"",
            )
            raise Refused(f"SASL {mechanism} authentication failed: {err}") from None
        self._answer_authenticate(header, 0, None, reply)
        if self.principal is not None:
            self.events.write(
                "authenticated",
                peer=self.peer,
                client_id=self.client_id,
                mechanism=mechanism,
                principal=self.principal,
                tls=self.config.tls is not None,
            )
        return scram

    def _answer_authenticate(
        self, header: RequestHeader, error: int, message: str | None, auth_bytes: bytes
    ) -> None:
        from kafka.protocol.sasl import SaslAuthenticateResponse

        answer = SaslAuthenticateResponse(
            error_code=error,
            error_message=message,
            auth_bytes=auth_bytes,
            session_lifetime_ms=0,  # no re-authentication (KIP-368)
            version=header.api_version,
        )
        answer.with_header(correlation_id=header.correlation_id)
        _send(self.writer, bytes(answer.encode(header=True)))

    async def _forward(self) -> None:
        up_reader, up_writer = await self._upstream()
        requests = asyncio.ensure_future(self._requests(up_writer))
        responses = asyncio.ensure_future(self._responses(up_reader))
        done, rest = await asyncio.wait({requests, responses}, return_when=asyncio.FIRST_COMPLETED)
        for task in rest:
            task.cancel()
        for task in done:
            task.result()  # a Refused or a connection error ends the connection, logged

    async def _requests(self, up_writer: asyncio.StreamWriter) -> None:
        while (frame := await _read_frame(self.reader)) is not None:
            header = parse_request_header(frame)
            if self.mechanism is None and not self.apis:
                self.events.write(
                    "authenticated",
                    peer=self.peer,
                    client_id=header.client_id,
                    mechanism="TLS",
                    principal=self.principal,
                    tls=True,
                )
            self.client_id = header.client_id or self.client_id
            if not self.apis[header.api_key]:
                # live, per connection: pooled consumers stay open past a test's checks
                self.events.write(
                    "request",
                    peer=self.peer,
                    client_id=header.client_id,
                    principal=self.principal,
                    api_key=header.api_key,
                )
            self.apis[header.api_key] += 1
            if header.api_key in (SASL_HANDSHAKE, SASL_AUTHENTICATE):
                raise Refused("SASL re-authentication is not supported")
            self.pending[header.correlation_id] = (header.api_key, header.api_version)
            _send(up_writer, frame)
            await up_writer.drain()

    async def _responses(self, up_reader: asyncio.StreamReader) -> None:
        while (frame := await _read_frame(up_reader)) is not None:
            (correlation_id,) = _SIZE.unpack_from(frame)
            api_key, api_version = self.pending.pop(correlation_id, (-1, -1))
            frame = rewrite_addresses(
                api_key, api_version, frame, self.config.host, self.config.port
            )
            _send(self.writer, frame)
            await self.writer.drain()


def _scram_credentials(config: GatewayConfig) -> dict[str, ScramCredential]:
    if config.mechanism not in _SCRAM_HASHES:
        return {}
    return {
        user: ScramCredential.derive(password, mechanism=config.mechanism)
        for user, password in config.users.items()
    }


async def serve(config: GatewayConfig) -> None:
    """Accept connections until the process is stopped."""
    context: ssl.SSLContext | None = None
    if config.tls is not None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(config.tls.cert, config.tls.key)
    shared = Shared(config, Events(config.events), _scram_credentials(config), context)
    events = shared.events

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await Connection(shared, reader, writer).run()

    server = await asyncio.start_server(handle, config.host, config.port, reuse_address=True)
    events.write(
        "listening",
        address=f"{config.host}:{config.port}",
        upstream=f"{config.upstream[0]}:{config.upstream[1]}",
        tls=config.tls is not None,
        mechanism=config.mechanism,
    )
    print(f"kafka gateway listening on {config.host}:{config.port}", flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.kafka_gateway", description=__doc__)
    parser.add_argument("--upstream", required=True, metavar="HOST:PORT")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--events", type=Path, required=True)
    parser.add_argument("--tls-cert", type=Path)
    parser.add_argument("--tls-key", type=Path)
    parser.add_argument("--tls-ca", type=Path)
    parser.add_argument("--sasl", choices=MECHANISMS)
    parser.add_argument("--users", type=Path, help='a JSON file {"user": "password", ...}')
    args = parser.parse_args(argv)
    host, _, port = args.upstream.rpartition(":")
    tls = None
    if args.tls_cert or args.tls_key:
        if not (args.tls_cert and args.tls_key):
            parser.error("--tls-cert and --tls-key go together")
        tls = TlsFiles(args.tls_ca or args.tls_cert, args.tls_cert, args.tls_key)
    users: dict[str, str] = {}
    if args.sasl:
        if args.users is None:
            parser.error("--sasl needs --users")
        users = {str(k): str(v) for k, v in json.loads(args.users.read_text()).items()}
    config = GatewayConfig(
        upstream=(host, int(port)),
        port=args.port,
        events=args.events,
        tls=tls,
        mechanism=args.sasl,
        users=users,
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(config))
    return 0


# --- the harness's server ---------------------------------------------------------------


class KafkaGateway(Server):
    """The gateway as a local process in front of ``upstream`` (a broker's ``host:port``).

    ``security_protocol`` is ``SSL`` (``tls`` only), ``SASL_SSL`` (``tls`` and
    ``mechanism``) or ``SASL_PLAINTEXT`` (``mechanism`` only). :meth:`client_settings` are
    the kafka-python settings a client needs here; :meth:`events` what the gateway saw.
    """

    NAME = "Kafka gateway (TLS/SASL)"
    ENV = "GTB_KAFKA_GATEWAY"  # never external: the tests need its events file
    START_TIMEOUT = 20.0

    def __init__(  # noqa: PLR0913 - keyword-only after the upstream, each named at the call
        self,
        workdir: Path,
        upstream: str,
        *,
        tls: TlsFiles | None = None,
        mechanism: str | None = None,
        user: str = PRINCIPAL,
        password: str | None = None,
    ) -> None:
        """``password``: the SASL user's (default: a random one)."""
        if tls is None and mechanism is None:
            raise ValueError("a gateway needs TLS, SASL or both")
        if mechanism is not None and mechanism not in MECHANISMS:
            raise ValueError(f"SASL mechanism {mechanism!r}: expected one of {MECHANISMS}")
        self.workdir = workdir
        self.upstream = upstream
        self.tls = tls
        self.mechanism = mechanism
        self.user = user
        self.password = secrets.token_urlsafe(18) if password is None else password
        self.events_path = workdir / "events.jsonl"
        self.users_path = workdir / "users.json"
        workdir.mkdir(parents=True, exist_ok=True)
        if mechanism is not None:
            self.users_path.touch(mode=0o600)
            self.users_path.write_text(json.dumps({user: self.password}))
        super().__init__(
            ManagedProcess(
                "kafka gateway",
                [],
                log_path=workdir / "gateway.log",
                cwd=REPO_ROOT,
                env=repo_env(),
            )
        )
        self._use_port(free_port())

    @classmethod
    def external_at(cls, address: str) -> KafkaGateway:
        raise NotImplementedError("the Kafka gateway is always local (its events file is read)")

    @property
    def address(self) -> str:
        return self.bootstrap

    @property
    def security_protocol(self) -> str:
        if self.mechanism is None:
            return "SSL"
        return "SASL_SSL" if self.tls is not None else "SASL_PLAINTEXT"

    def _use_port(self, port: int) -> None:
        self.port = port
        self.bootstrap = f"{LOOPBACK}:{port}"
        argv = [
            sys.executable,
            "-m",
            "harness.kafka_gateway",
            "--upstream",
            self.upstream,
            "--port",
            str(port),
            "--events",
            str(self.events_path),
        ]
        if self.tls is not None:
            argv += ["--tls-cert", str(self.tls.cert), "--tls-key", str(self.tls.key)]
            argv += ["--tls-ca", str(self.tls.ca)]
        if self.mechanism is not None:
            argv += ["--sasl", self.mechanism, "--users", str(self.users_path)]
        self._owned().argv = argv

    def ready(self) -> bool:
        """True once the gateway wrote its ``listening`` event for the current port (a
        TCP probe would show up in the events as a refused client)."""
        address = f"{LOOPBACK}:{self.port}"
        return any(e["event"] == "listening" and e.get("address") == address for e in self.events())

    def events(self, event: str | None = None) -> list[dict[str, Any]]:
        """Every event so far (of kind ``event`` if given), oldest first."""
        if not self.events_path.exists():
            return []
        found = []
        for line in self.events_path.read_text(encoding="utf-8").splitlines():
            with contextlib.suppress(ValueError):
                data = json.loads(line)
                if event is None or data.get("event") == event:
                    found.append(data)
        return found

    def requests_by(self, client_id: str) -> set[int]:
        """The api keys that authenticated connections of ``client_id`` forwarded."""
        return {
            int(e["api_key"]) for e in self.events("request") if e.get("client_id") == client_id
        }

    def client_settings(self, *, password: str | None = None) -> dict[str, Any]:
        """kafka-python settings for a client of this gateway (``password`` overrides the
        right one, for tests of a wrong one; OAUTHBEARER: a provider of valid tokens)."""
        settings: dict[str, Any] = {"security_protocol": self.security_protocol}
        if self.tls is not None:
            settings["ssl_cafile"] = str(self.tls.ca)
        if self.mechanism == "OAUTHBEARER":
            settings.update(sasl_mechanism=self.mechanism, sasl_oauth_token_provider=ValidTokens())
        elif self.mechanism is not None:
            settings.update(
                sasl_mechanism=self.mechanism,
                sasl_plain_username=self.user,
                sasl_plain_password=self.password if password is None else password,
            )
        return settings

    def options(self, prefix: str = "kafka.") -> dict[str, str]:
        """The settings as gtbarrier options under ``prefix`` (``kafka.`` for the source,
        ``consumer.kafka.`` for the sink's kafka consumer); OAUTHBEARER's token provider as
        its reference (:data:`harness.oauth_tokens.VALID_TOKEN`)."""
        options = {
            prefix + name.replace("_", "."): str(value)
            for name, value in self.client_settings().items()
        }
        if self.mechanism == "OAUTHBEARER":
            options[prefix + "sasl.oauth.token.provider"] = VALID_TOKEN
        return options


class ValidTokens(AbstractTokenProvider):  # type: ignore[misc]
    """Valid tokens of :data:`harness.oauth_tokens.PRINCIPAL`, for a kafka-python client."""

    def token(self) -> str:
        return valid_token()


if __name__ == "__main__":
    os.environ.setdefault("PYTHONUNBUFFERED", "1")
    raise SystemExit(main())
