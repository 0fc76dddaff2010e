"""The real parts the demo runs against: Kafka (Tansu), S3 (SeaweedFS), ZooKeeper.

Each is either started here on a free loopback port, with the servers of the
``harness`` package (the ones the integration tests use), or taken from the command
line / the environment variables the harness reads (``GTB_KAFKA_BOOTSTRAP``,
``GTB_S3_ENDPOINT``, ``GTB_ZK_HOSTS``), so the demo can also run against servers that
are already up. Everything started is stopped by :meth:`Services.stop`, by pid.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from harness.azurite import AzuriteServer
from harness.gcs import GcsServer
from harness.kafka import KafkaBroker, KafkaHelper
from harness.s3 import S3Server
from harness.server import Server
from harness.zookeeper import ZooKeeperServer

S = TypeVar("S", bound=Server)


@dataclass(frozen=True)
class Endpoint:
    name: str
    address: str
    started: bool  # by this process (else external)
    pid: int | None
    seconds: float

    def describe(self) -> str:
        how = f"started, pid {self.pid}, {self.seconds:.1f}s" if self.started else "external"
        return f"{self.name} at {self.address} ({how})"


class Services:
    """Kafka, S3 and ZooKeeper (or the ``parts`` named) for one demo run or notebook; with
    ``gcs`` or ``azure`` among the parts, also a GCS or Azure Blob Storage emulator for the
    state store (:meth:`state_store`)."""

    def __init__(
        self,
        workdir: Path,
        *,
        kafka: str | None = None,
        s3: str | None = None,
        zookeeper: str | None = None,
        gcs: str | None = None,
        azure: str | None = None,
        parts: tuple[str, ...] = ("kafka", "s3", "zookeeper"),
    ) -> None:
        unknown = set(parts) - {"kafka", "s3", "zookeeper", "gcs", "azure"}
        if unknown:
            raise ValueError(
                f"unknown service(s) {sorted(unknown)}: kafka, s3, zookeeper, gcs, azure"
            )
        self.parts = parts
        self.workdir = workdir
        self._want = {
            "kafka": kafka,
            "s3": s3,
            "zookeeper": zookeeper,
            "gcs": gcs,
            "azure": azure,
        }
        self._stops: list[Callable[[], None]] = []
        self.endpoints: list[Endpoint] = []
        self.broker: KafkaBroker | None = None
        self.s3: S3Server | None = None
        self.zk: ZooKeeperServer | None = None
        self.gcs: GcsServer | None = None
        self.azure: AzuriteServer | None = None

    def start(self) -> Services:
        try:
            if "kafka" in self.parts:
                self.broker = self._start("Kafka (Tansu)", "kafka", KafkaBroker, KafkaBroker)
            if "s3" in self.parts:
                self.s3 = self._start("S3 (SeaweedFS)", "s3", S3Server, S3Server)
            if "zookeeper" in self.parts:
                self.zk = self._start("ZooKeeper", "zookeeper", ZooKeeperServer, ZooKeeperServer)
            if "gcs" in self.parts:
                self.gcs = self._start("GCS (fake-gcs-server)", "gcs", GcsServer, GcsServer)
            if "azure" in self.parts:
                self.azure = self._start(
                    "Azure Blob (Azurite)", "azure", AzuriteServer, AzuriteServer
                )
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, name: str, key: str, kind: type[S], local: Callable[[Path], S]) -> S:
        """The server given on the command line, else the one its environment variable
        names, else one started here (``local(workdir)``)."""
        given = self._want[key]
        server = kind.external_at(given) if given else kind.from_env()
        if server is not None:
            self.endpoints.append(Endpoint(name, server.address, False, None, 0.0))
            return server
        t0 = time.monotonic()
        workdir = self.workdir / key
        workdir.mkdir(parents=True, exist_ok=True)
        server = local(workdir)
        self._stops.append(server.stop)
        server.start_on_free_port()
        self.endpoints.append(
            Endpoint(name, server.address, True, server.pid, time.monotonic() - t0)
        )
        return server

    # --- what the demo needs -------------------------------------------------------------

    @property
    def bootstrap(self) -> str:
        assert self.broker is not None
        return self.broker.bootstrap

    @property
    def zookeeper_hosts(self) -> str:
        assert self.zk is not None
        return self.zk.hosts

    def kafka(self, name: str = "demo") -> KafkaHelper:
        """A Kafka helper (topics, batched produce, full reads); close it after use."""
        assert self.broker is not None
        return KafkaHelper(self.broker, name)

    def create_bucket(self, bucket: str) -> None:
        assert self.s3 is not None
        self.s3.client().create_bucket(Bucket=bucket)

    def s3_options(self) -> dict[str, str]:
        """``s3.*`` options for the gtbarrier sources, sink and coordinator."""
        assert self.s3 is not None
        return self.s3.options()

    def state_store(self, bucket: str) -> tuple[str, dict[str, str]]:
        """A new bucket (or container) named ``bucket`` on the state store's server, and the
        ``state.uri`` and store options that name it: Azure or GCS if that part was
        started, else S3."""
        if self.azure is not None:
            self.azure.client().create_container(bucket)
            return f"az://{bucket}/gtbarrier", {**self.s3_options(), **self.azure.options()}
        if self.gcs is not None:
            self.gcs.client().create_bucket(bucket)
            return f"gs://{bucket}/gtbarrier", {**self.s3_options(), **self.gcs.options()}
        return f"s3://{bucket}/gtbarrier", self.s3_options()

    def describe(self) -> list[str]:
        return [e.describe() for e in self.endpoints]

    def stop(self) -> None:
        """Stop what this process started (by pid), last started first."""
        while self._stops:
            self._stops.pop()()
