"""The servers of a chaos run, started once and shared by every round.

Kafka (Tansu), S3 (SeaweedFS) behind a :class:`~harness.fault_proxy.FaultProxy` (drivers
talk to the proxy, the checks to SeaweedFS itself), ZooKeeper, the reference HTTP receiver,
PostgreSQL (``GTB_POSTGRES_DSN`` may name another) and, when asked, a Spark standalone
cluster with two workers. ``GTB_KAFKA_BOOTSTRAP`` and
``GTB_S3_ENDPOINT`` may name external servers; ZooKeeper, the receiver and the cluster are
always local, since faults stop and restart them.
"""

from __future__ import annotations

import logging
import urllib.parse
import uuid
from pathlib import Path
from typing import TypeVar

from harness.fault_proxy import FaultProxy
from harness.kafka import KafkaBroker, KafkaHelper
from harness.postgres import PostgresServer
from harness.process import wait_until
from harness.receiver import Receiver
from harness.s3 import S3Server
from harness.server import Server
from harness.spark import SparkCluster
from harness.zookeeper import ZooKeeperServer
from state.stores import StateStore, StoreConfig, open_store

log = logging.getLogger(__name__)

S = TypeVar("S", bound=Server)


class ChaosServers:
    """Every server of the run; :meth:`start` starts them, :meth:`stop` stops what it started."""

    def __init__(self, workdir: Path, *, cluster: bool) -> None:
        self.workdir = workdir
        self.want_cluster = cluster
        self.run_tag = uuid.uuid4().hex[:6]
        self.bucket = f"chaos-{self.run_tag}"
        self.zk_chroot = f"/chaos-{self.run_tag}"
        self.broker: KafkaBroker | None = None
        self.s3: S3Server | None = None
        self.s3_proxy: FaultProxy | None = None
        self.zk: ZooKeeperServer | None = None
        self.receiver: Receiver | None = None
        self.postgres: PostgresServer | None = None
        self.cluster: SparkCluster | None = None
        self._kafka: KafkaHelper | None = None

    # --- lifecycle ----------------------------------------------------------------------

    def start(self) -> ChaosServers:
        try:
            self.broker = KafkaBroker.from_env() or self._local(KafkaBroker(self._dir("kafka")))
            self.s3 = S3Server.from_env() or self._local(S3Server(self._dir("s3")))
            self.s3.client().create_bucket(Bucket=self.bucket)
            url = urllib.parse.urlsplit(self.s3.endpoint)
            self.s3_proxy = FaultProxy(url.hostname or "127.0.0.1", url.port or 80).start()
            self.zk = self._local(ZooKeeperServer(self._dir("zookeeper")))
            self.receiver = Receiver(self._dir("receiver") / "data", self._dir("receiver"))
            self.receiver.start()
            self.postgres = PostgresServer.from_env() or self._local(
                PostgresServer(self._dir("postgres"))
            )
            if self.want_cluster:
                self.cluster = SparkCluster(self._dir("spark-cluster"), n_workers=2)
                self.cluster.start()
        except BaseException:
            self.stop()
            raise
        return self

    def _dir(self, name: str) -> Path:
        path = self.workdir / "servers" / name
        path.mkdir(parents=True, exist_ok=True)
        return path

    @staticmethod
    def _local(server: S) -> S:
        server.start_on_free_port()
        return server

    def stop(self) -> None:
        """Stop everything started here, last started first (by pid)."""
        if self._kafka is not None:
            self._kafka.close()
        own_pg = self.postgres if self.postgres is not None and not self.postgres.external else None
        for stop in (
            self.cluster.stop if self.cluster is not None else None,
            own_pg.shutdown if own_pg is not None else None,
            own_pg.remove if own_pg is not None else None,
            self.receiver.stop if self.receiver is not None else None,
            self.zk.stop if self.zk is not None and not self.zk.external else None,
            self.s3_proxy.stop if self.s3_proxy is not None else None,
            self.s3.stop if self.s3 is not None and not self.s3.external else None,
            self.broker.stop if self.broker is not None and not self.broker.external else None,
        ):
            if stop is None:
                continue
            try:
                stop()
            except Exception:
                log.exception("stopping a chaos server failed")

    # --- what rounds use ----------------------------------------------------------------

    def kafka(self) -> KafkaHelper:
        """The run's Kafka helper (topics, batched produce, reads)."""
        assert self.broker is not None
        if self._kafka is None:
            self._kafka = KafkaHelper(self.broker, f"chaos-{self.run_tag}")
        return self._kafka

    def s3_options(self, *, proxied: bool = True) -> dict[str, str]:
        """``s3.*`` options: through the fault proxy (drivers) or straight to the server."""
        assert self.s3 is not None and self.s3_proxy is not None
        options = self.s3.options()
        if proxied:
            options["s3.endpoint"] = self.s3_proxy.endpoint
        return options

    def state_uri(self, prefix: str) -> str:
        return f"s3://{self.bucket}/{prefix}"

    def store(self, prefix: str) -> StateStore:
        """A state store at :meth:`state_uri` ``(prefix)``, straight to the server (for the
        checks); the caller closes it."""
        assert self.s3 is not None
        return open_store(StoreConfig(self.state_uri(prefix), self.s3.settings()))

    def zookeeper_hosts(self, port: int | None = None) -> str:
        """The run's chroot on ZooKeeper, at ``port`` (a proxy) or at the server's own."""
        assert self.zk is not None
        return f"127.0.0.1:{port or self.zk.port}{self.zk_chroot}"

    def ensure_healthy(self) -> None:
        """Between rounds: faults cleared, ZooKeeper, the receiver and the workers up."""
        assert self.s3_proxy is not None and self.zk is not None and self.receiver is not None
        self.s3_proxy.clear()
        if not self.zk.running:
            self.zk.start()
        if not self.receiver.proc.running:
            self.receiver.start()
        if self.postgres is not None and not self.postgres.running:
            self.postgres.start()
        if self.cluster is not None:
            for worker in self.cluster.workers:
                if not worker.process.running:
                    worker.process.start()
            cluster = self.cluster
            wait_until(
                lambda: (cluster.alive_workers() or 0) >= len(cluster.workers),
                timeout=120,
                what="every Spark worker registered",
            )
