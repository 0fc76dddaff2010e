"""How far the driver's pruner may raise the floor: never past what its own query still
needs, up to where epochs are committed even when their bundles are empty, and on every
pipeline the snapshot coordinator does not run (docs/PROTOCOL.md, "Pruning").

Each test drives the real source (``GlobalTimeKafkaStreamReader`` over a fake broker: its
``latestOffset``, and ``commit`` with the pruner it starts) and the real barrier
(``Barrier.commit`` of the write tasks' messages) on one memory store, as Spark runs them
for a micro-batch: plan the epoch, the marked read task writes the batch record, the sink
commits, then the source's ``commit(end)``. The pruner's thread is waited for after each
commit, so that every pruning it starts has ended before the next batch is planned.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import replace
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadMaxRows

from gtbarrier.cli import main
from state.layout import PipelineLayout
from state.metrics.definitions import BUNDLES_DELIVERED, REPLAYED_DROPPED
from state.metrics.families import metric_families
from state.metrics.reading import PipelineReading, StateReader
from state.protocol.barrier_state import COMMITTED_STEP, decide_committed
from state.protocol.batch_records import batch_record_keys, write_batch_record
from state.protocol.epoch_floor import (
    SEGMENT_EPOCHS,
    floor_target,
    prune_below,
    pruning_step,
    read_floor,
)
from state.protocol.epoch_log import EpochLog, epoch_of_batch
from state.protocol.fencing import (
    SWEEP_IDENTITY,
    coordinated,
    read_coordinated,
    read_driver_record,
    take_token,
)
from state.records.barrier import BarrierState
from state.records.driver import DriverOwner, DriverRecord
from state.records.source_offset import SourceOffset
from state.stores import StoreConfig
from state.stores.memory_store import MemoryStore
from tests.sink_helpers import Pipeline, gt_batch, sink_options
from tests.source_fakes import FakeBroker
from tests.test_record_formats import BUNDLE
from tests.test_source_stream_reader import Harness

pytestmark = pytest.mark.unit


class Query:
    """One streaming query of pipeline ``p``: a source on its own checkpoint (a new
    reader, a new query id) and the barrier sink, sharing the memory store at ``uri``."""

    def __init__(self, broker: FakeBroker, uri: str | None, retained: int, run_id: str) -> None:
        extra = {"state.epochsRetained": str(retained)}
        self.source = Harness(broker, uri=uri, maxOffsetsPerTrigger="1", **extra)
        self.uri = self.source.uri
        self.sink = Pipeline(sink_options(**{"pipeline.id": "p", "state.uri": self.uri}), run_id)
        self.start: dict[str, Any] = self.source.reader.initialOffset()
        self.batch_id = 0

    @property
    def epoch(self) -> int:
        """The epoch the query's next batch reads."""
        return SourceOffset.from_json(self.start).epoch

    def run_batch(self, *, output: bool, source_commit: bool = True) -> None:
        """One micro-batch of one record; ``output``: the query's output has a row.
        Without ``source_commit`` the source's ``commit`` is not called, as in a release
        before pruning and compaction, whose ``commit`` did neither."""
        end = self.source.latest(self.start, ReadMaxRows(1))
        assert end != self.start, "no record left to read"
        epoch, batch_id = self.epoch, self.batch_id
        write_batch_record(
            self.sink.store, self.sink.layout, self.sink.query_id, batch_id, epoch
        )  # the marked read task
        offset = dict(SourceOffset.from_json(self.start).offsets)[("t", 0)]
        rows = gt_batch(epoch, 0, [offset] if output else [])
        message = self.sink.write(batch_id, [rows])
        # the sink learns the bundle's epoch from the batch record (none: a no-data batch)
        assert epoch_of_batch(self.sink.store, self.sink.layout, self.sink.query_id, batch_id) == (
            epoch
        )
        self.sink.barrier().commit([message], batch_id)
        if source_commit:
            self.source.reader.commit(end)
            self.source.reader.pruner.close()  # the background pruning, if one started
        self.start, self.batch_id = end, batch_id + 1

    def restart(self, run_id: str) -> None:
        """The driver starts again on the query's checkpoint: a new source reader (and
        pruner), a new run of the sink; the next batch starts where the last one ended."""
        self.source.reader = self.source.new_reader()
        self.sink.run_id = run_id

    def stored_epochs(self) -> list[int]:
        """The epochs the log holds: from the floor up, in segments or one object each."""
        floor = read_floor(self.sink.store, self.sink.layout)
        first = 0 if floor is None else floor.epoch
        numbers = EpochLog(self.sink.store, self.sink.layout).epoch_numbers()
        return [k for k in numbers if k >= first]


@pytest.fixture
def broker() -> FakeBroker:
    b = FakeBroker()
    b.create("t", 1)
    return b


