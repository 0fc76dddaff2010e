"""The consumers a chaos round delivers into, and how the round reads back what they hold.

Pluggable: a consumer is a :class:`ChaosConsumer` subclass registered with
:func:`register`; it names its sink options for a round and reads the bundles the
consumer holds, in delivery order where the consumer shows it (kafka: topic order; http:
the receiver's insertion order), else in bundle order (file and s3 name their objects by
bundle). ``shape`` says what the sink input must look like (``"kafka"``: a ``value``
column, see :meth:`~integration_tests.chaos.queries.Query.for_kafka`). A consumer added
to the product later (iceberg, delta) gets a class here and is drawn like the others.
"""

from __future__ import annotations

import random
import re
import sqlite3
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import pyarrow as pa
import pyarrow.parquet as pq

from integration_tests.chaos.servers import ChaosServers
from sink.faults import KILL_STEPS
from state.records.gt import GT_FIELDS


@dataclass(frozen=True)
class DeliveredBundle:
    """One bundle as the consumer holds it (a kafka bundle: its messages' key and value)."""

    bundle_id: int
    rows: list[dict[str, Any]]


@dataclass(frozen=True)
class ConsumerSetup:
    """What a round gives its consumer."""

    round_id: str  # unique in the run; letters, digits and '-'
    workdir: Path
    topic: str  # the round's input topic
    servers: ChaosServers
    rng: random.Random


class ChaosConsumer(ABC):
    """One consumer for one round."""

    name: ClassVar[str]
    shape: ClassVar[str] = "arrow"
    ordered: ClassVar[bool] = False  # read() returns bundles in delivery order
    #: The protocol steps the driver can be killed at with this consumer (only a consumer
    #: with a commit of its own has ``after_consumer_commit``).
    kill_steps: ClassVar[tuple[str, ...]] = tuple(
        s for s in KILL_STEPS if s != "after_consumer_commit"
    )

    def __init__(self, setup: ConsumerSetup) -> None:
        self.setup = setup

    @abstractmethod
    def sink_options(self) -> dict[str, str]:
        """The barrier sink's consumer options for this round (``s3.*`` come from the job)."""

    @abstractmethod
    def read(self) -> list[DeliveredBundle]:
        """Every bundle the consumer holds (see the module docstring for the order)."""

    def describe(self) -> str:
        return self.name


CONSUMERS: dict[str, type[ChaosConsumer]] = {}


def register(cls: type[ChaosConsumer]) -> type[ChaosConsumer]:
    """Make ``cls`` available to ``--consumers`` under ``cls.name``."""
    CONSUMERS[cls.name] = cls
    return cls


_BUNDLE_NAME = re.compile(r"bundle-(\d+)(?:-(\d+))?\.parquet$")


def _bundle_files(names: list[str]) -> dict[int, list[str]]:
    """``bundle-<k>.parquet`` / ``bundle-<k>-<part>.parquet`` names grouped by bundle."""
    found: dict[int, list[str]] = {}
    for name in sorted(names):
        m = _BUNDLE_NAME.search(name)
        if m is not None and "/_" not in name and "/." not in name:
            found.setdefault(int(m.group(1)), []).append(name)
    return found


@register
class FileConsumer(ChaosConsumer):
    name = "file"

    @property
    def directory(self) -> Path:
        return self.setup.workdir / "out"

    def sink_options(self) -> dict[str, str]:
        return {"consumer": "file", "consumer.path": str(self.directory)}

    def read(self) -> list[DeliveredBundle]:
        if not self.directory.exists():
            return []
        names = [p.name for p in self.directory.iterdir() if not p.name.startswith((".", "_"))]
        return [
            DeliveredBundle(
                k, [r for f in files for r in pq.read_table(self.directory / f).to_pylist()]
            )
            for k, files in sorted(_bundle_files(names).items())
        ]


@register
class S3Consumer(ChaosConsumer):
    name = "s3"

    def __init__(self, setup: ConsumerSetup) -> None:
        super().__init__(setup)
        self.layout = setup.rng.choice(("bundle", "parts"))
        self.prefix = f"{setup.round_id}/out"

    def describe(self) -> str:
        return f"s3 (layout={self.layout})"

    def sink_options(self) -> dict[str, str]:
        return {
            "consumer": "s3",
            "consumer.path": f"s3://{self.setup.servers.bucket}/{self.prefix}",
            "consumer.s3.layout": self.layout,
        }

    def read(self) -> list[DeliveredBundle]:
        assert self.setup.servers.s3 is not None
        client = self.setup.servers.s3.client()
        bucket = self.setup.servers.bucket
        names: list[str] = []
        for page in client.get_paginator("list_objects_v2").paginate(
            Bucket=bucket, Prefix=f"{self.prefix}/bundle-"
        ):
            names.extend(o["Key"] for o in page.get("Contents", []))
        out = []
        for k, keys in sorted(_bundle_files(names).items()):
            rows: list[dict[str, Any]] = []
            for key in keys:
                body = client.get_object(Bucket=bucket, Key=key)["Body"].read()
                rows.extend(pq.read_table(pa.BufferReader(body)).to_pylist())
            out.append(DeliveredBundle(k, rows))
        return out


