"""Who may scrape a metrics endpoint: TLS, client certificates and basic authentication.

Kept apart from :mod:`state.metrics.server` (which needs ``prometheus_client``,
an optional extra) so that the coordinator's configuration checks these settings whether
or not the extra is installed.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import logging
import ssl
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from state.errors import ConfigError
from state.secrets import has_reference, resolve_secret

if TYPE_CHECKING:
    from wsgiref.types import StartResponse, WSGIApplication, WSGIEnvironment

log = logging.getLogger("gtbarrier.metrics")

DEFAULT_ADDRESS = "127.0.0.1"
"""Where an endpoint listens unless told otherwise: this host only."""
REALM = "gtbarrier metrics"


@dataclass(frozen=True)
class AccessNames:
    """How a component names the access settings in its errors."""

    tls_cert: str
    tls_key: str
    tls_client_ca: str
    basic_auth: str
    where: str


COORDINATOR_NAMES = AccessNames(
    "metrics_tls_cert",
    "metrics_tls_key",
    "metrics_tls_client_ca",
    "metrics_basic_auth",
    "SnapshotCoordinator",
)
EXPORTER_NAMES = AccessNames("--tls-cert", "--tls-key", "--tls-client-ca", "--basic-auth", "")
_BASIC_AUTH_FORM = "'user:password' (the password may be ${env:NAME} or ${file:/path})"


@dataclass(frozen=True)
class MetricsAccess:
    """Who may scrape: HTTPS with ``tls_cert`` and ``tls_key`` (PEM files), client
    certificates signed by ``tls_client_ca`` required when it is given, and basic
    authentication with ``basic_auth`` (``user:password``, the password a value or a
    secret reference resolved when the server starts, never shown). All unset: plain
    HTTP, anyone who reaches the address."""

    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    basic_auth: str | None = field(default=None, repr=False)
    names: AccessNames = COORDINATOR_NAMES

    @classmethod
    def parse(
        cls,
        *,
        tls_cert: str | None = None,
        tls_key: str | None = None,
        tls_client_ca: str | None = None,
        basic_auth: str | None = None,
        names: AccessNames = COORDINATOR_NAMES,
    ) -> MetricsAccess:
        """Check the settings together; :class:`ConfigError` names the first bad one
        (a ``basic_auth`` value is never shown, only a reference in it)."""
        for name, value in (
            (names.tls_cert, tls_cert),
            (names.tls_key, tls_key),
            (names.tls_client_ca, tls_client_ca),
        ):
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise ConfigError(name, value, "a path to a PEM file or None", where=names.where)
        if (tls_cert is None) != (tls_key is None):
            missing = names.tls_key if tls_key is None else names.tls_cert
            raise ConfigError(
                missing,
                None,
                f"{names.tls_cert} and {names.tls_key} together: a certificate and its key",
                where=names.where,
            )
        if tls_client_ca is not None and tls_cert is None:
            raise ConfigError(
                names.tls_cert,
                None,
                f"a server certificate: client certificates ({names.tls_client_ca}) need TLS",
                where=names.where,
            )
        if basic_auth is not None:
            user, sep, password = basic_auth.partition(":") if isinstance(basic_auth, str) else ""
            if not sep or not user or not password or any(c.isspace() for c in user):
                raise ConfigError(
                    names.basic_auth, _shown(basic_auth), _BASIC_AUTH_FORM, where=names.where
                )
        return cls(tls_cert, tls_key, tls_client_ca, basic_auth, names)

    @property
    def tls(self) -> bool:
        return self.tls_cert is not None

    def ssl_context(self) -> ssl.SSLContext | None:
        """The server's TLS context (None without TLS); :class:`ConfigError` naming the
        file's setting when a file cannot be loaded."""
        if self.tls_cert is None or self.tls_key is None:
            return None
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(self.tls_cert, self.tls_key)
        except (OSError, ssl.SSLError) as err:
            raise ConfigError(
                self.names.tls_cert,
                self.tls_cert,
                f"a PEM certificate whose key is {self.tls_key}, both readable by this "
                f"process ({type(err).__name__}: {err})",
                where=self.names.where,
            ) from None
        if self.tls_client_ca is not None:
            try:
                context.load_verify_locations(cafile=self.tls_client_ca)
            except (OSError, ssl.SSLError) as err:
                raise ConfigError(
                    self.names.tls_client_ca,
                    self.tls_client_ca,
                    f"a PEM file of CA certificates readable by this process "
                    f"({type(err).__name__}: {err})",
                    where=self.names.where,
                ) from None
            context.verify_mode = ssl.CERT_REQUIRED
        return context

    def credentials(self) -> tuple[str, str] | None:
        """The user and the password, its reference resolved (and hidden from logs)."""
        if self.basic_auth is None:
            return None
        user, _, password = self.basic_auth.partition(":")
        secret = resolve_secret(password, option=self.names.basic_auth, where=self.names.where)
        if not secret:
            raise ConfigError(
                self.names.basic_auth,
                _shown(self.basic_auth),
                "a non-empty password",
                where=self.names.where,
            )
        return user, secret


def _shown(basic_auth: object) -> str:
    """A ``basic_auth`` value for messages: the user, and the password only if it is a
    reference (it says where the password is, not what)."""
    if not isinstance(basic_auth, str) or ":" not in basic_auth:
        return "<not shown>"
    user, _, password = basic_auth.partition(":")
    return f"{user}:{password if has_reference(password) else '<not shown>'}"


def _digest(value: bytes) -> bytes:
    # equal lengths for compare_digest: the time taken tells nothing of the length
    return hashlib.sha256(value).digest()


def basic_auth_app(app: WSGIApplication, user: str, password: str) -> WSGIApplication:
    """``app`` behind basic authentication: a request without ``user`` and ``password``
    is answered 401 with ``WWW-Authenticate: Basic`` and logged (client, never what it
    sent)."""
    expected_user, expected_password = _digest(user.encode()), _digest(password.encode())

    def guarded(environ: WSGIEnvironment, start_response: StartResponse) -> Iterable[bytes]:
        given = str(environ.get("HTTP_AUTHORIZATION", ""))
        scheme, _, encoded = given.partition(" ")
        accepted = False
        if scheme.lower() == "basic":
            try:
                decoded = base64.b64decode(encoded.strip(), validate=True)
            except (binascii.Error, ValueError):
                decoded = b""
            name, sep, secret = decoded.partition(b":")
            user_ok = hmac.compare_digest(_digest(name), expected_user)
            password_ok = hmac.compare_digest(_digest(secret), expected_password)
            accepted = bool(sep) and user_ok and password_ok
        if accepted:
            return app(environ, start_response)
        log.warning(
            "gtbarrier metrics: refused a scrape from %s: %s (HTTP 401)",
            environ.get("REMOTE_ADDR", "?"),
            "no basic credentials" if not given else "credentials that are not accepted",
        )
        start_response(
            "401 Unauthorized",
            [
                ("WWW-Authenticate", f'Basic realm="{REALM}", charset="UTF-8"'),
                ("Content-Type", "text/plain; charset=utf-8"),
            ],
        )
        return [b"basic authentication required\n"]

    return guarded
