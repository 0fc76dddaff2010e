"""The demo's query reads its source once per micro-batch.

The query has three branches (rows, a windowed aggregation, ``applyInPandasWithState``)
over one ``gtkafka`` source. Spark plans each branch's copy of the source separately, so
unless the branches share one exchange over the source (Spark's ReuseExchange), every
micro-batch runs the Python source three times. Checked on a real broker, on what Spark
executed: the plan of the last micro-batch (``query.explain()``) holds one scan of the
Python source, which outputs only the columns the query declares, and every batch's
``numInputRows`` (Spark's count over the scans it ran) equals the Kafka records the
batch read.
"""

from __future__ import annotations

import contextlib
import io
import json
from pathlib import Path
from typing import Any

import pytest

from demo.generator import GeneratorConfig, iter_events
from demo.pipeline import SOURCE_COLUMNS, DemoJob, build_query, records_read
from harness.kafka import KafkaHelper
from harness.process import wait_until

pytestmark = pytest.mark.slow

EVENTS = 2000
PER_BATCH = 1000
PARTITIONS = 8
PYTHON_SCAN = "MicroBatchScan["  # how the executed plan shows a Python source's scan


def progress_of(query: Any) -> list[dict[str, Any]]:
    """The query's recent micro-batches, as StreamingQueryProgress JSON."""
    return [json.loads(p.json) for p in query.recentProgress]


@pytest.mark.timeout(600)
def test_a_micro_batch_of_the_demo_query_reads_the_source_once(
    spark: Any, kafka: KafkaHelper, kafka_broker: Any, tmp_path: Path
) -> None:
    topic = kafka.create_topic(partitions=PARTITIONS)
    config = GeneratorConfig(events=EVENTS, partitions=PARTITIONS)
    kafka.produce(topic, (e.record() for e in iter_events(config)), batch_size=EVENTS)
    job = DemoJob(
        pipeline_id=f"plan-{topic}"[-60:],
        topic=topic,
        bootstrap=kafka_broker.bootstrap,
        state_uri=f"file://{tmp_path}/state",
        s3_options={},
        zookeeper_hosts=None,
        checkpoint=str(tmp_path / "checkpoint"),
        consumer="file",
        consumer_path=str(tmp_path / "out"),
        max_offsets_per_trigger=PER_BATCH,
        use_coordinator=False,
    )
    # Without no-data batches (which replace the source by an empty relation) the last
    # execution the query explains is always a batch that read records. The query's
    # session is a clone taken at start, so the setting is put back right after.
    key = "spark.sql.streaming.noDataMicroBatches.enabled"
    before = spark.conf.get(key)
    spark.conf.set(key, "false")
    try:
        query = build_query(spark, job, None)
    finally:
        spark.conf.set(key, before)
    try:
        wait_until(
            lambda: sum(records_read(p) for p in progress_of(query)) >= EVENTS or query.exception(),
            timeout=300,
            what=f"the demo's query to read {EVENTS} records",
        )
        assert query.exception() is None, query.exception()
        plan = io.StringIO()
        with contextlib.redirect_stdout(plan):
            query.explain()
        batches = [p for p in progress_of(query) if records_read(p) > 0]
    finally:
        query.stop()

    executed = plan.getvalue()
    assert executed.count(PYTHON_SCAN) == 1, executed
    # The scan's output is the three columns the query declares, not gtkafka's nine.
    scan = executed[executed.index(PYTHON_SCAN) + len(PYTHON_SCAN) :].split("]")[0]
    assert [column.split("#")[0] for column in scan.split(", ")] == list(SOURCE_COLUMNS), scan
    assert "ReusedExchange" in executed, executed
    assert [p["numInputRows"] for p in batches] == [records_read(p) for p in batches]
