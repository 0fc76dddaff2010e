"""Dead letters under a superseded run, on the real servers: the PostgreSQL consumer, the
barrier state and the dead letters on SeaweedFS (``s3://``).

Two runs of one query commit the same bundle through the product's barrier
(:class:`~sink.barrier.Barrier` with the real postgres consumer, the real S3 state store
and S3 dead letters; not two Spark drivers). Run A's target has a ``varchar(3)`` column,
so A refuses the rows with longer values (``errors.tolerance=all``). Before A records the
bundle in flight, the column is widened and run B, started on a copy of A's checkpoint
(the same query and batch, a new run), commits the bundle refusing nothing. Then A
resumes: paused at the fault step ``before_inflight`` after its write tasks, or before its
write tasks (then committing from the state its process remembers, as Spark's reused
Python worker does). Every input row must be exactly once in the table or the dead
letters, and A fenced. Before the dead letters were fenced, the second case left 0:3 and
0:5 in both, and in the first A stopped on its own parts, swept by B's claim.
"""

from __future__ import annotations

import pyarrow as pa
import pytest
from pyspark.sql import types as st

from harness.postgres import PostgresSchema
from harness.s3 import S3Bucket
from integration_tests.test_sink_postgres import At
from sink.barrier import Barrier
from sink.bundle import BarrierCommitMessage
from sink.consumers import open_consumer
from sink.dead_letters.dead_letter_files import open_dead_letters
from sink.faults import FaultInjector
from sink.known_state import KNOWN
from sink.options import SinkOptions
from state.errors import PipelineFenced
from state.protocol.barrier_state import start_generation
from state.records.gt import arrow_array as gt_array
from state.records.gt import spark_type
from tests.sink_helpers import Pipeline

pytestmark = pytest.mark.timeout(240)

SCHEMA = st.StructType(
    [
        st.StructField("value", st.BinaryType()),
        st.StructField("v", st.StringType()),
        st.StructField("gt", spark_type()),
    ]
)


def rows(epoch: int, offsets: list[int], notes: list[str]) -> pa.RecordBatch:
    """Rows ``value = b"0:<offset>"``, ``v`` and their ``gt`` (partition 0 of topic t)."""
    n = len(offsets)
    gt = gt_array(
        pa.array([epoch] * n, pa.int64()),
        pa.array(["t"] * n, pa.string()),
        pa.array([0] * n, pa.int32()),
        pa.array(offsets, pa.int64()),
    )
    values = pa.array([f"0:{o}".encode() for o in offsets], pa.binary())
    return pa.RecordBatch.from_arrays(
        [values, pa.array(notes, pa.string()), gt], names=["value", "v", "gt"]
    )


class Run:
    """One run of the query in its own driver: the sink's options as its start check read
    the table, its consumer, the generation it started at."""

    def __init__(self, p: Pipeline, raw: dict[str, str], run_id: str) -> None:
        self.p = p
        self.options = SinkOptions.parse(raw).check_at_start(SCHEMA)
        self.run_id = run_id
        self.consumer = open_consumer(self.options, p.store, FaultInjector())
        self.start = start_generation(p.store, p.layout)

    def write(self, batch_id: int, batch: pa.RecordBatch) -> BarrierCommitMessage:
        self.p.options, self.p.run_id = self.options, self.run_id
        return self.p.write(batch_id, [batch])

    def commit(
        self, batch_id: int, messages: list[BarrierCommitMessage], faults: FaultInjector
    ) -> str:
        barrier = Barrier(
            self.options,
            self.p.store,
            self.consumer,
            self.consumer.staging,
            faults,
            sleep=lambda _s: None,
            start_generation=self.start,
        )
        return barrier.commit(messages, batch_id).action


def options(postgres: PostgresSchema, s3: S3Bucket) -> dict[str, str]:
    return {
        "pipeline.id": "p1",
        "state.uri": s3.uri("state"),
        **s3.options(),
        "consumer": "postgres",
        "consumer.postgres.dsn": postgres.dsn,
        "consumer.postgres.table": postgres.table("notes"),
        "errors.tolerance": "all",
        "errors.deadLetter.path": s3.uri("dead-letters"),
        "delivery.retryBackoffMs": "10",
    }


