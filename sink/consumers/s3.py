"""``consumer=s3``: the file consumer's layout under an ``s3://bucket/prefix``.

::

    <prefix>/bundle-000000000007.parquet   the items of bundle 7
    <prefix>/_last_bundle.json             the pointer, replaced by one PUT (atomic on S3)
    <prefix>/_staging/...                  parts written by the write tasks (hidden)

Objects go through the state layer's S3 client (:class:`state.stores.s3_store.S3Store`: the same
``s3.*`` options, retries and error mapping as ``state.uri``). Write tasks upload their
parts under ``_staging/``; delivery of a single-part bundle is a server-side
``CopyObject`` to its final name, so no item bytes pass through the driver. A bundle of
several parts is stitched server-side when every part is at least 5 MiB (S3's smallest
multipart part): ``UploadPartCopy`` of each part's body, then the new Parquet footer as
the last part; smaller parts are combined on the driver (their bytes are counted in the
ack): fetched concurrently and stitched in memory the same way (no page decoded), or
merged with pyarrow when their ``gt`` ranges overlap. A bundle object appears complete or
not at all (S3 PUT/COPY are atomic), so readers that skip ``_``/``.`` names see only
complete bundles.

``consumer.s3.layout=parts`` trades that atomicity for never moving item bytes through
the driver: a bundle of several parts becomes the objects ``bundle-<k>-00000.parquet``,
``bundle-<k>-00001.parquet``... (names still sort in delivery order), each a server-side
copy; readers that need whole bundles read the objects of bundles up to
``_last_bundle.json``.
"""

from __future__ import annotations

import io
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal

import pyarrow as pa
import pyarrow.parquet as pq

from sink.bundle import Bundle
from sink.consumers.base import POINTER, Ack, BundlePointer, Consumer, LastBundle
from sink.consumers.consumer_kind import ConsumerKind, ConsumerSettings, SinkView
from sink.consumers.file import CONSUMER_PATH, bundle_file_name
from sink.faults import FaultInjector
from sink.parquet_concat import (
    MAGIC,
    TAIL,
    NotStitchable,
    PartLayout,
    merge_tables,
    parse_tail,
    stitch_bytes,
    stitched_footer,
)
from sink.staging import Staging, StoreStaging
from state.errors import ConfigError, StateError, StoreConfigError
from state.option_table import ChoiceOption
from state.options import Options
from state.records.codec import decode
from state.stores import StateStore, StoreConfig, canonical_uri, is_s3_uri, open_store
from state.stores.state_store import S3Settings

if TYPE_CHECKING:
    from mypy_boto3_s3.type_defs import CompletedPartTypeDef

    from state.stores.s3_store import S3Store

S3Layout = Literal["bundle", "parts"]

S3_LAYOUT = ChoiceOption[S3Layout](
    name="consumer.s3.layout",
    choices=("bundle", "parts"),
    default="bundle",
    doc="s3: `bundle` (one object per bundle) or `parts` (one object per staged part: no "
    "item bytes through the driver, but readers may see part of a bundle being promoted).",
)

MIN_PART_SIZE = 5 * 1024 * 1024
"""S3's smallest multipart-upload part (all parts but the last)."""
PARALLEL_READS = 8
"""Staged parts fetched at once when a bundle is combined on the driver."""


def part_object_name(epoch: int, index: int) -> str:
    """With ``consumer.s3.layout=parts``: the ``index``-th object of bundle ``epoch``."""
    return f"bundle-{epoch:012d}-{index:05d}.parquet"


class S3PrefixStaging(StoreStaging):
    """Parts under ``<consumer.path>/_staging/``; store errors name ``consumer.path``."""

    def __init__(self, store: S3Store, consumer_path: str) -> None:
        super().__init__(store)
        self.s3 = store
        self.consumer_path = consumer_path

    def close(self) -> None:
        self.s3.close()

    def write_part(self, location: str, table: pa.Table) -> int:
        try:
            return super().write_part(location, table)
        except StoreConfigError as err:
            raise ConfigError(
                "consumer.path",
                self.consumer_path,
                f"a writable S3 prefix: {err}",
                where="barrier",
            ) from err


@dataclass(frozen=True)
class S3PrefixSettings(ConsumerSettings):
    """``consumer=s3``: the prefix bundles go to and how a bundle is laid out there."""

    path: str
    """``s3://bucket/prefix``, without a trailing slash."""
    layout: S3Layout = "bundle"


def parse_prefix(opts: Options) -> str:
    """``consumer.path`` for ``consumer=s3``: ``s3://bucket/prefix`` (``s3a://`` given is
    returned as ``s3://``)."""
    path = CONSUMER_PATH.read_required(opts)
    if not is_s3_uri(path):
        raise opts.error(CONSUMER_PATH.name, "s3://bucket/prefix (or s3a://) for consumer=s3")
    return canonical_uri(path).rstrip("/")


