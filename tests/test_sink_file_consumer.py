"""The file consumer with the real protocol on local directories (memory:// state)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pyarrow as pa
import pyarrow.dataset as ds
import pyarrow.parquet as pq
import pytest

from sink.consumers import open_consumer
from sink.consumers.file import FileConsumer, bundle_file_name
from sink.faults import FaultInjector, InjectedFault
from sink.writer import BarrierStreamWriter
from state.errors import DeliveryFailed, StateError
from state.records.gt import GlobalTime
from tests.sink_helpers import Pipeline, gt_batch, plain_batch, sink_options


def file_pipeline(root: Path, **extra: str) -> Pipeline:
    opts = sink_options(**{"consumer": "file", "consumer.path": str(root), "consumer.url": ""})
    if extra:
        raw = {
            "pipeline.id": "p1",
            "state.uri": opts.store.uri,
            "consumer": "file",
            "consumer.path": str(root),
            **extra,
        }
        opts = type(opts).parse(raw)
    p = Pipeline(opts)
    consumer = open_consumer(opts, p.store, FaultInjector())
    assert isinstance(consumer, FileConsumer)
    p.consumer = consumer  # type: ignore[assignment]
    p.staging = consumer.staging
    return p


def visible(root: Path) -> list[str]:
    return sorted(n for n in os.listdir(root) if not n.startswith(("_", ".")))


def test_one_file_per_bundle_names_sort_in_delivery_order(tmp_path: Path) -> None:
    p = file_pipeline(tmp_path)
    for batch_id, epoch in [(0, 1), (1, 2), (2, 10)]:
        p.record_batch(batch_id, epoch)
        m = p.write(batch_id, [gt_batch(epoch, 0, [epoch * 10, epoch * 10 + 1])])
        outcome = p.barrier().commit([m], batch_id)
        assert outcome.driver_bytes == 0  # a single part is promoted by a rename
    assert visible(tmp_path) == [bundle_file_name(1), bundle_file_name(2), bundle_file_name(10)]
    pointer = json.loads((tmp_path / "_last_bundle.json").read_text())
    assert pointer["bundle_id"] == 10 and pointer["gt"] == 10 and pointer["rows"] == 2
    # readers that skip _ and . names see exactly the items, in gt order
    table = ds.dataset(str(tmp_path), format="parquet").to_table()
    assert table.column_names == ["value", "gt"]
    assert [v.as_py() for v in table.column("value")] == [
        b"0:10",
        b"0:11",
        b"0:20",
        b"0:21",
        b"0:100",
        b"0:101",
    ]
    assert p.staged() == [] and not list((tmp_path / "_staging").rglob("*.parquet"))


def test_several_parts_become_one_file_in_gt_order(tmp_path: Path) -> None:
    p = file_pipeline(tmp_path)
    p.record_batch(0, 3)
    msgs = [
        p.write(0, [gt_batch(3, 2, [0, 1])], partition=0),
        p.write(0, [gt_batch(3, 0, [5]), gt_batch(3, 0, [6])], partition=1),
        p.write(0, [gt_batch(3, 1, [7])], partition=2),
    ]
    outcome = p.barrier().commit(msgs, 0)
    assert outcome.rows == 5
    assert outcome.driver_bytes == 0  # stitched: only the parts' footers were read
    assert visible(tmp_path) == [bundle_file_name(3)]
    t = pq.read_table(tmp_path / bundle_file_name(3))
    assert [v.as_py() for v in t.column("value")] == [b"0:5", b"0:6", b"1:7", b"2:0", b"2:1"]


def test_aggregated_output_keeps_its_columns(tmp_path: Path) -> None:
    p = file_pipeline(tmp_path)
    p.record_batch(0, 4)
    m = p.write(0, [plain_batch(["a", "b"], [3, 4])], has_gt=False)
    p.barrier().commit([m], 0)
    t = pq.read_table(tmp_path / bundle_file_name(4))
    assert t.to_pydict() == {"key": ["a", "b"], "count": [3, 4]}


def test_redelivery_is_idempotent_and_last_bundle_follows_the_pointer(tmp_path: Path) -> None:
    p = file_pipeline(tmp_path)
    consumer = p.consumer
    assert isinstance(consumer, FileConsumer)
    assert consumer.last_bundle() is None
    p.record_batch(0, 1)

    class Crash(FaultInjector):
        def at(self, step: str, n: int | None) -> None:
            if step == "after_deliver":
                raise InjectedFault("crash")

    consumer.faults = Crash()
    with pytest.raises(InjectedFault):
        p.barrier().commit([p.write(0, [gt_batch(1, 0, [0, 1, 2])])], 0)
    # the bundle file is there, the pointer is not: last_bundle() says "none"
    assert visible(tmp_path) == [bundle_file_name(1)]
    assert consumer.last_bundle() is None
    assert p.inflight().bundle_id == 1
    # restart: replay of batch 0; the in-flight bundle is delivered again (a no-op on data)
    consumer.faults = FaultInjector()
    p.run_id = "run-b"
    outcome = p.barrier().commit([p.write(0, [gt_batch(1, 0, [0, 1, 2])])], 0)
    assert outcome.recovered == 1 and outcome.action == "dropped"
    last = consumer.last_bundle()
    assert last is not None and (last.bundle_id, last.gt) == (1, 1)
    assert pq.read_table(tmp_path / bundle_file_name(1)).num_rows == 3
    assert visible(tmp_path) == [bundle_file_name(1)]
    assert p.staged() == []


def test_missing_staged_part_of_undelivered_bundle_is_an_error(tmp_path: Path) -> None:
    p = file_pipeline(tmp_path)
    p.record_batch(0, 1)
    m = p.write(0, [gt_batch(1, 0, [0])])
    assert m.part is not None
    p.staging.delete(m.part.location)
    with pytest.raises(StateError, match="cannot be delivered"):
        p.barrier().commit([m], 0)
    assert p.inflight().bundle_id == 1  # kept for an operator to look at


def test_unwritable_directory_is_a_clear_error(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    root = blocker / "out"
    p = file_pipeline(tmp_path)
    consumer = FileConsumer(str(root), p.staging, FaultInjector())  # type: ignore[arg-type]
    with pytest.raises(DeliveryFailed, match=r"consumer\.path .*a-file/out' is not a writable"):
        consumer.check()


def test_write_task_stages_parts_under_the_hidden_prefix(tmp_path: Path) -> None:
    p = file_pipeline(tmp_path)
    m = p.write(5, [gt_batch(1, 0, [3, 1, 2])], partition=7)
    assert m.part is not None
    assert m.part.location.startswith(f"_staging/{p.query_id}/000000000005/p00007-t")
    assert m.part.location.endswith("-rrun-a.parquet")
    staged = pq.read_table(tmp_path / m.part.location)
    assert [o.as_py() for o in staged.column("gt").combine_chunks().field("offset")] == [1, 2, 3]
    assert m.part.min_gt == GlobalTime(1, "t", 0, 1) and m.part.max_gt == GlobalTime(1, "t", 0, 3)


def test_writer_is_picklable_without_clients(tmp_path: Path) -> None:
    import pickle

    p = file_pipeline(tmp_path)
    writer = BarrierStreamWriter(p.options, has_gt=True)
    clone = pickle.loads(pickle.dumps(writer))
    assert clone.options == p.options
    assert len(pickle.dumps(writer)) < 4096


def test_bundle_of_wrong_gt_type_is_refused(tmp_path: Path) -> None:
    p = file_pipeline(tmp_path)
    bad = pa.RecordBatch.from_arrays(
        [pa.array([b"x"]), pa.array([5], pa.int64())], names=["value", "gt"]
    )
    with pytest.raises(Exception, match=r"'gt' column to be struct<epoch: bigint"):
        p.write(0, [bad])
