"""Progress events become completed batches; the epoch comes from the gtkafka end offset."""

from __future__ import annotations

import json

import pytest

from state.coordinator.batches import completed_batch_from_progress, is_gtkafka_offset


def progress(batch_id: int, *ends: object) -> dict[str, object]:
    return {
        "id": "q-1",
        "runId": "r-1",
        "batchId": batch_id,
        "numInputRows": 7,
        "batchDuration": 120,
        "sources": [
            {"description": f"src{i}", "endOffset": e if isinstance(e, str) else json.dumps(e)}
            for i, e in enumerate(ends)
        ],
    }


def test_gtkafka_end_offset_gives_the_epoch() -> None:
    end = {"epoch": 8, "offsets": {"orders": {"0": 1200, "1": 1187}}}
    b = completed_batch_from_progress(progress(3, end))
    assert (b.batch_id, b.epoch, b.frontier, b.gtkafka) == (3, 7, end, True)
    assert (b.query_id, b.run_id, b.num_input_rows, b.duration_ms) == ("q-1", "r-1", 7, 120)


def test_other_sources_use_the_batch_id() -> None:
    b = completed_batch_from_progress(progress(5, "42"))
    assert (b.epoch, b.gtkafka, b.frontier) == (5, False, {"src0": 42})


def test_two_gtkafka_sources_are_refused() -> None:
    end = {"epoch": 2, "offsets": {}}
    with pytest.raises(ValueError, match="exactly one"):
        completed_batch_from_progress(progress(1, end, end))


def test_offset_shape() -> None:
    assert is_gtkafka_offset({"epoch": 0, "offsets": {}})
    assert not is_gtkafka_offset({"epoch": "0", "offsets": {}})
    assert not is_gtkafka_offset({"offsets": {}})
    assert not is_gtkafka_offset(12)
