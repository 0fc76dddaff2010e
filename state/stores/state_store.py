"""The state store contract: :class:`StateStore`, its configuration and its options.

A store is a flat map from ``/``-separated keys to bytes, rooted at a URI:
``memory://name``, ``file:///abs/path``, ``s3://bucket/prefix`` (``s3a://``, Hadoop's
name for S3, is the same store: :func:`canonical_uri`), ``gs://bucket/prefix`` (Google
Cloud Storage) or ``az://container/prefix`` (Azure Blob Storage). Every value carries an
opaque *version* (an ETag on S3 and Azure, a generation on GCS, a content token on files)
that changes on every write. Two operations are conditional and are what makes two
drivers safe:

* :meth:`StateStore.create` writes only if the key is absent (S3 and Azure
  ``If-None-Match: *``, GCS ``ifGenerationMatch=0``);
* :meth:`StateStore.compare_and_swap` writes only if the key still has the version the
  caller read (S3 and Azure ``If-Match``, GCS ``ifGenerationMatch=<generation>``).

Stores hold configuration only until first use; clients (boto3) are created lazily and
are dropped when a store is pickled, so a :class:`StoreConfig` or even a store may
travel to executors. Executors open their own store with
:func:`state.stores.open_store` (:mod:`state.stores.factory`), which shares one store per
process and configuration.
"""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar
from urllib.parse import urlparse

from state.errors import KeyNotFound, StoreConfigError
from state.option_table import (
    BooleanOption,
    DurationOption,
    OptionSpec,
    OptionTable,
    StringOption,
)
from state.options import Options
from state.records.codec import dumps as dumps  # noqa: PLC0414 - re-exported


@dataclass(frozen=True)
class Versioned:
    """A stored value and the version it had when read."""

    data: bytes
    version: str

    def json(self) -> Any:
        return json.loads(self.data)


@dataclass(frozen=True)
class S3Settings:
    """Explicit S3 settings; ``None`` means "use the standard AWS configuration chain"."""

    endpoint: str | None = None
    region: str | None = None
    # Neither key in the repr: the access key id is no secret to AWS, but it names the
    # identity, and an inline value is what a user meant to keep out of sight.
    access_key_id: str | None = field(default=None, repr=False)
    secret_access_key: str | None = field(default=None, repr=False)
    path_style: bool | None = None
    connect_timeout: float | None = None
    read_timeout: float | None = None
    retry_deadline: float | None = None
    ca_bundle: str | None = None


@dataclass(frozen=True)
class GcsSettings:
    """Explicit Google Cloud Storage settings (``gcs.*``); ``None``: Google's defaults
    (Application Default Credentials, the public endpoint or ``STORAGE_EMULATOR_HOST``)."""

    endpoint: str | None = None
    project: str | None = None
    credentials_file: str | None = None
    anonymous: bool | None = None
    retry_deadline: float | None = None


@dataclass(frozen=True)
class AzureSettings:
    """Explicit Azure Blob Storage settings (``azure.*``). The account key and the SAS
    token may be secret references (:mod:`state.secrets`), resolved where the client is
    made; neither is in the repr."""

    account_name: str | None = None
    account_key: str | None = field(default=None, repr=False)
    sas_token: str | None = field(default=None, repr=False)
    endpoint: str | None = None
    retry_deadline: float | None = None


# --- options: state.uri and s3.*, shared by the source, the sink and the coordinator -----

# The S3 defaults named here are applied by state.stores.s3_store (DEFAULT_CONNECT_TIMEOUT, ...);
# tests/test_option_docs.py checks that the two agree.
_AWS_CHAIN = "AWS chain"