def narrow_then_deliver_bundle_0(
    postgres: PostgresSchema, s3: S3Bucket, raw: dict[str, str]
) -> tuple[Pipeline, Run]:
    """The table with ``v varchar(3)``; run A started on it, bundle 0 delivered."""
    p = Pipeline(SinkOptions.parse(raw), run_id="run-a")
    SinkOptions.parse(raw).check_at_start(SCHEMA)  # creates the table (v text)
    postgres.execute('ALTER TABLE "{schema}".notes ALTER COLUMN v TYPE varchar(3)')
    a = Run(p, raw, "run-a")
    p.record_batch(0, epoch=0)
    assert a.commit(0, [a.write(0, rows(0, [0, 1], ["ok", "ok"]))], FaultInjector()) == (
        "delivered"
    )
    return p, a


def widen_and_deliver_bundle_1(postgres: PostgresSchema, p: Pipeline, raw: dict[str, str]) -> str:
    """The column widened; run B, on a copy of A's checkpoint, commits bundle 1 (in its own
    process: what A's process remembers is left as it was)."""
    a_remembers = KNOWN.get(p.store, p.layout)
    postgres.execute('ALTER TABLE "{schema}".notes ALTER COLUMN v TYPE varchar(10)')
    b = Run(p, raw, "run-b")
    from_b = b.write(1, BUNDLE_1)
    assert from_b.dead_letter_rows == 0
    KNOWN.clear()
    try:
        return b.commit(1, [from_b], FaultInjector())
    finally:
        KNOWN.clear()
        if a_remembers is not None:
            KNOWN.put(p.store, p.layout, a_remembers)


def each_row_once(postgres: PostgresSchema, s3: S3Bucket, p: Pipeline) -> None:
    """Every input row exactly once in the table or the dead letters."""
    stored = [bytes(r[0]) for r in postgres.rows('SELECT value FROM "{schema}".notes')]
    dead_letters = open_dead_letters(s3.uri("dead-letters"), p.options.store.s3)
    dead = [
        v for f in dead_letters.files() for v in dead_letters.read(f.bundle_id)["value"].to_pylist()
    ]
    assert sorted(stored + dead) == [f"0:{o}".encode() for o in range(6)], (stored, dead)
    assert p.state().gt_last == 1 and p.state().inflight is None


BUNDLE_1 = rows(1, [2, 3, 4, 5], ["ab", "long", "cd", "longer"])


def test_a_run_paused_before_its_in_flight_record_while_another_delivers_leaves_each_row_once(
    postgres: PostgresSchema, s3: S3Bucket
) -> None:
    """A's write tasks of bundle 1 refuse 0:3 and 0:5; A is paused at ``before_inflight``
    while B delivers the bundle (refusing nothing, its claim sweeping A's staged parts);
    A resumes and is fenced, having written no dead letter."""
    raw = options(postgres, s3)
    p, a = narrow_then_deliver_bundle_0(postgres, s3, raw)
    p.record_batch(1, epoch=1)
    from_a = a.write(1, BUNDLE_1)
    assert from_a.dead_letter_rows == 2  # varchar(3) refuses 0:3 and 0:5
    b_did: list[str] = []
    pause = At(
        "before_inflight", 1, lambda: b_did.append(widen_and_deliver_bundle_1(postgres, p, raw))
    )
    with pytest.raises(PipelineFenced):
        a.commit(1, [from_a], pause)
    assert b_did == ["delivered"]
    each_row_once(postgres, s3, p)


def test_a_run_that_remembers_its_state_and_refuses_rows_another_run_delivered_is_fenced_first(
    postgres: PostgresSchema, s3: S3Bucket
) -> None:
    """A is paused before its write tasks of bundle 1 (and so before its in-flight
    record); B delivers the bundle, refusing nothing. A then stages its tasks against its
    varchar(3) (refusing 0:3 and 0:5) and commits from the state its process remembers:
    fenced by the swap before it writes any dead letter."""
    raw = options(postgres, s3)
    p, a = narrow_then_deliver_bundle_0(postgres, s3, raw)
    p.record_batch(1, epoch=1)
    assert widen_and_deliver_bundle_1(postgres, p, raw) == "delivered"
    from_a = a.write(1, BUNDLE_1)
    assert from_a.dead_letter_rows == 2
    with pytest.raises(PipelineFenced):
        a.commit(1, [from_a], FaultInjector())
    each_row_once(postgres, s3, p)
