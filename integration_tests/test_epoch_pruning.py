"""Bounded state: a pipeline prunes its epoch log and batch records below a retained window,
and compacts the rest into a few objects.

A real query (gtkafka -> barrier, file consumer, state on S3) runs many small epochs with
``state.epochsRetained`` small. The epoch log and the batch records stay within the window
and its pruning step however many epochs ran, the floor record says where the log begins,
and every record is delivered once. A query on a new checkpoint, which would replay from
the persisted start, is refused with an error that names the floor and the way out;
told to (``state.startAtFloor``), it starts at the floor, the barrier drops what the
consumer already has, and new records are delivered once. A query on a new checkpoint
while nothing is pruned yet, with the window lowered, replays up to ``GT_last``: its own
pruner stays behind it.
"""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest

from integration_tests.sink_helpers import read_bundles
from integration_tests.test_sink_pipeline import (
    check_exactly_once_in_gt_order,
    produce_numbered,
    query_failure,
    run_available_now,
    source,
    stateless,
)
from state.layout import PipelineLayout
from state.protocol.batch_records import batch_record_keys
from state.protocol.epoch_floor import SEGMENT_EPOCHS, pruning_step, read_floor
from state.stores import StoreConfig, open_store

RETAINED = 4
PER_EPOCH = 40  # maxOffsetsPerTrigger: 1,000 records make 25 epochs


def file_pipeline(
    kafka: Any, s3: Any, tmp_path: Path, prefix: str, *, n: int, partitions: int
) -> tuple[str, str, str, Path, dict[str, str]]:
    """A topic of ``n`` numbered records, and a pipeline with its state on S3 delivering
    it to a file consumer: ``(topic, pipeline id, state uri, output dir, sink options)``."""
    topic = kafka.create_topic(partitions=partitions)
    produce_numbered(kafka, topic, n, partitions)
    pipeline = f"{prefix}-" + topic[-40:].replace("_", "-")
    state_uri = s3.uri(f"state-{pipeline}")
    out = tmp_path / "out"
    sink = {
        "pipeline.id": pipeline,
        "state.uri": state_uri,
        "consumer": "file",
        "consumer.path": str(out),
        **s3.options(),
    }
    return topic, pipeline, state_uri, out, sink


def epoch_numbers(keys: list[str]) -> list[int]:
    return sorted(int(m.group(1)) for k in keys if (m := re.search(r"/(\d+)\.json$", k)))


@pytest.mark.timeout(900)
def test_a_long_pipeline_keeps_a_bounded_epoch_log_and_starts_a_new_checkpoint_only_at_the_floor(
    spark: Any, kafka: Any, s3: Any, tmp_path: Path
) -> None:
    n, more, partitions = 1_000, 200, 2
    topic, pipeline, state_uri, out, sink = file_pipeline(
        kafka, s3, tmp_path, "prune", n=n, partitions=partitions
    )

    def read(checkpoint: str, **extra: str) -> Any:
        return stateless(
            source(
                spark,
                kafka,
                topic,
                pipeline,
                state_uri,
                maxOffsetsPerTrigger=str(PER_EPOCH),
                **{"state.epochsRetained": str(RETAINED), **s3.options(), **extra},
            )
        )

    run_available_now(read("cp1"), sink, tmp_path / "cp1")
    store = open_store(StoreConfig.from_options({"state.uri": state_uri, **s3.options()}))
    layout = PipelineLayout(pipeline)
    epochs = epoch_numbers(store.list(layout.epochs_prefix))
    batches = batch_record_keys(store, layout)
    floor = read_floor(store, layout)
    planned = n // PER_EPOCH
    assert floor is not None and floor.epoch > 0, "nothing was pruned"
    # the window, the pruning step, the epoch whose commit prunes next
    bound = RETAINED + pruning_step(RETAINED) + 1
    assert epochs[0] == floor.epoch and epochs[-1] == planned - 1, (floor, epochs)
    assert len(epochs) <= bound and len(batches) <= bound, (epochs, batches)
    assert floor.epochs_with_records == floor.epoch  # every pruned epoch read records
    check_exactly_once_in_gt_order(read_bundles(out), n, partitions)

    # A new checkpoint would replay from epoch 0, which is gone: refused before any data.
    files_before = sorted(p.name for p in out.glob("bundle-*.parquet"))
    error = query_failure(read("cp2"), sink, tmp_path / "cp2")
    assert "state.startAtFloor" in error and f"epoch {floor.epoch}" in error, error
    assert sorted(p.name for p in out.glob("bundle-*.parquet")) == files_before

    # Told to, it starts at the floor: the pruned epochs' records are not read again, the
    # retained ones are dropped by the barrier, the new ones delivered once.
    produce_numbered_from(kafka, topic, n, more, partitions)
    run_available_now(read("cp3", **{"state.startAtFloor": "true"}), sink, tmp_path / "cp3")
    check_exactly_once_in_gt_order(read_bundles(out), n + more, partitions)
    assert len(epoch_numbers(store.list(layout.epochs_prefix))) <= bound


