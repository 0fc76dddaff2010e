"""consumer=iceberg with real Spark drivers, Kafka (Tansu) and S3: pyiceberg's SQL catalog on
SQLite, the warehouse on the local file system or on S3.

Each driver runs ``integration_tests/sink_driver_program.py`` (gtkafka -> drop multiples of
3 -> barrier) in its own process group; faults are injected with ``GTBARRIER_FAULT``. At
the end every surviving input record must be in the table exactly once, for pyiceberg's
reader and for Spark. Spark reads the data files of pyiceberg's scan plan with its Parquet
reader: Spark's own Iceberg reader needs the iceberg-spark-runtime jar, which this
project does not ship or download.
"""

from __future__ import annotations

import shutil
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from integration_tests.test_sink_pipeline import check_exactly_once_in_gt_order, produce_numbered
from sink.consumers import open_staging
from sink.consumers.iceberg.iceberg_consumer import marker_of
from sink.consumers.iceberg.iceberg_kind import ICEBERG
from sink.consumers.iceberg.iceberg_staging import data_prefix
from sink.consumers.iceberg.iceberg_sweep import Orphans, find_orphans
from sink.consumers.iceberg.iceberg_table import load_table
from sink.gt_column import sort_by_gt
from sink.options import SinkOptions
from state.layout import PipelineLayout
from state.protocol.barrier_state import read_barrier_state
from state.stores import open_store

pytest.importorskip("pyiceberg")

PROGRAM = Path(__file__).with_name("sink_driver_program.py")
DRIVER_TIMEOUT = 240.0
TABLE = "gtb.events"


class Lakehouse:
    """One pipeline into an Iceberg table, run by successive driver processes."""

    def __init__(
        self,
        driver: Any,
        kafka: Any,
        tmp_path: Path,
        pipeline: str,
        topic: str,
        *,
        warehouse: str | None = None,
        catalog: dict[str, str] | None = None,
    ) -> None:
        self.driver, self.kafka, self.tmp_path = driver, kafka, tmp_path
        self.pipeline, self.topic = pipeline, topic
        self.state_uri = f"file://{tmp_path}/state"
        self.sink_options = {
            "consumer": "iceberg",
            "consumer.iceberg.table": TABLE,
            "consumer.iceberg.catalog.uri": f"sqlite:///{tmp_path}/catalog.db",
            "consumer.iceberg.catalog.warehouse": warehouse or f"file://{tmp_path}/warehouse",
            **{f"consumer.iceberg.catalog.{k}": v for k, v in (catalog or {}).items()},
        }
        self.options = SinkOptions.parse(
            {"pipeline.id": pipeline, "state.uri": self.state_uri, **self.sink_options}
        )
        self.store = open_store(self.state_uri)
        self.layout = PipelineLayout(pipeline)

    def run(self, checkpoint: str, *extra: str, fault: str | None = None) -> Any:
        args = [
            "--bootstrap",
            self.kafka.bootstrap,
            "--topic",
            self.topic,
            "--pipeline",
            self.pipeline,
            "--state",
            self.state_uri,
            "--checkpoint",
            str(self.tmp_path / checkpoint),
            "--max-offsets",
            "1000",
            *extra,
        ]
        for key, value in self.sink_options.items():
            args += ["--sink-option", f"{key}={value}"]
        return self.driver.run(PROGRAM, *args, env={"GTBARRIER_FAULT": fault} if fault else None)

    def progress(self) -> tuple[int, int | None]:
        s = read_barrier_state(self.store, self.layout)
        return s.gt_last, None if s.inflight is None else s.inflight.bundle_id

    def table(self) -> Any:
        return load_table(ICEBERG.settings(self.options))

    def orphans(self) -> Orphans:
        return find_orphans(ICEBERG.settings(self.options), self.pipeline)

    def markers(self) -> list[int]:
        """The bundle ids of this pipeline's snapshots, oldest first."""
        found = [marker_of(s.summary, self.pipeline) for s in self.table().snapshots()]
        return [m.bundle_id for m in found if m is not None]

    def ours(self) -> pa.Table:
        """The pipeline's rows as pyiceberg reads them, in gt order."""
        rows = self.table().scan().to_arrow()
        rows = rows.filter(pc.equal(pc.struct_field(rows.column("gt"), "topic"), self.topic))
        return sort_by_gt(rows)

    def data_files(self) -> list[str]:
        return [task.file.file_path for task in self.table().scan().plan_files()]

    def moved_files(self, epoch: int) -> list[str]:
        """Data files of bundle ``epoch`` under the table location (committed or not)."""
        staging = open_staging(self.options, self.store)
        prefix = f"{data_prefix(self.pipeline)}{epoch:012d}-"
        return staging.list(prefix)

    def staged(self) -> list[str]:
        staging = open_staging(self.options, self.store)
        return staging.list(staging.root_prefix)


def killed(proc: Any) -> None:
    code = proc.wait(DRIVER_TIMEOUT)
    assert code == -signal.SIGKILL, f"driver exited {code}, not killed:\n{proc.output()[-3000:]}"


def finished(proc: Any) -> None:
    code = proc.wait(DRIVER_TIMEOUT)
    assert code == 0, proc.output()[-3000:]