STATE_URI = StringOption(
    name="state.uri",
    required=True,
    default_doc="(required; a component may supply a default)",
    doc="`memory://name`, `file:///absolute/path`, `s3://bucket[/prefix]` (or `s3a://`), "
    "`gs://bucket[/prefix]` or `az://container[/prefix]` (docs/state-stores.md)",
)
S3_ENDPOINT = StringOption(
    name="s3.endpoint", default_doc=_AWS_CHAIN, doc="endpoint URL, e.g. `http://127.0.0.1:9000`"
)
S3_REGION = StringOption(name="s3.region", default_doc=_AWS_CHAIN, doc="region name")
S3_ACCESS_KEY_ID = StringOption(
    name="s3.accessKeyId",
    default_doc=_AWS_CHAIN,
    doc="static credentials, with `s3.secretAccessKey` (both or neither)",
)
S3_SECRET_ACCESS_KEY = StringOption(
    name="s3.secretAccessKey",
    default_doc=_AWS_CHAIN,
    doc="static credentials, with `s3.accessKeyId` (both or neither)",
)
S3_PATH_STYLE = BooleanOption(
    name="s3.pathStyle",
    default=None,
    default_doc="`true` if an endpoint is configured (option or `AWS_ENDPOINT_URL[_S3]`), "
    "else virtual-host style",
    doc="path-style addressing",
)
S3_CONNECT_TIMEOUT = DurationOption(
    name="s3.connectTimeout",
    default=None,
    positive=True,
    default_doc="`5s`",
    doc="TCP connect timeout of one request",
)
S3_READ_TIMEOUT = DurationOption(
    name="s3.readTimeout",
    default=None,
    positive=True,
    default_doc="`20s`",
    doc="socket read timeout of one request",
)
S3_RETRY_DEADLINE = DurationOption(
    name="s3.retryDeadline",
    default=None,
    positive=True,
    default_doc="`30s`",
    doc="how long one operation keeps retrying transient failures",
)

S3_CA_BUNDLE = StringOption(
    name="s3.caBundle",
    default_doc="`AWS_CA_BUNDLE`, else botocore's bundle (public CAs)",
    doc="a PEM file of the CA certificates that sign an `https://` endpoint's certificate, on "
    "every host (a certificate it does not trust fails at once, naming the endpoint)",
)

S3_OPTIONS = OptionTable(
    "s3",
    (
        S3_ENDPOINT,
        S3_REGION,
        S3_ACCESS_KEY_ID,
        S3_SECRET_ACCESS_KEY,
        S3_PATH_STYLE,
        S3_CONNECT_TIMEOUT,
        S3_READ_TIMEOUT,
        S3_RETRY_DEADLINE,
        S3_CA_BUNDLE,
    ),
)

# The gs:// store's settings (state.stores.gcs_store applies DEFAULT_RETRY_DEADLINE).
_GOOGLE_DEFAULT = "Google's default"
GCS_ENDPOINT = StringOption(
    name="gcs.endpoint",
    default_doc="`STORAGE_EMULATOR_HOST`, else Google's",
    doc="the JSON API's base URL, for an emulator, e.g. `http://127.0.0.1:4443`",
)
GCS_PROJECT = StringOption(
    name="gcs.project", default_doc=_GOOGLE_DEFAULT, doc="the Google Cloud project of the client"
)
GCS_CREDENTIALS_FILE = StringOption(
    name="gcs.credentialsFile",
    default_doc="Application Default Credentials",
    doc="a service account key (JSON) file, on every host; not with `gcs.anonymous`",
)
GCS_ANONYMOUS = BooleanOption(
    name="gcs.anonymous",
    default=None,
    default_doc="`false`",
    doc="send no credentials (an emulator, or a bucket open to all)",
)
GCS_RETRY_DEADLINE = DurationOption(
    name="gcs.retryDeadline",
    default=None,
    positive=True,
    default_doc="`30s`",
    doc="how long one operation keeps retrying transient failures",
)
GCS_OPTIONS = OptionTable(
    "gcs", (GCS_ENDPOINT, GCS_PROJECT, GCS_CREDENTIALS_FILE, GCS_ANONYMOUS, GCS_RETRY_DEADLINE)
)