def test_the_target_stays_the_window_below_both_the_barrier_and_the_query() -> None:
    assert floor_target(299, None, 100) == 200
    assert floor_target(299, None, 100, query_next=1) == 0  # a replay just started
    assert floor_target(299, None, 100, query_next=250) == 150
    assert floor_target(299, None, 100, query_next=300) == 200  # the query at the barrier
    assert floor_target(299, 280, 100, query_next=290) == 180  # a bundle in flight


@pytest.mark.parametrize(
    ("n", "before"),
    [
        (300, "a release before pruning"),  # every epoch one object, no floor
        (600, "a larger window"),  # compacted into segments; the window lowered since
    ],
)
def test_a_new_checkpoint_replays_up_to_gt_last_while_its_own_pruner_runs(
    broker: FakeBroker, n: int, before: str
) -> None:
    """``n`` epochs with nothing pruned (written by a release before pruning, or under a
    window of 10,000), then a query on a new checkpoint at ``state.epochsRetained=100``
    replays them from the persisted start: its pruner must not delete the epochs (and
    batch records) ahead of it, before it reaches ``GT_last``."""
    retained = 100
    broker.produce("t", 0, n)
    first = Query(broker, None, 10_000, "run-a")
    for _ in range(n):
        first.run_batch(output=True, source_commit=before != "a release before pruning")
    assert first.sink.state().gt_last == n - 1
    floor = read_floor(first.sink.store, first.sink.layout)
    assert floor is None or not floor.pruned  # compacted, maybe; nothing pruned

    replay = Query(broker, first.uri, retained, "run-b")
    assert replay.epoch == 0  # nothing pruned: the persisted start
    while replay.epoch < n:
        replay.run_batch(output=True)  # each bundle is at or below GT_last: dropped

    assert replay.sink.state().gt_last == n - 1
    assert [b for b, _, _ in replay.sink.consumer.delivered] == []
    floor = read_floor(replay.sink.store, replay.sink.layout)
    # it pruned behind itself: the window and a pruning step below the query at most
    assert floor is not None and n - retained - pruning_step(retained) <= floor.epoch
    assert floor.epoch <= n - retained
    assert len(replay.stored_epochs()) <= retained + pruning_step(retained)


def test_a_query_whose_output_is_empty_keeps_a_bounded_epoch_log(broker: FakeBroker) -> None:
    """5,000 batches whose bundles are all empty (a filter that lets nothing through):
    GT_last never moves, yet the epochs are committed, so the log is pruned to the
    window (``1.25 R + 1`` epochs, and the few by which the barrier records the committed
    epochs late) and compacted."""
    n, retained = 5_000, 100
    broker.produce("t", 0, n)
    query = Query(broker, None, retained, "run-a")
    for _ in range(n):
        query.run_batch(output=False)

    assert query.sink.state().gt_last == -1  # nothing was delivered
    assert query.sink.consumer.delivered == []
    stored = query.stored_epochs()
    assert stored[-1] == n - 1
    assert len(stored) <= retained + pruning_step(retained) + 1 + SEGMENT_EPOCHS, (
        len(stored),
        stored[:3],
    )
    store, layout = query.sink.store, query.sink.layout
    loose = [k for k in store.list(layout.epochs_prefix) if "/segments/" not in k]
    assert len(loose) <= 4 * SEGMENT_EPOCHS, len(loose)
    assert len(batch_record_keys(store, layout)) <= 4 * SEGMENT_EPOCHS


def test_the_barrier_records_empty_bundles_committed_once_every_step() -> None:
    state = BarrierState(gt_last=4)
    assert state.progress == 4
    assert decide_committed(state, 5) is None  # not worth a swap yet
    assert decide_committed(state, 4 + COMMITTED_STEP) == replace(
        state, committed=4 + COMMITTED_STEP
    )
    later = BarrierState(gt_last=4, committed=40)
    assert later.progress == 40
    assert decide_committed(later, 40 + COMMITTED_STEP - 1) is None
    assert decide_committed(BarrierState(4, BUNDLE), 100) is None  # in flight: resolved first

    p = Pipeline()
    for epoch in range(41):
        p.record_batch(epoch, epoch)
        assert p.barrier().commit([p.write(epoch, [gt_batch(epoch, 0, [])])], epoch).action == (
            "empty"
        )
    assert (p.state().gt_last, p.state().committed) == (-1, 2 * COMMITTED_STEP - 1)
    p.record_batch(41, 41)
    assert p.barrier().commit([p.write(41, [gt_batch(41, 0, [7])])], 41).action == "delivered"
    assert (p.state().gt_last, p.state().committed, p.state().progress) == (41, 31, 41)
    p.record_batch(42, 42)
    p.barrier().commit([p.write(42, [gt_batch(42, 0, [])])], 42)
    assert p.state().progress == 41  # one empty bundle past a delivery: no swap