@register
class KafkaConsumer(ChaosConsumer):
    name = "kafka"
    shape = "kafka"
    ordered = True

    def __init__(self, setup: ConsumerSetup) -> None:
        super().__init__(setup)
        self.topic = setup.servers.kafka().create_topic(1, name=f"{setup.topic}-out")

    def sink_options(self) -> dict[str, str]:
        assert self.setup.servers.broker is not None
        return {
            "consumer": "kafka",
            "consumer.kafka.bootstrap.servers": self.setup.servers.broker.bootstrap,
            "consumer.topic": self.topic,
        }

    def read(self) -> list[DeliveredBundle]:
        out: list[DeliveredBundle] = []
        for rec in self.setup.servers.kafka().consume_all(self.topic):
            headers = dict(rec.headers or [])
            if "gtb.bundle" not in headers:
                continue
            bundle = int(headers["gtb.bundle"])
            row = {"key": rec.key, "value": rec.value, "index": int(headers["gtb.index"])}
            if not out or out[-1].bundle_id != bundle:
                out.append(DeliveredBundle(bundle, []))
            out[-1].rows.append(row)
        return out


@register
class HttpConsumer(ChaosConsumer):
    name = "http"
    ordered = True

    @property
    def stream(self) -> str:
        return self.setup.round_id

    def sink_options(self) -> dict[str, str]:
        receiver = self.setup.servers.receiver
        assert receiver is not None
        return {"consumer": "http", "consumer.url": f"{receiver.url}/{self.stream}"}

    def read(self) -> list[DeliveredBundle]:
        receiver = self.setup.servers.receiver
        assert receiver is not None
        conn = sqlite3.connect(receiver.directory / "receiver.sqlite3")
        try:
            rows = conn.execute(
                "SELECT bundle_id, body FROM bundles WHERE stream = ? ORDER BY rowid",
                ("/" + self.stream,),
            ).fetchall()
        finally:
            conn.close()
        return [
            DeliveredBundle(int(b), pa.ipc.open_stream(bytes(body)).read_all().to_pylist())
            for b, body in rows
        ]


@register
class PostgresConsumer(ChaosConsumer):
    """A table per round; a row's bundle is the one whose ``gtbarrier_bundles`` row has
    its ``xmin`` (one transaction per bundle), bundles in commit order."""

    name = "postgres"
    kill_steps = KILL_STEPS
    ordered = True

    @property
    def table(self) -> str:
        return "r_" + re.sub(r"[^A-Za-z0-9]", "_", self.setup.round_id)

    def sink_options(self) -> dict[str, str]:
        server = self.setup.servers.postgres
        assert server is not None
        return {
            "consumer": "postgres",
            "consumer.postgres.dsn": server.dsn,
            "consumer.postgres.table": f"chaos.{self.table}",
        }

    def create_labelled(self, length: int) -> None:
        """Create the round's table before the driver does, with the stateless query's
        columns and ``label varchar(length)`` (a setting change, :mod:`.variants`)."""
        server = self.setup.servers.postgres
        assert server is not None
        with server.connect() as conn:
            conn.execute("CREATE SCHEMA IF NOT EXISTS chaos")
            conn.execute(
                f"CREATE TABLE chaos.{self.table} (key bytea, value bytea, gt_epoch bigint, "
                f"gt_topic text, gt_partition integer, gt_offset bigint, "
                f"label varchar({int(length)}))"
            )

    def widen_label(self, length: int) -> None:
        """``ALTER TABLE``: the ``label`` column becomes ``varchar(length)``. The killed
        driver's connections may hold a lock until the server sees them gone: the
        statement waits for it (``lock_timeout``)."""
        server = self.setup.servers.postgres
        assert server is not None
        with server.connect() as conn:
            conn.execute("SET lock_timeout = '60s'")
            conn.execute(
                f"ALTER TABLE chaos.{self.table} ALTER COLUMN label TYPE varchar({int(length)})"
            )

    def read(self) -> list[DeliveredBundle]:
        server = self.setup.servers.postgres
        assert server is not None
        with server.connect() as conn:
            found = conn.execute(
                "SELECT to_regclass(%s), to_regclass('chaos.gtbarrier_bundles')",
                (f"chaos.{self.table}",),
            ).fetchone()
            if found is None or found[0] is None or found[1] is None:
                return []
            cur = conn.execute(
                f"SELECT b.bundle_id, e.* FROM chaos.{self.table} e "
                "JOIN chaos.gtbarrier_bundles b ON b.xmin = e.xmin "
                "ORDER BY b.committed_at, b.bundle_id"
            )
            names = [d.name for d in cur.description or []]
            rows = [dict(zip(names, r, strict=True)) for r in cur.fetchall()]
        out: list[DeliveredBundle] = []
        for row in rows:
            bundle = int(row.pop("bundle_id"))
            if "gt_epoch" in row:
                row["gt"] = {f: row.pop(f"gt_{f}") for f in GT_FIELDS}
            if not out or out[-1].bundle_id != bundle:
                out.append(DeliveredBundle(bundle, []))
            out[-1].rows.append(row)
        for b in out:
            if b.rows and "gt" in b.rows[0]:
                b.rows.sort(key=lambda r: tuple(r["gt"].values()))
        return out


