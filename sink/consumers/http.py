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
"""

from __future__ import annotations

import base64
import datetime as dt
import decimal
import io
import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal
from urllib.parse import urlparse

import pyarrow as pa
import urllib3

from sink.bundle import Bundle
from sink.consumers.base import Ack, Consumer, LastBundle
from sink.consumers.consumer_kind import ConsumerKind, ConsumerSettings, RowRejection, SinkView
from sink.consumers.row_checks import invalid_utf8
from sink.faults import FaultInjector
from sink.staging import Staging
from state.errors import CommitStateUnknown, DeliveryFailed
from state.option_table import ChoiceOption, StringOption
from state.options import Options

BodyFormat = Literal["arrow", "jsonl"]

URL = StringOption(name="consumer.url", required=True, doc="The endpoint bundles are POSTed to.")
FORMAT = ChoiceOption[BodyFormat](
    name="consumer.format",
    choices=("arrow", "jsonl"),
    default="arrow",
    doc="http body: `arrow` (Arrow IPC stream) or `jsonl`.",
)

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


def parse_settings(opts: Options) -> HttpSettings:
    """``consumer.format`` and ``consumer.url`` (an http:// or https:// URL), checked."""
    body_format = FORMAT.read(opts)
    url = URL.read_required(opts).rstrip("/")
    parsed = urlparse(url)
    if parsed.scheme not in ("http", "https") or not parsed.netloc:
        raise opts.error(URL.name, "an http:// or https:// URL")
    return HttpSettings(url=url, format=body_format)


class HttpConsumer(Consumer):
    name = "http"

    def __init__(
        self, settings: HttpSettings, staging: Staging, faults: FaultInjector, *, ack_timeout: float
    ) -> None:
        super().__init__(staging, faults)
        self.url = settings.url
        self.format = settings.format
        self.timeout = urllib3.Timeout(connect=min(5.0, ack_timeout), read=ack_timeout)
        self.pool = urllib3.PoolManager(retries=False, timeout=self.timeout)

    def describe(self) -> str:
        return f"http consumer {self.url}"

    def deliver(self, bundle: Bundle, *, redelivery: bool = False) -> Ack:
        tables = bundle.tables(self.staging)
        body = encode_arrow(tables) if self.format == "arrow" else encode_jsonl(tables)
        headers = {
            "Content-Type": CONTENT_TYPES[self.format],
            "X-Gtbarrier-Pipeline": bundle.pipeline_id,
            "X-Gtbarrier-Bundle-Id": str(bundle.bundle_id),
            "X-Gtbarrier-Gt": str(bundle.gt),
            "X-Gtbarrier-Rows": str(bundle.rows),
        }
        try:
            resp = self.pool.request("POST", self.url, body=body, headers=headers)
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
        if not 200 <= resp.status < 300:
            text = resp.data[:500].decode("utf-8", "replace")
            raise DeliveryFailed(
                f"{self.describe()}: bundle {bundle.bundle_id} refused with HTTP {resp.status}: "
                f"{text}"
            )
        return Ack(bundle.bundle_id, bundle.rows, driver_bytes=len(body))

    def last_bundle(self) -> LastBundle | None:
        url = f"{self.url}/last"
        try:
            resp = self.pool.request("GET", url)
        except urllib3.exceptions.HTTPError as err:
            raise DeliveryFailed(f"{self.describe()}: GET {url} failed: {err}") from err
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
    specs = (URL, FORMAT)

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