def produce_numbered_from(kafka: Any, topic: str, first: int, n: int, partitions: int) -> None:
    """Records ``first .. first + n - 1`` as :func:`produce_numbered` numbers them."""
    kafka.produce(
        topic,
        ((b"k%d" % i, b"%d" % i, None, i % partitions) for i in range(first, first + n)),
        batch_size=5000,
    )


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_a_compacted_log_is_a_few_objects_and_a_new_checkpoint_replays_it_exactly_once(
    spark: Any, kafka: Any, s3: Any, tmp_path: Path
) -> None:
    """With the default window nothing is pruned in 50 epochs, but the delivered ones are
    compacted: fewer objects than epochs, and a query on a new checkpoint replays every
    epoch from the persisted start, reading the compacted ones from their segments, so the
    barrier drops each and delivers only the records produced since."""
    n, more, partitions, per_epoch = 1_000, 200, 2, 20
    topic, pipeline, state_uri, out, sink = file_pipeline(
        kafka, s3, tmp_path, "compact", n=n, partitions=partitions
    )

    def read() -> Any:
        return stateless(
            source(
                spark,
                kafka,
                topic,
                pipeline,
                state_uri,
                maxOffsetsPerTrigger=str(per_epoch),
                **s3.options(),
            )
        )

    run_available_now(read(), sink, tmp_path / "cp1")
    store = open_store(StoreConfig.from_options({"state.uri": state_uri, **s3.options()}))
    layout = PipelineLayout(pipeline)
    planned = n // per_epoch
    deadline = time.monotonic() + 60
    floor = read_floor(store, layout)
    while (floor is None or floor.segments_end < planned - 2 * SEGMENT_EPOCHS) and (
        time.monotonic() < deadline
    ):
        time.sleep(0.5)  # the last compaction runs in the background after the last batch
        floor = read_floor(store, layout)
    assert floor is not None and not floor.pruned, floor
    assert floor.segments[0].first == 0 and floor.segments_end >= planned - 2 * SEGMENT_EPOCHS
    objects = store.list(layout.epochs_prefix)
    assert len(objects) < planned // 2, objects
    assert len(batch_record_keys(store, layout)) == planned - floor.segments_end
    check_exactly_once_in_gt_order(read_bundles(out), n, partitions)

    produce_numbered_from(kafka, topic, n, more, partitions)
    run_available_now(read(), sink, tmp_path / "cp2")
    check_exactly_once_in_gt_order(read_bundles(out), n + more, partitions)


@pytest.mark.timeout(900)
def test_a_new_checkpoint_with_a_lowered_window_replays_up_to_gt_last(
    spark: Any, kafka: Any, s3: Any, tmp_path: Path
) -> None:
    """25 epochs under a window of 10,000 (nothing pruned), then a query on a new
    checkpoint with ``state.epochsRetained`` lowered to 4: it replays from the persisted
    start, and its own pruner must not delete the epochs (and batch records) ahead of it,
    so it reaches ``GT_last``; the barrier drops every bundle, and it prunes behind itself."""
    n, partitions = 1_000, 2
    topic, pipeline, state_uri, out, sink = file_pipeline(
        kafka, s3, tmp_path, "lowered", n=n, partitions=partitions
    )

    def read(retained: int) -> Any:
        return stateless(
            source(
                spark,
                kafka,
                topic,
                pipeline,
                state_uri,
                maxOffsetsPerTrigger=str(PER_EPOCH),
                **{"state.epochsRetained": str(retained), **s3.options()},
            )
        )

    run_available_now(read(10_000), sink, tmp_path / "cp1")
    store = open_store(StoreConfig.from_options({"state.uri": state_uri, **s3.options()}))
    layout = PipelineLayout(pipeline)
    planned = n // PER_EPOCH
    floor = read_floor(store, layout)
    assert floor is None or not floor.pruned, floor
    check_exactly_once_in_gt_order(read_bundles(out), n, partitions)
    files_before = sorted(p.name for p in out.glob("bundle-*.parquet"))

    query = run_available_now(read(RETAINED), sink, tmp_path / "cp2")
    assert query.lastProgress is not None
    assert sorted(p.name for p in out.glob("bundle-*.parquet")) == files_before
    check_exactly_once_in_gt_order(read_bundles(out), n, partitions)
    floor = read_floor(store, layout)
    assert floor is not None and 0 < floor.epoch <= planned - RETAINED, floor
