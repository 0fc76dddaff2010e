"""The real parts the demo runs against: Kafka (Tansu), S3 (moto), ZooKeeper.

Each is either started here on a free loopback port, with the same launchers the
integration tests use (``integration_tests/fixtures``: plain classes, usable without
pytest running), or taken from the command line / the environment variables the test
harness uses (``GTB_KAFKA_BOOTSTRAP``, ``GTB_S3_ENDPOINT``, ``GTB_ZK_HOSTS``), so the
demo can also run against servers that are already up. Everything started is stopped
by :meth:`Services.stop`, by pid.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from integration_tests.fixtures.kafka import KafkaBroker, KafkaHelper
from integration_tests.fixtures.s3 import S3Server
from integration_tests.fixtures.zookeeper import ZooKeeperServer

ENV_KAFKA = "GTB_KAFKA_BOOTSTRAP"
ENV_S3 = "GTB_S3_ENDPOINT"
ENV_ZK = "GTB_ZK_HOSTS"


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
    """Kafka, S3 and ZooKeeper (or the ``parts`` named) for one demo run or notebook."""

    def __init__(
        self,
        workdir: Path,
        *,
        kafka: str | None = None,
        s3: str | None = None,
        zookeeper: str | None = None,
        parts: tuple[str, ...] = ("kafka", "s3", "zookeeper"),
    ) -> None:
        unknown = set(parts) - {"kafka", "s3", "zookeeper"}
        if unknown:
            raise ValueError(f"unknown service(s) {sorted(unknown)}: kafka, s3, zookeeper")
        self.parts = parts
        self.workdir = workdir
        self._want = {
            "kafka": kafka or os.environ.get(ENV_KAFKA, "").strip() or None,
            "s3": s3 or os.environ.get(ENV_S3, "").strip() or None,
            "zookeeper": zookeeper or os.environ.get(ENV_ZK, "").strip() or None,
        }
        self._stops: list[Callable[[], None]] = []
        self.endpoints: list[Endpoint] = []
        self.broker: KafkaBroker | None = None
        self.s3: S3Server | None = None
        self.zk: ZooKeeperServer | None = None

    def start(self) -> Services:
        try:
            if "kafka" in self.parts:
                self.broker = self._start("Kafka (Tansu)", "kafka", _kafka, lambda b: b.bootstrap)
            if "s3" in self.parts:
                self.s3 = self._start("S3 (moto)", "s3", _s3, lambda s: s.endpoint)
            if "zookeeper" in self.parts:
                self.zk = self._start("ZooKeeper", "zookeeper", _zookeeper, lambda z: z.hosts)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(
        self,
        name: str,
        key: str,
        make: Callable[[Path | None, str | None], Any],
        address: Callable[[Any], str],
    ) -> Any:
        external = self._want[key]
        t0 = time.monotonic()
        if external is not None:
            server = make(None, external)
            self.endpoints.append(Endpoint(name, address(server), False, None, 0.0))
            return server
        workdir = self.workdir / key
        workdir.mkdir(parents=True, exist_ok=True)
        server = make(workdir, None)
        self._stops.append(server.stop)
        server.start()
        self.endpoints.append(
            Endpoint(name, address(server), True, server.pid, time.monotonic() - t0)
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
        return {
            "s3.endpoint": self.s3.endpoint,
            "s3.region": self.s3.region,
            "s3.accessKeyId": self.s3.access_key_id,
            "s3.secretAccessKey": self.s3.secret_access_key,
            "s3.pathStyle": "true",
        }

    def describe(self) -> list[str]:
        return [e.describe() for e in self.endpoints]

    def stop(self) -> None:
        """Stop what this process started (by pid), last started first."""
        while self._stops:
            self._stops.pop()()


def _kafka(workdir: Path | None, external: str | None) -> KafkaBroker:
    if external is not None:
        return KafkaBroker(None, external_bootstrap=external)
    return KafkaBroker(workdir)


def _s3(workdir: Path | None, external: str | None) -> S3Server:
    if external is not None:
        return S3Server(None, external_endpoint=external)
    return S3Server(workdir)


def _zookeeper(workdir: Path | None, external: str | None) -> ZooKeeperServer:
    if external is not None:
        return ZooKeeperServer(None, external_hosts=external)
    return ZooKeeperServer(workdir)
