"""An in-flight bundle that can no longer be delivered, and the operator's way past it.

The barrier records a bundle in flight before delivering it, and a restart delivers it
again from its staged parts unless the consumer has it. If those parts are gone (deleted
by hand or by a storage lifecycle rule) and the consumer does not have the bundle, nothing
can deliver it:
every restart stops with a :class:`~state.errors.StateError` that says what is lost
(:meth:`LostBundle.describe`) and names the way out::

    from gtbarrier import resolve_lost_inflight
    resolve_lost_inflight(sink_options, bundle_id=7)                         # reports only
    resolve_lost_inflight(sink_options, bundle_id=7, acknowledge_loss=True)  # skips it

or from a shell, ``gtbarrier resolve-lost --pipeline ... --bundle 7 [--acknowledge-loss]``
(:mod:`gtbarrier.cli.resolve_lost`).

Skipping moves ``GT_last`` to the bundle (a replay of its epoch is then dropped), clears
the in-flight record and records the loss under ``skipped`` in the barrier state
(:class:`~state.records.barrier.SkippedBundle`), in one compare-and-swap
(:meth:`~state.protocol.barrier_state.BarrierStateStore.skip`). Stop the query first: a
commit running meanwhile makes it fail rather than race.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass, replace

from sink.bundle import Bundle
from sink.consumers import Consumer, open_consumer
from sink.dead_letters.dead_letter_files import DeadLetters
from sink.dead_letters.dead_letter_settlement import DeadLetterSettlement
from sink.faults import FaultInjector
from sink.options import SinkOptions
from state.errors import StateError
from state.layout import PipelineLayout
from state.protocol.barrier_state import BarrierStateStore
from state.records.barrier import SkippedBundle
from state.records.inflight_bundle import InflightBundle
from state.stores import StateStore, open_store

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LostBundle:
    """An in-flight bundle whose staged parts are (partly) gone while the consumer does not
    have it, or whose dead-letter parts are gone before its dead-letter file was published:
    what is lost. ``applied``: it was skipped (the loss acknowledged)."""

    pipeline_id: str
    state: str
    consumer: str
    consumer_last: int | None
    bundle_id: int
    batch_id: int
    query_id: str
    run_id: str | None
    rows: int
    parts: tuple[str, ...]
    parts_missing: tuple[str, ...]
    rows_missing: int
    applied: bool = False

    @property
    def epoch(self) -> int:
        return self.bundle_id

    @classmethod
    def check(  # noqa: PLR0913 - what is lost, and where each part of it was looked for
        cls,
        pipeline_id: str,
        state: str,
        inflight: InflightBundle,
        *,
        consumer: Consumer,
        consumer_last: int | None,
        dead_letters_missing: tuple[str, ...] = (),
    ) -> LostBundle | None:
        """What is lost of ``inflight`` (stored at ``state``); None if the consumer can
        still deliver it (:meth:`~sink.consumers.base.Consumer.missing_parts`: no part
        gone, or gone only into the consumer's own place) and no dead-letter part its
        unpublished file needs is gone (``dead_letters_missing``:
        :meth:`~sink.dead_letters.dead_letter_settlement.DeadLetterSettlement.unpublishable`)."""
        missing = set(consumer.missing_parts(Bundle.from_record(pipeline_id, inflight)))
        missing.update(dead_letters_missing)
        if not missing:
            return None
        staged = (*inflight.parts, *inflight.dead_letters)
        return cls(
            pipeline_id=pipeline_id,
            state=state,
            consumer=consumer.describe(),
            consumer_last=consumer_last,
            bundle_id=inflight.bundle_id,
            batch_id=inflight.batch_id,
            query_id=inflight.query_id,
            run_id=inflight.run_id,
            rows=inflight.rows,
            parts=tuple(p.location for p in staged),
            parts_missing=tuple(p.location for p in staged if p.location in missing),
            rows_missing=sum(p.rows for p in staged if p.location in missing),
        )

    def describe(self, *, recomputable: bool | None = None) -> str:
        """What is lost. ``recomputable``: said by a commit that found it, True when that
        commit is a replay that recomputes the bundle (the in-flight record is cleared),
        False when a later epoch is committing; None for the operator's report."""
        has = (
            "it has no bundle"
            if self.consumer_last is None
            else f"its last bundle is {self.consumer_last}"
        )
        text = (
            f"barrier: pipeline {self.pipeline_id!r}: in-flight bundle {self.bundle_id} "
            f"(epoch {self.epoch}, batch {self.batch_id} of query {self.query_id}, run "
            f"{self.run_id}; {self.rows} rows in {len(self.parts)} part(s)) cannot be "
            f"delivered: {self.consumer} does not have it ({has}) and "
            f"{len(self.parts_missing)} of its {len(self.parts)} staged part(s) are gone "
            f"({self.rows_missing} rows): {', '.join(self.parts_missing)}."
        )
        if recomputable:
            return text + (
                f" The in-flight record is cleared and GT_last stays below it: the replay of "
                f"epoch {self.epoch}, which Spark recomputes from the epoch log, delivers it."
            )
        if self.applied:
            return text + (
                f" Skipped, the loss acknowledged: GT_last is now {self.bundle_id}, the "
                f"bundle's {self.rows} rows are lost (recorded under 'skipped' in {self.state})."
            )
        why = (
            " A later epoch is committing, so no replay recomputes it (Spark's checkpoint "
            "records its batch as committed): every restart stops here."
            if recomputable is False
            else " Nothing can deliver it again, so every restart stops here."
        )
        return text + (
            f"{why} To skip it and "
            f"accept the loss of its {self.rows} rows, stop the query and run "
            f"gtbarrier.resolve_lost_inflight(<the sink's options>, bundle_id={self.bundle_id}, "
            "acknowledge_loss=True), or the command gtbarrier resolve-lost --pipeline "
            f"{self.pipeline_id} --bundle {self.bundle_id} --acknowledge-loss (with the sink's "
            "--state-uri and --option consumer...), then restart; without acknowledging the "
            'loss both only report (docs/sink.md, "A lost in-flight bundle").'
        )

    def skipped(self, since: float) -> SkippedBundle:
        return SkippedBundle(
            bundle_id=self.bundle_id,
            batch_id=self.batch_id,
            query_id=self.query_id,
            run_id=self.run_id,
            rows=self.rows,
            parts_missing=self.parts_missing,
            rows_missing=self.rows_missing,
            since=since,
        )


def resolve_lost_inflight(
    options: Mapping[str, str] | SinkOptions,
    *,
    bundle_id: int,
    acknowledge_loss: bool = False,
) -> LostBundle:
    """Report, and with ``acknowledge_loss=True`` skip, the in-flight bundle ``bundle_id``
    of the pipeline the sink ``options`` name (the query must be stopped).

    Raises :class:`~state.errors.StateError` if that bundle is not the one in flight, if the
    consumer has it, or if none of its parts is gone (a restart resolves those cases
    without loss), and if the barrier state changes meanwhile (a driver is running).
    """
    opts = options if isinstance(options, SinkOptions) else SinkOptions.parse(options)
    store = open_store(opts.store)
    try:
        consumer = open_consumer(opts, store, FaultInjector())
        try:
            return resolve(opts, store, consumer, bundle_id, acknowledge_loss=acknowledge_loss)
        finally:
            consumer.close()
    finally:
        store.close()


def resolve(  # noqa: PLR0913 - the pipeline's clients, the bundle and the decision
    opts: SinkOptions,
    store: StateStore,
    consumer: Consumer,
    bundle_id: int,
    *,
    acknowledge_loss: bool,
    dead_letters: DeadLetters | None = None,
) -> LostBundle:
    """:func:`resolve_lost_inflight` with its store and consumer open (and its dead-letter
    destination: by default opened from ``errors.deadLetter.path`` when it is set)."""
    states = BarrierStateStore(store, PipelineLayout(opts.pipeline_id))
    where = states.where
    held = states.load()
    state, inflight = held.state, held.state.inflight
    if inflight is None or held.version is None:
        raise StateError(
            f"barrier: no bundle is in flight in {where} (GT_last {state.gt_last}), not "
            f"bundle {bundle_id}: nothing to resolve"
        )
    if inflight.bundle_id != bundle_id:
        raise StateError(
            f"barrier: bundle {inflight.bundle_id} is in flight, not bundle {bundle_id} "
            f"({where}): nothing changed"
        )
    last = consumer.last_bundle()
    if last is not None and last.bundle_id >= bundle_id:
        raise StateError(
            f"barrier: {consumer.describe()} has bundle {last.bundle_id}, so in-flight bundle "
            f"{bundle_id} is not lost: restarting the query resolves it; nothing changed"
        )
    settlement = DeadLetterSettlement(
        opts, consumer.staging, states, destination=dead_letters, sleep=time.sleep
    )
    lost = LostBundle.check(
        opts.pipeline_id,
        where,
        inflight,
        consumer=consumer,
        consumer_last=None if last is None else last.bundle_id,
        dead_letters_missing=settlement.unpublishable(
            Bundle.from_record(opts.pipeline_id, inflight)
        ),
    )
    if lost is None:
        raise StateError(
            f"barrier: {consumer.describe()} can still deliver in-flight bundle {bundle_id} "
            "(its staged parts are there, or already moved into the consumer's place): "
            "restarting the query delivers it; nothing changed"
        )
    if not acknowledge_loss:
        log.warning("%s (not applied)", lost.describe())
        return lost
    states.skip(held, lost.skipped(time.time()))
    # Nothing references the bundle's remaining parts once the in-flight record is gone.
    for location in inflight.staged_locations:
        if location not in lost.parts_missing:
            consumer.staging.delete(location)
    applied = replace(lost, applied=True)
    log.warning("%s", applied.describe())
    return applied


__all__ = ["LostBundle", "resolve", "resolve_lost_inflight"]
