"""The barrier protocol, run by ``commit``/``abort`` on the driver.

Spark runs ``commit(messages, batchId)`` on a writer object made anew for each micro-batch
(in a Python worker that Spark may reuse, or a new one after a restart), so everything the
barrier knows is in the state store (but the generation its run started at, which the
sink Spark pickled for the run carries: :mod:`sink.data_source`), in one record
(``<pipeline>/barrier/state.json``, :class:`~state.records.barrier.BarrierState`,
docs/PROTOCOL.md)::

    {"format": 1, "gt_last": 6, "inflight": {...bundle 7...} | null,
     "owner": {"run_id", "query_id", "generation", "since", "token"}}

Every change of that record is a compare-and-swap on the version that was read; a lost
CAS is never retried blindly (it means another driver took the pipeline over). The store
retries its own requests; a swap whose outcome it cannot establish is
:class:`~state.errors.CommitStateUnknown`, resolved by a restart through the in-flight
record.

``commit`` of batch ``b``:

1. The bundle's global time is the epoch ``k`` the batch read, from the batch record the
   source's read tasks wrote (:mod:`state.protocol.batch_records`). No record: a no-data
   batch.
2. Ownership (zombie fencing, like a Kafka producer epoch): the first commit of a driver
   run claims the pipeline by bumping ``owner.generation``, only over the generation the
   run started at (``start_generation``, which Spark's pickled sink carries into every
   commit of the run: :mod:`sink.data_source`); a run that was superseded, or started
   before another run's claim, is fenced (:class:`~state.errors.PipelineFenced`). With
   ``fencing.token``, a lower token than the recorded one is fenced too; the snapshot
   coordinator records its token as the owner when it takes it, before its query runs.
   The claims and every swap of the state are
   :class:`~state.protocol.barrier_state.BarrierStateStore`'s. After a claim's commit has
   delivered its bundle, the claims of runs long superseded are pruned (a failed pruning
   is logged; the next claim prunes them).
3. An in-flight bundle ``j`` left by a crash is resolved first: if the consumer's
   ``last_bundle()`` is ``j`` it is marked acknowledged, otherwise delivered again. If it
   cannot be (its staged parts are gone) and ``k <= j``, this batch is a replay that
   recomputes it: the in-flight record is cleared, ``GT_last`` stays, and the replay of
   epoch ``j`` delivers it. If ``k > j`` nothing recomputes it: the error says what is
   lost and names the way out (:mod:`sink.lost_bundle`).
4. If ``k <= GT_last`` the bundle was delivered before: its staged parts are deleted.
5. Otherwise, if the bundle has rows its consumer's target refused (``errors.tolerance=all``,
   the tasks' dead-letter parts), its dead-letter file is created, keyed by ``k``
   (:mod:`sink.dead_letters`). A file already there, from an earlier attempt of the same
   bundle, is the record of what was refused: the rows it holds are not delivered, and a
   row this attempt refuses that it lacks replaces it (no topic) or stops the commit
   (:mod:`sink.dead_letters.dead_letter_settlement`). Then bundle ``k`` is recorded in flight,
   delivered (retrying the *same* bundle), then ``GT_last`` advances to ``k`` and the
   in-flight record is cleared, in one CAS. A bundle all of whose rows were refused
   writes its dead-letter file and delivers nothing (``GT_last`` stays, as for any bundle
   without rows).

Every row of a bundle ends in exactly one of (consumer, dead letters) because the file
is written before the bundle is recorded in flight and named by the bundle id: a crash
before the in-flight record replays the epoch, which finds the file and delivers only the
rows it does not hold; a redelivery of the bundle in flight finds it too (it checks, and
writes it from the recorded dead-letter parts only if it is missing).

``delivery=at-least-once`` skips the in-flight record and ``last_bundle()``: a crash between
delivery and the ``GT_last`` CAS delivers the bundle again on replay.

Staged parts are deleted only under verified ownership (:mod:`sink.cleanup`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from sink.bundle import BarrierCommitMessage, Bundle
from sink.cleanup import StagingCleanup
from sink.commit_outcome import CommitOutcome
from sink.consumers.base import Ack, Consumer, LastBundle
from sink.dead_letters.dead_letter_files import DeadLetters, DeadLetterWrite
from sink.dead_letters.dead_letter_settlement import DeadLetterSettlement, HeldState
from sink.faults import FaultInjector
from sink.known_state import KNOWN
from sink.lost_bundle import LostBundle
from sink.options import SinkOptions
from sink.staging import Staging
from state.errors import (
    CommitFailed,
    CommitStateUnknown,
    DeliveryFailed,
    FatalError,
    GtBarrierError,
    StateError,
)
from state.layout import PipelineLayout
from state.profiling import StepTimer
from state.protocol.barrier_state import BarrierStateStore, StaleState, claimant
from state.protocol.epoch_log import epoch_of_batch
from state.records.barrier import BarrierState, Owner
from state.retry import Retry, cas_loop, delivery
from state.stores import StateStore
from state.worker_logging import ensure_worker_logging

log = logging.getLogger(__name__)


@dataclass
class BatchCommit:
    """One commit in progress: the batch Spark asked to commit, and its step timings.

    ``run_id`` is the run id the batch's write tasks saw (in their parts' names; None if
    they saw none), :attr:`claimant` the id the run owns the pipeline under.
    """

    batch_id: int
    query_id: str
    run_id: str | None
    messages: list[BarrierCommitMessage]
    timer: StepTimer = field(default_factory=StepTimer)
    #: This batch recomputes a bundle that was in flight when its parts were lost: the
    #: consumer may hold part of it, so it is delivered as a redelivery.
    redeliver: bool = False

    @property
    def rows(self) -> int:
        return sum(m.rows for m in self.messages)

    @property
    def claimant(self) -> str:
        return claimant(self.run_id, self.query_id)

    def outcome(
        self, action: str, epoch: int | None, dead_letters: DeadLetterWrite | None = None
    ) -> CommitOutcome:
        return CommitOutcome(
            self.batch_id,
            epoch,
            action,
            rows=self.rows,
            timings=self.timer.seconds,
            dead_letters=0 if dead_letters is None else dead_letters.rows,
            dead_letters_at=None if dead_letters is None else dead_letters.location,
        )


@dataclass(frozen=True)
class Held:
    """The barrier state as a commit holds it (read or swapped by it, or remembered from
    the last commit of this process) and the version its next swap expects."""

    state: BarrierState
    version: str


class Barrier:
    """The protocol for one pipeline; created per commit/abort in the commit process."""

    def __init__(  # noqa: PLR0913 - its collaborators plus an injectable clock and sleep
        self,
        options: SinkOptions,
        store: StateStore,
        consumer: Consumer,
        staging: Staging,
        faults: FaultInjector | None = None,
        *,
        dead_letters: DeadLetters | None = None,
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
        races: Retry | None = None,
        overlap_reads: bool = True,
        start_generation: int | None = None,
    ) -> None:
        """``dead_letters`` is where refused rows go (by default opened, when a bundle has
        any, from ``errors.deadLetter.path``); ``clock`` stamps owners, ``sleep`` waits
        between delivery attempts, ``races`` retries a claim's lost race (default
        :func:`~state.retry.cas_loop` on ``sleep``), and ``overlap_reads`` reads a commit's
        batch record and barrier state concurrently (two round trips in the time of one);
        without it, one after the other. ``start_generation`` is the generation the
        committing run started at (:func:`~state.protocol.barrier_state.start_generation`),
        None if it is not known: the run is then fenced by its marker, as before claims."""
        self.options = options
        self.store = store
        self.consumer = consumer
        self.staging = staging
        self.faults = faults if faults is not None else FaultInjector.from_environment()
        self.layout = PipelineLayout(options.pipeline_id)
        self.sleep = sleep
        self.states = BarrierStateStore(
            store, self.layout, clock=clock, races=races or cas_loop(sleep=sleep)
        )
        self.overlap_reads = overlap_reads
        self.start_generation = start_generation
        self.dead_letters = DeadLetterSettlement(
            options, staging, self.states, destination=dead_letters, sleep=sleep
        )

    # --- Spark's hooks --------------------------------------------------------------

    def commit(
        self, messages: Sequence[BarrierCommitMessage | None], batch_id: int
    ) -> CommitOutcome:
        started = time.perf_counter()
        ensure_worker_logging()
        batch = _batch(messages, batch_id)
        if batch is None:
            return CommitOutcome(batch_id, None, "empty")
        try:
            outcome = self._commit(batch)
        except BaseException:
            KNOWN.forget(self.store, self.layout)
            raise
        outcome.timings["total"] = time.perf_counter() - started
        outcome.log(self.options.pipeline_id, self.consumer.describe())
        outcome.record_metrics(self.options)
        return outcome

    def abort(self, messages: Sequence[BarrierCommitMessage | None], batch_id: int) -> None:
        """Delete what the failed batch staged, except parts an in-flight record references."""
        batch = _batch([m for m in messages if m is not None], batch_id)
        if batch is None:
            return
        KNOWN.forget(self.store, self.layout)
        self._clean_up(batch)

    # --- the protocol ---------------------------------------------------------------

    def _commit(self, batch: BatchCommit) -> CommitOutcome:
        known = self._known(batch) if batch.rows else None
        if known is not None:
            # The state this process left with the last commit: no read (sink.known_state).
            with batch.timer.step("read_state"):
                epoch = self._epoch_of(batch)
            if epoch is not None and epoch > known.state.gt_last:
                try:
                    return self._advance(batch, epoch, known, remembered=True)
                except StaleState:
                    batch.timer.clear()
            KNOWN.forget(self.store, self.layout)
            with batch.timer.step("read_state"):
                state, version = self.states.load()
        else:
            with batch.timer.step("read_state"):
                epoch, (state, version) = self._epoch_and_state(batch)
        if epoch is None:
            if batch.rows:
                raise FatalError(
                    f"barrier: batch {batch.batch_id} of query {batch.query_id} produced "
                    f"{batch.rows} row(s) but has no batch record {self.store.uri}/"
                    f"{self.layout.batch(batch.query_id, batch.batch_id)}: either it is a "
                    "no-data micro-batch, whose content is not replay-stable (set "
                    "spark.sql.streaming.noDataMicroBatches.enabled=false; "
                    "gtbarrier.register_all(spark) does), or the query does not read a "
                    "gtkafka source with the same pipeline.id and state.uri as this sink "
                    f"(pipeline.id={self.options.pipeline_id!r}, state.uri={self.store.uri!r})"
                )
            return batch.outcome("no-data", None)

        claim = self.states.claim_run(
            state,
            version,
            batch.claimant,
            batch.query_id,
            self.options.fencing_token,
            start_generation=self.start_generation,
        )
        held = Held(claim.state, claim.version)
        if claim.took_over:
            cleanup = self._cleanup()
            cleanup.sweep(cleanup.verify(batch.run_id, batch.claimant, held.state))
        recovered = None
        if held.state.inflight is not None:
            with batch.timer.step("recover"):
                held, recovered = self._resolve_inflight(held, batch, epoch)

        if epoch <= held.state.gt_last or batch.rows == 0:
            written = None
            if epoch > held.state.gt_last:  # no rows to deliver, maybe rows refused
                _, written = self._settle_dead_letters(
                    self._bundle(batch, epoch), batch, held, remembered=False
                )
                # how far epochs are done, for pruning and compaction
                held = Held(*self.states.record_committed(held.state, held.version, epoch))
            self._clean_up(batch)
            self._remember(held)
            action = "dropped" if epoch <= held.state.gt_last else "empty"
            outcome = batch.outcome(action, epoch, written)
        else:
            outcome = self._advance(batch, epoch, held, remembered=False)
        outcome.recovered = recovered
        if claim.took_over:
            self._prune_claims(claim.state)
        return outcome

    def _prune_claims(self, claimed: BarrierState) -> None:
        """After this run's claim (``claimed``), once its bundle is delivered: delete the
        claims of the runs long superseded. They are fenced without them; a pruning that
        fails on the store is logged, and the next claim prunes what it left."""
        try:
            self.states.prune_claims(claimed)
        except GtBarrierError as err:
            log.warning(
                "barrier: pipeline %s: pruning the barrier's run claims failed (the next "
                "claim prunes them): %s",
                self.options.pipeline_id,
                err,
            )

    def _advance(
        self, batch: BatchCommit, epoch: int, held: Held, *, remembered: bool
    ) -> CommitOutcome:
        """Deliver bundle ``epoch`` (above ``GT_last``) and advance ``GT_last`` to it.

        ``remembered``: ``held`` is what this process last read or wrote, not a read made
        by this commit; the first swap confirms it or raises :class:`StaleState` (nothing
        was written: the caller starts again from a read). At-least-once delivers before
        its first swap, so it never starts from a remembered state.
        """
        me = held.state.owner
        bundle = self._bundle(batch, epoch)
        if self.options.exactly_once:
            self.faults.at("before_inflight", epoch)
        # Before anything of the bundle is recorded or delivered; the first file of the
        # bundle decides which of its rows are dead letters.
        bundle, written = self._settle_dead_letters(bundle, batch, held, remembered=remembered)
        if written is not None:
            self.faults.at("after_dead_letters", epoch)
        if self.options.exactly_once:
            with batch.timer.step("cas_inflight"):
                held = self._swap(
                    held,
                    replace(held.state, inflight=bundle.to_record()),
                    me,
                    f"record bundle {epoch} in flight",
                    remembered=remembered,
                )
            self.faults.at("after_inflight", epoch)
        else:
            assert not remembered, "at-least-once delivers before its first swap"
        with batch.timer.step("deliver"):
            ack = self._deliver(bundle, redelivery=batch.redeliver)
        self.faults.at("after_ack", epoch)
        with batch.timer.step("cas_gt_last"):
            held = self._swap(
                held,
                replace(held.state, gt_last=epoch, inflight=None),
                me,
                f"advance GT_last to {epoch}",
            )
        self._remember(held)
        with batch.timer.step("cleanup"):
            self._delete_parts(bundle)
            cleanup = self._cleanup()
            auth = cleanup.verify(batch.run_id, batch.claimant, held.state)  # just swapped
            cleanup.clean_batch(batch.query_id, batch.batch_id, auth)
        self.faults.at("after_gt_last", epoch)
        outcome = batch.outcome("delivered", epoch, written)
        outcome.driver_bytes = ack.driver_bytes
        return outcome

    def _swap(
        self,
        held: Held,
        new: BarrierState,
        me: Owner | None,
        what: str,
        *,
        remembered: bool = False,
    ) -> Held:
        state, version = self.states.swap(
            held.state, new, held.version, me, what, remembered=remembered
        )
        return Held(state, version)

    def _bundle(self, batch: BatchCommit, epoch: int) -> Bundle:
        return Bundle.from_messages(self.options.pipeline_id, epoch, batch.batch_id, batch.messages)

    def _settle_dead_letters(
        self, bundle: Bundle, batch: BatchCommit, held: Held, *, remembered: bool
    ) -> tuple[Bundle, DeadLetterWrite | None]:
        """Bundle ``bundle`` as it is to be delivered, its dead letters settled
        (:meth:`~sink.dead_letters.dead_letter_settlement.DeadLetterSettlement.settle`)."""
        return self.dead_letters.settle(
            bundle,
            batch.timer,
            HeldState(held.state, held.version, remembered),
            batch=f"batch {batch.batch_id} of query {batch.query_id}",
        )

    def _known(self, batch: BatchCommit) -> Held | None:
        """The state this process remembers for the pipeline, if an exactly-once commit of
        this run may start from it: owned by this run (with this fencing token), nothing in
        flight. Anything else takes the read and the checks of a first commit."""
        if not self.options.exactly_once:
            return None
        known = KNOWN.get(self.store, self.layout)
        if known is None or known.state.inflight is not None:
            return None
        owner, token = known.state.owner, self.options.fencing_token
        if owner is None or owner.run_id != batch.claimant:
            return None
        if token is not None and token != owner.token:
            return None
        return Held(known.state, known.version)

    def _remember(self, held: Held) -> None:
        KNOWN.put(self.store, self.layout, held.state, held.version)

    def _epoch_and_state(
        self, batch: BatchCommit
    ) -> tuple[int | None, tuple[BarrierState, str | None]]:
        """The batch's epoch and the barrier state, read concurrently (two round trips
        to the store in the time of one) unless ``overlap_reads`` is off."""
        if not self.overlap_reads:
            return self._epoch_of(batch), self.states.load()
        with ThreadPoolExecutor(max_workers=1) as pool:
            loading = pool.submit(self.states.load)
            epoch = self._epoch_of(batch)
            return epoch, loading.result()

    def _epoch_of(self, batch: BatchCommit) -> int | None:
        """The epoch the batch read (its batch record); None for a no-data batch."""
        return epoch_of_batch(self.store, self.layout, batch.query_id, batch.batch_id)

    def _resolve_inflight(self, held: Held, batch: BatchCommit, epoch: int) -> tuple[Held, int]:
        """Resolve the in-flight bundle of ``held`` before batch ``batch`` (of ``epoch``)
        is committed: acknowledge it if the consumer has it, else deliver it again.

        If it cannot be delivered again (the delivery fails and its staged parts are gone)
        while this batch is its epoch or an earlier one, the batch is a replay that
        recomputes it: the in-flight record is cleared, ``GT_last`` stays, and the replay of
        its epoch delivers it (this batch, marked as a possible redelivery, when it is that
        epoch).
        If a later epoch is committing, nothing will recompute it: the error says what is
        lost and names the way out (:mod:`sink.lost_bundle`).
        """
        inflight = held.state.inflight
        assert inflight is not None
        bundle = Bundle.from_record(self.options.pipeline_id, inflight)
        last: LastBundle | None = None
        if self.options.exactly_once:
            last = self.consumer.last_bundle()
            if last is not None and last.bundle_id > bundle.bundle_id:
                self._fenced_if_superseded(held)
                raise StateError(
                    f"barrier: {self.consumer.describe()} reports bundle {last.bundle_id} but the "
                    f"barrier state ({self.states.where}) has bundle {bundle.bundle_id} in "
                    "flight: the consumer is shared with another pipeline or the state was reset"
                )
        if last is not None and last.bundle_id == bundle.bundle_id:
            how = "the consumer had it"
        else:
            # Written before the bundle was recorded in flight: found, never written twice.
            self.dead_letters.ensure_written(bundle)
            try:
                self._deliver(bundle, redelivery=True)
            except GtBarrierError:
                lost = LostBundle.check(
                    self.options.pipeline_id,
                    self.states.where,
                    inflight,
                    consumer=self.consumer,
                    consumer_last=None if last is None else last.bundle_id,
                )
                if lost is None:
                    raise
                held = self._clear_lost(held, lost, batch, epoch)
                self.staging.delete_many(p.location for p in bundle.dead_letters)
                return held, bundle.bundle_id
            how = "delivered again"
        state = held.state
        held = self._swap(
            held,
            replace(state, gt_last=max(state.gt_last, bundle.epoch), inflight=None),
            state.owner,
            f"acknowledge in-flight bundle {bundle.epoch}",
        )
        self._delete_parts(bundle)
        log.info(
            "barrier: pipeline %s: in-flight bundle %d (batch %d, %d rows) resolved: %s; "
            "GT_last=%d",
            self.options.pipeline_id,
            bundle.bundle_id,
            bundle.batch_id,
            bundle.rows,
            how,
            held.state.gt_last,
        )
        return held, bundle.bundle_id

    def _fenced_if_superseded(self, held: Held) -> None:
        """Raise :class:`PipelineFenced` if another run owns the pipeline now: ``held`` was
        read before it claimed, so what this run sees of the consumer is that run's
        progress, not a fault of the consumer."""
        now, _ = self.states.load()
        mine = held.state.owner
        if now.owner is not None and now.owner != mine:
            raise self.states.fenced(
                now.owner, mine.run_id if mine else "?", "another run resolved its bundle"
            )

    def _clear_lost(self, held: Held, lost: LostBundle, batch: BatchCommit, epoch: int) -> Held:
        """Clear in-flight bundle ``lost`` (its parts are gone, the consumer lacks it) for
        the replay of its epoch to deliver it; raise if no replay can (module docstring)."""
        if epoch > lost.epoch:
            raise StateError(lost.describe(recomputable=False))
        state = held.state
        held = self._swap(
            held, replace(state, inflight=None), state.owner, f"clear lost bundle {lost.epoch}"
        )
        # What is left of its parts is referenced no more.
        self.staging.delete_many(p for p in lost.parts if p not in lost.parts_missing)
        batch.redeliver = epoch == lost.epoch
        log.warning("%s", lost.describe(recomputable=True))
        return held

    def _deliver(self, bundle: Bundle, *, redelivery: bool) -> Ack:
        """Deliver ``bundle``, retrying the same bundle; raise once the retries are spent."""
        attempts = [0]

        def attempt() -> Ack:
            again = redelivery or attempts[0] > 0
            attempts[0] += 1
            self.faults.at("deliver_error", bundle.bundle_id)
            try:
                return self.consumer.deliver(bundle, redelivery=again)
            except GtBarrierError:
                raise
            except Exception as err:
                raise DeliveryFailed(
                    f"{self.consumer.describe()}: delivery of bundle {bundle.bundle_id} failed: "
                    f"{type(err).__name__}: {err}"
                ) from err

        retry = delivery(self.options.max_retries, self.options.retry_backoff, sleep=self.sleep)
        try:
            return retry(attempt)
        except (DeliveryFailed, CommitStateUnknown) as err:
            inflight = (
                " It stays recorded in flight; restarting the query resolves it."
                if self.options.exactly_once
                else ""
            )
            err.add_note(
                f"barrier: bundle {bundle.bundle_id} (batch {bundle.batch_id}, "
                f"{bundle.rows} rows) was not acknowledged after {attempts[0]} "
                f"attempt(s).{inflight}"
            )
            raise

    # --- staging cleanup --------------------------------------------------------------

    def _delete_parts(self, bundle: Bundle) -> None:
        """Delete a bundle's parts and dead-letter parts once a swap this driver made no
        longer references them."""
        self.staging.delete_many(bundle.staged_locations)

    def _cleanup(self) -> StagingCleanup:
        return StagingCleanup(self.states, self.staging)

    def _clean_up(self, batch: BatchCommit) -> None:
        """A dropped, empty or failed batch: delete what it staged, then its batch
        directory's leftovers, on a fresh read of the barrier state (this run's state may
        predate another run's claim)."""
        cleanup = self._cleanup()
        auth = cleanup.verify(batch.run_id, batch.claimant)
        staged = (p.location for m in batch.messages for p in (m.part, m.dead_letters) if p)
        cleanup.discard(staged, auth)
        cleanup.clean_batch(batch.query_id, batch.batch_id, auth)


def _batch(messages: Sequence[BarrierCommitMessage | None], batch_id: int) -> BatchCommit | None:
    """The commit of ``messages`` (None if there are none); a failed task's message (None)
    or tasks that disagree on their query or run fail the commit."""
    if any(m is None for m in messages):
        raise CommitFailed(
            f"barrier: commit of batch {batch_id} got a failed task's message (None)"
        )
    msgs = [m for m in messages if m is not None]
    if not msgs:
        return None
    query_id, run_id = _identity(msgs, batch_id)
    return BatchCommit(batch_id, query_id, run_id, msgs)


def _identity(msgs: Iterable[BarrierCommitMessage], batch_id: int) -> tuple[str, str | None]:
    ids = {(m.query_id, m.run_id) for m in msgs}
    if len(ids) != 1:
        raise CommitFailed(f"barrier: batch {batch_id}'s tasks disagree on query/run: {ids}")
    query_id, run_id = ids.pop()
    return query_id, run_id
