"""Spark Connect for tests, the demo and the benchmarks: a local Connect server from the
pip-installed pyspark, run in the foreground as a process the harness owns.

* :class:`SparkConnectServer` (a :class:`~harness.server.Server`): ``bin/spark-submit
  --class org.apache.spark.sql.connect.service.SparkConnectServer`` (what
  ``sbin/start-connect-server.sh --wait`` runs, without the daemonizing wrapper, so the
  pid is the server's JVM) on a free loopback port, ``local[2]``, the settings of
  :func:`harness.spark.local_spark_conf` (UI off, loopback, 1 GiB driver, 4 shuffle
  partitions), its own empty conf dir. Its Python workers (the data sources' planners on
  the server's driver, and the executors' readers and writers) run this interpreter with
  the repository on ``PYTHONPATH``, so they import ``datasource``, ``sink`` and
  ``state``; ``env`` adds variables such as :meth:`harness.s3.S3Server.exported_env`.
  ``.url`` (``sc://127.0.0.1:PORT``), ``.session()`` (a new client session). Its log
  (stdout, stderr and log4j at WARN, the server's own start line at INFO) goes to
  ``workdir / "connect-server.log"``.

``GTB_SPARK_REMOTE=sc://host:port`` names an external Connect server
(:meth:`SparkConnectServer.from_env`): its Python workers must import gtbarrier
themselves (README, "Using gtbarrier from a Spark Connect client").
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from harness.ports import LOOPBACK, free_port, port_open
from harness.process import ManagedProcess, repo_env
from harness.server import Server
from harness.spark import TEST_JVM_FLAGS, local_spark_conf, spark_home

if TYPE_CHECKING:
    from collections.abc import Mapping

SERVER_CLASS = "org.apache.spark.sql.connect.service.SparkConnectServer"
LOG_NAME = "connect-server.log"
START_TIMEOUT = 180.0
# Set by a caller to make *its* pyspark a Connect client; the server must not inherit them.
CLIENT_ONLY_ENV = ("SPARK_REMOTE", "SPARK_CONNECT_MODE_ENABLED", "SPARK_LOCAL_REMOTE")

LOG4J2 = """\
# Written by harness/spark_connect.py: everything to the console, i.e. the server's log file
rootLogger.level = WARN
rootLogger.appenderRef.console.ref = console
logger.connect.name = org.apache.spark.sql.connect.service.SparkConnectServer
logger.connect.level = INFO
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss.SSS} %p [%t] %c{1}: %m%n%ex
"""


def connect_url(host: str, port: int) -> str:
    return f"sc://{host}:{port}"


def remote_session(url: str) -> Any:
    """A new Spark Connect client session on ``url``, not made the default or active one
    (the caller's ``SparkSession.builder.getOrCreate()`` is left alone); ``.stop()`` it."""
    from pyspark.sql.connect.session import SparkSession as RemoteSparkSession

    return RemoteSparkSession(connection=url)


class SparkConnectServer(Server):
    """A local Spark Connect server (``local[2]``) or an external one (``GTB_SPARK_REMOTE``)."""

    NAME = "Spark Connect server"
    ENV = "GTB_SPARK_REMOTE"
    START_TIMEOUT = START_TIMEOUT

    def __init__(
        self,
        workdir: Path | None,
        *,
        env: Mapping[str, str] | None = None,
        conf: Mapping[str, str] | None = None,
        external_url: str | None = None,
    ) -> None:
        if external_url is not None:
            super().__init__(None)
            parsed = urlparse(external_url)
            if parsed.scheme != "sc" or not parsed.hostname:
                raise ValueError(f"{self.ENV} must be sc://host:port, not {external_url!r}")
            self.url = external_url
            self.host = parsed.hostname
            self.port = parsed.port or 15002
            return
        if workdir is None:
            raise ValueError("a workdir is needed to start a Spark Connect server")
        self.workdir = workdir
        self.host = LOOPBACK
        conf_dir = workdir / "conf"
        conf_dir.mkdir(parents=True, exist_ok=True)
        log4j = conf_dir / "log4j2.properties"
        log4j.write_text(LOG4J2)
        home = spark_home()
        self._spark_submit = str(home / "bin" / "spark-submit")
        settings = local_spark_conf(workdir)
        settings.update(
            {
                "spark.app.name": "gtbarrier-spark-connect",
                "spark.driver.extraJavaOptions": (
                    f"-Dlog4j2.configurationFile=file:{log4j} "
                    f"-Dderby.system.home={workdir / 'derby'} {TEST_JVM_FLAGS}"
                ),
                "spark.connect.grpc.binding.address": LOOPBACK,
                # Fail on a taken port (start_on_free_port picks another) instead of
                # moving to a port the harness does not know.
                "spark.connect.grpc.port.maxRetries": "0",
                **(conf or {}),
            }
        )
        self._settings = settings
        server_env = repo_env(
            {
                "SPARK_HOME": str(home),
                "SPARK_CONF_DIR": str(conf_dir),  # no machine-wide spark-defaults.conf
                "SPARK_LOCAL_IP": LOOPBACK,
                "SPARK_CONNECT_MODE": "0",  # as sbin/start-connect-server.sh
                "PYSPARK_PYTHON": sys.executable,
                **(env or {}),
            }
        )
        server_env.pop("PYSPARK_DRIVER_PYTHON", None)
        for name in CLIENT_ONLY_ENV:
            server_env.pop(name, None)
        super().__init__(
            ManagedProcess(
                "spark connect server", [], log_path=workdir / LOG_NAME, cwd=workdir, env=server_env
            )
        )
        self._use_port(free_port())

    @classmethod
    def external_at(cls, address: str) -> SparkConnectServer:
        return cls(None, external_url=address)

    @property
    def address(self) -> str:
        return self.url

    def _use_port(self, port: int) -> None:
        self.port = port
        self.url = connect_url(LOOPBACK, port)
        argv = [self._spark_submit, "--class", SERVER_CLASS, "--name", "Spark Connect server"]
        settings = {**self._settings, "spark.connect.grpc.binding.port": str(port)}
        for key, value in settings.items():
            argv += ["--conf", f"{key}={value}"]
        self._owned().argv = argv

    def ready(self) -> bool:
        """True once the gRPC port accepts connections and a client can run a query."""
        if not port_open(self.port, self.host):
            return False
        session = self.session()
        try:
            return bool(session.range(1).count() == 1)
        finally:
            session.stop()

    def session(self) -> Any:
        """A new client session on this server (:func:`remote_session`); ``.stop()`` it."""
        return remote_session(self.url)


__all__ = ["SERVER_CLASS", "SparkConnectServer", "connect_url", "remote_session"]
