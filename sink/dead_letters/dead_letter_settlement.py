"""A bundle's dead letters, settled before the bundle is recorded in flight.

The barrier (:mod:`sink.barrier`) hands each bundle above ``GT_last`` to
:meth:`DeadLetterSettlement.settle` before its in-flight record, and each in-flight bundle
it delivers again to :meth:`DeadLetterSettlement.ensure_written`. Every row of a bundle
ends in exactly one of (consumer, dead letters): the bundle's dead-letter file is named by
its bundle id and written before anything of the bundle is delivered, so

* a crash before the in-flight record replays the epoch, which finds the file and
  delivers only the rows the file does not hold;
* a redelivery of the bundle in flight finds the file too, and writes it from the
  recorded dead-letter parts only if it is missing;
* the optional dead-letter topic is sent the file's rows, after the file, unless it
  holds the bundle already.

The first file of a bundle is the record of what was refused. An earlier attempt killed
after writing it may have refused other rows than this one (the output topic gained
partitions, the table was altered, a limit was raised):

* rows the file holds that this attempt accepts are taken out of the bundle's parts
  (written again beside them) and never delivered;
* a row this attempt refuses that the file lacks can be neither delivered nor dropped.
  Without a topic, nothing has acted on the file yet, so this attempt's file replaces it
  once a fresh read shows the barrier state the commit holds (no other run took over);
  with a topic, which may hold the file's rows already, it is a
  :class:`~state.errors.StateError` naming the bundle, both sets and the way out.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, replace

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
from state.errors import CommitFailed, StateError
from state.profiling import StepTimer
from state.protocol.barrier_state import BarrierStateStore, StaleState
from state.records.barrier import BarrierState
from state.records.inflight_bundle import StagedPart
from state.retry import delivery

log = logging.getLogger(__name__)

STEP = "dead_letters"
"""The commit step (:class:`~state.profiling.StepTimer`) the time spent here counts in."""


@dataclass(frozen=True)
class HeldState:
    """The barrier state a commit holds and the version its next swap expects;
    ``remembered``: what this process last read or wrote, not a read of this commit."""

    state: BarrierState
    version: str | None
    remembered: bool


class DeadLetterSettlement:
    """Writes, checks and reconciles one pipeline's dead letters for the barrier's commits.

    ``destination`` is where refused rows go (by default opened, when a bundle has any,
    from ``errors.deadLetter.path``); ``states`` is read before a file is replaced, and
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

    def settle(
        self, bundle: Bundle, timer: StepTimer, held: HeldState, *, batch: str
    ) -> tuple[Bundle, DeadLetterWrite | None]:
        """Bundle ``bundle`` (above ``GT_last``, not in flight) as it is to be delivered,
        and its dead letters, written or found (module docstring). ``batch`` names the
        commit in messages ("batch 3 of query q")."""
        destination = self.destination()
        if destination is None:
            return bundle, self.ensure_written(bundle, timer)
        with timer.step(STEP):
            found = destination.find(self.pipeline_id, bundle.bundle_id)
        if found is None:
            return bundle, self.ensure_written(bundle, timer)
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
            return bundle, self._replace(
                bundle, timer, held, refused, found=found, unrecorded=unrecorded, batch=batch
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
        with timer.step(STEP):
            self._send_to_topic(destination, bundle.bundle_id, recorded)
        return bundle, DeadLetterWrite(bundle.bundle_id, found.rows, False, found.location)

    def ensure_written(
        self, bundle: Bundle, timer: StepTimer | None = None
    ) -> DeadLetterWrite | None:
        """Create the bundle's dead-letter file from its dead-letter parts unless it is
        there already (an earlier attempt of the same bundle wrote it), and send it to the
        topic; None if the bundle has none. Only ever creates: a replay or a redelivery
        never writes it twice."""
        if not bundle.dead_letters:
            return None
        destination = self.destination()
        if destination is None:
            # Recorded in flight by a run with errors.tolerance=all, which wrote the file
            # before recording it; this run has no destination to check it in.
            log.warning(
                "barrier: pipeline %s: bundle %d has %d refused row(s) whose dead-letter file "
                "was written before it was recorded in flight; errors.deadLetter.path is not "
                "set now, so it is not checked",
                self.pipeline_id,
                bundle.bundle_id,
                bundle.dead_letter_rows,
            )
            return None
        with timer.step(STEP) if timer is not None else nullcontext():
            written = destination.write(
                self.pipeline_id,
                bundle.bundle_id,
                lambda: bundle.read_dead_letters(self.staging),
            )
            self._send_to_topic(destination, bundle.bundle_id, written.table)
            return written

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

    def _replace(  # noqa: PLR0913 - the bundle, its commit and both sets
        self,
        bundle: Bundle,
        timer: StepTimer,
        held: HeldState,
        refused: pa.Table,
        *,
        found: DeadLetterFile,
        unrecorded: int,
        batch: str,
    ) -> DeadLetterWrite:
        """This attempt refuses ``unrecorded`` row(s) the bundle's file lacks: put its own
        file in place (no topic), or stop with the way out (a topic)."""
        destination = self.destination()
        assert destination is not None
        if self._topic() is not None:
            raise StateError(
                f"barrier: pipeline {self.pipeline_id!r}: bundle {bundle.bundle_id} "
                f"({batch}) refuses {refused.num_rows} row(s) now, {unrecorded} of them not "
                f"among the {found.rows} row(s) an earlier attempt refused and wrote to "
                f"{found.location} and to the dead-letter topic {self.options.errors.topic!r}: "
                "the target refuses rows it accepted then, so they can be neither delivered "
                "nor dropped, and the topic may hold the earlier rows already. Nothing of the "
                "bundle was delivered. Way out: make the target accept those rows again (undo "
                "the change to the table, the topic or the consumer.* settings since that "
                "attempt) and restart on the same checkpoint; the bundle is then delivered "
                'without the rows the file holds (docs/sink.md, "Bad rows and dead letters")'
            )
        now, version = self.states.load()
        if version != held.version:
            if held.remembered:
                raise StaleState(f"replace bundle {bundle.bundle_id}'s dead letters")
            mine = held.state.owner
            if now.owner != mine and now.owner is not None:
                raise self.states.fenced(
                    now.owner,
                    mine.run_id if mine else "?",
                    f"it replaced bundle {bundle.bundle_id}'s dead letters",
                )
            raise CommitFailed(
                f"barrier: pipeline {self.pipeline_id!r}: the barrier state changed while "
                f"bundle {bundle.bundle_id}'s dead letters were compared; restart"
            )
        with timer.step(STEP):
            written = destination.replace(self.pipeline_id, bundle.bundle_id, refused)
        log.warning(
            "barrier: pipeline %s: bundle %d: this attempt refuses %d row(s), %d of them not "
            "in the %d row(s) of the dead-letter file an earlier attempt wrote (the bundle was "
            "never recorded in flight, nothing of it delivered): %s is replaced by this "
            "attempt's",
            self.pipeline_id,
            bundle.bundle_id,
            refused.num_rows,
            unrecorded,
            found.rows,
            found.location,
        )
        return written

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
        # After the file (the record of what was refused): the messages are the file's
        # rows, and a topic holding the bundle already is not sent to.
        retry = delivery(self.options.max_retries, self.options.retry_backoff, sleep=self.sleep)
        retry(
            lambda: topic.ensure(
                self.pipeline_id,
                bundle_id,
                lambda: table if table is not None else destination.read(bundle_id),
            )
        )


__all__ = ["DeadLetterSettlement", "HeldState"]
