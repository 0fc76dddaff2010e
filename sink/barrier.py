"""The barrier protocol, run by ``commit``/``abort`` on the driver.

Spark runs ``commit(messages, batchId)`` on a writer object made anew for each micro-batch
(in a Python worker that Spark may reuse, or a new one after a restart), so everything the
barrier knows is in the state store, in one record
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
   source's read tasks wrote (``batches/<queryId>/<b>``). No record: a no-data batch.
2. Ownership (zombie fencing, like a Kafka producer epoch): the first commit of a driver
   run claims the pipeline by bumping ``owner.generation``; a run that was superseded is
   fenced (:class:`~state.errors.PipelineFenced`). With ``fencing.token``, a lower token
   than the recorded one is fenced too; the snapshot coordinator records its token as the
   owner when it takes it (:func:`state.protocol.fencing.claim_barrier`), before its query runs.
   The claim and every swap of the state are :mod:`sink.ownership`'s.
3. An in-flight bundle ``j`` left by a crash is resolved first: if the consumer's
   ``last_bundle()`` is ``j`` it is marked acknowledged, otherwise delivered again. If it
   cannot be (its staged parts are gone), the error says what is lost and names the way
   out (:mod:`sink.lost_bundle`).
4. If ``k <= GT_last`` the bundle was delivered before: its staged parts are deleted.
5. Otherwise bundle ``k`` is recorded in flight, delivered (retrying the *same* bundle),
   then ``GT_last`` advances to ``k`` and the in-flight record is cleared, in one CAS.

``delivery=at-least-once`` skips the in-flight record and ``last_bundle()``: a crash between
delivery and the ``GT_last`` CAS delivers the bundle again on replay.

Staged parts are deleted only under verified ownership (:mod:`sink.cleanup`).
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace

from sink.bundle import BarrierCommitMessage, Bundle
from sink.cleanup import StagingCleanup
from sink.commit_outcome import CommitOutcome
from sink.consumers.base import Ack, Consumer, LastBundle
from sink.faults import FaultInjector
from sink.known_state import KNOWN, KnownState
from sink.lost_bundle import LostBundle
from sink.options import SinkOptions
from sink.ownership import Ownership, StaleState, claimant
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
from state.protocol.barrier_state import load_barrier_state
from state.records.barrier import BarrierState, Owner
from state.records.batch import BatchRecord
from state.records.codec import decode
from state.retry import delivery
from state.stores import StateStore
from state.worker_logging import ensure_worker_logging

log = logging.getLogger(__name__)

RUN_ID = re.compile(r"runId\s*=\s*([0-9A-Za-z-]+)")


def run_id_from_description(description: str | None) -> str | None:
    """The streaming run id in Spark's job description (``"... runId = <uuid> ..."``)."""
    if not description:
        return None
    m = RUN_ID.search(description)
    return m.group(1) if m else None


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
        clock: Callable[[], float] = time.time,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.options = options
        self.store = store
        self.consumer = consumer
        self.staging = staging
        self.faults = faults if faults is not None else FaultInjector.from_environment()
        self.layout = PipelineLayout(options.pipeline_id)
        self.clock = clock
        self.sleep = sleep
        self.ownership = Ownership(options, store, self.layout, clock=clock)

    # --- Spark's hooks --------------------------------------------------------------

    def commit(
        self, messages: Sequence[BarrierCommitMessage | None], batch_id: int
    ) -> CommitOutcome:
        started = time.perf_counter()
        ensure_worker_logging()
        if any(m is None for m in messages):
            raise CommitFailed(
                f"barrier: commit of batch {batch_id} got a failed task's message (None)"
            )
        msgs = [m for m in messages if m is not None]
        rows = sum(m.rows for m in msgs)
        if not msgs:
            return CommitOutcome(batch_id, None, "empty")
        query_id, run_id = _identity(msgs, batch_id)
        try:
            outcome = self._commit(msgs, batch_id, query_id, run_id, rows)
        except BaseException:
            KNOWN.forget(self.store, self.layout)
            raise
        outcome.timings["total"] = time.perf_counter() - started
        outcome.log(self.options.pipeline_id, self.consumer.describe())
        outcome.record_metrics(self.options)
        return outcome

    def abort(self, messages: Sequence[BarrierCommitMessage | None], batch_id: int) -> None:
        """Delete what the failed batch staged, except parts an in-flight record references."""
        msgs = [m for m in messages if m is not None]
        if not msgs:
            return
        query_id, run_id = _identity(msgs, batch_id)
        KNOWN.forget(self.store, self.layout)
        self._clean_up(msgs, query_id, batch_id, run_id)

    # --- the protocol ---------------------------------------------------------------

    def _commit(
        self,
        msgs: list[BarrierCommitMessage],
        batch_id: int,
        query_id: str,
        run_id: str | None,
        rows: int,
    ) -> CommitOutcome:
        t = time.perf_counter
        timings: dict[str, float] = {}
        t0 = t()
        known = self._known(run_id, query_id) if rows else None
        if known is not None:
            # The state this process left with the last commit: no read (sink.known_state).
            epoch = self._epoch_of(query_id, batch_id)
            if epoch is not None and epoch > known.state.gt_last:
                timings["read_state"] = t() - t0
                try:
                    return self._advance(
                        msgs,
                        batch_id,
                        query_id,
                        run_id,
                        rows=rows,
                        epoch=epoch,
                        state=known.state,
                        version=known.version,
                        timings=timings,
                        remembered=True,
                    )
                except StaleState:
                    timings.clear()
            KNOWN.forget(self.store, self.layout)
            loaded = self._load()
        else:
            epoch, loaded = self._epoch_and_state(query_id, batch_id)
        if epoch is None:
            if rows:
                raise FatalError(
                    f"barrier: batch {batch_id} of query {query_id} produced {rows} row(s) "
                    f"but has no batch record {self.store.uri}/"
                    f"{self.layout.batch(query_id, batch_id)}: either it is a no-data "
                    "micro-batch, whose content is not replay-stable (set "
                    "spark.sql.streaming.noDataMicroBatches.enabled=false; "
                    "datasource.register_all(spark) does), or the query does not read a "
                    "gtkafka source with the same pipeline.id and state.uri as this sink "
                    f"(pipeline.id={self.options.pipeline_id!r}, state.uri={self.store.uri!r})"
                )
            return CommitOutcome(batch_id, None, "no-data")
        state, version = loaded
        timings["read_state"] = t() - t0

        claim = self.ownership.claim(state, version, run_id, query_id)
        state, version = claim.state, claim.version
        if claim.took_over:
            cleanup = self._cleanup()
            cleanup.sweep(cleanup.verify(run_id, claimant(run_id, query_id), state))
        me = state.owner
        outcome = CommitOutcome(batch_id, epoch, "delivered", rows=rows, timings=timings)

        if state.inflight is not None:
            t1 = t()
            state, version, outcome.recovered = self._resolve_inflight(state, version, me)
            timings["recover"] = t() - t1

        if epoch <= state.gt_last or rows == 0:
            outcome.action = "dropped" if epoch <= state.gt_last else "empty"
            self._clean_up(msgs, query_id, batch_id, run_id)
            self._remember(state, version)
            return outcome
        advanced = self._advance(
            msgs,
            batch_id,
            query_id,
            run_id,
            rows=rows,
            epoch=epoch,
            state=state,
            version=version,
            timings=timings,
            remembered=False,
        )
        advanced.recovered = outcome.recovered
        return advanced

    def _advance(  # noqa: PLR0913 - the commit's findings, passed on
        self,
        msgs: list[BarrierCommitMessage],
        batch_id: int,
        query_id: str,
        run_id: str | None,
        *,
        rows: int,
        epoch: int,
        state: BarrierState,
        version: str,
        timings: dict[str, float],
        remembered: bool,
    ) -> CommitOutcome:
        """Deliver bundle ``epoch`` (above ``GT_last``) and advance ``GT_last`` to it.

        ``remembered``: ``state`` is what this process last read or wrote, not a read made
        by this commit; the first swap confirms it or raises
        :class:`~sink.ownership.StaleState` (nothing was written: the caller starts again
        from a read). At-least-once delivers before its first swap, so it never starts
        from a remembered state.
        """
        t = time.perf_counter
        me = state.owner
        outcome = CommitOutcome(batch_id, epoch, "delivered", rows=rows, timings=timings)
        bundle = Bundle.from_messages(self.options.pipeline_id, epoch, batch_id, msgs)
        if self.options.exactly_once:
            self.faults.at("before_inflight", epoch)
            t1 = t()
            state, version = self.ownership.swap(
                state,
                replace(state, inflight=bundle.to_record()),
                version,
                me,
                f"record bundle {epoch} in flight",
                remembered=remembered,
            )
            timings["cas_inflight"] = t() - t1
            self.faults.at("after_inflight", epoch)
        else:
            assert not remembered, "at-least-once delivers before its first swap"
        t1 = t()
        ack = self._deliver(bundle, redelivery=False)
        timings["deliver"] = t() - t1
        outcome.driver_bytes = ack.driver_bytes
        self.faults.at("after_ack", epoch)
        t1 = t()
        state, version = self.ownership.swap(
            state,
            replace(state, gt_last=epoch, inflight=None),
            version,
            me,
            f"advance GT_last to {epoch}",
        )
        timings["cas_gt_last"] = t() - t1
        self._remember(state, version)
        t1 = t()
        self._delete_parts(bundle)
        cleanup = self._cleanup()
        auth = cleanup.verify(run_id, claimant(run_id, query_id), state)  # just swapped
        cleanup.clean_batch(query_id, batch_id, auth)
        timings["cleanup"] = t() - t1
        self.faults.at("after_gt_last", epoch)
        return outcome

    def _known(self, run_id: str | None, query_id: str) -> KnownState | None:
        """The state this process remembers for the pipeline, if an exactly-once commit of
        this run may start from it: owned by this run (with this fencing token), nothing in
        flight. Anything else takes the read and the checks of a first commit."""
        if not self.options.exactly_once:
            return None
        known = KNOWN.get(self.store, self.layout)
        if known is None or known.state.inflight is not None:
            return None
        owner, token = known.state.owner, self.options.fencing_token
        if owner is None or owner.run_id != claimant(run_id, query_id):
            return None
        if token is not None and token != owner.token:
            return None
        return known

    def _remember(self, state: BarrierState, version: str | None) -> None:
        if version is not None:
            KNOWN.put(self.store, self.layout, state, version)

    def _epoch_and_state(
        self, query_id: str, batch_id: int
    ) -> tuple[int | None, tuple[BarrierState, str | None]]:
        """The batch's epoch and the barrier state, read concurrently (two round trips
        to the store in the time of one)."""
        with ThreadPoolExecutor(max_workers=1) as pool:
            loading = pool.submit(self._load)
            epoch = self._epoch_of(query_id, batch_id)
            return epoch, loading.result()

    def _epoch_of(self, query_id: str, batch_id: int) -> int | None:
        """The epoch the batch read (its batch record); None for a no-data batch."""
        key = self.layout.batch(query_id, batch_id)
        hit = self.store.get_or_none(key)
        if hit is None:
            return None
        record = decode(hit.data, BatchRecord.from_json, f"{self.store.uri}/{key}")
        if (record.query_id, record.batch_id) != (query_id, batch_id):
            raise StateError(f"barrier: batch record {key} names another batch: {record.to_json()}")
        return record.epoch

    def _load(self) -> tuple[BarrierState, str | None]:
        return load_barrier_state(self.store, self.layout)

    def _resolve_inflight(
        self, state: BarrierState, version: str, me: Owner | None
    ) -> tuple[BarrierState, str, int]:
        assert state.inflight is not None
        bundle = Bundle.from_record(self.options.pipeline_id, state.inflight)
        delivered = False
        last: LastBundle | None = None
        if self.options.exactly_once:
            last = self.consumer.last_bundle()
            if last is not None and last.bundle_id > bundle.bundle_id:
                raise StateError(
                    f"barrier: {self.consumer.describe()} reports bundle {last.bundle_id} but the "
                    f"barrier state ({self.store.uri}/{self.layout.barrier_state}) has bundle "
                    f"{bundle.bundle_id} in flight: the consumer is shared with another pipeline "
                    "or the state was reset"
                )
            delivered = last is not None and last.bundle_id == bundle.bundle_id
        if not delivered:
            try:
                self._deliver(bundle, redelivery=True)
            except GtBarrierError as err:
                lost = LostBundle.check(
                    self.options.pipeline_id,
                    f"{self.store.uri}/{self.layout.barrier_state}",
                    state.inflight,
                    consumer=self.consumer,
                    staging=self.staging,
                    consumer_last=None if last is None else last.bundle_id,
                )
                if lost is None:
                    raise
                raise StateError(lost.describe()) from err
        state, version = self.ownership.swap(
            state,
            replace(state, gt_last=max(state.gt_last, bundle.epoch), inflight=None),
            version,
            me,
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
            "the consumer had it" if delivered else "delivered again",
            state.gt_last,
        )
        return state, version, bundle.bundle_id

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
                if (self.options.exactly_once)
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
        """Delete a bundle's parts once a swap this driver made no longer references them."""
        self.staging.delete_many(part.location for part in bundle.parts)

    def _cleanup(self) -> StagingCleanup:
        return StagingCleanup(self.store, self.layout, self.staging)

    def _clean_up(
        self,
        msgs: list[BarrierCommitMessage],
        query_id: str,
        batch_id: int,
        run_id: str | None,
    ) -> None:
        """A dropped, empty or failed batch: delete what it staged, then its batch
        directory's leftovers, on a fresh read of the barrier state (this run's state may
        predate another run's claim)."""
        cleanup = self._cleanup()
        auth = cleanup.verify(run_id, claimant(run_id, query_id))
        cleanup.discard((m.part.location for m in msgs if m.part is not None), auth)
        cleanup.clean_batch(query_id, batch_id, auth)


def _identity(msgs: Iterable[BarrierCommitMessage], batch_id: int) -> tuple[str, str | None]:
    ids = {(m.query_id, m.run_id) for m in msgs}
    if len(ids) != 1:
        raise CommitFailed(f"barrier: batch {batch_id}'s tasks disagree on query/run: {ids}")
    query_id, run_id = ids.pop()
    return query_id, run_id
