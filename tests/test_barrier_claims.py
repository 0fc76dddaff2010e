"""A run's claim of the barrier by the generation it started at, and the bounded claims.

A run's commit-side data source is pickled by Spark once per run, at its first commit, and
every commit of the run unpickles those bytes (``sink.data_source.BarrierSink``); the
owner's generation read then is the run's *start generation*. A run claims the pipeline
only over the generation it started at, so a run that was superseded, or that started
before another run's claim, is fenced with no marker of its own: the claim markers below
the owner's generation are pruned (docs/PROTOCOL.md, "Barrier state").

The pure decision (:func:`~state.protocol.barrier_state.decide_claim`), then whole runs
through the barrier on ``memory://`` (the same runs on every store, ``file://`` and S3
included, are in ``tests/store_contract.py``), and the pickling Spark does.
"""

from __future__ import annotations

import pickle
import re
from collections.abc import Iterable

import pytest
from pyspark.sql.types import BinaryType, StructField, StructType

from sink.barrier import Barrier
from sink.bundle import BarrierCommitMessage
from sink.commit_outcome import CommitOutcome
from sink.data_source import BarrierSink
from state.errors import PipelineFenced, StoreUnavailable
from state.protocol.barrier_state import (
    CLAIMS_KEPT,
    BarrierStateStore,
    ClaimDecision,
    decide_claim,
    start_generation,
)
from state.records.barrier import Owner
from tests.sink_helpers import Pipeline, gt_batch, sink_options

# --- the decision -------------------------------------------------------------------------


def run(run_id: str, generation: int, token: int | None = None) -> Owner:
    return Owner(run_id, "q", generation, 0.0, token)


def driver(generation: int, token: int) -> Owner:
    return Owner.driver_claim("host:1:d", token, generation, 0.0)


@pytest.mark.parametrize(
    ("owner", "token", "start", "expected"),
    [
        # a state created from nothing: the first run claims generation 1
        (None, None, 0, ClaimDecision("claims", 1)),
        # a restart, on the same checkpoint or a new one: it started at the owner's
        # generation, nothing claimed since
        (run("old", 4), None, 4, ClaimDecision("claims", 5)),
        # the owner: nothing to write, whatever it started at
        (run("me", 5), None, 4, ClaimDecision("owns", 5)),
        # the owner with a newer fencing token claims again
        (run("me", 5, token=3), 4, 4, ClaimDecision("claims", 6)),
        # the coordinator claimed for its driver before the query started
        (driver(5, token=3), 3, 5, ClaimDecision("claims", 6)),
    ],
)
def test_a_run_claims_over_the_generation_it_started_at(
    owner: Owner | None, token: int | None, start: int, expected: ClaimDecision
) -> None:
    assert decide_claim(owner, "me", token, start) == expected


@pytest.mark.parametrize(
    ("owner", "token", "start", "why"),
    [
        # claimed since it started: a newer run (it was superseded, or it lost the race
        # with a run that started with it)
        (run("new", 6), None, 4, r"^the pipeline was claimed at generation 6 after this run "),
        # a driver's claim made after this run started (no token: the generation fences)
        (driver(5, token=3), None, 4, r"^the pipeline was claimed at generation 5 after"),
        # the state is gone, or was made again, since it started
        (None, None, 3, r"^the barrier state was made anew after this run started at gen"),
        # a lower token, whatever the generations say
        (run("new", 4, token=3), 2, 4, r"^its fencing\.token 2 < 3$"),
    ],
)
def test_a_run_is_fenced_when_the_pipeline_was_claimed_after_it_started(
    owner: Owner | None, token: int | None, start: int, why: str
) -> None:
    decision = decide_claim(owner, "me", token, start)
    assert decision.action == "fenced"
    assert re.search(why, decision.why), decision.why


def test_of_two_runs_that_start_together_the_first_claim_wins_for_good() -> None:
    # Both started at generation 4; "a" claims first (its compare-and-swap landed first).
    first = decide_claim(run("old", 4), "a", None, 4)
    assert first == ClaimDecision("claims", 5)
    owner = run("a", first.generation)
    for _ in range(3):  # no flip-flop: "b" stays fenced, "a" stays the owner
        assert decide_claim(owner, "b", None, 4).action == "fenced"
        assert decide_claim(owner, "a", None, 4) == ClaimDecision("owns", 5)