# The az:// store's settings (state.stores.azure_store applies DEFAULT_RETRY_DEADLINE).
AZURE_ACCOUNT_NAME = StringOption(
    name="azure.accountName",
    default_doc="(required for `az://`)",
    doc="the storage account's name",
)
AZURE_ACCOUNT_KEY = StringOption(
    name="azure.accountKey",
    default_doc="(one of the two for `az://`)",
    doc="the account's shared key, best as a secret reference (`${env:NAME}`, `${file:/path}`); "
    "or `azure.sasToken`",
)
AZURE_SAS_TOKEN = StringOption(
    name="azure.sasToken",
    default_doc="(one of the two for `az://`)",
    doc="a shared access signature with read, add, create, write, delete and list permissions "
    "on the container, best as a secret reference; or `azure.accountKey`",
)
AZURE_ENDPOINT = StringOption(
    name="azure.endpoint",
    default_doc="`https://<account>.blob.core.windows.net`",
    doc="the account's blob service URL (Azurite: `http://127.0.0.1:10000/<account>`)",
)
AZURE_RETRY_DEADLINE = DurationOption(
    name="azure.retryDeadline",
    default=None,
    positive=True,
    default_doc="`30s`",
    doc="how long one operation keeps retrying transient failures",
)
AZURE_OPTIONS = OptionTable(
    "azure",
    (AZURE_ACCOUNT_NAME, AZURE_ACCOUNT_KEY, AZURE_SAS_TOKEN, AZURE_ENDPOINT, AZURE_RETRY_DEADLINE),
)

STORE_OPTIONS = OptionTable(
    "state", (STATE_URI, *S3_OPTIONS.entries, *GCS_OPTIONS.entries, *AZURE_OPTIONS.entries)
)

_Spec = TypeVar("_Spec", bound=OptionSpec)


def _under(prefix: str, spec: _Spec) -> _Spec:
    return replace(spec, name=prefix + spec.name) if prefix else spec


@dataclass(frozen=True)
class StoreConfig:
    """Where state lives: a URI plus the settings of the object store it may name (only
    those of its scheme are used). Small and picklable."""

    uri: str
    s3: S3Settings = field(default_factory=S3Settings)
    gcs: GcsSettings = field(default_factory=GcsSettings)
    azure: AzureSettings = field(default_factory=AzureSettings)

    SCHEMES = ("memory", "file", "s3", "s3a", "gs", "az")
    OPTIONS = S3_OPTIONS.names() + GCS_OPTIONS.names() + AZURE_OPTIONS.names()

    def __post_init__(self) -> None:
        # one spelling per store: s3a:// and s3:// name the same objects, so a source on
        # one and a sink on the other must share (and compare equal as) one store
        object.__setattr__(self, "uri", canonical_uri(self.uri))

    @classmethod
    def from_options(
        cls,
        options: Options | Mapping[str, str],
        *,
        uri_option: str = "state.uri",
        default_uri: str | None = None,
        s3_prefix: str = "",
    ) -> StoreConfig:
        """Parse ``uri_option``, the ``s3.*`` options (under ``s3_prefix``) and the
        ``gcs.*`` and ``azure.*`` options."""
        opts = options if isinstance(options, Options) else Options(options, where="state")
        uri = opts.string(uri_option, default_uri)
        if uri is None:
            raise opts.error(uri_option, "a store URI: " + _EXPECTED_URI)
        validate_uri(uri, option=uri_option, where=opts.where)
        s3 = S3Settings(
            endpoint=_under(s3_prefix, S3_ENDPOINT).read(opts),
            region=_under(s3_prefix, S3_REGION).read(opts),
            access_key_id=_under(s3_prefix, S3_ACCESS_KEY_ID).read(opts),
            secret_access_key=_under(s3_prefix, S3_SECRET_ACCESS_KEY).read(opts),
            path_style=_under(s3_prefix, S3_PATH_STYLE).read(opts),
            connect_timeout=_under(s3_prefix, S3_CONNECT_TIMEOUT).read(opts),
            read_timeout=_under(s3_prefix, S3_READ_TIMEOUT).read(opts),
            retry_deadline=_under(s3_prefix, S3_RETRY_DEADLINE).read(opts),
            ca_bundle=_under(s3_prefix, S3_CA_BUNDLE).read(opts),
        )
        gcs = GcsSettings(
            endpoint=GCS_ENDPOINT.read(opts),
            project=GCS_PROJECT.read(opts),
            credentials_file=GCS_CREDENTIALS_FILE.read(opts),
            anonymous=GCS_ANONYMOUS.read(opts),
            retry_deadline=GCS_RETRY_DEADLINE.read(opts),
        )
        azure = AzureSettings(
            account_name=AZURE_ACCOUNT_NAME.read(opts),
            account_key=AZURE_ACCOUNT_KEY.read(opts),
            sas_token=AZURE_SAS_TOKEN.read(opts),
            endpoint=AZURE_ENDPOINT.read(opts),
            retry_deadline=AZURE_RETRY_DEADLINE.read(opts),
        )
        return cls(
            uri=uri.rstrip("/") if not uri.endswith("://") else uri, s3=s3, gcs=gcs, azure=azure
        )


