"""The barrier's owner deletes a superseded run's staged parts itself, on SeaweedFS.

A zombie driver that stages a batch after the new run's claim, and dies before its abort,
leaves parts that the claim's sweep never saw. The owner deletes them every
``staging.sweepEvery`` bundles, after the bundle's commit, without ``gtbarrier sweep``;
the parts of the owner's own next batch, of a driver that has not claimed yet and of a
newer run's bundle in flight stay.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import pytest

from sink.barrier import Barrier
from sink.faults import FaultInjector, InjectedFault
from sink.options import SinkOptions
from sink.staging import StoreStaging
from tests.sink_helpers import Pipeline, gt_batch


class _CrashAfterInflight(FaultInjector):
    def at(self, step: str, n: int | None) -> None:
        if step == "after_inflight":
            raise InjectedFault("crash")


class _HookedStaging(StoreStaging):
    """Store staging that runs ``hook`` once, right before its first deletion."""

    def __init__(self, p: Pipeline, hook: Callable[[], None]) -> None:
        super().__init__(p.store, p.layout)
        self.hook: Callable[[], None] | None = hook

    def delete_many(self, locations: Iterable[str]) -> None:
        wanted = list(locations)
        if wanted and self.hook is not None:
            hook, self.hook = self.hook, None
            hook()
        super().delete_many(wanted)


@pytest.mark.timeout(300)
def test_the_owner_deletes_a_superseded_runs_parts_on_s3_and_keeps_the_rest(s3: Any) -> None:
    raw = {
        "pipeline.id": "owner-sweep",
        "state.uri": s3.uri("owner-sweep"),
        "consumer": "http",  # store staging, on SeaweedFS; the fake consumer delivers
        "consumer.url": "http://127.0.0.1:9/bundles",
        "staging.sweepEvery": "2",
        **s3.options(),
    }
    p = Pipeline(SinkOptions.parse(raw))
    p.record_batch(0, epoch=1)
    p.barrier().commit([p.write(0, [gt_batch(1, 0, [0])])], 0)  # run-a
    p.run_id = "run-b"
    p.record_batch(1, epoch=2)
    p.barrier().commit([p.write(1, [gt_batch(2, 0, [1])])], 1)  # run-b claims and sweeps
    # zombie run-a and a driver starting up stage on checkpoints of their own
    query_b, p.query_id = p.query_id, "q-old"
    zombie = p.write(2, [gt_batch(3, 0, [2])], run_id="run-a")
    starting = p.write(2, [gt_batch(3, 0, [2])], run_id="run-starting")
    p.query_id = query_b
    assert zombie.part is not None and starting.part is not None
    p.record_batch(2, epoch=3)
    p.barrier().commit([p.write(2, [gt_batch(3, 0, [2])])], 2)  # bundle 3: not due
    assert zombie.part.location in p.staged()

    # bundle 4 is due: run-a's part goes; run-b's next batch, staged already, stays
    p.record_batch(3, epoch=4)
    p.record_batch(4, epoch=5)
    next_batch = p.write(4, [gt_batch(5, 0, [4])])
    assert next_batch.part is not None
    p.barrier().commit([p.write(3, [gt_batch(4, 0, [3])])], 3)
    assert sorted(p.staged()) == sorted([starting.part.location, next_batch.part.location])
    p.barrier().commit([next_batch], 4)

    # bundle 6 is due; run-c (a restored checkpoint) claims and records bundle 7 in flight
    # while run-b's commit deletes: the sweep with run-b's state keeps its parts
    p.record_batch(5, epoch=6)
    p.record_batch(6, epoch=7)
    current = p.write(5, [gt_batch(6, 0, [5])])
    newer = p.write(6, [gt_batch(7, 0, [6])], run_id="run-c")
    assert newer.part is not None

    def run_c_claims_and_dies_after_inflight() -> None:
        with pytest.raises(InjectedFault):
            p.barrier(faults=_CrashAfterInflight()).commit([newer], 6)

    staging = _HookedStaging(p, run_c_claims_and_dies_after_inflight)
    barrier = Barrier(p.options, p.store, p.consumer, staging, FaultInjector())
    assert barrier.commit([current], 5).action == "delivered"

    assert p.owner().run_id == "run-c" and p.inflight().locations == (newer.part.location,)
    assert sorted(p.staged()) == sorted([starting.part.location, newer.part.location])
    assert [d[0] for d in p.consumer.delivered] == [1, 2, 3, 4, 5, 6]
