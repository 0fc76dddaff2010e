"""The barrier protocol, run by ``commit``/``abort`` on the driver.

Spark runs ``commit(messages, batchId)`` on a writer object made anew for each micro-batch
(in a Python worker that Spark may reuse, or a new one after a restart), so everything the
barrier knows is in the state store (but the generation its run started at, which the
sink Spark pickled for the run carries: :mod:`sink.data_source`, and the state this
process last swapped: :mod:`sink.known_state`).

The rules are docs/PROTOCOL.md's: "Barrier state" (the record and every transition a
compare-and-swap), "A run's claim" (zombie fencing), "A commit's decisions" (the steps of
a commit, each decided by :func:`~state.protocol.barrier_state.decide_commit`) and "Dead
letters" (every dead-letter write after the swap that records its bundle in flight).
:class:`Barrier` does the I/O of those steps: it reads, claims
(:class:`~state.protocol.barrier_state.BarrierStateStore`), resolves an in-flight bundle,
reconciles and publishes dead letters (:mod:`sink.dead_letters.dead_letter_settlement`),
delivers, and cleans up under verified ownership (:mod:`sink.cleanup`); a lost bundle's way
out is :mod:`sink.lost_bundle`'s.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from sink.bundle import BarrierCommitMessage, Bundle
from sink.cleanup import Authority, StagingCleanup, sweep_due
from sink.commit_outcome import CommitOutcome
from sink.consumers.base import Ack, Consumer, LastBundle
from sink.dead_letters.dead_letter_files import DeadLetters, DeadLetterWrite
from sink.dead_letters.dead_letter_settlement import DeadLetterSettlement
from sink.faults import FaultInjector
from sink.known_state import KNOWN
from sink.lost_bundle import LostBundle
from sink.offset_log_epochs import batch_epoch, no_record_reason
from sink.options import SinkOptions
from sink.staging import Staging
from state.errors import (
    CommitFailed,
    CommitStateUnknown,
    DeliveryFailed,
    FatalError,
    GtBarrierError,
    PipelineFenced,
    StaleState,
    StateError,
)
from state.layout import PipelineLayout
from state.log_format import fields
from state.profiling import StepTimer
from state.protocol.barrier_state import (
    BarrierStateStore,
    CommitAction,
    HeldState,
    claimant,
    decide_commit,
)
from state.records.barrier import BarrierState
from state.retry import Retry, cas_loop, delivery
from state.spark_offset_log import CheckpointOffsetLog, OffsetLog
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
    def refused(self) -> int:
        return sum(m.dead_letter_rows for m in self.messages)

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
        offset_log: OffsetLog | None = None,
    ) -> None:
        """``dead_letters`` is where refused rows go (by default opened, when a bundle has
        any, from ``errors.deadLetter.path``); ``clock`` stamps owners, ``sleep`` waits
        between delivery attempts, ``races`` retries a claim's lost race (default
        :func:`~state.retry.cas_loop` on ``sleep``), and ``overlap_reads`` reads a commit's
        batch record and barrier state concurrently (two round trips in the time of one);
        without it, one after the other. ``start_generation`` is the generation the
        committing run started at (:func:`~state.protocol.barrier_state.start_generation`),
        None if it is not known: the run is then fenced by its marker, as before claims.
        ``offset_log`` is the query's offset log, read for a batch without a batch record
        (by default the files under the sink's ``checkpointLocation``)."""
        self.offset_log = offset_log
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
        except PipelineFenced as err:
            KNOWN.forget(self.store, self.layout)
            # A fence is one of the barrier's decisions: logged with them (docs/sink.md,
            # "Log and metrics").
            log.warning("%s", err)
            raise
        except BaseException:
            KNOWN.forget(self.store, self.layout)
            raise
        outcome.timings["total"] = time.perf_counter() - started
        outcome.log(self.options.pipeline_id, self.consumer.describe(), batch.query_id)
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
        """The steps of docs/PROTOCOL.md, "A commit's decisions"."""
        known = KNOWN.get(self.store, self.layout)
        if known is not None and self._decide(None, known, batch) == "advance":
            # The state this process left with the last commit: no read (sink.known_state).
            with batch.timer.step("read_state"):
                epoch = self._epoch_of(batch)
            if epoch is not None and self._decide(epoch, known, batch) == "advance":
                try:
                    return self._advance(batch, epoch, known)
                except StaleState:
                    batch.timer.clear()
            KNOWN.forget(self.store, self.layout)
            with batch.timer.step("read_state"):
                held = self.states.load()
        else:
            with batch.timer.step("read_state"):
                epoch, held = self._epoch_and_state(batch)
        if epoch is None:
            if batch.rows:
                raise FatalError(f"barrier: {self._no_record(batch)}")
            return batch.outcome("no-data", None)

        claim = self.states.claim_run(
            held,
            batch.claimant,
            batch.query_id,
            self.options.fencing_token,
            start_generation=self.start_generation,
        )
        held = claim.held
        if claim.took_over:
            cleanup = self._cleanup()
            cleanup.sweep(cleanup.verify(batch.run_id, batch.claimant, held.state))
        recovered = None
        if held.state.inflight is not None:
            with batch.timer.step("recover"):
                held, recovered = self._resolve_inflight(held, batch, epoch)

        action = self._decide(epoch, held, batch)
        if action == "advance":
            outcome = self._advance(batch, epoch, held)
        else:
            if action == "empty":
                # how far epochs are done, for pruning and compaction
                held = self.states.record_committed(held, epoch)
            self._clean_up(batch)
            self._remember(held)
            outcome = batch.outcome(action, epoch)
        outcome.recovered = recovered
        if claim.took_over:
            self._prune_claims(claim.held.state)
        return outcome

    def _decide(self, epoch: int | None, held: HeldState, batch: BatchCommit) -> CommitAction:
        """:func:`~state.protocol.barrier_state.decide_commit` for ``batch``; ``epoch`` None
        from a remembered state: whether the batch may start from it at all (its epoch not
        read yet, taken as ahead)."""
        if held.remembered and epoch is None:
            epoch = held.state.gt_last + 1
        return decide_commit(
            epoch,
            held,
            rows=batch.rows,
            refused=batch.refused,
            run_id=batch.claimant,
            token=self.options.fencing_token,
            exactly_once=self.options.exactly_once,
        )

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

    def _advance(self, batch: BatchCommit, epoch: int, held: HeldState) -> CommitOutcome:
        """Settle bundle ``epoch`` (above ``GT_last``: rows to deliver, rows refused, or
        both) and advance ``GT_last`` to it (docs/PROTOCOL.md, "A commit's decisions").

        From a remembered ``held`` the first swap confirms it or raises
        :class:`~state.errors.StaleState` with nothing written (the caller starts again
        from a read): the dead letters are only read before it. At-least-once delivers
        before its first swap, so it never starts from a remembered state.
        """
        me = held.state.owner
        bundle = self._bundle(batch, epoch)
        if self.options.exactly_once:
            self.faults.at("before_inflight", epoch)
        bundle, found = self.dead_letters.reconcile(
            bundle, batch.timer, held, batch=f"batch {batch.batch_id} of query {batch.query_id}"
        )
        if self.options.exactly_once:
            with batch.timer.step("cas_inflight"):
                held = self.states.swap(
                    held,
                    replace(held.state, inflight=bundle.to_record()),
                    me,
                    f"record bundle {epoch} in flight",
                )
        else:
            assert not held.remembered, "at-least-once delivers before its first swap"
        # After the swap that records the bundle in flight: a run it fenced writes nothing.
        written = self.dead_letters.publish(bundle, batch.timer, found=found)
        if written is not None:
            self.faults.at("after_dead_letters", epoch)
        if self.options.exactly_once:
            self.faults.at("after_inflight", epoch)
        with batch.timer.step("deliver"):
            ack = self._deliver(bundle, redelivery=batch.redeliver)
        self.faults.at("after_ack", epoch)
        with batch.timer.step("cas_gt_last"):
            held = self.states.swap(
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
            if sweep_due(epoch, self.options.sweep_every):
                self._sweep_superseded(cleanup, auth)
                self._expire_dead_letters(epoch)
        self.faults.at("after_gt_last", epoch)
        outcome = batch.outcome("delivered" if bundle.rows else "empty", epoch, written)
        outcome.driver_bytes = ack.driver_bytes
        return outcome

    def _bundle(self, batch: BatchCommit, epoch: int) -> Bundle:
        return Bundle.from_messages(self.options.pipeline_id, epoch, batch.batch_id, batch.messages)

    def _remember(self, held: HeldState) -> None:
        KNOWN.put(self.store, self.layout, held)

    def _epoch_and_state(self, batch: BatchCommit) -> tuple[int | None, HeldState]:
        """The batch's epoch and the barrier state, read concurrently (two round trips
        to the store in the time of one) unless ``overlap_reads`` is off."""
        if not self.overlap_reads:
            return self._epoch_of(batch), self.states.load()
        with ThreadPoolExecutor(max_workers=1) as pool:
            loading = pool.submit(self.states.load)
            epoch = self._epoch_of(batch)
            return epoch, loading.result()

    def _epoch_of(self, batch: BatchCommit) -> int | None:
        """The batch's epoch; None for a no-data batch (``offset_log_epochs.batch_epoch``)."""
        return batch_epoch(
            self.store,
            self.layout,
            lambda: self.offset_log or CheckpointOffsetLog(self.options.checkpoint_location),
            self._no_record(batch),
            query_id=batch.query_id,
            batch_id=batch.batch_id,
            rows=batch.rows,
        )

    def _no_record(self, batch: BatchCommit) -> str:
        """Why a batch with rows and no batch record is refused, and the ways out."""
        return no_record_reason(
            self.store.uri,
            self.layout,
            pipeline_id=self.options.pipeline_id,
            query_id=batch.query_id,
            batch_id=batch.batch_id,
            rows=batch.rows,
        )

    def _resolve_inflight(
        self, held: HeldState, batch: BatchCommit, epoch: int
    ) -> tuple[HeldState, int]:
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
            try:
                # Published after the bundle was recorded in flight, maybe not yet: from
                # the record's dead-letter parts, created once.
                self.dead_letters.publish(bundle)
                self._deliver(bundle, redelivery=True)
            except GtBarrierError:
                lost = LostBundle.check(
                    self.options.pipeline_id,
                    self.states.where,
                    inflight,
                    consumer=self.consumer,
                    consumer_last=None if last is None else last.bundle_id,
                    dead_letters_missing=self.dead_letters.unpublishable(bundle),
                )
                if lost is None:
                    raise
                held = self._clear_lost(held, lost, batch, epoch)
                self.staging.delete_many(p.location for p in bundle.dead_letters)
                return held, bundle.bundle_id
            how = "delivered again"
        state = held.state
        held = self.states.swap(
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
            extra=fields(
                pipeline=self.options.pipeline_id,
                query=batch.query_id,
                batch=bundle.batch_id,
                epoch=bundle.epoch,
                bundle=bundle.bundle_id,
                event="inflight_resolved",
                rows=bundle.rows,
                gt_last=held.state.gt_last,
            ),
        )
        return held, bundle.bundle_id

    def _fenced_if_superseded(self, held: HeldState) -> None:
        """Raise :class:`PipelineFenced` if another run owns the pipeline now: ``held`` was
        read before it claimed, so what this run sees of the consumer is that run's
        progress, not a fault of the consumer."""
        now = self.states.load().state
        mine = held.state.owner
        if now.owner is not None and now.owner != mine:
            raise self.states.fenced(
                now.owner, mine.run_id if mine else "?", "another run resolved its bundle"
            )

    def _clear_lost(
        self, held: HeldState, lost: LostBundle, batch: BatchCommit, epoch: int
    ) -> HeldState:
        """Clear in-flight bundle ``lost`` (its parts are gone, the consumer lacks it) for
        the replay of its epoch to deliver it; raise if no replay can (module docstring)."""
        if epoch > lost.epoch:
            raise StateError(lost.describe(recomputable=False))
        state = held.state
        held = self.states.swap(
            held, replace(state, inflight=None), state.owner, f"clear lost bundle {lost.epoch}"
        )
        # What is left of its parts is referenced no more.
        self.staging.delete_many(p for p in lost.parts if p not in lost.parts_missing)
        batch.redeliver = epoch == lost.epoch
        log.warning("%s", lost.describe(recomputable=True))
        return held

    def _deliver(self, bundle: Bundle, *, redelivery: bool) -> Ack:
        """Deliver ``bundle``, retrying the same bundle; raise once the retries are spent. A
        bundle with no rows (every row refused) is not handed to the consumer."""
        if not bundle.rows:
            return Ack(bundle.bundle_id, 0)
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

    def _sweep_superseded(self, cleanup: StagingCleanup, auth: Authority) -> None:
        """The owner's periodic sweep (:func:`~sink.cleanup.sweep_due`), after the bundle is
        delivered and ``GT_last`` advanced: a store that fails it fails no commit, the next
        sweep deletes what this one left."""
        try:
            cleanup.sweep(auth)
        except GtBarrierError as err:
            log.warning(
                "barrier: pipeline %s: sweeping the staged parts of superseded runs failed "
                "(the next sweep deletes them): %s",
                self.options.pipeline_id,
                err,
            )

    def _expire_dead_letters(self, gt_last: int) -> None:
        """``errors.deadLetter.retention``: the owner deletes the files that have outlived
        it, of bundles at or below ``gt_last`` (just swapped in). Like the sweep, a store
        that fails it fails no commit: the next sweep deletes what this one left."""
        retention = self.options.errors.retention
        destination = self.dead_letters.destination()
        if retention is None or destination is None:
            return
        try:
            deleted = destination.expire(gt_last, retention)
        except GtBarrierError as err:
            log.warning(
                "barrier: pipeline %s: deleting dead-letter files older than "
                "errors.deadLetter.retention failed (the next sweep deletes them): %s",
                self.options.pipeline_id,
                err,
            )
            return
        if deleted:
            log.info(
                "barrier: pipeline %s: deleted the dead-letter files of %d bundle(s) older "
                "than errors.deadLetter.retention (bundles %d to %d)",
                self.options.pipeline_id,
                len(deleted),
                deleted[0],
                deleted[-1],
            )

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