_EXPECTED_URI = (
    "memory://name, file:///absolute/path, s3://bucket[/prefix] (or s3a://), "
    "gs://bucket[/prefix] or az://container[/prefix]"
)
# Spark's and Hadoop's names for Azure storage: the blob service of the account they name
# is what az:// reaches, with azure.accountName.
_AZURE_HADOOP_SCHEMES = ("abfs", "abfss", "wasb", "wasbs")


S3_SCHEMES = ("s3", "s3a")
"""The schemes of an S3 URI: ``s3a://`` is what Hadoop and Spark users write for S3."""


def canonical_uri(uri: str) -> str:
    """``uri`` with an ``s3a://`` (any case) scheme written ``s3://``, else unchanged: the
    bucket and the prefix are the same, and every component keeps one spelling of them."""
    scheme, sep, rest = uri.partition("://")
    return f"s3://{rest}" if sep and scheme.lower() == "s3a" else uri


def is_s3_uri(uri: str) -> bool:
    """Whether ``uri`` is ``s3://bucket[/prefix]`` or ``s3a://bucket[/prefix]`` (a bucket given)."""
    parsed = urlparse(uri)
    return parsed.scheme in S3_SCHEMES and bool(parsed.netloc)


def validate_uri(uri: str, *, option: str = "state.uri", where: str = "") -> None:
    """Raise :class:`StoreConfigError` unless ``uri`` names a supported store."""
    parsed = urlparse(uri)
    if parsed.scheme in _AZURE_HADOOP_SCHEMES:
        raise StoreConfigError(
            option,
            uri,
            "az://container[/prefix], with the account in azure.accountName (Hadoop's "
            f"{parsed.scheme}://container@account.../prefix names the same data)",
            where=where,
        )
    if parsed.scheme not in StoreConfig.SCHEMES:
        raise StoreConfigError(option, uri, _EXPECTED_URI, where=where)
    if parsed.scheme == "file" and (
        parsed.netloc not in ("", "localhost") or not parsed.path.startswith("/")
    ):
        raise StoreConfigError(option, uri, "file:///absolute/path (three slashes)", where=where)
    if parsed.scheme in S3_SCHEMES and not parsed.netloc:
        raise StoreConfigError(
            option, uri, f"{parsed.scheme}://bucket[/prefix] with a bucket name", where=where
        )
    if parsed.scheme == "gs" and not parsed.netloc:
        raise StoreConfigError(option, uri, "gs://bucket[/prefix] with a bucket name", where=where)
    if parsed.scheme == "az" and not parsed.netloc:
        raise StoreConfigError(
            option, uri, "az://container[/prefix] with a container name", where=where
        )