def test_a_run_without_a_start_generation_is_fenced_by_its_marker_as_before() -> None:
    """As every earlier release decides: the run's marker is its memory."""
    owner = run("new", 6)
    assert decide_claim(owner, "me", None, None, marker_exists=False) == ClaimDecision("claims", 7)
    fenced = decide_claim(owner, "me", None, None, marker_exists=True)
    assert (fenced.action, fenced.why) == ("fenced", "a newer run took the pipeline over")


# --- whole runs through the barrier ---------------------------------------------------------


class Runs:
    """Driver runs of one pipeline, each with the start generation Spark gives it: read
    once, when its sink is pickled for its first commit (or abort)."""

    def __init__(self, p: Pipeline) -> None:
        self.p = p
        self.starts: dict[str, int | None] = {}
        self.batch = 0

    def start(self, run_id: str, *, earlier_release: bool = False) -> None:
        self.starts[run_id] = (
            None if earlier_release else start_generation(self.p.store, self.p.layout)
        )

    def stage(self, run_id: str) -> BarrierCommitMessage:
        if run_id not in self.starts:
            self.start(run_id)
        self.batch += 1
        self.p.record_batch(self.batch, epoch=self.batch)
        return self.p.write(self.batch, [gt_batch(self.batch, 0, [self.batch])], run_id=run_id)

    def barrier(self, run_id: str) -> Barrier:
        return self.p.barrier(start_generation=self.starts[run_id])

    def commit(self, run_id: str) -> CommitOutcome:
        message = self.stage(run_id)
        return self.barrier(run_id).commit([message], self.batch)

    def claims(self) -> list[str]:
        return self.p.store.list(self.p.layout.barrier_claims_prefix)

    def markers(self) -> list[str]:
        return self.p.store.list(f"{self.p.layout.root}/barrier/runs/")


RUNS = 30


def test_after_many_runs_the_claims_stay_bounded_and_a_superseded_run_is_still_fenced() -> None:
    p = Pipeline()
    runs = Runs(p)
    assert runs.commit("run-0").action == "delivered"
    first_claim = runs.claims()
    assert first_claim == [p.layout.barrier_claim(1, "run-0")]
    for i in range(1, RUNS):
        assert runs.commit(f"run-{i}").action == "delivered"
        assert p.owner().run_id == f"run-{i}" and p.owner().generation == i + 1
        assert len(runs.claims()) <= CLAIMS_KEPT + 1, runs.claims()
    assert sorted(runs.claims()) == [
        p.layout.barrier_claim(g, f"run-{g - 1}") for g in range(RUNS - CLAIMS_KEPT, RUNS + 1)
    ]
    assert runs.markers() == []  # no run of this release writes the marker of old
    # run-0 is a zombie: its claim is long gone, and it is fenced at its next commit
    assert first_claim[0] not in runs.claims()
    message = runs.stage("run-0")
    with pytest.raises(PipelineFenced, match=r"\(run run-0\) is a zombie .*claimed at generation"):
        runs.barrier("run-0").commit([message], runs.batch)
    runs.barrier("run-0").abort([message], runs.batch)
    assert p.owner().run_id == f"run-{RUNS - 1}" and p.owner().generation == RUNS
    assert [d[0] for d in p.consumer.delivered] == list(range(1, RUNS + 1))
    assert p.staged() == []


def test_two_runs_that_start_together_one_wins_and_the_other_never_claims() -> None:
    p = Pipeline()
    runs = Runs(p)
    runs.commit("run-0")
    runs.start("run-a")
    runs.start("run-b")  # before run-a's claim: both started at generation 1
    assert runs.commit("run-a").action == "delivered"
    for _ in range(2):
        with pytest.raises(PipelineFenced, match=r"\(run run-b\) is a zombie"):
            runs.commit("run-b")
        assert runs.commit("run-a").action == "delivered"
    assert p.owner().run_id == "run-a" and p.owner().generation == 2


