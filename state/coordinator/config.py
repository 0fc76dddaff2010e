"""The coordinator's arguments: one declarative table and one frozen, validated config.

:data:`PARAMETERS` lists every argument of :class:`~state.coordinator.SnapshotCoordinator`
with its type, default and a one-line meaning (the README's and docs/coordinator.md's
argument tables are written from it). :meth:`CoordinatorConfig.from_arguments` checks
them all once, in the constructor: a bad one raises :class:`ConfigError` naming it.
Durations accept ``"500ms"``, ``"30s"``, ``"5m"``, ``"1h"`` or a number of seconds.

``zookeeper_auth`` (:class:`ZooKeeperAuth`) is the one secret among them. The config keeps
the text as given, so a secret reference (:mod:`state.secrets`) stays a
reference in the config and its pickles, and is resolved only where the kazoo client is
created; no ``repr``, ``str`` or error message shows the credentials.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlparse

from state.errors import ConfigError
from state.layout import PipelineLayout, validate_pipeline_id
from state.metrics.access import DEFAULT_ADDRESS as DEFAULT_METRICS_ADDRESS
from state.metrics.access import MetricsAccess
from state.option_table import DocRow
from state.options import Options, parse_duration
from state.secrets import hide_in_logs, resolve
from state.stores import StoreConfig

WHERE = "SnapshotCoordinator"

_HOSTS = re.compile(r"[A-Za-z0-9.\-\[\]:]+:\d+(,[A-Za-z0-9.\-\[\]:]+:\d+)*(/[A-Za-z0-9._\-/]*)?")


class Required:
    """The default of an argument that has none."""

    def __repr__(self) -> str:
        return "required"


REQUIRED = Required()


@dataclass(frozen=True)
class Parameter:
    """One constructor argument: its name, type, default (:data:`REQUIRED` if none) and
    a one-line meaning."""

    name: str
    type: str
    default: object
    doc: str

    def doc_row(self) -> DocRow:
        """The argument as a row of the README's and docs/coordinator.md's table."""
        default = "required" if self.default is REQUIRED else f"`{self.default!r}`"
        return DocRow(f"`{self.name}`", default.replace("'", '"'), self.doc)


PARAMETERS: tuple[Parameter, ...] = (
    Parameter(
        "spark",
        "SparkSession | None",
        REQUIRED,
        "The driver's SparkSession (its `streams` get the listener); `None` for recovery-only use.",
    ),
    Parameter("pipeline_id", "str", REQUIRED, "As the source and sink option `pipeline.id`."),
    Parameter(
        "state_uri",
        "str",
        REQUIRED,
        "As the source and sink option `state.uri` (`file:///...`, `s3://bucket/prefix`, "
        "`s3a://...`); "
        "snapshots go here.",
    ),
    Parameter(
        "checkpoint_location",
        "str | PathLike",
        REQUIRED,
        "The query's checkpoint directory on the driver's host (a path or `file://` URI); "
        "remote Hadoop file systems are refused.",
    ),
    Parameter(
        "zookeeper_hosts",
        "str | None",
        None,
        "`host:port[,host:port...][/chroot]`; `None`: the resume point lives in the state "
        "store and drivers are fenced by token only (no lock).",
    ),
    Parameter(
        "snapshot_period",
        "duration",
        "30s",
        "Minimum time between snapshot attempts (start to start); `request_snapshot()` asks "
        "for one now.",
    ),
    Parameter(
        "retain",
        "int",
        3,
        "Snapshots kept; older ones and the packs no kept snapshot names are deleted.",
    ),
    Parameter(
        "drain_timeout",
        "duration",
        "180s",
        "A snapshot not accepted within this time (upload, barrier drained, resume point "
        "written) is abandoned; the previous resume point stays.",
    ),
    Parameter(
        "reset_timeout",
        "duration",
        "180s",
        "Bounds each `recover()`: ZooKeeper connection, lock, reading the resume point, "
        "materialising the checkpoint.",
    ),
    Parameter(
        "state_options",
        "Mapping[str, str] | None",
        None,
        "`s3.*` store options for `state_uri` (otherwise the AWS chain).",
    ),
    Parameter(
        "driver_wait",
        "duration | None",
        None,
        "`None`: a second driver fails fast (`DriverLockHeld`); a duration: wait that long "
        "for the lock (counts inside `reset_timeout`).",
    ),
    Parameter(
        "zookeeper_session_timeout",
        "duration",
        "10s",
        "The ZooKeeper session timeout: how long a crashed driver blocks its successor.",
    ),
    Parameter(
        "zookeeper_auth",
        "str | None",
        None,
        "`scheme:credentials`, e.g. `digest:gtb:${env:ZK_PASSWORD}` (secret references "
        "`${env:NAME}`, `${file:/path}`, `${file:/path:key}` are resolved when the session "
        "starts): the pipeline's znodes get "
        "an ACL that gives this identity every permission and other clients none; `None`: "
        "open ACLs, as ZooKeeper makes them (docs/security.md).",
    ),
    Parameter(
        "metrics_port",
        "int | None",
        None,
        "Serve Prometheus metrics at `/metrics` on this port while the coordinator is open "
        "(`0`: a free port, `coord.metrics_port` tells which); needs `gtbarrier[metrics]`; "
        "`None`: no endpoint (docs/operations.md, Metrics).",
    ),
    Parameter(
        "metrics_address",
        "str",
        "127.0.0.1",
        "The address the metrics endpoint listens on: this host only by default; "
        "`0.0.0.0` for every interface (then give it TLS and basic authentication: a scrape "
        "reads the store and ZooKeeper with the driver's credentials).",
    ),
    Parameter(
        "metrics_tls_cert",
        "str | None",
        None,
        "A PEM certificate (its chain may follow) for the metrics endpoint: it then serves "
        "HTTPS; with `metrics_tls_key`.",
    ),
    Parameter(
        "metrics_tls_key",
        "str | None",
        None,
        "The private key of `metrics_tls_cert` (a PEM file).",
    ),
    Parameter(
        "metrics_tls_client_ca",
        "str | None",
        None,
        "A PEM file of CA certificates: the metrics endpoint then requires a client "
        "certificate one of them signed (needs `metrics_tls_cert`).",
    ),
    Parameter(
        "metrics_basic_auth",
        "str | None",
        None,
        "`user:password` a scrape must send (HTTP basic authentication; use it with TLS); "
        "the password may be a secret reference (`prometheus:${file:/run/secrets/metrics}`), "
        "resolved when the endpoint starts, never shown.",
    ),
    Parameter(
        "source_ends",
        "SourceEnds | None",
        None,
        "`gtbarrier.kafka_ends(options)` with the gtkafka source's options (its `kafka.*` "
        "settings, secret references included): the metrics endpoint then reads Kafka's end "
        "offsets at each scrape (kept at most 2 s) against the newest planned epoch, so "
        "`gtbarrier_source_offsets_behind` grows while the query is stuck; `None`: the lag "
        "each completed batch reported. Needs `metrics_port`.",
    ),
    Parameter(
        "epochs_retained",
        "int",
        1000,
        "Epochs kept below the barrier's progress (`GT_last`, or a later epoch whose bundle "
        "was empty); after each accepted snapshot, older "
        "epochs and their batch records are pruned, never those of a retained snapshot. A "
        'query on a new checkpoint (`recover(mode="replay")`) cannot replay pruned epochs '
        "(docs/PROTOCOL.md, Pruning).",
    ),
)

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9._-]*")
_REFERENCE_FORMS = "${env:NAME}, ${file:/path} or ${file:/path:key}"
_HIDDEN = "<credentials hidden>"


@dataclass(frozen=True)
class ZooKeeperAuth:
    """``zookeeper_auth``: the scheme, and the credentials as given (with their secret
    references unresolved). :meth:`credentials` resolves them; nothing else shows them.

    kazoo sends ``(scheme, credentials)`` with ``addauth`` on every connection; the nodes
    the coordinator creates get ZooKeeper's ``auth`` ACL, which the server records as the
    identity the client authenticated as (for ``digest``: ``user:base64(sha1(user:pw))``).
    Any scheme the server has an ``authProvider`` for works that way; ``digest`` is the
    one ZooKeeper ships.
    """

    scheme: str
    given: str = field(repr=False)

    @classmethod
    def parse(
        cls, value: object, *, option: str = "zookeeper_auth", where: str = WHERE
    ) -> ZooKeeperAuth:
        """Check ``value`` and resolve its references once, so that an unset variable or
        a missing file fails here, naming ``option``; the result keeps them unresolved."""
        expected = (
            "'scheme:credentials', e.g. 'digest:user:${env:ZK_PASSWORD}' "
            f"(secret references: {_REFERENCE_FORMS})"
        )
        if not isinstance(value, str):
            raise ConfigError(option, f"<a {type(value).__name__}>", expected, where=where)
        scheme, sep, credentials = value.strip().partition(":")
        if not sep or not _SCHEME.fullmatch(scheme) or not credentials:
            raise ConfigError(option, _masked(value), expected, where=where)
        auth = cls(scheme, credentials)
        auth._check(auth._resolve(option, where), option, where)
        return auth

    def credentials(self) -> str:
        """The credentials, references resolved now (an environment variable or a file
        may have changed since :meth:`parse`)."""
        resolved = self._resolve("zookeeper_auth", WHERE)
        self._check(resolved, "zookeeper_auth", WHERE)
        # kazoo is about to be given them: out of every log record of this process (digest's
        # password alone too, which a message may quote without the user name)
        hide_in_logs(resolved)
        if self.scheme == "digest":
            hide_in_logs(resolved.partition(":")[2])
        return resolved

    def _resolve(self, option: str, where: str) -> str:
        return resolve(self.given, option=option, where=where)

    def _check(self, resolved: str, option: str, where: str) -> None:
        user, sep, password = resolved.partition(":")
        if self.scheme == "digest" and (not sep or not user or not password):
            raise ConfigError(
                option,
                f"digest:{_HIDDEN}",
                "digest credentials as 'user:password' (both non-empty)",
                where=where,
            )

    def __str__(self) -> str:
        return f"{self.scheme}:{_HIDDEN}"

    def __repr__(self) -> str:
        return f"ZooKeeperAuth(scheme={self.scheme!r}, credentials={_HIDDEN})"


def _masked(value: str) -> str:
    """What an error may show of a malformed ``zookeeper_auth``: a plausible scheme only."""
    scheme = value.strip().partition(":")[0]
    return f"{scheme}:{_HIDDEN}" if _SCHEME.fullmatch(scheme) else _HIDDEN


@dataclass(frozen=True)
class CoordinatorConfig:
    """The checked arguments (durations in seconds, the checkpoint as a local path)."""

    pipeline_id: str
    store: StoreConfig
    checkpoint: Path
    zookeeper_hosts: str | None = None
    snapshot_period: float = 30.0
    retain: int = 3
    drain_timeout: float = 180.0
    reset_timeout: float = 180.0
    driver_wait: float | None = None
    zookeeper_session_timeout: float = 10.0
    zookeeper_auth: ZooKeeperAuth | None = None
    metrics_port: int | None = None
    metrics_address: str = DEFAULT_METRICS_ADDRESS
    metrics_tls_cert: str | None = None
    metrics_tls_key: str | None = None
    metrics_tls_client_ca: str | None = None
    metrics_basic_auth: str | None = field(default=None, repr=False)
    epochs_retained: int = 1000

    @classmethod
    def from_arguments(  # noqa: PLR0913, PLR0917 - mirrors SnapshotCoordinator's signature
        cls,
        pipeline_id: str,
        state_uri: str,
        checkpoint_location: str | os.PathLike[str],
        zookeeper_hosts: str | None = None,
        snapshot_period: str | float = "30s",
        retain: int = 3,
        drain_timeout: str | float = "180s",
        reset_timeout: str | float = "180s",
        *,
        state_options: Mapping[str, str] | None = None,
        driver_wait: str | float | None = None,
        zookeeper_session_timeout: str | float = "10s",
        zookeeper_auth: str | None = None,
        metrics_port: int | None = None,
        metrics_address: str = DEFAULT_METRICS_ADDRESS,
        metrics_tls_cert: str | None = None,
        metrics_tls_key: str | None = None,
        metrics_tls_client_ca: str | None = None,
        metrics_basic_auth: str | None = None,
        epochs_retained: int = 1000,
    ) -> CoordinatorConfig:
        """Check every argument; :class:`ConfigError` names the first bad one."""
        try:
            pipeline = validate_pipeline_id(pipeline_id, where=WHERE)
        except ConfigError as err:
            raise ConfigError("pipeline_id", pipeline_id, err.expected, where=WHERE) from None
        if not isinstance(state_uri, str) or not state_uri.strip():
            raise ConfigError(
                "state_uri",
                state_uri,
                "a store URI: file:///abs/path or s3://bucket/prefix",
                where=WHERE,
            )
        opts = Options({"state_uri": state_uri, **dict(state_options or {})}, where=WHERE)
        opts.check_known(["state_uri", *StoreConfig.OPTIONS])
        store = StoreConfig.from_options(opts, uri_option="state_uri")
        checkpoint = _checkpoint_path(checkpoint_location)
        if zookeeper_hosts is not None:
            if (
                not isinstance(zookeeper_hosts, str)
                or not _HOSTS.fullmatch(zookeeper_hosts.strip())
                or {".", ".."} & set(zookeeper_hosts.strip().partition("/")[2].split("/"))
            ):
                raise ConfigError(
                    "zookeeper_hosts",
                    zookeeper_hosts,
                    "'host:port[,host:port...][/chroot]' (a chroot without '.' or '..') or None",
                    where=WHERE,
                )
            zookeeper_hosts = zookeeper_hosts.strip()
        period = _positive_duration(snapshot_period, "snapshot_period")
        if not isinstance(retain, int) or isinstance(retain, bool) or retain < 1:
            raise ConfigError("retain", retain, "an integer >= 1", where=WHERE)
        if metrics_port is not None and (
            not isinstance(metrics_port, int)
            or isinstance(metrics_port, bool)
            or not 0 <= metrics_port <= 65535
        ):
            raise ConfigError(
                "metrics_port", metrics_port, "a port 0-65535 (0: a free one) or None", where=WHERE
            )
        if (
            not isinstance(epochs_retained, int)
            or isinstance(epochs_retained, bool)
            or epochs_retained < 1
        ):
            raise ConfigError("epochs_retained", epochs_retained, "an integer >= 1", where=WHERE)
        if not isinstance(metrics_address, str) or not metrics_address.strip():
            raise ConfigError(
                "metrics_address", metrics_address, "an address such as '127.0.0.1'", where=WHERE
            )
        MetricsAccess.parse(
            tls_cert=metrics_tls_cert,
            tls_key=metrics_tls_key,
            tls_client_ca=metrics_tls_client_ca,
            basic_auth=metrics_basic_auth,
        )
        return cls(
            pipeline_id=pipeline,
            store=store,
            checkpoint=checkpoint,
            zookeeper_hosts=zookeeper_hosts,
            snapshot_period=period,
            retain=retain,
            drain_timeout=_positive_duration(drain_timeout, "drain_timeout"),
            reset_timeout=_positive_duration(reset_timeout, "reset_timeout"),
            driver_wait=(
                None
                if driver_wait is None
                else parse_duration(driver_wait, option="driver_wait", where=WHERE)
            ),
            zookeeper_session_timeout=_positive_duration(
                zookeeper_session_timeout, "zookeeper_session_timeout"
            ),
            zookeeper_auth=(
                None if zookeeper_auth is None else ZooKeeperAuth.parse(zookeeper_auth)
            ),
            metrics_port=metrics_port,
            metrics_address=metrics_address.strip(),
            metrics_tls_cert=metrics_tls_cert,
            metrics_tls_key=metrics_tls_key,
            metrics_tls_client_ca=metrics_tls_client_ca,
            metrics_basic_auth=metrics_basic_auth,
            epochs_retained=epochs_retained,
        )

    @property
    def layout(self) -> PipelineLayout:
        return PipelineLayout(self.pipeline_id)

    @property
    def metrics_access(self) -> MetricsAccess:
        """Who may scrape the metrics endpoint (checked by :meth:`from_arguments`)."""
        return MetricsAccess(
            self.metrics_tls_cert,
            self.metrics_tls_key,
            self.metrics_tls_client_ca,
            self.metrics_basic_auth,
        )

    def store_description(self) -> str:
        """The state store and, for S3, the endpoint it talks to (for errors)."""
        endpoint = (
            self.store.s3.endpoint
            or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL")
        )
        if self.store.uri.startswith("s3://") and endpoint:
            return f"the state store {self.store.uri} (S3 endpoint {endpoint})"
        return f"the state store {self.store.uri}"


def _positive_duration(value: str | float, name: str) -> float:
    seconds = parse_duration(value, option=name, where=WHERE)
    if seconds <= 0:
        raise ConfigError(
            name, value, "a positive duration such as '500ms', '30s', '5m'", where=WHERE
        )
    return seconds


def _checkpoint_path(value: str | os.PathLike[str]) -> Path:
    text = os.fspath(value) if isinstance(value, os.PathLike | str) else None
    if not text:
        raise ConfigError(
            "checkpoint_location", value, "a local directory path or file:// URI", where=WHERE
        )
    parsed = urlparse(text)
    if parsed.scheme and parsed.scheme != "file" and len(parsed.scheme) > 1:
        raise ConfigError(
            "checkpoint_location",
            value,
            "a local directory on the driver (path or file:// URI); the coordinator copies it to "
            "the state store, so a remote checkpoint file system is not needed",
            where=WHERE,
        )
    path = Path(parsed.path) if parsed.scheme == "file" else Path(text)
    # A file where the directory (or one of its parents) should be: Spark would fail later.
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise ConfigError(
            "checkpoint_location",
            value,
            f"a directory on the driver (or a path where one can be created): {existing} is a file",
            where=WHERE,
        )
    return path


__all__ = [
    "PARAMETERS",
    "REQUIRED",
    "CoordinatorConfig",
    "Parameter",
    "ZooKeeperAuth",
]
