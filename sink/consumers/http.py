"""``consumer=http``: POST each bundle to ``consumer.url``; a 2xx answer is the ack.

Request: ``POST {consumer.url}`` with the bundle's rows in ``gt`` order as an Arrow IPC
stream (``consumer.format=arrow``, ``application/vnd.apache.arrow.stream``) or JSON lines
(``jsonl``, ``application/x-ndjson``; binary values base64, timestamps ISO-8601), and the
headers ``X-Gtbarrier-Pipeline``, ``X-Gtbarrier-Bundle-Id``, ``X-Gtbarrier-Gt``,
``X-Gtbarrier-Rows``. The receiver must store the items and the bundle id in one
transaction before answering 2xx, and answer 2xx without storing again when it already
has that bundle id.

``GET {consumer.url}/last`` answers ``{"bundle_id": 7, "gt": 7}`` (or ``404`` / a null
``bundle_id`` when it has none). :mod:`gtbarrier.http_receiver` is a reference receiver.

A JSON line holds text: with ``jsonl`` a row whose strings are not valid UTF-8 cannot be
encoded, so :meth:`HttpKind.validate` refuses it before the bundle is delivered (it goes
to dead letters with ``errors.tolerance=all``); Arrow bodies carry the bytes as they are.

A refused connection or a 4xx/5xx answer means the bundle was not stored
(:class:`DeliveryFailed`); a timeout or a connection dropped after the request was sent
means it may have been (:class:`CommitStateUnknown`); the barrier retries the same bundle
either way and recovery asks ``/last``.

Security: ``consumer.http.token`` is sent as ``Authorization: Bearer <token>`` with every
request; it may be a secret reference (``${env:NAME}``, ``${file:/path}``), kept as such in
the settings and resolved where the client is made (:class:`HttpConsumer`), and a literal
one is left out of the settings' ``repr``. A token sent to an ``http://`` URL is logged as
a warning (it crosses the network in clear text), once per client. An ``https://``
receiver's certificate is checked against ``consumer.http.caFile``, else OpenSSL's
defaults (``SSL_CERT_FILE``, ``SSL_CERT_DIR``, the system's CAs). A 401 or 403 answer,
and a certificate that does not verify, are configuration errors (:class:`ConfigError`
naming the option, fatal): no retry of the same request can succeed.
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import io
import json
import logging
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any, Literal
from urllib.parse import urlparse

import pyarrow as pa

from sink.bundle import Bundle
from sink.consumers.base import Ack, Consumer, LastBundle
from sink.consumers.consumer_kind import ConsumerKind, ConsumerSettings, RowRejection, SinkView
from sink.consumers.row_checks import invalid_utf8
from sink.faults import FaultInjector
from sink.staging import Staging
from state.errors import CommitStateUnknown, ConfigError, DeliveryFailed
from state.option_table import ChoiceOption, StringOption
from state.options import Options
from state.secrets import has_reference, hide_in_logs, resolve

BodyFormat = Literal["arrow", "jsonl"]

URL = StringOption(name="consumer.url", required=True, doc="The endpoint bundles are POSTed to.")
FORMAT = ChoiceOption[BodyFormat](
    name="consumer.format",
    choices=("arrow", "jsonl"),
    default="arrow",
    doc="http body: `arrow` (Arrow IPC stream) or `jsonl`.",
)
TOKEN = StringOption(
    name="consumer.http.token",
    doc="http: a bearer token sent with every request (`Authorization: Bearer ...`); may be a "
    "secret reference (`${env:NAME}`, `${file:/path}`), resolved where the client is made. A "
    "401 or 403 answer stops the query (a configuration error, not retried).",
)
CA_FILE = StringOption(
    name="consumer.http.caFile",
    default_doc="`SSL_CERT_FILE` or the system's CAs",
    doc="http: a PEM file of the CA certificates that sign an `https://` receiver's "
    "certificate, read on the driver; a certificate that does not verify stops the query.",
)
WHERE = "barrier"

log = logging.getLogger(__name__)
HIDDEN = "<not shown: a token>"

NOT_UTF8 = "string not valid UTF-8, which a JSON line (consumer.format=jsonl) cannot hold"

CONTENT_TYPES = {"arrow": "application/vnd.apache.arrow.stream", "jsonl": "application/x-ndjson"}


def encode_arrow(tables: Iterator[pa.Table]) -> bytes:
    out = io.BytesIO()
    writer: pa.ipc.RecordBatchStreamWriter | None = None
    for table in tables:
        if writer is None:
            writer = pa.ipc.new_stream(out, table.schema)
        writer.write_table(table)
    if writer is not None:
        writer.close()
    return out.getvalue()


def _json_default(value: Any) -> Any:
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, dt.datetime | dt.date | dt.time):
        return value.isoformat()
    if isinstance(value, decimal.Decimal):
        return str(value)
    if isinstance(value, dt.timedelta):
        return value.total_seconds()
    raise TypeError(f"cannot encode {type(value).__name__} as JSON")


def encode_jsonl(tables: Iterator[pa.Table]) -> bytes:
    out = io.BytesIO()
    for table in tables:
        for row in table.to_pylist():
            out.write(json.dumps(row, default=_json_default, separators=(",", ":")).encode())
            out.write(b"\n")
    return out.getvalue()


@dataclass(frozen=True)
class HttpSettings(ConsumerSettings):
    """``consumer=http``: where bundles are POSTed and in which body format."""

    url: str
    """``http://`` or ``https://``, without a trailing slash."""
    format: BodyFormat = "arrow"
    token: str | None = field(default=None, repr=False)
    """``consumer.http.token`` as given: a secret reference stays one (resolved by
    :class:`HttpConsumer`); never in the ``repr``."""
    ca_file: str | None = None

    @property
    def shown_token(self) -> str | None:
        """The token for messages: a reference as written (it says where the token is, not
        what), a literal hidden, None when unset."""
        if self.token is None:
            return None
        return self.token if has_reference(self.token) else HIDDEN