def test_a_query_started_after_its_drivers_claim_claims_and_older_runs_are_fenced() -> None:
    p = Pipeline()
    runs = Runs(p)
    runs.commit("run-a")
    runs.start("run-b")  # a run that started before the new driver took the pipeline
    BarrierStateStore(p.store, p.layout).claim_driver(1, driver="host:2:new")
    assert p.owner().is_driver_claim and p.owner().generation == 2
    # the new driver's query starts after the claim; its options carry the token
    p.options = sink_options(**{"fencing.token": "1", "state.uri": p.options.store.uri})
    assert runs.commit("run-c").action == "delivered"
    assert (p.owner().run_id, p.owner().generation, p.owner().token) == ("run-c", 3, 1)
    p.options = sink_options(**{"state.uri": p.options.store.uri})
    for older in ("run-a", "run-b"):
        with pytest.raises(PipelineFenced, match=rf"\(run {older}\) is a zombie"):
            runs.commit(older)


def test_an_earlier_releases_run_is_fenced_by_its_marker_which_is_never_pruned() -> None:
    p = Pipeline()
    runs = Runs(p)
    runs.start("run-old", earlier_release=True)
    runs.commit("run-old")
    marker = f"{p.layout.root}/barrier/runs/run-old.json"
    assert runs.markers() == [marker] and runs.claims() == []
    for i in range(6):
        runs.commit(f"run-{i}")
    assert runs.markers() == [marker]
    assert len(runs.claims()) == CLAIMS_KEPT + 1
    with pytest.raises(PipelineFenced, match="a newer run took the pipeline over"):
        runs.commit("run-old")
    assert p.owner().run_id == "run-5"


def test_a_failed_pruning_is_logged_and_the_next_claim_prunes(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    p = Pipeline()
    runs = Runs(p)
    for i in range(4):
        runs.commit(f"run-{i}")
    real_delete_many = p.store.delete_many
    claims = p.layout.barrier_claims_prefix

    def refused(keys: Iterable[str]) -> None:
        wanted = list(keys)
        if any(k.startswith(claims) for k in wanted):
            raise StoreUnavailable(p.store.uri, wanted[0], "connection refused")
        real_delete_many(wanted)

    monkeypatch.setattr(p.store, "delete_many", refused)
    assert runs.commit("run-4").action == "delivered"  # the commit is not failed by it
    assert "pruning the barrier's run claims failed" in caplog.text
    assert len(runs.claims()) == CLAIMS_KEPT + 2
    monkeypatch.setattr(p.store, "delete_many", real_delete_many)
    runs.commit("run-5")
    assert len(runs.claims()) == CLAIMS_KEPT + 1


# --- what Spark pickles -----------------------------------------------------------------------

SCHEMA = StructType([StructField("value", BinaryType())])


def test_the_sink_carries_the_generation_it_was_pickled_at_into_every_commit() -> None:
    """Spark makes the commit-side data source at a run's first commit and pickles it
    (``PythonDataSourceV2.getOrCreateDataSourceInPython``, once per query start); each
    commit unpickles those bytes and calls ``streamWriter``
    (``pyspark/sql/worker/python_streaming_sink_runner.py``). The instances Spark makes
    for every batch's write tasks (``write_into_data_source.py``) are never pickled."""
    p = Pipeline()
    runs = Runs(p)
    runs.commit("run-a")
    raw = {
        "pipeline.id": p.options.pipeline_id,
        "state.uri": p.options.store.uri,
        "consumer": "http",
        "consumer.url": "http://127.0.0.1:9/bundles",
    }
    pickled = pickle.dumps(BarrierSink(raw))  # run-z's first commit
    runs.commit("run-b")  # a newer run claims generation 2
    for _ in range(2):  # every commit of run-z
        writer = pickle.loads(pickled).streamWriter(SCHEMA, False)
        assert writer.start_generation == 1
        with writer._barrier() as barrier:
            assert barrier.start_generation == 1
    assert BarrierSink(raw).streamWriter(SCHEMA, False).start_generation is None
