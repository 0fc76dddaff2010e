"""Nothing leaks: every secret a pipeline uses is a unique marker, and no marker is found
in any place a secret could land.

Secured real servers, each credential a marker of its own:

* the gtkafka source reads through a SASL PLAIN gateway over TLS (``kafka.*``);
* ``consumer=kafka`` writes through a SCRAM-SHA-512 gateway (``consumer.kafka.*``), its
  dead-letter topic through another SASL PLAIN one (``errors.deadLetter.kafka.*``);
* the state store and every dead-letter path are on SeaweedFS with an identity whose access
  key and secret key are markers (``s3.accessKeyId``, ``s3.secretAccessKey``);
* ``consumer=postgres`` logs in over TLS with a SCRAM password (``consumer.postgres.dsn``);
* ``consumer=iceberg`` has a SQL catalog on that PostgreSQL server, its role's password in
  the catalog's URI (``consumer.iceberg.catalog.uri``);
* ``consumer=http`` sends a bearer token to the reference receiver over HTTPS
  (``consumer.http.token``);
* the snapshot coordinator of the kafka pipeline authenticates to ZooKeeper with digest
  credentials (``zookeeper_auth``).

Two runs, each a real driver program (:mod:`integration_tests.secrets_leak_driver_program`)
on the standalone cluster with Spark's event log on: one with every secret inline, one
with every secret as a reference (``${env:...}``, ``${file:...}``, ``${file:...:key}``).
Each runs the four pipelines (gtkafka -> barrier, poison rows into dead letters) and the
coordinator, then provokes failures: bad options next to secrets, starts with a wrong
password (a marker too), servers that cannot be reached. Then the CLI (``status``,
``epochs``, ``deadletters``, ``sweep``, and ``exporter``, scraped once) with the secrets as
``--option``s, and with a wrong one. Every Python process of the runs logs every record at
DEBUG (the driver to a file, Spark's Python workers to their stderr, through a
``sitecustomize`` on their path); Spark logs at INFO.

Searched, for each marker as bytes, base64 (any alignment, standard and URL-safe), hex and
URL-encoded: the driver's output and Python log, Spark's driver log, the executors' logs
(stdout, stderr and everything else in their work directories) and the cluster's daemons'
logs, Spark's event log, the checkpoints, every object of the S3 bucket (state store,
coordinator snapshots, dead letters), every znode under the pipeline's chroot, the output
and dead-letter topics (keys, values, headers), every row of every table in the
PostgreSQL schemas (the consumer's bookkeeping and the Iceberg catalog's), the Iceberg
warehouse, the receiver's database and log, every error's text (``str``, ``repr``,
traceback, Spark's JVM message and stack trace), and the CLI's output. And the stored
notebooks hold no marker and no credential.

What the inline run cannot keep out, and is therefore not searched in it, is said where
it is set up (:data:`INLINE_ONLY_EXEMPT`); docs/security.md, "Secrets", says it too.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import secrets
import subprocess
import sys
import time
import urllib.parse
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from harness.driver import DriverRunner
from harness.kafka import KafkaBroker, KafkaHelper
from harness.kafka_gateway import KafkaGateway, TlsFiles, make_tls_files
from harness.ports import LOOPBACK, free_port
from harness.postgres import PostgresServer
from harness.process import REPO_ROOT, repo_env
from harness.receiver import Receiver
from harness.s3 import S3Server
from harness.seaweedfs import ADMIN_ACTIONS, WeedIdentity
from harness.server import serving
from harness.spark import SparkCluster, write_log4j2
from harness.zookeeper import ZkHelper
from integration_tests.metrics_support import exporter, scrape

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

PROGRAM = Path(__file__).with_name("secrets_leak_driver_program.py")
DRIVER_TIMEOUT = 900.0
CLI_TIMEOUT = 120.0
RECORDS, PARTITIONS = 240, 2
RUNS = ("inline", "reference")
POISON = 3  # records whose value starts with "poison": a null gt, refused by every consumer

# Every secret of the runs; the "wrong_*" ones are given where a start must fail.
SECRET_NAMES = (
    "kafka_source",
    "kafka_sink",
    "kafka_dlq",
    "s3_access_key",
    "s3_secret_key",
    "pg_password",
    "iceberg_password",
    "http_token",
    "zk_password",
    "wrong_kafka",
    "wrong_pg",
    "wrong_iceberg",
    "wrong_http",
    "wrong_s3",
    "wrong_zk",
)


def make_marker(name: str) -> str:
    """A unique marker for ``name``: letters and digits only (any server takes it as a
    password or key) and long enough that a hit is never chance."""
    return "lk" + re.sub(r"[^a-z]", "", name) + secrets.token_hex(10)


MARKERS = {name: make_marker(name) for name in SECRET_NAMES}


def encoded_forms(marker: str) -> dict[str, bytes]:
    """How ``marker`` may appear in bytes: as is, URL-encoded, hex, and base64 (standard and
    URL-safe) at each of the three alignments a longer encoded text may put it at (the
    characters that depend on the marker alone)."""
    raw = marker.encode()
    forms = {
        "raw": raw,
        "url": urllib.parse.quote(marker, safe="").encode(),
        "hex": binascii.hexlify(raw),
        "HEX": binascii.hexlify(raw).upper(),
    }
    for shift in range(3):
        encoded = base64.b64encode(b"\0" * shift + raw)
        # characters that also depend on the padding before or the bytes after: cut off
        core = encoded[(shift * 4 + 2) // 3 + 1 : len(encoded) - 4]
        forms[f"base64+{shift}"] = core
        forms[f"base64url+{shift}"] = core.replace(b"+", b"-").replace(b"/", b"_")
    return forms


@dataclass
class Findings:
    """Marker hits: which secret, in which form, in which artefact, with some context."""

    markers: dict[str, str]
    hits: list[str] = field(default_factory=list)
    searched: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self._forms: list[tuple[str, str, bytes]] = []
        for name, marker in self.markers.items():
            seen: set[bytes] = set()
            for form, value in encoded_forms(marker).items():
                if value not in seen:  # a form that is another's bytes (URL-encoded letters)
                    seen.add(value)
                    self._forms.append((name, form, value))

    def search(self, label: str, blob: bytes | str) -> None:
        data = blob.encode("utf-8", "replace") if isinstance(blob, str) else blob
        self.searched.append(label)
        for name, form, value in self._forms:
            at = data.find(value)
            if at >= 0:
                context = data[max(0, at - 160) : at + len(value) + 60]
                self.hits.append(f"{name} ({form}) in {label}: ...{context!r}...")

    def search_tree(self, label: str, root: Path, exclude: tuple[Path, ...] = ()) -> None:
        for path in sorted(root.rglob("*")):
            if path.is_file() and not any(path.is_relative_to(e) for e in exclude):
                self.search(f"{label}: {path.relative_to(root)}", path.read_bytes())


# --- the servers ----------------------------------------------------------------------------


@dataclass
class Servers:
    """Every server of both runs, with the markers as their credentials."""

    kafka: KafkaHelper
    source_gw: KafkaGateway
    sink_gw: KafkaGateway
    dlq_gw: KafkaGateway
    tls: TlsFiles
    s3: S3Server
    bucket: str
    postgres: PostgresServer
    pg_role: str
    iceberg_role: str
    receiver: Receiver
    zk: ZkHelper
    cluster: SparkCluster
    topic: str
    out_topics: dict[str, str]  # by run: a topic belongs to one pipeline
    dlq_topics: dict[str, str]


@contextmanager
def pg_roles(server: PostgresServer, suffix: str) -> Iterator[tuple[str, str]]:
    """Two login roles on the secured server, each with a schema of its own (the search
    path's ``$user``: the Iceberg SQL catalog makes its tables there), passwords the
    markers; dropped afterwards."""
    app, ice = f"leak_app_{suffix}", f"leak_ice_{suffix}"
    with server.connect() as conn:
        for role, password in ((app, MARKERS["pg_password"]), (ice, MARKERS["iceberg_password"])):
            conn.execute(
                sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(
                    sql.Identifier(role), sql.Literal(password)
                )
            )
            conn.execute(
                sql.SQL("CREATE SCHEMA {} AUTHORIZATION {}").format(
                    sql.Identifier(role), sql.Identifier(role)
                )
            )
            # the consumer creates its table's schema if missing, which asks for this
            conn.execute(
                sql.SQL("GRANT CREATE ON DATABASE postgres TO {}").format(sql.Identifier(role))
            )
    try:
        yield app, ice
    finally:
        with server.connect() as conn:
            for role in (app, ice):
                conn.execute(sql.SQL("DROP OWNED BY {} CASCADE").format(sql.Identifier(role)))
                conn.execute(sql.SQL("DROP ROLE IF EXISTS {}").format(sql.Identifier(role)))


@pytest.fixture
def servers(  # noqa: PLR0917 - the fixtures it brings together
    kafka: KafkaHelper,
    kafka_broker: KafkaBroker,
    postgres_tls_server: PostgresServer,
    zk_auth: ZkHelper,
    spark_cluster: SparkCluster,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Servers]:
    base = tmp_path_factory.mktemp("leak-servers")
    tls = make_tls_files(base / "tls")

    def gateway(name: str, mechanism: str, with_tls: bool, password: str) -> KafkaGateway:
        return KafkaGateway(
            base / name,
            kafka_broker.bootstrap,
            tls=tls if with_tls else None,
            mechanism=mechanism,
            password=password,
        )

    source_gw = gateway("gw-source", "PLAIN", True, MARKERS["kafka_source"])
    sink_gw = gateway("gw-sink", "SCRAM-SHA-512", False, MARKERS["kafka_sink"])
    dlq_gw = gateway("gw-dlq", "PLAIN", True, MARKERS["kafka_dlq"])
    identity = WeedIdentity(
        "leak", MARKERS["s3_access_key"], MARKERS["s3_secret_key"], ADMIN_ACTIONS
    )
    s3 = S3Server(base / "s3", identities=[identity])
    receiver = Receiver(
        base / "receiver-data",
        base,
        tls=make_tls_files(base / "receiver-tls"),
        token=MARKERS["http_token"],
    )
    topic = kafka.create_topic(partitions=PARTITIONS)
    records = [
        (
            b"k%d" % i,
            (b"poison-%d" if i % (RECORDS // POISON) == 7 else b"v%d") % i,
            None,
            i % PARTITIONS,
        )
        for i in range(RECORDS)
    ]
    kafka.produce(topic, records)
    with (
        serving(source_gw, "leak source gateway", fixture="servers"),
        serving(sink_gw, "leak sink gateway", fixture="servers"),
        serving(dlq_gw, "leak dead-letter gateway", fixture="servers"),
        serving(s3, "leak s3 (seaweedfs)", fixture="servers"),
    ):
        bucket = f"leak-{uuid.uuid4().hex[:10]}"
        s3.client().create_bucket(Bucket=bucket)
        receiver.start()
        try:
            with pg_roles(postgres_tls_server, uuid.uuid4().hex[:8]) as (pg_role, iceberg_role):
                yield Servers(
                    kafka=kafka,
                    source_gw=source_gw,
                    sink_gw=sink_gw,
                    dlq_gw=dlq_gw,
                    tls=tls,
                    s3=s3,
                    bucket=bucket,
                    postgres=postgres_tls_server,
                    pg_role=pg_role,
                    iceberg_role=iceberg_role,
                    receiver=receiver,
                    zk=zk_auth,
                    cluster=spark_cluster,
                    topic=topic,
                    out_topics={r: kafka.create_topic(partitions=2) for r in RUNS},
                    dlq_topics={r: kafka.create_topic(partitions=1) for r in RUNS},
                )
        finally:
            receiver.stop()


# --- one run --------------------------------------------------------------------------------

# Where each secret is given by reference in the reference run: secrets the executors use
# (the source's password, the S3 keys) in files, which every process on this host reads;
# the others, resolved on the driver, in its environment.
FILE_REFERENCES = {
    "kafka_source": None,
    "kafka_dlq": None,
    "s3_access_key": "accessKey",
    "s3_secret_key": "secretKey",
    "http_token": "token",
    "wrong_kafka": None,
    "wrong_s3": None,
}

# What the inline run cannot keep out, and so does not make: py4j's DEBUG records in the
# driver program (every command it sends to the JVM, an option's value among them). py4j
# is PySpark's bridge, and the driver program never makes a client with those secrets, so
# gtbarrier cannot know them there: the inline run keeps py4j at INFO, the reference run
# logs it at DEBUG too (docs/security.md: use references, or keep py4j below DEBUG).
INLINE_ONLY_EXEMPT = ("py4j DEBUG records of the driver program",)


@dataclass
class Run:
    """One run's options: every secret inline, or every secret by reference."""

    name: str  # "inline" or "reference"
    servers: Servers
    out: Path  # everything the run makes, searched whole
    inputs: Path  # the run's config and secret files: never searched
    env: dict[str, str] = field(default_factory=dict)
    exporter_runs: int = 0

    def secret(self, name: str) -> str:
        if self.name == "inline":
            return MARKERS[name]
        if name in FILE_REFERENCES:
            key = FILE_REFERENCES[name]
            if key is None:
                path = self.inputs / f"{name}.secret"
                path.write_text(MARKERS[name] + "\n")
                return f"${{file:{path}}}"
            path = self.inputs / "secrets.properties"
            with path.open("a") as f:
                f.write(f"{key}{name} = {MARKERS[name]}\n")
            return f"${{file:{path}:{key}{name}}}"
        variable = f"GTB_LEAK_{name.upper()}"
        self.env[variable] = MARKERS[name]
        return f"${{env:{variable}}}"

    # --- options ---

    def pipeline(self, what: str) -> str:
        return f"leak-{self.name}-{what}"

    def s3_options(
        self, *, secret: str = "s3_secret_key", endpoint: str | None = None
    ) -> dict[str, str]:
        return {
            "s3.endpoint": endpoint or self.servers.s3.endpoint,
            "s3.region": "us-east-1",
            "s3.accessKeyId": self.secret("s3_access_key"),
            "s3.secretAccessKey": self.secret(secret),
        }

    def state(self, pipeline: str) -> str:
        return f"s3://{self.servers.bucket}/{self.name}/state"

    def dead_letters(self, pipeline: str) -> str:
        return f"s3://{self.servers.bucket}/{self.name}/dead/{pipeline}"

    def source(self, pipeline: str, **extra: str) -> dict[str, str]:
        gw = self.servers.source_gw
        assert gw.tls is not None
        return {
            "pipeline.id": pipeline,
            "state.uri": self.state(pipeline),
            **self.s3_options(),
            "kafka.bootstrap.servers": gw.bootstrap,
            "kafka.security.protocol": "SASL_SSL",
            "kafka.ssl.cafile": str(gw.tls.ca),
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.plain.username": gw.user,
            "kafka.sasl.plain.password": self.secret("kafka_source"),
            "subscribe": self.servers.topic,
            "startingOffsets": "earliest",
            "maxOffsetsPerTrigger": "120",
            "kafkaConsumer.pollTimeoutMs": "20000",
            **extra,
        }

    def sink(self, pipeline: str, **extra: str) -> dict[str, str]:
        return {
            "pipeline.id": pipeline,
            "state.uri": self.state(pipeline),
            **self.s3_options(),
            "errors.tolerance": "all",
            "errors.deadLetter.path": self.dead_letters(pipeline),
            "delivery.retryBackoffMs": "50",
            **extra,
        }

    def kafka_sink(self) -> dict[str, str]:
        sink, dlq = self.servers.sink_gw, self.servers.dlq_gw
        assert dlq.tls is not None
        return {
            "consumer": "kafka",
            "consumer.topic": self.servers.out_topics[self.name],
            "consumer.kafka.bootstrap.servers": sink.bootstrap,
            "consumer.kafka.security.protocol": "SASL_PLAINTEXT",
            "consumer.kafka.sasl.mechanism": "SCRAM-SHA-512",
            "consumer.kafka.sasl.plain.username": sink.user,
            "consumer.kafka.sasl.plain.password": self.secret("kafka_sink"),
            "ack.timeoutMs": "20000",
            "errors.deadLetter.topic": self.servers.dlq_topics[self.name],
            "errors.deadLetter.kafka.bootstrap.servers": dlq.bootstrap,
            "errors.deadLetter.kafka.security.protocol": "SASL_SSL",
            "errors.deadLetter.kafka.ssl.cafile": str(dlq.tls.ca),
            "errors.deadLetter.kafka.sasl.mechanism": "PLAIN",
            "errors.deadLetter.kafka.sasl.plain.username": dlq.user,
            "errors.deadLetter.kafka.sasl.plain.password": self.secret("kafka_dlq"),
        }

    def pg_dsn(self, password: str = "pg_password", port: int | None = None) -> str:
        pg = self.servers.postgres
        assert pg.tls is not None
        return make_conninfo(
            "",
            host=LOOPBACK,
            port=port or pg.port,
            user=self.servers.pg_role,
            dbname="postgres",
            sslmode="verify-full",
            sslrootcert=str(pg.tls.ca),
            password=self.secret(password),
        )

    def pg_url(self, password: str = "pg_password") -> str:
        pg = self.servers.postgres
        assert pg.tls is not None
        return (
            f"postgresql://{self.servers.pg_role}:{self.secret(password)}@{LOOPBACK}:{pg.port}"
            f"/postgres?sslmode=verify-full&sslrootcert={pg.tls.ca}"
        )

    def postgres_sink(self, *, url: bool = False, **dsn: Any) -> dict[str, str]:
        return {
            "consumer": "postgres",
            "consumer.postgres.dsn": self.pg_url(**dsn) if url else self.pg_dsn(**dsn),
            "consumer.postgres.table": f"{self.servers.pg_role}.events_{self.name}",
        }

    def http_sink(self, token: str = "http_token", url: str | None = None) -> dict[str, str]:
        receiver = self.servers.receiver
        assert receiver.tls is not None
        return {
            "consumer": "http",
            "consumer.url": url or f"{receiver.url}/{self.name}",
            "consumer.http.token": self.secret(token),
            "consumer.http.caFile": str(receiver.tls.ca),
        }

    def catalog(
        self, password: str = "iceberg_password", port: int | None = None
    ) -> dict[str, str]:
        pg = self.servers.postgres
        assert pg.tls is not None
        uri = (
            f"postgresql+psycopg://{self.servers.iceberg_role}:{self.secret(password)}"
            f"@{LOOPBACK}:{port or pg.port}/postgres"
            f"?sslmode=verify-full&sslrootcert={pg.tls.ca}"
        )
        return {
            "consumer.iceberg.catalog.type": "sql",
            "consumer.iceberg.catalog.uri": uri,
            "consumer.iceberg.catalog.warehouse": f"file://{self.out / 'warehouse'}",
        }

    def iceberg_sink(self, **catalog: Any) -> dict[str, str]:
        return {
            "consumer": "iceberg",
            "consumer.iceberg.table": f"leak.events_{self.name}",
            **{k: v for k, v in self.catalog(**catalog).items()},
        }

    def zookeeper_auth(self, password: str = "zk_password") -> str:
        return f"digest:gtb:{self.secret(password)}"

    # --- what the driver does ---

    def query(self, what: str, sink: dict[str, str], **source: str) -> dict[str, Any]:
        pipeline = self.pipeline(what)
        return {
            "name": f"{self.name}_{what}".replace("-", "_"),
            "source": self.source(pipeline, **source),
            "sink": {**self.sink(pipeline), **sink},
            "checkpoint": str(self.out / "checkpoints" / what),
        }

    def queries(self) -> list[dict[str, Any]]:
        return [
            self.query("kafka", self.kafka_sink()),
            self.query("postgres", self.postgres_sink(url=True)),
            self.query("http", self.http_sink()),
            self.query("iceberg", self.iceberg_sink()),
        ]

    def coordinator(
        self, password: str = "zk_password", hosts: str | None = None
    ) -> dict[str, Any]:
        pipeline = self.pipeline("kafka")
        return {
            "pipeline_id": pipeline,
            "state_uri": self.state(pipeline),
            "checkpoint_location": str(self.out / "checkpoints" / "kafka"),
            "zookeeper_hosts": hosts or self.servers.zk.hosts,
            "zookeeper_auth": self.zookeeper_auth(password),
            "state_options": self.s3_options(),
            "snapshot_period": "1s",
            "reset_timeout": "20s",
        }

    def failures(self) -> list[dict[str, Any]]:
        """Starts that must fail, each next to secrets, each with a pipeline of its own."""
        closed = free_port()
        failing = {
            "quick": {"delivery.maxRetries": "0", "delivery.retryBackoffMs": "10"},
            "kafka_quick": {"kafkaConsumer.pollTimeoutMs": "4000", "fetchOffset.numRetries": "0"},
        }
        out = [
            self.query("bad-sink-option", {**self.postgres_sink(), "delivery.maxRetries": "many"}),
            self.query("bad-source-option", self.http_sink(), maxOffsetsPerTrigger="lots"),
            # another consumer's secret option, which does not apply here
            self.query(
                "misplaced-secret",
                {**self.http_sink(), "consumer.postgres.dsn": self.pg_url()},
            ),
            self.query(
                "bad-catalog",
                {
                    **self.iceberg_sink(password="wrong_iceberg"),
                    "consumer.iceberg.catalog.type": "nosuchcatalog",
                },
            ),
            self.query(
                "wrong-kafka-password",
                self.http_sink(),
                **{"kafka.sasl.plain.password": self.secret("wrong_kafka")},
                **failing["kafka_quick"],
            ),
            self.query(
                "wrong-pg-password",
                {**self.postgres_sink(url=True, password="wrong_pg"), **failing["quick"]},
            ),
            self.query("wrong-iceberg-password", self.iceberg_sink(password="wrong_iceberg")),
            self.query(
                "wrong-http-token", {**self.http_sink(token="wrong_http"), **failing["quick"]}
            ),
            self.query(
                "wrong-s3-secret",
                {**self.postgres_sink(), **self.s3_options(secret="wrong_s3")},
                **self.s3_options(secret="wrong_s3"),
            ),
            self.query("unreachable-pg", {**self.postgres_sink(port=closed), **failing["quick"]}),
            self.query("unreachable-iceberg", self.iceberg_sink(port=closed)),
            self.query(
                "unreachable-http",
                {**self.http_sink(url=f"https://{LOOPBACK}:{closed}/x"), **failing["quick"]},
            ),
            self.query(
                "unreachable-kafka",
                self.http_sink(),
                **{"kafka.bootstrap.servers": f"{LOOPBACK}:{closed}"},
                **failing["kafka_quick"],
            ),
            self.query(
                "unreachable-s3",
                self.http_sink(),
                **self.s3_options(endpoint=f"http://{LOOPBACK}:{closed}"),
                **{"s3.retryDeadline": "2s", "s3.connectTimeout": "1s"},
            ),
        ]
        for spec in out:
            spec["kind"] = "query"
        out += [
            {
                "name": f"{self.name}_wrong_zk_password",
                "kind": "coordinator",
                "args": self.coordinator(password="wrong_zk"),
            },
            {
                "name": f"{self.name}_unreachable_zk",
                "kind": "coordinator",
                "args": {**self.coordinator(hosts=f"{LOOPBACK}:{closed}"), "reset_timeout": "4s"},
            },
        ]
        return out

    def config(self) -> dict[str, Any]:
        cluster = self.servers.cluster
        events = self.out / "events"
        events.mkdir(parents=True)
        log4j = write_log4j2(
            self.out / "log4j2.properties",
            self.out / "spark-driver.log",
            level="INFO",
            console_level="WARN",
        )
        hooks = self.out / "python-hooks"
        hooks.mkdir()
        # Every Python process of the run logs every record at DEBUG to its stderr (the
        # driver's Python workers to the driver's output, the executors' to their logs).
        (hooks / "sitecustomize.py").write_text(
            "import logging, sys\n"
            "logging.basicConfig(level=logging.DEBUG, stream=sys.stderr,\n"
            "    format='%(asctime)s %(process)d %(levelname)s %(name)s: %(message)s')\n"
            + (
                "logging.getLogger('py4j').setLevel(logging.INFO)\n"
                if self.name == "inline"
                else ""
            )
        )
        self.env["PYTHONPATH"] = f"{hooks}:{REPO_ROOT}"
        self.env["GTBARRIER_LOG_LEVEL"] = "DEBUG"
        spark_conf = {
            **cluster.driver_conf(),
            "spark.app.name": f"secrets-never-leak-{self.name}",
            "spark.eventLog.enabled": "true",
            "spark.eventLog.dir": f"file://{events}",
            "spark.eventLog.compress": "false",
            "spark.local.dir": str(self.out / "spark-local"),
            "spark.executorEnv.PYTHONPATH": f"{hooks}:{REPO_ROOT}",
            "spark.executorEnv.GTBARRIER_LOG_LEVEL": "DEBUG",
            "spark.driver.extraJavaOptions": f"-Dlog4j2.configurationFile=file:{log4j}",
        }
        queries = self.queries()
        return {
            "spark_conf": spark_conf,
            "python_log": str(self.out / "driver-python.log"),
            "coordinator": {"args": self.coordinator()},
            "queries": queries,
            "failures": self.failures(),
        }

    # --- the CLI ---

    def exporter(self, *args: str) -> tuple[str, str]:
        """``gtbarrier exporter`` with ``args``, scraped once, then stopped: ``(the scrape,
        its output)``, which is kept in the run's directory (searched with it)."""
        self.exporter_runs += 1
        output = self.out / f"exporter-{self.exporter_runs}.log"
        with exporter(args, env=repo_env(self.env), output=output, timeout=CLI_TIMEOUT) as run:
            scraped, _ = scrape(run.url, timeout=CLI_TIMEOUT)
        return scraped, run.text()

    def exporter_calls(self) -> list[tuple[list[str], bool]]:
        """``(arguments, must read the pipeline)`` of every exporter run: with every secret,
        and with a wrong ZooKeeper password (each scrape then fails and logs why)."""
        return [
            (self.status_args()[1:], True),
            (self.status_args(zk_password="wrong_zk")[1:], False),
        ]

    def cli(self, *args: str) -> tuple[int, str]:
        argv = [sys.executable, "-m", "gtbarrier", *args]
        proc = subprocess.run(
            argv,
            cwd=REPO_ROOT,
            env=repo_env(self.env),
            capture_output=True,
            text=True,
            timeout=CLI_TIMEOUT,
            check=False,
        )
        return proc.returncode, f"{proc.stdout}\n{proc.stderr}"

    def status_args(self, zk_password: str | None = None) -> list[str]:
        """``status`` of the kafka pipeline with every secret it can take: the store's, the
        ZooKeeper credentials (``zk_password`` instead of the right one), Kafka's."""
        gw = self.servers.source_gw
        assert gw.tls is not None
        kafka = self.pipeline("kafka")
        store = [f"--option={k}={v}" for k, v in self.s3_options().items()]
        kafka_settings = {
            "kafka.security.protocol": "SASL_SSL",
            "kafka.ssl.cafile": str(gw.tls.ca),
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.plain.username": gw.user,
            "kafka.sasl.plain.password": self.secret("kafka_source"),
        }
        return [
            "status",
            "--pipeline",
            kafka,
            "--state-uri",
            self.state(kafka),
            *store,
            "--zookeeper",
            self.servers.zk.hosts,
            "--zookeeper-auth",
            self.zookeeper_auth()
            if zk_password is None
            else self.zookeeper_auth(password=zk_password),
            "--bootstrap",
            gw.bootstrap,
            *(f"--option={k}={v}" for k, v in kafka_settings.items()),
            "--dead-letters",
            self.dead_letters(kafka),
        ]

    def cli_calls(self) -> list[tuple[list[str], bool]]:
        """``(arguments, must succeed)`` of every CLI call."""
        kafka = self.pipeline("kafka")
        store = [f"--option={k}={v}" for k, v in self.s3_options().items()]
        wrong_store = [f"--option={k}={v}" for k, v in self.s3_options(secret="wrong_s3").items()]
        status = self.status_args()
        iceberg = self.pipeline("iceberg")

        def sweep_iceberg(password: str = "iceberg_password") -> list[str]:
            return [
                "sweep",
                "--pipeline",
                iceberg,
                "--state-uri",
                self.state(iceberg),
                *store,
                *(f"--option={k}={v}" for k, v in self.iceberg_sink(password=password).items()),
            ]

        return [
            ([*status, "--json"], True),
            (status, True),
            (
                ["epochs", "--pipeline", kafka, "--state-uri", self.state(kafka), *store, "--json"],
                True,
            ),
            (
                [
                    "deadletters",
                    "--pipeline",
                    kafka,
                    "--state-uri",
                    self.state(kafka),
                    *store,
                    "--dead-letters",
                    self.dead_letters(kafka),
                    "--json",
                ],
                True,
            ),
            (
                [
                    "deadletters",
                    "--pipeline",
                    kafka,
                    "--state-uri",
                    self.state(kafka),
                    *store,
                    "--dead-letters",
                    self.dead_letters(kafka),
                    "--bundle",
                    "1",
                ],
                True,
            ),
            ([*sweep_iceberg(), "--json"], True),
            (
                [
                    "sweep",
                    "--pipeline",
                    kafka,
                    "--state-uri",
                    self.state(kafka),
                    *store,
                    *(
                        f"--option={k}={v}"
                        for k, v in self.kafka_sink().items()
                        if k.startswith("consumer")
                    ),
                    "--delete",
                    "--zookeeper",
                    self.servers.zk.hosts,
                    "--zookeeper-auth",
                    self.zookeeper_auth(),
                ],
                True,
            ),
            # failing: a wrong ZooKeeper password, a wrong S3 secret key, a wrong catalog
            (
                [
                    "status",
                    "--pipeline",
                    kafka,
                    "--state-uri",
                    self.state(kafka),
                    *store,
                    "--zookeeper",
                    self.servers.zk.hosts,
                    "--zookeeper-auth",
                    self.zookeeper_auth(password="wrong_zk"),
                ],
                False,
            ),
            (
                ["epochs", "--pipeline", kafka, "--state-uri", self.state(kafka), *wrong_store],
                False,
            ),
            (sweep_iceberg(password="wrong_iceberg"), False),
        ]


# --- what a run left ------------------------------------------------------------------------


def s3_objects(servers: Servers) -> Iterator[tuple[str, bytes]]:
    client = servers.s3.client()
    for page in client.get_paginator("list_objects_v2").paginate(Bucket=servers.bucket):
        for item in page.get("Contents", []):
            key = item["Key"]
            body = client.get_object(Bucket=servers.bucket, Key=key)["Body"].read()
            yield key, key.encode() + b"\n" + body


def znodes(zk: ZkHelper) -> Iterator[tuple[str, bytes]]:
    admin = zk.admin()
    stack = ["/"]
    while stack:
        path = stack.pop()
        data, _ = admin.get(path)
        acl, _ = admin.get_acls(path)
        yield path, path.encode() + b"\n" + (data or b"") + b"\n" + repr(acl).encode()
        stack += [f"{path.rstrip('/')}/{child}" for child in admin.get_children(path)]


def topic_records(servers: Servers, topic: str) -> bytes:
    out = []
    for r in servers.kafka.consume_all(topic):
        out.append(repr((r.key, r.value, r.headers)).encode())
        out += [r.key or b"", r.value or b"", *(v for _, v in r.headers)]
    return b"\n".join(out)


def postgres_rows(servers: Servers) -> Iterator[tuple[str, bytes]]:
    with servers.postgres.connect() as conn:
        tables = conn.execute(
            "SELECT table_schema, table_name FROM information_schema.tables "
            "WHERE table_schema = ANY(%s)",
            ([servers.pg_role, servers.iceberg_role],),
        ).fetchall()
        for schema, table in tables:
            query = sql.SQL("SELECT row_to_json(t)::text FROM {}.{} t").format(
                sql.Identifier(schema), sql.Identifier(table)
            )
            rows = [r[0] for r in conn.execute(query).fetchall()]
            yield f"{schema}.{table}", "\n".join(rows).encode()


def run_leaves(
    run: Run, driver_output: Path, runner: DriverRunner, report: dict[str, Any], findings: Findings
) -> None:
    """Search everything ``run`` left."""
    servers = run.servers
    findings.search(f"{run.name}: driver output", driver_output.read_bytes())
    findings.search_tree(f"{run.name}: run directory", run.out)
    # the driver's working directory (Spark's warehouse and Derby files, if any), but not
    # the other run's output
    others = tuple(p for p in runner.workdir.glob("driver-*.out") if p != driver_output)
    findings.search_tree(f"{run.name}: driver work directory", runner.workdir, exclude=others)
    app_id = report.get("app_id", "")
    for worker in servers.cluster.workers:
        app_dir = worker.work_dir / app_id
        assert app_dir.is_dir(), f"no executor directory {app_dir}"
        findings.search_tree(f"{run.name}: executors of {worker.name}", app_dir)
    findings.search(f"{run.name}: report", json.dumps({**report, "cli": None}))


def everything_else(servers: Servers, findings: Findings) -> None:
    """What both runs left in the servers, and the cluster's own logs."""
    for name, path in servers.cluster.logs().items():
        findings.search(f"cluster log {name}", path.read_bytes())
    for key, blob in s3_objects(servers):
        findings.search(f"s3 object {key}", blob)
    for node, blob in znodes(servers.zk):
        findings.search(f"znode {node}", blob)
    for topic in (*servers.out_topics.values(), *servers.dlq_topics.values()):
        findings.search(f"topic {topic}", topic_records(servers, topic))
    for table, blob in postgres_rows(servers):
        findings.search(f"postgres table {table}", blob)
    findings.search("receiver log", servers.receiver.log_text())
    findings.search_tree("receiver directory", servers.receiver.directory)


def run_once(
    name: str, servers: Servers, runner: DriverRunner, root: Path, findings: Findings
) -> dict[str, Any]:
    out, inputs = root / name / "out", root / name / "inputs"
    out.mkdir(parents=True)
    inputs.mkdir(parents=True)
    run = Run(name, servers, out, inputs)
    config = run.config()
    config_path = inputs / "config.json"
    config_path.write_text(json.dumps(config))
    report_path = out / "report.json"
    started = time.monotonic()
    proc = runner.run(
        PROGRAM, "--config", str(config_path), "--report", str(report_path), env=run.env
    )
    code = proc.wait(DRIVER_TIMEOUT)
    assert code == 0 and report_path.exists(), proc.output()[-5000:]
    report: dict[str, Any] = json.loads(report_path.read_text())
    report["seconds"] = time.monotonic() - started
    # what did not go as it must: reported with the marker hits, at the end
    report["cli"] = []
    problems = report["problems"] = [
        f"query {q} failed: {texts[0][:3000]}" for q, texts in report["queries"].items() if texts
    ]
    if report.get("snapshot") is None:
        problems.append("the coordinator took no snapshot")
    problems += [
        f"{f} did not fail" for f, t in report["failures"].items() if t[0].startswith("NO ERROR")
    ]
    for args, must_succeed in run.cli_calls():
        code, text = run.cli(*args)
        # the output alone is searched: the command line holds the secrets the test gave
        findings.search(f"{name}: output of gtbarrier {args[0]} ({len(report['cli'])})", text)
        report["cli"].append(text)
        if (code == 0) != must_succeed:
            problems.append(f"gtbarrier {args[0]} exited {code}: {text[-3000:]}")
    for args, must_read in run.exporter_calls():
        scraped, text = run.exporter(*args)
        findings.search(f"{name}: scrape and output of gtbarrier exporter", scraped + text)
        report["cli"].append(text)
        if ("gtbarrier_gt_last{" in scraped) != must_read:
            problems.append(f"gtbarrier exporter scraped {scraped[:2000]!r}: {text[-3000:]}")
    run_leaves(run, proc.output_path, runner, report, findings)
    return report


def test_no_secret_leaks_inline_or_by_reference(
    servers: Servers, driver: DriverRunner, tmp_path: Path
) -> None:
    findings = Findings(MARKERS)
    reports = {name: run_once(name, servers, driver, tmp_path, findings) for name in RUNS}
    everything_else(servers, findings)

    # the runs did use every secret: data arrived everywhere, dead letters too
    problems = [p for r in reports.values() for p in r["problems"]]
    for run in RUNS:
        delivered = servers.kafka.consume_all(servers.out_topics[run])
        if len(delivered) != RECORDS - POISON:
            problems.append(f"{run}: {len(delivered)} records in the output topic")
        dead = servers.kafka.consume_all(servers.dlq_topics[run])
        if len(dead) != POISON:
            problems.append(f"{run}: {len(dead)} records in the dead-letter topic")
    searched = "\n".join(findings.searched)
    for what in (
        "events",
        "checkpoints",
        "executors",
        "znode",
        "s3 object",
        "postgres table",
        "warehouse",
        "spark-driver.log",
        "driver-python.log",
    ):
        if what not in searched:
            problems.append(f"nothing of {what} was searched")
    seconds = {name: round(r["seconds"]) for name, r in reports.items()}
    (tmp_path / "hits.txt").write_text("\n".join(findings.hits))  # all of them, for a look
    assert not findings.hits and not problems, (
        "\n".join(problems) + "\n"
        f"{len(findings.hits)} marker hit(s) in {len(findings.searched)} artefacts "
        f"(runs took {seconds}s):\n" + "\n".join(findings.hits[:80])
    )


# --- the stored notebooks -------------------------------------------------------------------

NOTEBOOKS = sorted((REPO_ROOT / "notebooks").glob("*.ipynb"))
# An option or setting that holds a credential, followed by a value that is not a secret
# reference: in code (`.option("s3.secretAccessKey", "...")`, `password="..."`) or in
# output (`secretAccessKey=...`, a DSN's `password=...`, a URL's `user:password@`).
CREDENTIAL = re.compile(
    r"""(?ix)
    (?:secret[._-]?access[._-]?key|access[._-]?key[._-]?id|sasl[._]plain[._]password
       |password|passwd|http[._]token|bearer|jaas[._]config|aws_session_token|zookeeper_auth)
    ["']?\s*(?:[=:,]|\)\s*,)\s*["']?(?!\$\{|<|\*|None|null|\)|["'])([^\s"',)}]{4,})
    |://[^/\s:@"']+:(?!\$\{)([^/\s@"']{4,})@
    """
)


def test_the_stored_notebooks_hold_no_marker_and_no_credential() -> None:
    assert NOTEBOOKS, "no notebooks found"
    findings = Findings(MARKERS)
    credentials = []
    for path in NOTEBOOKS:
        text = path.read_text()
        findings.search(path.name, text)
        credentials += [f"{path.name}: {m.group(0)!r}" for m in CREDENTIAL.finditer(text)]
    assert not findings.hits and not credentials, [*findings.hits, *credentials]
