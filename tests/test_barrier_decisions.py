"""A commit's decisions (docs/PROTOCOL.md, "A commit's decisions"): the pure
:func:`~state.protocol.barrier_state.decide_commit`, called directly, then the barrier
around it where a dead letter depends on it.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow.parquet as pq
import pytest

from sink.dead_letters.dead_letter_files import FileDeadLetters
from sink.dead_letters.dead_letter_format import dead_letter_name
from state.errors import StateError
from state.protocol.barrier_state import CommitAction, HeldState, decide_commit
from state.records.barrier import BarrierState, Owner
from state.records.inflight_bundle import InflightBundle
from tests.sink_helpers import Pipeline
from tests.test_sink_dead_letters import (
    Interrupted,
    commit_as,
    crash_at,
    file_id,
    jsonl,
    note_batch,
    remembered_by,
    values_of,
    write_refusing,
    write_refusing_table,
)

OWNER = Owner("run-a", "q", 3, 0.0, token=2)
INFLIGHT = InflightBundle(5, "q", 4, "run-a", (), has_gt=True, ordered=True)


def decide(
    epoch: int | None,
    state: BarrierState,
    *,
    remembered: bool = False,
    rows: int = 1,
    refused: int = 0,
    run_id: str = "run-a",
    token: int | None = 2,
    exactly_once: bool = True,
) -> CommitAction:
    return decide_commit(
        epoch,
        HeldState(state, "v1", remembered),
        rows=rows,
        refused=refused,
        run_id=run_id,
        token=token,
        exactly_once=exactly_once,
    )


@pytest.mark.parametrize(
    ("epoch", "rows", "refused", "expected"),
    [
        (None, 0, 0, "no-data"),
        (None, 3, 0, "no-data"),  # the caller refuses rows without a batch record
        (4, 3, 0, "dropped"),
        (3, 0, 2, "dropped"),  # a replay of a delivered bundle: its dead letters untouched
        (5, 0, 0, "empty"),
        (5, 3, 0, "advance"),
        (5, 0, 2, "advance"),  # every row refused: recorded in flight like any bundle
        (5, 3, 2, "advance"),
    ],
)
def test_a_read_state_drops_at_or_below_gt_last_and_advances_anything_to_settle(
    epoch: int | None, rows: int, refused: int, expected: CommitAction
) -> None:
    state = BarrierState(gt_last=4, owner=OWNER)
    assert decide(epoch, state, rows=rows, refused=refused) == expected


@pytest.mark.parametrize(
    ("state", "facts", "expected"),
    [
        (BarrierState(4, None, OWNER), {}, "advance"),
        (BarrierState(4, None, OWNER), {"rows": 0, "refused": 1}, "advance"),
        (BarrierState(4, None, OWNER), {"rows": 0}, "read"),  # nothing to settle
        (BarrierState(4, None, OWNER), {"epoch": 4}, "read"),  # dropped: decided on a read
        (BarrierState(4, None, OWNER), {"epoch": None}, "read"),
        (BarrierState(4, INFLIGHT, OWNER), {}, "read"),  # something to resolve first
        (BarrierState(4, None, OWNER), {"run_id": "run-b"}, "read"),  # another run's state
        (BarrierState(4, None, OWNER), {"token": 3}, "read"),  # another token
        (BarrierState(4, None, OWNER), {"token": None}, "advance"),
        (BarrierState(4, None, None), {}, "read"),
        (BarrierState(4, None, OWNER), {"exactly_once": False}, "read"),
    ],
)
def test_a_remembered_state_advances_only_its_own_runs_next_bundle_and_reads_otherwise(
    state: BarrierState, facts: dict[str, object], expected: CommitAction
) -> None:
    epoch = facts.pop("epoch", 5)
    assert epoch is None or isinstance(epoch, int)
    assert decide(epoch, state, remembered=True, **facts) == expected  # type: ignore[arg-type]


def test_a_dead_letter_part_lost_before_its_file_is_published_is_recomputed_by_the_replay(
    tmp_path: Path,
) -> None:
    """The bundle is in flight, its file not published, its dead-letter part gone: its
    refused rows cannot be published from it, so (like a lost part) the replay of its epoch
    clears the record and recomputes the bundle, which then publishes them."""
    p = Pipeline(jsonl(tmp_path))
    rows = note_batch(1, 0, [0, 1, 2], bad=[1])
    p.record_batch(0, epoch=1)
    with pytest.raises(Exception, match="crash at after_inflight"):
        p.barrier(faults=crash_at("after_inflight")).commit([p.write(0, [rows])], 0)
    path = tmp_path / "dl" / dead_letter_name(1)
    path.unlink()  # as if the crash came before the file was published
    [part] = p.inflight().dead_letters
    p.staging.delete(part.location)
    p.run_id = "run-b"
    outcome = p.barrier().commit([p.write(0, [rows])], 0)
    assert outcome.action == "delivered" and outcome.recovered == 1
    assert [(d[0], values_of(d[1])) for d in p.consumer.delivered] == [(1, [b"0:0", b"0:2"])]
    assert values_of(pq.read_table(path)) == [b"0:1"]
    assert p.state().gt_last == 1 and p.state().inflight is None and p.staged() == []


def test_a_remembered_state_that_meets_a_file_it_disagrees_with_starts_again_from_a_read(
    tmp_path: Path,
) -> None:
    """From a remembered state, a file whose rows differ from what this attempt refuses
    may be that of a bundle delivered since: no error is decided on it (a
    :class:`~state.errors.StaleState`, which the barrier answers with a read). Here another
    process of the same run delivered bundle 2 meanwhile; the read shows it, and the batch
    is dropped, the file and the consumer as that process left them."""
    p = Pipeline(jsonl(tmp_path))
    p.record_batch(0, epoch=1)
    assert commit_as(p, "run-a", None, 0, note_batch(1, 0, [9]), [], start_generation=0) == (
        "delivered"
    )
    remembers = remembered_by(p)
    p.record_batch(1, epoch=2)
    rows = note_batch(2, 0, [0, 1, 2])
    assert commit_as(p, "run-a", None, 1, rows, [b"0:1"], start_generation=0) == "delivered"
    path = tmp_path / "dl" / dead_letter_name(2)
    written = file_id(path)
    action = commit_as(p, "run-a", remembers, 1, rows, [b"0:1", b"0:2"], start_generation=0)
    assert action == "dropped"
    assert file_id(path) == written and values_of(pq.read_table(path)) == [b"0:1"]
    assert [(d[0], values_of(d[1])) for d in p.consumer.delivered][1:] == [(2, [b"0:0", b"0:2"])]


def test_a_file_created_by_an_unknown_writer_with_other_rows_stops_the_commit(
    tmp_path: Path,
) -> None:
    """Between this commit's look for the file (none) and its create, a writer the protocol
    does not know of creates it with other rows: the commit stops before delivering, the
    bundle stays in flight, the foreign file is left as it is."""
    p = Pipeline(jsonl(tmp_path))
    rows = note_batch(1, 0, [0, 1, 2])
    p.record_batch(0, epoch=1)
    destination = Interrupted(str(tmp_path / "dl"))

    def foreign_file() -> None:
        FileDeadLetters(str(tmp_path / "dl")).write(
            "p1", 1, lambda: write_refusing_table(p, rows, [b"0:2"])
        )

    destination.after_find = foreign_file
    message = write_refusing(p, 0, rows, [b"0:1"])
    with pytest.raises(StateError, match="created by another writer after this commit"):
        p.barrier(dead_letters=destination).commit([message], 0)
    assert p.consumer.calls == 0 and p.inflight().dead_letter_rows == 1
    assert values_of(pq.read_table(tmp_path / "dl" / dead_letter_name(1))) == [b"0:2"]