def check_key(uri: str, key: str) -> str:
    """Keys are relative, ``/``-separated, without empty, ``.`` or ``..`` segments."""
    parts = key.split("/")
    if not key or key.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise StoreConfigError(
            "key", key, f"a relative key without empty/./.. segments (store {uri})"
        )
    return key


class StateStore(ABC):
    """Get, put, conditional create, compare-and-swap, list and delete over one URI.

    Safe for concurrent use by the threads of one process. A store opened by
    :func:`open_store` is *shared* (:attr:`shared`): its :meth:`close` does nothing.
    """

    #: Set by :func:`open_store` on the instance it shares; a pickled copy is not shared.
    shared: bool = False

    def __init__(self, config: StoreConfig) -> None:
        self.config = config

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.pop("shared", None)
        return state

    @property
    def uri(self) -> str:
        return self.config.uri

    @abstractmethod
    def get(self, key: str) -> Versioned:
        """The value and its version; :class:`KeyNotFound` if absent."""

    def get_or_none(self, key: str) -> Versioned | None:
        try:
            return self.get(key)
        except KeyNotFound:
            return None

    @abstractmethod
    def put(self, key: str, data: bytes) -> str:
        """Write unconditionally and atomically (readers see the old or the new value).

        Returns the new version.
        """

    @abstractmethod
    def create(self, key: str, data: bytes) -> str:
        """Write only if ``key`` is absent; :class:`KeyExists` otherwise. The new version."""

    @abstractmethod
    def compare_and_swap(self, key: str, data: bytes, expected_version: str) -> str:
        """Write only if ``key`` still has ``expected_version``.

        :class:`ConcurrentModification` if it has another version or is absent.
        """

    @abstractmethod
    def list(self, prefix: str = "") -> list[str]:
        """Keys that start with ``prefix``, sorted."""

    @abstractmethod
    def delete(self, key: str) -> None:
        """Remove ``key``; absent keys are not an error."""

    def delete_many(self, keys: Iterable[str]) -> None:
        """Remove ``keys``; absent keys are not an error. A store may batch the requests
        (S3: one ``DeleteObjects`` per 1000 keys)."""
        for k in keys:
            self.delete(k)

    def delete_prefix(self, prefix: str) -> int:
        """Remove every key under ``prefix``; the number removed."""
        keys = self.list(prefix)
        self.delete_many(keys)
        return len(keys)

    def close(self) -> None:
        """Release clients; the store may be used again (clients are re-created).

        Does nothing on a shared store (:func:`open_store`): others use it; see
        :func:`close_all`.
        """
        if not self.shared:
            self.release()

    def release(self) -> None:  # noqa: B027 - optional hook
        """Release the clients this store holds (what :meth:`close` does when unshared)."""

    # JSON conveniences: all protocol records are small JSON documents with sorted keys.

    def get_json(self, key: str) -> tuple[Any, str]:
        v = self.get(key)
        return v.json(), v.version

    def get_json_or_none(self, key: str) -> tuple[Any, str] | None:
        v = self.get_or_none(key)
        return None if v is None else (v.json(), v.version)

    def put_json(self, key: str, value: Any) -> str:
        return self.put(key, dumps(value))

    def create_json(self, key: str, value: Any) -> str:
        return self.create(key, dumps(value))

    def compare_and_swap_json(self, key: str, value: Any, expected_version: str) -> str:
        return self.compare_and_swap(key, dumps(value), expected_version)


def aws_environment() -> tuple[tuple[str, str], ...]:
    """The ``AWS_*`` variables of this process, which the S3 client's defaults come from."""
    return tuple(sorted((k, v) for k, v in os.environ.items() if k.startswith("AWS_")))