def check_spark_reads_each_row_once(spark: Any, lake: Lakehouse, n: int, partitions: int) -> None:
    """Spark's Parquet reader over the data files of pyiceberg's scan plan."""
    files = lake.data_files()
    df = spark.read.parquet(*files).where(f"gt.topic = '{lake.topic}'")
    rows = df.select("gt.partition", "gt.offset").collect()
    pairs = [(r[0], r[1]) for r in rows]
    assert len(pairs) == len(set(pairs)), "Spark reads a row twice"
    assert len(pairs) == len([i for i in range(n) if i % 3])


@pytest.mark.slow
@pytest.mark.timeout(1200)
def test_sigkill_around_the_iceberg_commit_and_a_lost_checkpoint_is_exactly_once(
    driver: Any, kafka: Any, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    n, partitions = 6_000, 2  # 6 epochs of 1000 records
    topic = kafka.create_topic(partitions=partitions)
    produce_numbered(kafka, topic, n, partitions)
    lake = Lakehouse(driver, kafka, tmp_path, "lake", topic)

    # 1. bundle 1's data files are written into the table location, not committed
    killed(lake.run("cp1", fault="after_deliver:1"))
    assert lake.progress() == (0, 1)
    assert lake.markers() == [0]
    assert lake.moved_files(1), "bundle 1's data files should be in the table location"

    # 2. bundle 1 is committed from those files; bundle 2 is committed, the driver dies
    #    before GT_last moves
    killed(lake.run("cp1", fault="after_ack:2"))
    assert lake.progress() == (1, 2)
    assert lake.markers() == [0, 1, 2]

    # 3. the checkpoint is lost: a new one replays epochs 0..2 (bundle 2 is found in the
    #    table, not appended again), delivers 3 and dies after moving bundle 4's files
    shutil.rmtree(tmp_path / "cp1")
    killed(lake.run("cp2", fault="after_deliver:4"))
    assert lake.progress() == (3, 4)
    assert lake.markers() == [0, 1, 2, 3]

    # 4. to the end
    finished(lake.run("cp2"))
    assert lake.progress() == (5, None)
    assert lake.markers() == [0, 1, 2, 3, 4, 5]  # one snapshot per bundle
    check_exactly_once_in_gt_order(lake.ours(), n, partitions)
    spark = request.getfixturevalue("spark")  # started only now: one JVM at a time
    check_spark_reads_each_row_once(spark, lake, n, partitions)
    assert lake.staged() == []
    assert lake.orphans().orphans == ()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_concurrent_writer_appends_to_the_same_table(
    driver: Any, kafka: Any, tmp_path: Path
) -> None:
    n, partitions = 5_000, 2
    topic = kafka.create_topic(partitions=partitions)
    produce_numbered(kafka, topic, n, partitions)
    lake = Lakehouse(driver, kafka, tmp_path, "shared", topic)
    proc = lake.run("cp", "--max-offsets", "500")
    stop = threading.Event()
    appended: list[int] = []
    errors: list[BaseException] = []

    def other_writer() -> None:
        """Another pyiceberg writer: appends a row, retrying its own lost races."""
        from pyiceberg.exceptions import CommitFailedException, NoSuchTableError

        i = 0
        while not stop.is_set():
            try:
                table = lake.table()
            except NoSuchTableError:
                time.sleep(0.2)
                continue
            row = {"key": None, "value": b"other-%d" % i, "gt": None}
            try:
                table.append(pa.Table.from_pylist([row], schema=table.schema().as_arrow()))
            except CommitFailedException:
                continue
            except Exception as err:
                if "database is locked" in str(err):  # SQLite, busy with a commit
                    continue
                errors.append(err)
                return
            appended.append(i)
            i += 1
            time.sleep(0.1)

    writer = threading.Thread(target=other_writer, daemon=True)
    writer.start()
    try:
        finished(proc)
    finally:
        stop.set()
        writer.join(60)
    assert not errors, errors
    assert len(appended) >= 3, "the other writer should have committed in between"
    markers = lake.markers()
    assert markers == sorted(set(markers)) and len(markers) == 10
    check_exactly_once_in_gt_order(lake.ours(), n, partitions)
    rows = lake.table().scan().to_arrow()
    others = [v for v in rows.column("value").to_pylist() if v.startswith(b"other-")]
    assert sorted(others) == sorted(b"other-%d" % i for i in appended)


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_warehouse_on_s3(driver: Any, kafka: Any, s3: Any, tmp_path: Path) -> None:
    n, partitions = 3_000, 2
    topic = kafka.create_topic(partitions=partitions)
    produce_numbered(kafka, topic, n, partitions)
    server = s3.server
    catalog = {
        "s3.endpoint": server.endpoint,
        "s3.access-key-id": server.access_key_id,
        "s3.secret-access-key": server.secret_access_key,
        "s3.region": server.region,
    }
    lake = Lakehouse(
        driver, kafka, tmp_path, "s3lake", topic, warehouse=s3.uri("warehouse"), catalog=catalog
    )
    killed(lake.run("cp", fault="after_deliver:1"))
    assert lake.progress() == (0, 1) and lake.markers() == [0]
    finished(lake.run("cp"))
    assert lake.markers() == [0, 1, 2]
    check_exactly_once_in_gt_order(lake.ours(), n, partitions)
    files = lake.data_files()
    assert files and all(f.startswith(s3.uri("warehouse")) for f in files)
    assert lake.staged() == []
    assert lake.orphans().orphans == ()
