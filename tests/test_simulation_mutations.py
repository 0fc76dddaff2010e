"""The simulator can fail: each test re-introduces a known bug into the product's real code
(a monkeypatch, undone after the test) and asserts that the simulator finds a violation
within the test's budget and prints its shortest failing schedule.

The search (:func:`simulation.explore.hunt`) first runs every schedule of at most one event
(so a bug a failure-free run or a single fault shows is found with its shortest schedule),
then seeded random walks; the schedule found is minimised by delta debugging and must be
1-minimal: removing any one of its events makes the violation go away.

The bugs:

1. the row filter by gt: write tasks drop rows whose ``gt`` is at or below ``GT_last``,
   losing stateful output that carries the ``gt`` of older records;
2. a snapshot accepted into another generation (the resume point's generation check
   removed, the snapshot written into the current generation);
3. a zombie's cleanup deleting a newer run's parts (the generation rule of
   ``sink/cleanup.py``'s ``_superseded`` removed);
4. a commit without the claim check (``BarrierStateStore.claim_run`` claims even where it
   would fence);
5. a bundle recorded in flight from a stale state (a swap from the remembered state of
   ``sink/known_state.py`` not confirmed by its compare-and-swap: it is made on whatever
   version the state has now);
6. dead letters rewritten on a replay (``DeadLetters.write`` puts the bundle's file every
   time instead of creating it once, leaving an existing one as it is), on the pipeline
   with poison rows at ``errors.tolerance=all``;
7. a retried delivery not marked as a redelivery (``Barrier._deliver`` passes its caller's
   flag on every attempt, so the retry after a delivery whose answer was lost is a plain
   delivery of a bundle the consumer holds: a Kafka topic would hold it twice);
8. a recomputable bundle left to the operator (``Barrier._clear_lost`` refuses the replay
   of the lost bundle's own epoch, so the operator skips a bundle a replay recomputes).

The findings of the review of the newest paths, each fix reverted:

9. reconciliation pairing rows that share a ``gt`` (``recorded_against`` pairs the file's
   rows with this attempt's refused rows alone, falling back to a ``gt`` that fan-out rows
   share), on the pipeline whose fan-out record's refused row changes between runs;
10. dead letters written before the barrier's compare-and-swap (the bundle's dead-letter
    file created when a commit finds none, before the swap that records the bundle in
    flight: a run that swap fences, a zombie or one deciding from a stale remembered
    state, has written it already), on the pipeline with poison rows at
    ``errors.tolerance=all``.

The source's planning, which the simulator runs in the product's stream reader:

14. the rate limit one record too generous (``offsets.plan_end`` grants
    ``maxOffsetsPerTrigger + 1`` records, an off-by-one in the epoch's end).

Who prunes, now that every batch's commit reaches the reader's ``commit`` (as Spark calls
it), with the coordinator too:

15. the driver's pruner not deferring to the snapshot coordinator
    (``log_pruner.read_coordinated`` answers no: the driver prunes a pipeline whose
    coordinator owns the pruning, below the epochs its restores start at), on the pipeline
    with the coordinator whose source sets ``state.epochsRetained``.

Where a pruned pipeline restarts, now that ``make sim`` and ``--quick`` explore the
pipelines whose drivers prune:

16. a query on a new checkpoint started at the floor without ``state.startAtFloor``
    (``new_checkpoint_start`` takes the floor's start instead of refusing with
    ``EpochsPruned``): a stateful query builds its state from the floor only.

The read tasks, which run the product's topic-id check:

17. a re-run reading a topic recreated since its epoch was planned (the read task's
    comparison of the recorded topic ids with the broker's, ``topic_id_check.recreated``
    as ``partition_reader`` calls it, disabled), on the pipeline whose topic may be
    recreated, at ``failOnDataLoss=false``.

The snapshot coordinator's own steps, which the simulator runs in the product's
``SnapshotPipeline``:

18. a snapshot accepted over a newer resume point (``SnapshotPipeline``'s acceptance
    writes its point with a plain compare-and-swap, without ``advance_resume_point``'s
    forward-only check): a driver that restored an older snapshot moves the point back;
19. a snapshot accepted into the generation of its acceptance rather than the one it
    started in (``SnapshotPipeline._accept`` takes the driver's lineage as it is then: a
    snapshot of the old query version still in progress when ``recover(mode="replay")``
    begins a new generation joins the new one).

``recover(mode="replay")``, which the simulator runs in the product's ``Recoverer``:

20. a replay that begins the new generation but leaves the checkpoint as it is
    (``recover_checkpoint`` not called for ``mode="replay"``): the new query version runs
    on the old version's offsets and state.

The coordinator's pruning after an accepted snapshot, due in the simulator on the pipeline
whose coordinator keeps few epochs:

21. the coordinator pruning past its oldest retained snapshot (``snapshot_floor_target``
    as the snapshot pipeline calls it, without the snapshot's bound): a restore of that
    snapshot would find its epochs pruned.

The compaction of the epoch log, reached on the pipeline whose compaction unit is one epoch:

22. a compaction that deletes the epochs it copied before the swap of the floor record
    that names their segments (``_swap_floor`` preceded by that deletion): a driver that
    dies in between leaves the epochs in neither.

The floor against a paused coordinator, on the pipeline whose coordinator keeps few epochs:

23. ``recover(mode="replay")`` writing its generation without fencing the floor first
    (``fence_generation`` as the ``Recoverer`` calls it, a no-op): an old driver's snapshot
    thread that read the floor and the resume point before the new generation raises the
    floor the new generation's replay needs.

Snapshot retention after an acceptance, found by PCT runs (the search's walks miss both):

24. retention deleting every snapshot the resume point does not retain, not only those
    below the oldest one it retains (``retention.doomed``): a paused driver deletes the
    snapshot a newer driver is about to accept;
25. retention decided from the resume point the driver wrote rather than the one it reads
    after its acceptance (``read_resume_point`` as the snapshot pipeline calls it answers
    with the driver's own last write, and everything it does not retain is doomed): the
    bug ``make sim`` found, a paused driver deleting the newer driver's snapshots.

The planner behind a compaction, found by PCT runs on the compacting pipeline:

26. ``EpochLog.record`` keeping its own end after a create that succeeds for an epoch a
    compaction already moved into a segment (``_unless_compacted`` answering "created"):
    the driver's checkpoint and the log then disagree on that epoch.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from datasource import log_pruner, offsets, partition_reader, stream_reader
from simulation import mutants
from simulation.explore import (
    COMPACTING,
    COORDINATED,
    DEAD_LETTERS,
    FANOUT,
    LONG,
    PRUNING,
    RECREATED,
    SPARSE,
    hunt,
    report,
    run_schedule,
    shortest,
)
from simulation.query import SimConfig
from simulation.staging import SimStaging
from simulation.world import Schedule
from sink import barrier as sink_barrier
from sink import write_task
from sink.bundle import BarrierCommitMessage, Bundle
from sink.consumers.base import Ack
from sink.dead_letters import dead_letter_format, dead_letter_settlement
from sink.dead_letters.dead_letter_files import (
    DeadLetterFile,
    DeadLetters,
    DeadLetterWrite,
    StoreDeadLetters,
)
from sink.dead_letters.dead_letter_format import (
    BUNDLE_KEY,
    NO_GT,
    PIPELINE_KEY,
    Identity,
    dead_letter_name,
    dead_letter_table,
)
from sink.dead_letters.dead_letter_settlement import DeadLetterSettlement
from sink.lost_bundle import LostBundle
from sink.staging import Staging, parquet_bytes
from state.coordinator import recovery_future
from state.coordinator.checkpoint_recovery import RecoveryResult, recover_checkpoint
from state.coordinator.snapshot import attempt as snapshot_attempt
from state.coordinator.snapshot import retention as snapshot_retention
from state.coordinator.snapshot.attempt import Closing, SnapshotPipeline
from state.errors import PipelineFenced, StateError
from state.layout import PipelineLayout
from state.profiling import StepTimer
from state.protocol import barrier_state, epoch_floor, fencing, resume_point
from state.protocol.barrier_state import (
    BarrierStateStore,
    Claim,
    HeldState,
    read_barrier_state,
)
from state.protocol.epoch_log import EpochLog
from state.records.barrier import BarrierState, Owner
from state.records.epoch import EpochRecord
from state.records.floor import FloorRecord
from state.records.gt import GT_COLUMN
from state.records.manifest import Manifest
from state.records.resume_point import ResumePoint, SnapshotRef
from state.records.source_offset import Frontier, SourceOffset, TopicPartitionKey
from state.retry import Retry, cas_loop, delivery
from state.spark_task import StreamingTask
from state.stores import StateStore

CONFIG = SimConfig()
#: Random walks after the exhaustive search of one-event schedules (fixed seeds: the
#: search is deterministic, so is its time), and how many more seeds after the first
#: violation are searched for others to minimise (the shortest is kept).
SEEDS = 8000
MORE = 100


def find_shortest(
    name: str, config: SimConfig = CONFIG, *, pct: bool = False
) -> tuple[Schedule, str]:
    """Hunt for the mutation's violation on ``config`` (after the one-event schedules, the
    random walks, or with ``pct`` the PCT runs); minimise, check and print the shortest
    schedule."""
    started = time.monotonic()
    found, tally = hunt(config, bound=1, seeds=SEEDS, more=MORE, pct=pct)
    searched = time.monotonic() - started
    assert found, (
        f"{name}: the simulator found no violation in {tally.schedules} schedules "
        f"({tally.steps} steps)"
    )
    best, small = shortest(config, found)
    invariant = best.violation.invariant
    assert _fails(small, invariant, config), f"{name}: the minimised schedule does not fail"
    for i in range(len(small.events)):
        fewer = replace(small, events=small.events[:i] + small.events[i + 1 :])
        assert not _fails(fewer, invariant, config), f"{name}: {small} is not 1-minimal"
    first = "the empty schedule" if found[0].seed is None else f"seed {found[0].seed}"
    first += " (PCT)" if found[0].pct else ""
    print(
        f"\n{name}: first violation at {first}; searched {tally.schedules} schedules "
        f"({tally.steps} steps) in {searched:.1f} s; {len(found)} violation(s) minimised, "
        f"the shortest has {len(small.events)} event(s); {time.monotonic() - started:.1f} s "
        "in all"
    )
    print(report(config, best, small))
    return small, invariant


def _fails(schedule: Schedule, invariant: str, config: SimConfig = CONFIG) -> bool:
    outcome, _ = run_schedule(config, schedule)
    return outcome.violation is not None and outcome.violation.invariant == invariant


# --- 1. the row filter by gt ------------------------------------------------------------------


def test_row_filter_by_gt_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    stage = write_task.stage_task

    def filtered(
        batches: Iterable[pa.RecordBatch],
        task: StreamingTask,
        staging: Staging,
        *,
        has_gt: bool,
        **checks: Any,
    ) -> BarrierCommitMessage:
        assert isinstance(staging, SimStaging)
        gt_last = read_barrier_state(staging.world.current_store(), staging.layout).gt_last
        kept = [
            b.filter(pc.greater(pc.struct_field(b.column(GT_COLUMN), [0]), gt_last))
            for b in batches
        ]
        return stage(kept, task, staging, has_gt=has_gt, **checks)

    monkeypatch.setattr(write_task, "stage_task", filtered)
    shortest, invariant = find_shortest("row filter by gt")
    # A failure-free run shows it: stateful rows carry the gt of older epochs.
    assert invariant == "content"
    assert shortest.events == ()


# --- 2. a snapshot accepted into another generation -----------------------------------------


def test_snapshot_accepted_into_another_generation_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bug = mutants.SNAPSHOT_INTO_ANOTHER_GENERATION
    monkeypatch.setattr(bug.owner, bug.name, bug.replacement())
    shortest, _ = find_shortest("snapshot accepted into another generation")
    assert any(e.kind == "upgrade" for e in shortest.events)


# --- 3. a zombie's cleanup deleting a newer run's parts ---------------------------------------


@pytest.mark.slow
def test_cleanup_without_the_generation_rule_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    bug = mutants.CLEANUP_WITHOUT_THE_GENERATION_RULE
    monkeypatch.setattr(bug.owner, bug.name, bug.replacement())
    _, invariant = find_shortest("cleanup without the generation rule")
    assert invariant == "in-flight parts kept"


# --- 4. a commit without the claim check -------------------------------------------------------


def test_commit_without_the_claim_check_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    claim_run = BarrierStateStore.claim_run

    def claim_anyway(
        self: BarrierStateStore,
        held: HeldState,
        run_id: str,
        query_id: str,
        token: int | None,
        *,
        start_generation: int | None = None,
    ) -> Claim:
        try:
            return claim_run(self, held, run_id, query_id, token, start_generation=start_generation)
        except PipelineFenced:
            # The fenced checks skipped: the run swaps itself in over the current state.
            now = self.load()
            current, current_version = now.state, now.version
            assert current_version is not None
            generation = current.owner.generation + 1 if current.owner else 1
            owner = Owner(run_id, query_id, generation, self.clock(), token)
            claimed = replace(current, owner=owner)
            new_version = self.store.compare_and_swap_json(
                self.layout.barrier_state, claimed.to_json(), current_version
            )
            return Claim(HeldState(claimed, new_version), took_over=True)

    monkeypatch.setattr(BarrierStateStore, "claim_run", claim_anyway)
    shortest, _ = find_shortest("commit without the claim check")
    assert any(e.kind in ("zombie", "crash") for e in shortest.events)


# --- 5. an in-flight bundle recorded from a stale state ---------------------------------------


def test_stale_remembered_state_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    bug = mutants.STALE_REMEMBERED_STATE
    monkeypatch.setattr(bug.owner, bug.name, bug.replacement())
    shortest, _ = find_shortest("stale remembered state")
    assert any(e.kind in ("zombie", "crash") for e in shortest.events)


# --- 6. dead letters rewritten on a replay ------------------------------------------------------


def test_dead_letters_rewritten_on_a_replay_are_found(monkeypatch: pytest.MonkeyPatch) -> None:
    def put_every_time(
        self: DeadLetters, pipeline_id: str, bundle_id: int, staged: Callable[[], pa.Table]
    ) -> DeadLetterWrite:
        # The file is written from the staged rows on every attempt, replacing one that is
        # there: not created once.
        assert isinstance(self, StoreDeadLetters)
        table = dead_letter_table(staged(), bundle_id)
        metadata = {
            **(table.schema.metadata or {}),
            PIPELINE_KEY: pipeline_id.encode(),
            BUNDLE_KEY: str(bundle_id).encode(),
        }
        self.store.put(
            dead_letter_name(bundle_id), parquet_bytes(table.replace_schema_metadata(metadata))
        )
        return DeadLetterWrite(bundle_id, table.num_rows, True, self.location(bundle_id), table)

    monkeypatch.setattr(DeadLetters, "write", put_every_time)
    shortest, invariant = find_shortest("dead letters rewritten on a replay", DEAD_LETTERS)
    # A failure-free run writes each file once; one crash or lost answer after the file was
    # written makes the replay of its epoch write it again.
    assert invariant == "dead letters created once"
    assert len(shortest.events) == 1


# --- 7. a retried delivery not marked as a redelivery -------------------------------------------


def test_retry_without_the_redelivery_flag_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    def deliver_unmarked(self: sink_barrier.Barrier, bundle: Bundle, *, redelivery: bool) -> Ack:
        # Every attempt carries the caller's flag: a retry after an answer that was lost
        # (the consumer may have stored the bundle) is not marked as a redelivery.
        def attempt() -> Ack:
            return self.consumer.deliver(bundle, redelivery=redelivery)

        retry = delivery(self.options.max_retries, self.options.retry_backoff, sleep=self.sleep)
        return retry(attempt)

    monkeypatch.setattr(sink_barrier.Barrier, "_deliver", deliver_unmarked)
    shortest, invariant = find_shortest("retry without the redelivery flag")
    assert invariant == "delivered once"
    assert [e.kind for e in shortest.events] == ["consumer"]


# --- 8. a recomputable bundle left to the operator ----------------------------------------------


def test_recomputable_bundle_skipped_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    clear_lost = sink_barrier.Barrier._clear_lost

    def refuse_own_epoch(
        self: sink_barrier.Barrier,
        held: Any,
        lost: LostBundle,
        batch: Any,
        epoch: int,
    ) -> Any:
        # The replay of the lost bundle's own epoch is refused too: the operator is told to
        # skip a bundle that this very batch recomputes.
        if epoch == lost.epoch:
            raise StateError(lost.describe(recomputable=False))
        return clear_lost(self, held, lost, batch, epoch)

    monkeypatch.setattr(sink_barrier.Barrier, "_clear_lost", refuse_own_epoch)
    shortest, invariant = find_shortest("recomputable bundle skipped")
    assert invariant == "skipped only when unrecomputable"
    assert any(e.kind == "lose-part" for e in shortest.events)


# --- 9. reconciliation pairing rows that share a gt ---------------------------------------------


def test_reconciliation_pairing_rows_that_share_a_gt_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def paired_with_refused_alone(
        recorded: pa.Table,
        refused: pa.Table | None,
        accepted: Callable[[], Sequence[pa.Table]],
    ) -> tuple[int, list[Identity]]:
        # The file's rows are paired with the rows refused now alone, by value, then by any
        # equal gt: a fan-out row of the file pairs with its sibling refused now, though the
        # file's row itself is accepted now.
        columns = dead_letter_format.input_columns(recorded)
        held = dead_letter_format.row_identities(recorded, columns)
        now = dead_letter_format.row_identities(refused, columns) if refused is not None else []
        taken: set[int] = set()
        paired: dict[int, int] = {}
        for i, (value, _) in enumerate(held):
            same = [j for j in range(len(now)) if j not in taken and now[j][0] == value]
            if same:
                paired[i] = same[0]
                taken.add(same[0])
        for i, (_, gt) in enumerate(held):
            shared = [j for j in range(len(now)) if j not in taken and now[j][1] == gt]
            if i not in paired and gt != NO_GT and shared:
                paired[i] = shared[0]
                taken.add(shared[0])
        kept_out = [held[i] for i in range(len(held)) if i not in paired]
        return len(now) - len(taken), kept_out

    monkeypatch.setattr(dead_letter_settlement, "recorded_against", paired_with_refused_alone)
    shortest, invariant = find_shortest("reconciliation pairing rows that share a gt", FANOUT)
    # The replay after a lost part refuses the other row of the fan-out record than the
    # file holds: the file's row is delivered too.
    assert invariant == "exactly once with dead letters"
    assert [e.kind for e in shortest.events] == ["lose-part"]


# --- 10. dead letters written before the barrier's compare-and-swap --------------------------


def test_dead_letters_written_before_the_swap_are_found(monkeypatch: pytest.MonkeyPatch) -> None:
    reconcile = DeadLetterSettlement.reconcile

    def created_first(
        self: DeadLetterSettlement, bundle: Bundle, timer: StepTimer, held: HeldState, *, batch: str
    ) -> tuple[Bundle, DeadLetterFile | None]:
        # The file is created as soon as a commit finds none, before the swap that records
        # the bundle in flight: nothing fences the write of a run that swap would refuse.
        bundle, found = reconcile(self, bundle, timer, held, batch=batch)
        destination = self.destination()
        if found is None and destination is not None and bundle.dead_letters:
            self.publish(bundle, timer, found=None)
            found = destination.find(self.pipeline_id, bundle.bundle_id)
        return bundle, found

    monkeypatch.setattr(DeadLetterSettlement, "reconcile", created_first)
    shortest, invariant = find_shortest("dead letters written before the swap", DEAD_LETTERS)
    # Every commit writes before its swap, a failure-free one too: whether a later swap
    # would fence the writer is no longer what decides the write.
    assert invariant == "dead letters fenced"
    assert shortest.events == ()


# --- 11. the driver's pruner deleting epochs its own query still reads ------------------------


def test_pruner_passing_its_own_query_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    target = epoch_floor.floor_target

    def from_the_barrier_alone(
        progress: int, inflight_epoch: int | None, retained: int, *, query_next: int | None = None
    ) -> int:
        # Where the pruning query reads next is ignored: a query behind the barrier (a
        # replay on a new checkpoint) has the epochs it still reads deleted ahead of it.
        return target(progress, inflight_epoch, retained)

    monkeypatch.setattr(log_pruner, "floor_target", from_the_barrier_alone)
    shortest, invariant = find_shortest("pruner passing its own query", PRUNING)
    # The driver dies with its first pruning due and its checkpoint; the next one replays
    # from the persisted start, and its first pruning passes it.
    assert invariant == "the pruner spares its query"
    assert [(e.kind, e.arg) for e in shortest.events] == [("crash", "lose")]


# --- 12. pruning stalled by sparse output -------------------------------------------------------


def test_pruning_stalled_by_empty_bundles_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    def never_recorded(state: BarrierState, epoch: int) -> BarrierState | None:
        # Epochs committed with empty bundles are not recorded: the barrier's progress stays
        # at GT_last, and so does the pruning target.
        return None

    monkeypatch.setattr(barrier_state, "decide_committed", never_recorded)
    shortest, invariant = find_shortest("pruning stalled by empty bundles", SPARSE)
    # A failure-free run keeps every epoch after the only one with output.
    assert invariant == "the epoch log stays bounded"
    assert shortest.events == ()


# --- 13. a sweep turning the driver's pruning off ----------------------------------------------


def test_pruning_turned_off_by_a_sweep_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    def any_driver_record(store: StateStore, layout: PipelineLayout) -> bool:
        # A driver record means "the coordinator prunes here", whoever took its token: the
        # operator's sweep takes one too, and the pipeline is never pruned again.
        return store.get_or_none(layout.driver) is not None

    monkeypatch.setattr(log_pruner, "read_coordinated", any_driver_record)
    shortest, invariant = find_shortest("pruning turned off by a sweep", LONG)
    assert invariant == "the epoch log stays bounded"
    assert [e.kind for e in shortest.events] == ["sweep"]


# --- 14. the rate limit one record too generous ------------------------------------------------


def test_rate_limit_off_by_one_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    plan = offsets.plan_end

    def one_more(
        begin: Mapping[TopicPartitionKey, int],
        latest: Mapping[TopicPartitionKey, int],
        *,
        max_rows: int | None = None,
        **limits: Any,
    ) -> Frontier | None:
        # The epoch's end one record past what maxOffsetsPerTrigger allows.
        return plan(begin, latest, max_rows=None if max_rows is None else max_rows + 1, **limits)

    monkeypatch.setattr(offsets, "plan_end", one_more)
    shortest, invariant = find_shortest("rate limit off by one")
    # The first epoch a failure-free run plans holds one record too many.
    assert invariant == "the source plans within its limits"
    assert shortest.events == ()


# --- 15. the driver's pruner not deferring to the coordinator --------------------------------


def test_pruner_not_deferring_to_the_coordinator_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    def never_coordinated(store: StateStore, layout: PipelineLayout) -> bool:
        # The driver record's word that a coordinator took a token is not read: the driver
        # prunes as if nobody else did, past the coordinator's retained snapshots.
        return False

    monkeypatch.setattr(log_pruner, "read_coordinated", never_coordinated)
    shortest, invariant = find_shortest("pruner not deferring to the coordinator", COORDINATED)
    # The failure-free run: p1's first pruning (after epoch 1) raises the floor before its
    # snapshot worker had a snapshot accepted.
    assert invariant == "the floor spares restores"
    assert shortest.events == ()


# --- 16. a new checkpoint started at the floor without state.startAtFloor ---------------------


def test_new_checkpoint_started_at_the_floor_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    def at_the_floor(
        floor: FloorRecord | None,
        persisted: SourceOffset,
        *,
        pipeline_id: str,
        retained: int,
        start_at_floor: bool,
    ) -> SourceOffset:
        # state.startAtFloor is not asked: once epochs were pruned, a query on a new
        # checkpoint starts at the floor, its state built from the epochs above it only.
        if floor is None or not floor.pruned:
            return persisted
        return floor.start

    monkeypatch.setattr(stream_reader, "new_checkpoint_start", at_the_floor)
    shortest, invariant = find_shortest("new checkpoint started at the floor", PRUNING)
    # One fault: the driver dies without its checkpoint after its first pruning; the next
    # one starts at the floor, and its totals lack the pruned epochs' records.
    assert invariant == "content"
    assert [(e.kind, e.arg) for e in shortest.events] == [("crash", "lose")]


# --- 17. a re-run reading a topic recreated since its epoch was planned ------------------------


def test_recreated_topic_read_under_the_old_id_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    def never_recreated(recorded: Mapping[str, str], current: Mapping[str, str]) -> dict[str, str]:
        # The ids a task's plan names are not compared with the broker's: a task that
        # runs after the topic was recreated reads the new topic's records at the offsets
        # of the old epoch.
        return {}

    monkeypatch.setattr(partition_reader, "recreated", never_recreated)
    shortest, invariant = find_shortest("recreated topic read under the old id", RECREATED)
    assert invariant == "read under the planned topic id"
    # The topic recreated between epoch 0's planning and its read task.
    assert [e.kind for e in shortest.events] == ["recreate"]


# --- 18. a snapshot accepted over a newer resume point ---------------------------------------


def test_snapshot_accepted_over_a_newer_point_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    def written_anyway(
        backend: resume_point.ResumePointBackend,
        make: Callable[[ResumePoint | None], ResumePoint],
        *,
        retry: Retry | None = None,
    ) -> ResumePoint | None:
        # The snapshot's point replaces the current one whatever their order: a plain
        # compare-and-swap, without the forward-only check.
        def once() -> ResumePoint:
            current, version = resume_point.read_resume_point(backend)
            new = make(current)
            backend.write(new.to_json(), version)
            return new

        return (retry or cas_loop())(once)

    monkeypatch.setattr(snapshot_attempt, "advance_resume_point", written_anyway)
    _, invariant = find_shortest("snapshot accepted over a newer resume point")
    assert invariant == "resume point never moves back"


# --- 19. a snapshot accepted into the generation of its acceptance ----------------------------


def test_snapshot_taking_the_generation_at_acceptance_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def generation_at_acceptance(
        self: SnapshotPipeline, manifest: Manifest, token: int, timeout: float, closing: Closing
    ) -> ResumePoint:
        # SnapshotPipeline._accept, but the generation is read when the snapshot is
        # accepted, not taken from its manifest (when it started): the driver's own
        # recover(mode="replay") has moved its lineage on meanwhile.
        ref = SnapshotRef(
            snapshot_id=manifest.snapshot_id,
            manifest=self.writer.manifest_key(manifest.snapshot_id),
            manifest_sha256=hashlib.sha256(manifest.to_bytes()).hexdigest(),
            epoch=manifest.epoch,
            batch_id=manifest.batch_id,
        )

        def make(current: ResumePoint | None) -> ResumePoint:
            fencing.check_token(self.store, self.layout, token)
            return resume_point.accepted_point(
                current,
                ref,
                generation=self.lineage.generation,
                token=token,
                query_id=manifest.query_id,
                frontier=manifest.frontier,
                retain=self.config.retain,
                created_at=time.time(),
            )

        written = resume_point.advance_resume_point(self.ownership.backend, make)
        if written is None:
            raise StateError("not accepted")
        self.lineage.seen(written)
        return written

    monkeypatch.setattr(SnapshotPipeline, "_accept", generation_at_acceptance)
    shortest, invariant = find_shortest("snapshot taking the generation at its acceptance")
    # The healthy driver's restore refuses the old version's snapshot in the new
    # generation, and none other is retained.
    assert invariant == "liveness"
    assert any(e.kind == "upgrade" for e in shortest.events)


# --- 20. a replay that keeps the old checkpoint -------------------------------------------------


def test_replay_keeping_the_old_checkpoint_is_found(monkeypatch: pytest.MonkeyPatch) -> None:
    prepare = recover_checkpoint

    def kept_on_replay(
        store: StateStore,
        layout: PipelineLayout,
        point: ResumePoint | None,
        checkpoint: Path,
        mode: str,
        **seams: Any,
    ) -> RecoveryResult:
        # The new generation is written, but the old version's checkpoint stays in place
        # (neither emptied nor marked with the new generation).
        if mode == "replay":
            return RecoveryResult("keep", "the checkpoint is kept")
        return prepare(store, layout, point, checkpoint, mode, **seams)

    monkeypatch.setattr(recovery_future, "recover_checkpoint", kept_on_replay)
    shortest, invariant = find_shortest("replay keeping the old checkpoint")
    assert invariant == "content"
    assert any(e.kind == "upgrade" for e in shortest.events)


# --- 21. the coordinator pruning past its oldest retained snapshot -------------------------------


def test_coordinator_pruning_past_its_oldest_snapshot_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def past_the_snapshots(
        progress: int, inflight_epoch: int | None, retained: int, oldest_snapshot_epoch: int
    ) -> int:
        # The epochs the oldest retained snapshot's restore starts at are not kept.
        return epoch_floor.floor_target(progress, inflight_epoch, retained)

    monkeypatch.setattr(snapshot_attempt, "snapshot_floor_target", past_the_snapshots)
    shortest, invariant = find_shortest("coordinator pruning past its oldest snapshot", COORDINATED)
    assert invariant == "the floor spares restores"
    # The failure-free run: the coordinator's first pruning after a snapshot.
    assert shortest.events == ()


# --- 22. a compaction deleting the epochs it copied before the floor names the copies -----------


def test_compaction_deleting_before_its_floor_swap_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    swap_floor = epoch_floor._swap_floor

    def deleting_first(
        store: StateStore, layout: PipelineLayout, new: FloorRecord, version: str | None
    ) -> bool:
        # The copied epochs are deleted before the swap that names their segments: a
        # driver that dies in between leaves epochs in neither.
        old = epoch_floor.read_floor(store, layout)
        begin = 0 if old is None else old.segments_end
        store.delete_many([layout.epoch(k) for k in range(begin, new.segments_end)])
        return bool(swap_floor(store, layout, new, version))

    monkeypatch.setattr(epoch_floor, "_swap_floor", deleting_first)
    shortest, invariant = find_shortest("compaction deleting before its floor swap", COMPACTING)
    # The first driver dies between deleting epoch 0 and creating the floor that names its
    # segment, with its checkpoint; the next one, at 2 records an epoch, plans epoch 0
    # again differently, and the product refuses the recorded epoch 1 after it
    # (EpochLogConflict) for good: it stops rather than read the log wrong.
    assert invariant == "liveness"
    assert [(e.kind, e.arg) for e in shortest.events] == [("crash", "lose")]


# --- 23. a new generation that does not fence the floor ------------------------------------------


def test_a_new_generation_without_its_floor_fence_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def unfenced(
        store: StateStore,
        layout: PipelineLayout,
        generation: int,
        start: Callable[[], SourceOffset | None],
    ) -> bool:
        # The new generation is written with the floor as it was: a raise decided from
        # the old generation's retained snapshots still wins its swap.
        return False

    monkeypatch.setattr(recovery_future, "fence_generation", unfenced)
    shortest, invariant = find_shortest("a new generation without its floor fence", COORDINATED)
    assert invariant == "the floor spares restores"
    assert any(e.kind == "upgrade" for e in shortest.events)


# --- 24. retention deleting every snapshot the point does not retain ----------------------------


def _not_retained(stored: Iterable[int], keep: Sequence[int]) -> list[int]:
    # Every snapshot the point does not name, one a newer driver is accepting included.
    return sorted(set(stored) - set(keep)) if keep else []


def test_retention_deleting_above_the_oldest_retained_snapshot_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(snapshot_retention, "doomed", _not_retained)
    shortest, invariant = find_shortest(
        "retention above the oldest retained snapshot", CONFIG, pct=True
    )
    # The next restore finds the retained snapshots deleted: SnapshotCorrupted, for good.
    assert invariant == "liveness"
    assert any(e.kind == "zombie" for e in shortest.events)


# --- 25. retention from the point the driver wrote ------------------------------------------------


def test_retention_from_the_point_the_driver_wrote_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    wrote: dict[int, ResumePoint] = {}
    advance = resume_point.advance_resume_point
    read = resume_point.read_resume_point

    def remembered(
        backend: resume_point.ResumePointBackend,
        make: Callable[[ResumePoint | None], ResumePoint],
        *,
        retry: Retry | None = None,
    ) -> ResumePoint | None:
        written = advance(backend, make, retry=retry)
        if written is not None:
            wrote[id(backend)] = written
        return written

    def as_written(
        backend: resume_point.ResumePointBackend,
    ) -> tuple[ResumePoint | None, str | None]:
        # The point this driver wrote, whatever the backend holds now.
        if id(backend) in wrote:
            return wrote[id(backend)], None
        return read(backend)

    monkeypatch.setattr(snapshot_attempt, "advance_resume_point", remembered)
    monkeypatch.setattr(snapshot_attempt, "read_resume_point", as_written)
    monkeypatch.setattr(snapshot_retention, "doomed", _not_retained)
    shortest, invariant = find_shortest("retention from the point it wrote", CONFIG, pct=True)
    assert invariant == "liveness"
    assert any(e.kind in {"zombie", "upgrade"} for e in shortest.events)


# --- 26. a planner keeping its own end for an epoch a compaction moved -------------------------


def test_planner_keeping_its_end_for_a_compacted_epoch_is_found(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def as_created(log: EpochLog, epoch: int, created: EpochRecord) -> tuple[EpochRecord, bool]:
        return created, True

    monkeypatch.setattr(EpochLog, "_unless_compacted", as_created)
    shortest, invariant = find_shortest(
        "a planner keeping its end for a compacted epoch", COMPACTING, pct=True
    )
    # The healthy driver continuing the stray planner's checkpoint meets the next epoch
    # starting elsewhere (EpochLogConflict), for good.
    assert invariant == "liveness"
    # Only a driver that fell behind (a zombie) creates an epoch a compaction moved.
    assert any(e.kind == "zombie" for e in shortest.events)