@register
class IcebergConsumer(ChaosConsumer):
    """An Iceberg table (pyiceberg's SQL catalog on SQLite, a ``file://`` warehouse); a
    bundle's rows are those of its data files (the bundle id leads their names), put in
    ``gt`` order as a reader of the table does (a table has no row order)."""

    name = "iceberg"

    @property
    def directory(self) -> Path:
        return self.setup.workdir / "iceberg"

    def sink_options(self) -> dict[str, str]:
        return {
            "consumer": "iceberg",
            "consumer.iceberg.table": "chaos.out",
            "consumer.iceberg.catalog.uri": f"sqlite:///{self.directory}/catalog.db",
            "consumer.iceberg.catalog.warehouse": f"file://{self.directory}/warehouse",
        }

    def read(self) -> list[DeliveredBundle]:
        from pyiceberg.catalog import load_catalog
        from pyiceberg.exceptions import NoSuchTableError

        from sink.consumers.iceberg.iceberg_staging import epoch_of_data_file

        if not (self.directory / "catalog.db").exists():
            return []
        catalog = load_catalog(
            "default",
            uri=f"sqlite:///{self.directory}/catalog.db",
            warehouse=f"file://{self.directory}/warehouse",
        )
        try:
            table = catalog.load_table("chaos.out")
        except NoSuchTableError:
            return []
        found: dict[int, list[dict[str, Any]]] = {}
        for task in sorted(table.scan().plan_files(), key=lambda t: t.file.file_path):
            path = task.file.file_path
            bundle = epoch_of_data_file(path)
            assert bundle is not None, f"a data file not written by gtbarrier: {path}"
            rows = pq.read_table(path.removeprefix("file://")).to_pylist()
            found.setdefault(bundle, []).extend(rows)
        return [
            DeliveredBundle(k, sorted(rows, key=_gt_order)) for k, rows in sorted(found.items())
        ]


@register
class DeltaConsumer(ChaosConsumer):
    """A Delta table on the local file system; a bundle's rows are those of the data files
    its commit added (the log entry that carries the pipeline's transaction id with the
    bundle id as its version), put in ``gt`` order as a reader of the table does."""

    name = "delta"
    kill_steps = KILL_STEPS

    @property
    def directory(self) -> Path:
        return self.setup.workdir / "delta"

    def sink_options(self) -> dict[str, str]:
        return {"consumer": "delta", "consumer.delta.uri": f"file://{self.directory}"}

    def read(self) -> list[DeliveredBundle]:
        import json

        log = self.directory / "_delta_log"
        if not log.is_dir():
            return []
        found: dict[int, list[dict[str, Any]]] = {}
        for entry in sorted(log.glob("*.json")):
            actions = [json.loads(line) for line in entry.read_text().splitlines() if line]
            txns = [a["txn"]["version"] for a in actions if "txn" in a]
            added = [a["add"]["path"] for a in actions if "add" in a]
            if not txns:
                assert not added, f"a commit without gtbarrier's transaction id: {entry.name}"
                continue
            (bundle,) = txns
            assert bundle not in found, f"bundle {bundle} committed twice ({entry.name})"
            found[bundle] = [
                row for path in added for row in pq.read_table(self.directory / path).to_pylist()
            ]
        return [
            DeliveredBundle(k, sorted(rows, key=_gt_order))
            for k, rows in sorted(found.items())
            if rows
        ]


def _gt_order(row: dict[str, Any]) -> tuple[Any, ...]:
    gt = row.get("gt")
    if gt is None:
        return ()
    return (gt["epoch"], gt["topic"], gt["partition"], gt["offset"])