def parse_settings(opts: Options) -> HttpSettings:
    """``consumer.format``, ``consumer.url`` (an http:// or https:// URL), the token and
    the CA file, checked (the token is resolved later, where the client is made)."""
    body_format = FORMAT.read(opts)
    url = URL.read_required(opts).rstrip("/")
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise opts.error(URL.name, "an http:// or https:// URL")
    return HttpSettings(
        url=url, format=body_format, token=TOKEN.read(opts), ca_file=CA_FILE.read(opts)
    )


def resolve_token(settings: HttpSettings) -> str | None:
    """The bearer token of ``settings``, its references resolved (:mod:`state.secrets`);
    raises :class:`ConfigError` naming ``consumer.http.token`` (never its value) when a
    reference cannot be resolved or the token cannot go in a header."""
    if settings.token is None:
        return None
    # hidden from log records, a literal too (a reference's secret is by resolve)
    token = hide_in_logs(resolve(settings.token, option=TOKEN.name, where=WHERE))
    if not token or any(c.isspace() or not c.isprintable() for c in token):
        raise ConfigError(
            TOKEN.name,
            settings.shown_token,
            "a bearer token: non-empty, without spaces, line breaks or control characters",
            where=WHERE,
        )
    return token


def check_ca_file(settings: HttpSettings) -> None:
    """``consumer.http.caFile``, when given, is a readable file here (where the client
    runs); raises :class:`ConfigError` naming it and the path."""
    path = settings.ca_file
    if path is not None and not (os.path.isfile(path) and os.access(path, os.R_OK)):
        raise ConfigError(
            CA_FILE.name,
            path,
            "a readable PEM file of CA certificates on the driver, which sends the bundles",
            where=WHERE,
        )