def s3_staging(settings: S3PrefixSettings, s3: S3Settings) -> S3PrefixStaging:
    """The staging area under ``consumer.path``, on the process's shared store for it
    (:func:`~state.stores.open_store`: one boto3 client per worker, not per task or
    commit); ``s3`` are the sink's ``s3.*`` options (shared with ``state.uri``)."""
    # botocore comes with the store, where parts are staged: not with the sink's import
    from state.stores.s3_store import S3Store

    store = open_store(StoreConfig(uri=settings.path, s3=s3))
    assert isinstance(store, S3Store)
    return S3PrefixStaging(store, settings.path)


class S3Consumer(Consumer):
    name = "s3"

    def __init__(self, settings: S3PrefixSettings, staging: Any, faults: FaultInjector) -> None:
        assert isinstance(staging, S3PrefixStaging)
        super().__init__(staging, faults)
        self.store: S3Store = staging.s3
        self.path = staging.consumer_path
        self.layout = settings.layout

    def describe(self) -> str:
        return f"s3 consumer {self.path}"

    def deliver(self, bundle: Bundle, *, redelivery: bool = False) -> Ack:
        name = bundle_file_name(bundle.epoch)
        driver_bytes = 0
        if self.layout == "parts" and len(bundle.parts) > 1:
            name = self._promote_parts(bundle, redelivery)
        elif not (redelivery and self._exists(name)):
            driver_bytes = self._promote(bundle, name, redelivery)
        self.faults.at("after_deliver", bundle.bundle_id)
        current = self.last_bundle() if redelivery else None
        if current is None or current.bundle_id < bundle.bundle_id:
            self.store.put(POINTER, BundlePointer.of(bundle, name).to_bytes())
        return Ack(bundle.bundle_id, bundle.rows, driver_bytes)

    def _promote(self, bundle: Bundle, name: str, redelivery: bool) -> int:
        """Make the bundle's object; the item bytes that went through this process."""
        if len(bundle.parts) == 1:
            self._copy(bundle.parts[0].location, name, bundle)
            return 0
        # A part's body is shorter than the part, so one part under S3's smallest multipart
        # part rules stitching out without reading any footer.
        if bundle.ordered and all(p.size >= MIN_PART_SIZE for p in bundle.parts):
            try:
                layouts = [self._layout(p.location) for p in bundle.parts]
                footer = stitched_footer(layouts)
            except NotStitchable:
                layouts = []
            if layouts and all(
                (lay.body_end if i == 0 else lay.body_len) >= MIN_PART_SIZE
                for i, lay in enumerate(layouts)
            ):
                self._multipart_copy(bundle, name, layouts, footer)
                return 0
        parts = self._read_parts(bundle)
        body = None
        if bundle.ordered:
            try:
                body = stitch_bytes(parts)  # no page decoded: the bodies behind a new footer
            except NotStitchable:
                body = None
        if body is None:
            tables = [pq.read_table(pa.BufferReader(data)) for data in parts]
            out = io.BytesIO()
            pq.write_table(merge_tables(bundle, tables), out)
            body = out.getvalue()
        self.store.put(name, body)
        return bundle.size + len(body)

    def _read_parts(self, bundle: Bundle) -> list[bytes]:
        """The bundle's staged parts, in its order, fetched concurrently (the client is
        thread-safe): a commit waits for about one GET, not one per part."""
        locations = [p.location for p in bundle.parts]

        def fetch(location: str) -> bytes:
            return self.store.get(location).data

        if len(locations) == 1:
            return [fetch(locations[0])]
        with ThreadPoolExecutor(max_workers=min(PARALLEL_READS, len(locations))) as pool:
            return list(pool.map(fetch, locations))

    def _promote_parts(self, bundle: Bundle, redelivery: bool) -> str:
        """``consumer.s3.layout=parts``: each staged part becomes ``bundle-<k>-<i>.parquet``
        by a server-side copy, in delivery order; the pointer, written after the last one,
        is what makes the bundle complete. The name of the first object is returned."""
        names = [part_object_name(bundle.epoch, i) for i in range(len(bundle.parts))]
        for part, name in zip(bundle.parts, names, strict=True):
            if not (redelivery and self._exists(name)):
                self._copy(part.location, name, bundle)
        return names[0]

    def _layout(self, location: str) -> PartLayout:
        """A staged part's footer, by two ranged GETs (no item bytes)."""
        key = self._key(location)

        def attempt() -> PartLayout:
            try:
                head = self.store.client.get_object(
                    Bucket=self.store.bucket, Key=key, Range=f"bytes=-{TAIL}"
                )
                size = int(head["ContentRange"].rsplit("/", 1)[1])
                length = parse_tail(size, head["Body"].read())
                start = size - TAIL - length
                resp = self.store.client.get_object(
                    Bucket=self.store.bucket, Key=key, Range=f"bytes={start}-{size - TAIL - 1}"
                )
                return PartLayout(size, start, resp["Body"].read())
            except NotStitchable:
                raise
            except Exception as err:
                raise self.store.translate_error(err, location) from err

        return self.store.retry(attempt)

    def _multipart_copy(
        self, bundle: Bundle, name: str, layouts: list[PartLayout], footer: bytes
    ) -> None:
        """Assemble the stitched object server-side: each part's body by UploadPartCopy,
        then the new footer as the last (small) part."""
        client, bucket, key = self.store.client, self.store.bucket, self._key(name)
        upload = client.create_multipart_upload(Bucket=bucket, Key=key)["UploadId"]
        try:
            done: list[CompletedPartTypeDef] = []
            for i, (part, lay) in enumerate(zip(bundle.parts, layouts, strict=True)):
                start = 0 if i == 0 else len(MAGIC)
                copied = client.upload_part_copy(
                    Bucket=bucket,
                    Key=key,
                    UploadId=upload,
                    PartNumber=i + 1,
                    CopySource={"Bucket": bucket, "Key": self._key(part.location)},
                    CopySourceRange=f"bytes={start}-{lay.body_end - 1}",
                )
                done.append({"PartNumber": i + 1, "ETag": copied["CopyPartResult"]["ETag"]})
            last = len(layouts) + 1
            uploaded = client.upload_part(
                Bucket=bucket, Key=key, UploadId=upload, PartNumber=last, Body=footer
            )
            done.append({"PartNumber": last, "ETag": uploaded["ETag"]})
            client.complete_multipart_upload(
                Bucket=bucket, Key=key, UploadId=upload, MultipartUpload={"Parts": done}
            )
        except Exception as err:
            client.abort_multipart_upload(Bucket=bucket, Key=key, UploadId=upload)
            raise self.store.translate_error(err, name) from err

    def _copy(self, location: str, name: str, bundle: Bundle) -> None:
        """Server-side copy of a staged part to its final name (no bytes through here)."""
        src = self._key(location)

        def attempt() -> None:
            try:
                self.store.client.copy_object(
                    Bucket=self.store.bucket,
                    Key=self._key(name),
                    CopySource={"Bucket": self.store.bucket, "Key": src},
                )
            except Exception as err:
                if _code(err) in ("NoSuchKey", "404"):
                    raise StateError(
                        f"{self.describe()}: bundle {bundle.bundle_id} is not in {name} and its "
                        f"staged part {location} is gone; the bundle cannot be delivered"
                    ) from err
                raise self.store.translate_error(err, name) from err

        self.store.retry(attempt)

    def _exists(self, name: str) -> bool:
        def attempt() -> bool:
            try:
                self.store.client.head_object(Bucket=self.store.bucket, Key=self._key(name))
            except Exception as err:
                if _code(err) in ("NoSuchKey", "404", "NotFound"):
                    return False
                raise self.store.translate_error(err, name) from err
            return True

        return self.store.retry(attempt)

    def _key(self, location: str) -> str:
        return f"{self.store.prefix}/{location}" if self.store.prefix else location

    def last_bundle(self) -> LastBundle | None:
        hit = self.store.get_or_none(POINTER)
        if hit is None:
            return None
        return decode(hit.data, BundlePointer.from_json, f"{self.store.uri}/{POINTER}").last_bundle

    def close(self) -> None:
        self.store.close()


def _code(err: Exception) -> str | None:
    response = getattr(err, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", "")) or None
    return None


class S3PrefixKind(ConsumerKind[S3PrefixSettings]):
    """``consumer=s3``: parts staged under the prefix, promoted by server-side copies."""

    settings_type = S3PrefixSettings
    specs = (CONSUMER_PATH, S3_LAYOUT)

    def parse(self, opts: Options) -> S3PrefixSettings:
        return S3PrefixSettings(path=parse_prefix(opts), layout=S3_LAYOUT.read(opts))

    def open_staging(self, options: SinkView, store: StateStore) -> S3PrefixStaging:
        return s3_staging(self.settings(options), options.store.s3)

    def open_consumer(
        self, options: SinkView, staging: Staging, faults: FaultInjector
    ) -> S3Consumer:
        return S3Consumer(self.settings(options), staging, faults)

    def consumer_path(self, options: SinkView) -> str:
        return self.settings(options).path


S3 = S3PrefixKind()