def test_status_shows_how_far_epochs_are_committed(capsys: pytest.CaptureFixture[str]) -> None:
    p = Pipeline()
    for epoch in range(COMMITTED_STEP):
        p.record_batch(epoch, epoch)
        p.barrier().commit([p.write(epoch, [gt_batch(epoch, 0, [])])], epoch)
    argv = ["status", "--pipeline", p.options.pipeline_id, "--state-uri", p.options.store.uri]
    assert main([*argv, "--json"]) == 0
    barrier = json.loads(capsys.readouterr().out)["barrier"]
    assert (barrier["gt_last"], barrier["progress"]) == (-1, COMMITTED_STEP - 1)
    assert main(argv) == 0
    assert f"to {COMMITTED_STEP - 1} (empty bundles included)" in capsys.readouterr().out


def test_the_metrics_do_not_jump_when_the_epochs_of_empty_bundles_are_pruned() -> None:
    """Epochs 3 to 9 were committed with empty bundles (GT_last 2): the counters count
    them before they are pruned as the floor's counts do after."""
    store = MemoryStore(StoreConfig(f"memory://metrics-{uuid.uuid4().hex}"))
    layout = PipelineLayout("p")
    log = EpochLog(store, layout)
    for k in range(10):
        log.record(
            SourceOffset(k, {("t", 0): 10 * k}), SourceOffset(k + 1, {("t", 0): 10 * k + 10})
        )
        write_batch_record(store, layout, "q1", k, k)
    for b in range(3):
        write_batch_record(store, layout, "q2", b, b + 4)  # a replay of epochs 4 to 6
    store.put_json(layout.barrier_state, BarrierState(gt_last=2, committed=9).to_json())
    reader = StateReader(store, layout)

    def counters() -> dict[str, float]:
        reading = PipelineReading("p", reader.read())
        names = (BUNDLES_DELIVERED.name, REPLAYED_DROPPED.name)
        return {
            f.name: f.samples[0].value for f in metric_families(reading, 0.0) if f.name in names
        }

    before = counters()
    assert before == {BUNDLES_DELIVERED.name: 10, REPLAYED_DROPPED.name: 3}
    assert prune_below(store, layout, 6).raised
    assert counters() == before


def test_a_sweep_leaves_a_pipeline_without_the_coordinator_to_its_drivers_pruner(
    broker: FakeBroker, capsys: pytest.CaptureFixture[str]
) -> None:
    """``gtbarrier sweep --delete --force`` takes a fencing token (the driver record is
    created) on a pipeline that no snapshot coordinator runs: its driver still prunes."""
    retained = 8
    broker.produce("t", 0, 80)
    query = Query(broker, None, retained, "run-a")
    for _ in range(40):
        query.run_batch(output=True)
    store, layout = query.sink.store, query.sink.layout
    before = read_floor(store, layout)
    assert before is not None and before.pruned

    http = ["--option", "consumer=http", "--option", "consumer.url=http://127.0.0.1:9/b"]
    argv = ["sweep", "--pipeline", "p", "--state-uri", query.uri, *http, "--delete", "--force"]
    assert main([*argv, "--json"]) == 0, capsys.readouterr().err
    assert store.get_or_none(layout.driver) is not None  # the sweep's fencing token

    query.restart("run-b")  # the sweep fenced the running driver: it starts again
    for _ in range(40):
        query.run_batch(output=True)
    after = read_floor(store, layout)
    assert after is not None and after.epoch > before.epoch
    assert len(query.stored_epochs()) <= retained + pruning_step(retained) + 1


def test_the_driver_record_says_whether_a_coordinator_ever_took_a_token() -> None:
    store = MemoryStore(StoreConfig(f"memory://driver-{uuid.uuid4().hex}"))
    layout = PipelineLayout("p")
    assert not read_coordinated(store, layout)  # nobody took a token
    take_token(store, layout, identifier=f"{SWEEP_IDENTITY}:h:1", coordinator=False)
    assert not read_coordinated(store, layout)
    take_token(store, layout, identifier="h:2:c")  # a coordinator's driver
    assert read_coordinated(store, layout)
    take_token(store, layout, identifier=f"{SWEEP_IDENTITY}:h:3", coordinator=False)
    assert read_coordinated(store, layout)  # a sweep leaves it as it was
    record = read_driver_record(store, layout)
    assert record is not None and (record.token, record.coordinated) == (3, True)

    # records written before the field: only a first token, taken by a sweep, says no
    sweep = DriverOwner("h", 1, f"{SWEEP_IDENTITY}:h:1", 1.0)
    driver = DriverOwner("h", 2, "h:2:c", 1.0)
    assert not coordinated(DriverRecord.from_json(DriverRecord(1, sweep).to_json()))
    assert coordinated(DriverRecord(2, sweep))  # token 1 may have been a coordinator's
    assert coordinated(DriverRecord(1, driver))
    assert coordinated(DriverRecord(4))  # no owner recorded
    assert not coordinated(DriverRecord(2, driver, coordinated=False))