class HttpConsumer(Consumer):
    name = "http"

    def __init__(
        self, settings: HttpSettings, staging: Staging, faults: FaultInjector, *, ack_timeout: float
    ) -> None:
        super().__init__(staging, faults)
        self.settings = settings
        self.url = settings.url
        self.format = settings.format
        # The secret exists only here, in the client the commit process makes.
        token = resolve_token(settings)
        self._token = token
        self._auth = {} if token is None else {"Authorization": f"Bearer {token}"}
        if token is not None and urlparse(settings.url).scheme == "http":
            # not refused: a receiver on the same host or a private network may be fine;
            # the operator must know the token crosses the network readable
            log.warning(
                "consumer=http: %s is sent in clear text with every request to %s "
                "(http://): anyone on the network path can read and reuse it; use an "
                "https:// consumer.url",
                TOKEN.name,
                settings.url,
            )
        check_ca_file(settings)
        # urllib3 is imported where a consumer is made, not by every process that
        # imports the sink (Spark's data source lookup, planners, workers).
        import urllib3

        self.timeout = urllib3.Timeout(connect=min(5.0, ack_timeout), read=ack_timeout)
        # cert_reqs: an https:// receiver's certificate is always verified; ca_certs None
        # leaves urllib3 to OpenSSL's defaults (SSL_CERT_FILE, SSL_CERT_DIR, the system's).
        self.pool = urllib3.PoolManager(
            retries=False,
            timeout=self.timeout,
            cert_reqs="CERT_REQUIRED",
            ca_certs=settings.ca_file,
        )

    def describe(self) -> str:
        return f"http consumer {self.url}"

    def _scrub(self, text: str) -> str:
        """``text`` (a receiver's answer, an exception's message) without the token."""
        return text if self._token is None else text.replace(self._token, "***")

    def _refused(self, status: int, body: bytes, what: str) -> ConfigError:
        """A 401/403 answer: the token (or its absence) is wrong, which no retry cures."""
        said = self._scrub(body[:300].decode("utf-8", "replace")).strip()
        sent = "no token was sent" if self._token is None else "the token was refused"
        return ConfigError(
            TOKEN.name,
            self.settings.shown_token,
            f"a bearer token that {self.url} accepts: {what} was answered HTTP {status} "
            f"({sent}; the receiver said: {said or 'nothing'}). For the reference receiver, "
            "the value of its --token or --token-file",
            where=WHERE,
        )

    def _untrusted(self, err: Exception) -> ConfigError | None:
        """A certificate that does not verify, as the configuration error it is; None for
        any other TLS failure (a handshake cut short by a restarting receiver)."""
        text = self._scrub(str(err))
        if "CERTIFICATE_VERIFY_FAILED" not in text and "certificate verify failed" not in text:
            return None
        return ConfigError(
            CA_FILE.name,
            self.settings.ca_file,
            f"the CA that signed the TLS certificate of {self.url}: that certificate was not "
            f"trusted ({text}). Set consumer.http.caFile, or SSL_CERT_FILE, to a PEM file "
            "holding the CA that signed it",
            where=WHERE,
        )

    def deliver(self, bundle: Bundle, *, redelivery: bool = False) -> Ack:
        import urllib3

        tables = bundle.tables(self.staging)
        body = encode_arrow(tables) if self.format == "arrow" else encode_jsonl(tables)
        headers = {
            "Content-Type": CONTENT_TYPES[self.format],
            "X-Gtbarrier-Pipeline": bundle.pipeline_id,
            "X-Gtbarrier-Bundle-Id": str(bundle.bundle_id),
            "X-Gtbarrier-Gt": str(bundle.gt),
            "X-Gtbarrier-Rows": str(bundle.rows),
            **self._auth,
        }
        try:
            resp = self.pool.request("POST", self.url, body=body, headers=headers)
        except urllib3.exceptions.SSLError as err:
            # refused in the handshake, before the request was sent: not stored
            untrusted = self._untrusted(err)
            if untrusted is not None:
                raise untrusted from None
            raise DeliveryFailed(f"{self.describe()}: TLS failed: {self._scrub(str(err))}") from err
        except urllib3.exceptions.NewConnectionError as err:
            raise DeliveryFailed(f"{self.describe()}: cannot connect: {err}") from err
        except urllib3.exceptions.ConnectTimeoutError as err:
            raise DeliveryFailed(f"{self.describe()}: connect timed out: {err}") from err
        except urllib3.exceptions.HTTPError as err:
            raise CommitStateUnknown(
                f"{self.describe()}: bundle {bundle.bundle_id} was sent but no answer arrived "
                f"({type(err).__name__}: {err}); it may have been stored"
            ) from err
        self.faults.at("after_deliver", bundle.bundle_id)
        if resp.status in (401, 403):
            raise self._refused(resp.status, resp.data, f"POST of bundle {bundle.bundle_id}")
        if not 200 <= resp.status < 300:
            text = self._scrub(resp.data[:500].decode("utf-8", "replace"))
            raise DeliveryFailed(
                f"{self.describe()}: bundle {bundle.bundle_id} refused with HTTP {resp.status}: "
                f"{text}"
            )
        return Ack(bundle.bundle_id, bundle.rows, driver_bytes=len(body))

    def last_bundle(self) -> LastBundle | None:
        import urllib3

        url = f"{self.url}/last"
        try:
            resp = self.pool.request("GET", url, headers=self._auth)
        except urllib3.exceptions.SSLError as err:
            untrusted = self._untrusted(err)
            if untrusted is not None:
                raise untrusted from None
            raise DeliveryFailed(f"{self.describe()}: GET {url} failed: {err}") from err
        except urllib3.exceptions.HTTPError as err:
            raise DeliveryFailed(f"{self.describe()}: GET {url} failed: {err}") from err
        if resp.status in (401, 403):
            raise self._refused(resp.status, resp.data, f"GET {url}")
        if resp.status == 404:
            return None
        if resp.status != 200:
            raise DeliveryFailed(f"{self.describe()}: GET {url} answered HTTP {resp.status}")
        rec = json.loads(resp.data)
        if rec.get("bundle_id") is None:
            return None
        return LastBundle(int(rec["bundle_id"]), int(rec.get("gt", rec["bundle_id"])))

    def close(self) -> None:
        self.pool.clear()


class HttpKind(ConsumerKind[HttpSettings]):
    """``consumer=http``: parts staged in the state store, each bundle POSTed as one body."""

    settings_type = HttpSettings
    specs = (URL, FORMAT, TOKEN, CA_FILE)

    def parse(self, opts: Options) -> HttpSettings:
        return parse_settings(opts)

    def validate(self, settings: HttpSettings, table: pa.Table) -> list[RowRejection]:
        """With ``jsonl`` bodies: rows with strings that are not valid UTF-8."""
        if settings.format != "jsonl":
            return []
        return invalid_utf8(table, NOT_UTF8)

    def open_consumer(
        self, options: SinkView, staging: Staging, faults: FaultInjector
    ) -> HttpConsumer:
        return HttpConsumer(
            self.settings(options), staging, faults, ack_timeout=options.ack_timeout
        )


HTTP = HttpKind()
