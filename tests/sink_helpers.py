"""Helpers for the sink's unit tests: batches with a ``gt`` column, fake tasks and consumers."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pyarrow as pa

from sink.barrier import Barrier
from sink.bundle import BarrierCommitMessage, Bundle
from sink.consumers.base import Ack, Consumer, LastBundle
from sink.faults import FaultInjector
from sink.options import SinkOptions
from sink.staging import Staging, StoreStaging
from sink.writer import BarrierStreamWriter
from state.layout import PipelineLayout
from state.protocol.barrier_state import read_barrier_state
from state.protocol.batch_records import write_batch_record
from state.records.barrier import BarrierState, Owner
from state.records.gt import arrow_array as gt_array
from state.records.inflight_bundle import InflightBundle
from state.spark_task import StreamingTask
from state.stores import StateStore, open_store

_attempts = itertools.count(1)


def gt_batch(
    epoch: int, partition: int, offsets: Sequence[int], topic: str = "t"
) -> pa.RecordBatch:
    """Rows ``value = "<partition>:<offset>"`` with their ``gt``."""
    n = len(offsets)
    gt = gt_array(
        pa.array([epoch] * n, pa.int64()),
        pa.array([topic] * n, pa.string()),
        pa.array([partition] * n, pa.int32()),
        pa.array(list(offsets), pa.int64()),
    )
    values = pa.array([f"{partition}:{o}".encode() for o in offsets], pa.binary())
    return pa.RecordBatch.from_arrays([values, gt], names=["value", "gt"])


def plain_batch(keys: Sequence[str], counts: Sequence[int]) -> pa.RecordBatch:
    return pa.RecordBatch.from_arrays(
        [pa.array(list(keys), pa.string()), pa.array(list(counts), pa.int64())],
        names=["key", "count"],
    )


def sink_options(**extra: str) -> SinkOptions:
    raw = {
        "pipeline.id": "p1",
        "state.uri": f"memory://{uuid.uuid4().hex}",
        "consumer": "http",  # store staging; the tests swap in a FakeConsumer
        "consumer.url": "http://127.0.0.1:9/bundles",
    }
    raw.update(extra)
    return SinkOptions.parse(raw)


@dataclass
class FakeConsumer(Consumer):
    """Records delivered bundles; can fail, lose its memory, or answer a fixed last bundle."""

    staging: Staging
    faults: FaultInjector = field(default_factory=FaultInjector)
    delivered: list[tuple[int, pa.Table | None, bool]] = field(default_factory=list)
    fail_times: int = 0
    fail_with: type[Exception] = ConnectionError
    last: LastBundle | None = None
    calls: int = 0
    on_deliver: Any = None
    name: str = "fake"

    def deliver(self, bundle: Bundle, *, redelivery: bool = False) -> Ack:
        self.calls += 1
        if self.on_deliver is not None:
            self.on_deliver(bundle)
        if self.fail_times > 0:
            self.fail_times -= 1
            raise self.fail_with("consumer down")
        table = bundle.read_all(self.staging) if bundle.parts else None
        self.delivered.append((bundle.bundle_id, table, redelivery))
        self.last = LastBundle(bundle.bundle_id, bundle.gt)
        return Ack(bundle.bundle_id, bundle.rows)

    def last_bundle(self) -> LastBundle | None:
        return self.last


class Pipeline:
    """One pipeline on a memory:// store: write tasks, batch records and commits."""

    def __init__(self, options: SinkOptions | None = None, run_id: str = "run-a") -> None:
        self.options = options or sink_options()
        self.store: StateStore = open_store(self.options.store)
        self.layout = PipelineLayout(self.options.pipeline_id)
        self.staging: Staging = StoreStaging(self.store, self.layout)
        self.consumer = FakeConsumer(self.staging)
        self.query_id = "q-" + uuid.uuid4().hex[:8]
        self.run_id = run_id
        self.sleeps: list[float] = []

    def record_batch(self, batch_id: int, epoch: int, query_id: str | None = None) -> None:
        write_batch_record(self.store, self.layout, query_id or self.query_id, batch_id, epoch)

    def write(
        self,
        batch_id: int,
        batches: Sequence[pa.RecordBatch],
        *,
        partition: int = 0,
        has_gt: bool = True,
        attempt_number: int = 0,
        run_id: str | None = None,
    ) -> BarrierCommitMessage:
        writer = BarrierStreamWriter(self.options, has_gt)
        task = StreamingTask(
            self.query_id,
            batch_id,
            run_id or self.run_id,
            partition=partition,
            task_attempt=next(_attempts),
            attempt_number=attempt_number,
        )
        return writer.write_task(iter(batches), task)

    def barrier(self, **kwargs: Any) -> Barrier:
        return Barrier(
            self.options,
            self.store,
            self.consumer,
            self.staging,
            kwargs.pop("faults", FaultInjector()),
            sleep=self.sleeps.append,
            **kwargs,
        )

    def state(self) -> BarrierState:
        assert self.store.get_or_none(self.layout.barrier_state) is not None, "no barrier state"
        return read_barrier_state(self.store, self.layout)

    def inflight(self) -> InflightBundle:
        inflight = self.state().inflight
        assert inflight is not None, "no bundle in flight"
        return inflight

    def owner(self) -> Owner:
        owner = self.state().owner
        assert owner is not None, "the barrier has no owner"
        return owner

    def staged(self) -> list[str]:
        return self.staging.list(self.layout.staging_prefix)
