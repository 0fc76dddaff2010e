"""A bundle's dead letters: reconciled before the bundle is recorded in flight, written
after (docs/PROTOCOL.md, "Dead letters" and "A commit's decisions").

Every write to the dead letters, the file and the topic, depends on the barrier's
compare-and-swap: :meth:`DeadLetterSettlement.publish` runs only for a bundle recorded in
flight (just swapped in by this commit, or found in flight by a later one), and writes
the file from that record's dead-letter parts, create-once, then sends the file's rows to
the topic. :meth:`DeadLetterSettlement.reconcile`, before the swap, only reads: a file
already there was published for an earlier record of the bundle, and its rows are kept
out of the delivery.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import replace

import pyarrow as pa

from sink.bundle import Bundle
from sink.dead_letters.dead_letter_files import (
    DeadLetterFile,
    DeadLetters,
    DeadLetterWrite,
    open_dead_letters,
)
from sink.dead_letters.dead_letter_format import (
    Identity,
    input_columns,
    recorded_against,
    without_rows,
)
from sink.dead_letters.dead_letter_topic import DeadLetterTopic
from sink.gt_column import gt_bounds
from sink.options import SinkOptions
from sink.staging import Staging, without_dead_letters_location
from state.errors import CommitFailed, StaleState, StateError
from state.profiling import StepTimer
from state.protocol.barrier_state import BarrierStateStore, HeldState
from state.records.inflight_bundle import StagedPart
from state.retry import delivery

log = logging.getLogger(__name__)

STEP = "dead_letters"
"""The commit step (:class:`~state.profiling.StepTimer`) the time spent here counts in."""


class _Look:
    """:meth:`DeadLetterSettlement.publish` does not know whether the file is there."""


LOOK = _Look()


class DeadLetterSettlement:
    """Writes, checks and reconciles one pipeline's dead letters for the barrier's commits.

    ``destination`` is where refused rows go (by default opened, when a bundle has any,
    from ``errors.deadLetter.path``); ``states`` is read when a file stops a commit, and
    ``sleep`` waits between attempts at the topic.
    """

    def __init__(
        self,
        options: SinkOptions,
        staging: Staging,
        states: BarrierStateStore,
        *,
        destination: DeadLetters | None,
        sleep: Callable[[float], None],
    ) -> None:
        self.options = options
        self.staging = staging
        self.states = states
        self.sleep = sleep
        self._destination = destination

    @property
    def pipeline_id(self) -> str:
        return self.options.pipeline_id

    def reconcile(
        self, bundle: Bundle, timer: StepTimer, held: HeldState, *, batch: str
    ) -> tuple[Bundle, DeadLetterFile | None]:
        """Bundle ``bundle`` (above ``GT_last``, about to be recorded in flight from
        ``held``) as it is to be delivered, and the file an earlier record of it published,
        if any. Writes nothing to the dead letters (the swap that records the bundle fences
        every such write: :meth:`publish`).

        The file's rows this attempt accepts are kept out of the delivery; a row this
        attempt refuses that the file lacks can be neither delivered nor dropped, and stops
        the commit (:meth:`_refuses_more`). ``batch`` names the commit in messages ("batch
        3 of query q").
        """
        destination = self.destination()
        if destination is None:
            return bundle, None
        with timer.step(STEP):
            found = destination.find(self.pipeline_id, bundle.bundle_id)
        if found is None:
            return bundle, None
        with timer.step(STEP):
            recorded = destination.read(bundle.bundle_id)
            refused = bundle.read_dead_letters(self.staging) if bundle.dead_letters else None
            try:
                unrecorded, kept_out = recorded_against(
                    recorded,
                    refused,
                    lambda: [self.staging.read_part(p.location) for p in bundle.parts],
                )
            except KeyError as err:
                raise StateError(
                    f"barrier: pipeline {self.pipeline_id!r}: bundle {bundle.bundle_id}'s "
                    f"dead-letter file {found.location} does not have this attempt's columns "
                    f"({err}): the query changed since it was written"
                ) from err
        if unrecorded:
            assert refused is not None
            self._refuses_more(
                bundle, held, refused, found=found, unrecorded=unrecorded, batch=batch
            )
        if kept_out:
            bundle = self._without(bundle, timer, input_columns(recorded), kept_out)
            log.warning(
                "barrier: pipeline %s: bundle %d: %d row(s) an earlier attempt refused (its "
                "dead-letter file %s) are accepted now; they stay dead letters and are not "
                "delivered",
                self.pipeline_id,
                bundle.bundle_id,
                len(kept_out),
                found.location,
            )
        return bundle, found

    def publish(
        self,
        bundle: Bundle,
        timer: StepTimer | None = None,
        *,
        found: DeadLetterFile | _Look | None = LOOK,
    ) -> DeadLetterWrite | None:
        """Publish the dead letters of ``bundle``, which the barrier state holds in flight
        (this commit's swap recorded it, or a later commit found it there): create its
        file from its dead-letter parts unless it is there, then send the file's rows to
        the topic; None if it has none. ``found``: what :meth:`reconcile` found (by
        default, looked for here).

        Only ever creates: a redelivery never writes the file twice. A file this commit did
        not find before its swap, and that does not hold exactly its refused rows, was
        written by a writer the protocol does not know of: a :class:`StateError`, before
        anything of the bundle is delivered.
        """
        destination = self.destination()
        if destination is None:
            if bundle.dead_letters:
                # Recorded in flight by a run with errors.tolerance=all; this run has no
                # destination to publish to.
                log.warning(
                    "barrier: pipeline %s: bundle %d has %d refused row(s) whose dead-letter "
                    "file was published by the run that recorded it in flight; "
                    "errors.deadLetter.path is not set now, so it is not checked",
                    self.pipeline_id,
                    bundle.bundle_id,
                    bundle.dead_letter_rows,
                )
            return None
        with timer.step(STEP) if timer is not None else nullcontext():
            if not bundle.dead_letters:
                if isinstance(found, _Look):
                    found = destination.find(self.pipeline_id, bundle.bundle_id)
                if found is None:
                    return None
                written = DeadLetterWrite(bundle.bundle_id, found.rows, False, found.location)
            else:
                written = destination.write(
                    self.pipeline_id, bundle.bundle_id, lambda: self._staged_rows(bundle)
                )
                if not written.written and found is None:
                    self._check_unexpected(destination, bundle)
            self._send_to_topic(destination, bundle.bundle_id, written.table)
            return written

    def unpublishable(self, bundle: Bundle) -> tuple[str, ...]:
        """The dead-letter parts of in-flight ``bundle`` that are gone while its file was
        never published: its refused rows are lost with them (:mod:`sink.lost_bundle`).
        Empty when it has none, its file is there, or its parts are."""
        if not bundle.dead_letters:
            return ()
        missing = self.staging.missing(p.location for p in bundle.dead_letters)
        destination = self.destination()
        if not missing or destination is None:
            return missing if destination is not None else ()
        found = destination.find(self.pipeline_id, bundle.bundle_id)
        return () if found is not None else missing

    def _staged_rows(self, bundle: Bundle) -> pa.Table:
        """The rows ``bundle``'s dead-letter parts hold; a :class:`StateError` naming the
        parts that are gone."""
        missing = self.staging.missing(p.location for p in bundle.dead_letters)
        if missing:
            raise StateError(
                f"barrier: pipeline {self.pipeline_id!r}: bundle {bundle.bundle_id}'s dead "
                f"letters cannot be published: {len(missing)} of its staged dead-letter "
                f"part(s) are gone: {', '.join(missing)}"
            )
        return bundle.read_dead_letters(self.staging)

    def _check_unexpected(self, destination: DeadLetters, bundle: Bundle) -> None:
        """The file of ``bundle`` appeared between this commit's look and its create:
        :class:`StateError` unless it holds exactly the rows this commit refused."""
        recorded = destination.read(bundle.bundle_id)
        unrecorded, kept_out = recorded_against(
            recorded,
            bundle.read_dead_letters(self.staging),
            lambda: [self.staging.read_part(p.location) for p in bundle.parts],
        )
        if unrecorded or kept_out:
            raise StateError(
                f"barrier: pipeline {self.pipeline_id!r}: bundle {bundle.bundle_id}'s "
                f"dead-letter file {destination.location(bundle.bundle_id)} was created by "
                "another writer after this commit recorded the bundle in flight, with other "
                "rows: is errors.deadLetter.path shared with another pipeline, or written "
                "to by hand? Nothing of the bundle was delivered; it stays in flight"
            )

    def destination(self) -> DeadLetters | None:
        """The files of ``errors.deadLetter.path``; None if it is not set."""
        if self._destination is None and self.options.errors.path is not None:
            self._destination = open_dead_letters(self.options.errors.path, self.options.store.s3)
        return self._destination

    def _topic(self) -> DeadLetterTopic | None:
        errors = self.options.errors
        if errors.topic is None or errors.bootstrap is None:
            return None
        return DeadLetterTopic(
            errors.bootstrap, errors.topic, errors.kafka, self.options.ack_timeout
        )

    def _refuses_more(  # noqa: PLR0913 - the bundle, its commit and both sets
        self,
        bundle: Bundle,
        held: HeldState,
        refused: pa.Table,
        *,
        found: DeadLetterFile,
        unrecorded: int,
        batch: str,
    ) -> None:
        """This attempt refuses ``unrecorded`` row(s) the bundle's file lacks: raise. From a
        state this commit did not confirm, the file may be that of a bundle delivered since
        (:class:`StaleState` for a remembered state; a fresh read that shows another owner
        fences, another change fails the commit); else the file is the record of an
        earlier in-flight record of the bundle, which the topic may hold, and the error
        names the way out. Nothing is written either way."""
        if held.remembered:
            raise StaleState(
                f"barrier: bundle {bundle.bundle_id}'s dead-letter file differs from what "
                "this attempt refuses; starting again from a read"
            )
        now = self.states.load()
        if now.version != held.version:
            mine = held.state.owner
            if now.state.owner != mine and now.state.owner is not None:
                raise self.states.fenced(
                    now.state.owner,
                    mine.run_id if mine else "?",
                    f"bundle {bundle.bundle_id}'s dead letters were published by another run",
                )
            raise CommitFailed(
                f"barrier: pipeline {self.pipeline_id!r}: the barrier state changed while "
                f"bundle {bundle.bundle_id}'s dead letters were compared; restart"
            )
        topic = self.options.errors.topic
        also = f" and may have been sent to the dead-letter topic {topic!r}" if topic else ""
        raise StateError(
            f"barrier: pipeline {self.pipeline_id!r}: bundle {bundle.bundle_id} "
            f"({batch}) refuses {refused.num_rows} row(s) now, {unrecorded} of them not "
            f"among the {found.rows} row(s) an earlier attempt refused and wrote to "
            f"{found.location}{also}: the target refuses rows it accepted then, so they can "
            "be neither delivered nor dropped. Nothing of the bundle was delivered. Way out: "
            "make the target accept those rows again (undo the change to the table, the "
            "topic or the consumer.* settings since that attempt) and restart on the same "
            "checkpoint; the bundle is then delivered without the rows the file holds "
            '(docs/sink.md, "Bad rows and dead letters")'
        )

    def _without(
        self, bundle: Bundle, timer: StepTimer, columns: list[str], out: list[Identity]
    ) -> Bundle:
        """``bundle`` without the rows ``out`` identifies: each part that holds some is
        written again without them, beside it (the original stays as the task staged it,
        so a commit that starts again from a read takes them out again)."""
        parts = []
        with timer.step(STEP):
            tables = [self.staging.read_part(p.location) for p in bundle.parts]
            for part, table, kept in zip(
                bundle.parts, tables, without_rows(tables, columns, out), strict=True
            ):
                if kept.num_rows == table.num_rows:
                    parts.append(part)
                    continue
                if kept.num_rows == 0:
                    continue
                location = without_dead_letters_location(part.location)
                size = self.staging.write_part(location, kept)
                bounds = gt_bounds(kept) if bundle.has_gt else None
                parts.append(
                    StagedPart(
                        location=location,
                        rows=kept.num_rows,
                        size=size,
                        min_gt=bounds[0] if bounds else None,
                        max_gt=bounds[1] if bounds else None,
                    )
                )
        return replace(bundle, parts=tuple(parts))

    def _send_to_topic(
        self, destination: DeadLetters, bundle_id: int, table: pa.Table | None
    ) -> None:
        """Send bundle ``bundle_id``'s dead letters (its file's rows: ``table``, or read)
        to the topic, unless there is none or it holds them."""
        topic = self._topic()
        if topic is None:
            return
        # After the file (the record of what was refused), so after the swap that recorded
        # the bundle in flight: the messages are the file's rows, and a topic holding the
        # bundle already is not sent to.
        retry = delivery(self.options.max_retries, self.options.retry_backoff, sleep=self.sleep)
        retry(
            lambda: topic.ensure(
                self.pipeline_id,
                bundle_id,
                lambda: table if table is not None else destination.read(bundle_id),
            )
        )


__all__ = ["LOOK", "DeadLetterSettlement"]
