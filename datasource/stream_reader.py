"""The streaming reader of ``gtkafka``: offsets, the epoch log, admission control.

Spark creates this object in a long-lived Python process on the driver (``initialOffset``,
``latestOffset``, ``partitions``, ``commit``), and again, pickled, for the executors'
``read``. It therefore holds only options until a driver hook first needs the broker or
the store; both clients are created lazily and dropped on pickling.

``latestOffset(start, limit)`` consults the epoch log first: a recorded epoch for
``start`` is returned unchanged, whatever the read limit is now, so every replay (with or
without Spark's checkpoint) sees the same epochs and hence the same ``gt``.

The cluster's ends are read against the frontier by :mod:`datasource.cluster_ends`
(a partition is never lost, an end never goes backwards on one answer, data loss is told
apart from a stale answer). The topic ids under which each end was computed are recorded
with its epoch, so a driver that starts again compares the broker's ids with those of the
frontier it resumes from.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import StructType

from datasource import offsets
from datasource.cluster_ends import EndSettler
from datasource.group_commit import commit_to_group
from datasource.log_pruner import EpochLogPruner
from datasource.offset_reader import OffsetReader, may_reuse_cached_ends
from datasource.offset_specs import resolve, subscribed_partitions
from datasource.offsets import backlog
from datasource.options import KafkaSourceOptions
from datasource.partition_reader import KafkaInputPartition, plan_partitions, read_partition
from datasource.schema import arrow_schema
from datasource.subscription import WHERE
from state.errors import ConfigError, MalformedOffset
from state.lag import Lag
from state.layout import PipelineLayout
from state.log_format import fields
from state.log_summary import SUMMARIES
from state.profiling import span
from state.protocol.epoch_floor import new_checkpoint_start
from state.protocol.epoch_log import EpochLog
from state.records.source_offset import Frontier, SourceOffset, frontier_json
from state.spark_task import StreamingTask
from state.stores import open_store
from state.worker_logging import ensure_worker_logging

log = logging.getLogger(__name__)


class GlobalTimeKafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Replayable micro-batch reads of Kafka with a durable epoch log."""

    def __init__(  # noqa: PLR0913 - keyword-only injectable clients, clock and sleep
        self,
        options: KafkaSourceOptions,
        schema: StructType,
        *,
        offset_reader: OffsetReader | None = None,
        epoch_log: EpochLog | None = None,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
        prune_in_background: bool = True,
    ) -> None:
        """``offset_reader``, ``epoch_log``, ``clock`` and ``sleep`` replace the clients and
        the time this process would use; ``prune_in_background=False`` runs the epoch log's
        pruning in ``commit`` itself, not on a thread (a caller that schedules every step,
        as the protocol's simulator does)."""
        options.require_streaming()
        assert options.pipeline_id is not None and options.store is not None
        self.options = options
        self.schema = schema
        self.layout = PipelineLayout(options.pipeline_id)
        self._offsets = offset_reader
        self._log = epoch_log
        self._clock = clock
        self._sleep = sleep
        self._target: Frontier | None = None
        self._last_trigger: float | None = None
        # When the previous latestOffset call ended, and whether it planned an epoch:
        # whether the next one may reuse cached ends (may_reuse_cached_ends).
        self._previous_call: tuple[float, bool] | None = None
        self._pruner: EpochLogPruner | None = None
        self._prune_in_background = prune_in_background
        self._ends = EndSettler(options)
        # The topic ids this process saw last (the epoch log's win where it has some, see
        # _reference_ids), and the ids of the answer behind an end not recorded yet.
        self._topic_ids: dict[str, str] = {}
        self._pending_ids: dict[str, str] = {}
        # The ids recorded with the frontier the next end starts from (one store read
        # per frontier at most, not one per idle poll).
        self._recorded_ids: tuple[SourceOffset, dict[str, str] | None] | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_offsets"] = None
        state["_log"] = None
        state["_pruner"] = None
        state["_clock"] = None
        state["_sleep"] = None
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._clock = time.monotonic
        self._sleep = time.sleep

    # --- lazily created clients ------------------------------------------------------

    @property
    def offset_reader(self) -> OffsetReader:
        if self._offsets is None:
            self._offsets = OffsetReader(self.options)
        return self._offsets

    @property
    def epoch_log(self) -> EpochLog:
        if self._log is None:
            assert self.options.store is not None
            self._log = EpochLog(open_store(self.options.store), self.layout)
        return self._log

    @property
    def pruner(self) -> EpochLogPruner:
        if self._pruner is None:
            self._pruner = EpochLogPruner(
                self.epoch_log.store,
                self.layout,
                self.options.epochs_retained,
                background=self._prune_in_background,
            )
        return self._pruner

    @property
    def lost_events(self) -> int:
        """Data-loss events that ``failOnDataLoss=false`` let through, in this process."""
        return self._ends.lost_events

    # --- Spark hooks (driver) --------------------------------------------------------

    def initialOffset(self) -> dict[str, Any]:
        """The persisted start, or the start resolved now and persisted (first writer wins).

        Once epochs were pruned, the start cannot be replayed from: the floor's start if
        ``state.startAtFloor``, else :class:`~state.errors.EpochsPruned`.
        """
        with span("driver.initialOffset"):
            return self._initial_offset()

    def _initial_offset(self) -> dict[str, Any]:
        persisted = self.epoch_log.start()
        if persisted is None:
            found = self.offset_reader.topic_partitions()
            tps = subscribed_partitions(self.options, found)
            frontier = resolve(
                self.options.streaming_starting,
                tps,
                self.offset_reader,
                role="start",
                strategy=self.options.starting_by_timestamp_strategy,
                fail_on_data_loss=self.options.fail_on_data_loss,
            )
            topics = {t for t, _ in frontier}
            ids = {t: i for t, i in self.offset_reader.topic_ids.items() if t in topics}
            persisted = self.epoch_log.create_start(SourceOffset(0, frontier), ids)
            if dict(persisted.offsets) == frontier:
                self._topic_ids = self.offset_reader.topic_ids
        else:
            persisted = new_checkpoint_start(
                self.epoch_log.floor(),
                persisted,
                pipeline_id=self.layout.pipeline_id,
                retained=self.options.epochs_retained,
                start_at_floor=self.options.start_at_floor,
            )
        self._check_compatible(persisted)
        return persisted.to_json()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.options.min_offsets_per_trigger is not None:
            return ReadMinRows(self.options.min_offsets_per_trigger)
        if self.options.max_offsets_per_trigger is not None:
            return ReadMaxRows(self.options.max_offsets_per_trigger)
        return ReadAllAvailable()

    def prepareForTriggerAvailableNow(self) -> None:
        """Record the frontier to stop at: the latest offsets now (freshly fetched, every
        end confirmed by a fetch, so that a stale end does not stop the run short)."""
        with span("driver.availableNow"):
            latest = dict(self.offset_reader.view(fresh=True, verify=True).latest)
        self._target = latest
        log.info("gtkafka: Trigger.AvailableNow reads up to %s", frontier_json(latest))

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        ensure_worker_logging()
        with span("driver.latestOffset"):
            previous = self._previous_call
            fresh = not may_reuse_cached_ends(
                self._clock(),
                None if previous is None else previous[0],
                previous is not None and previous[1],
            )
            end = self._latest_offset(start, limit, fresh=fresh)
            self._previous_call = (self._clock(), end != start)
            return end

    def _latest_offset(
        self, start: dict[str, Any], limit: ReadLimit, *, fresh: bool
    ) -> dict[str, Any]:
        begin = from_checkpoint(start)
        with span("driver.epoch_log", op="recorded_end"):
            recorded = self.epoch_log.recorded_end(begin)
        if recorded is not None:
            self._adopt_recorded_ids(recorded)
            self._last_trigger = self._clock()
            return recorded.to_json()
        with span("driver.kafka_offsets"):
            fresh = fresh and not self._capped_by_cached_ends(dict(begin.offsets), limit)
            end = self._next_end(begin, limit, fresh=fresh)
        if end is None:
            self._topic_ids.update(self._pending_ids)
            return begin.to_json()
        topics = {t for t, _ in end}
        ids = {t: tid for t, tid in self._pending_ids.items() if t in topics}
        with span("driver.epoch_log", op="record"):
            winner = self.epoch_log.record(begin, SourceOffset(begin.epoch + 1, end), ids)
        self._topic_ids.update(self._pending_ids)
        self._adopt_recorded_ids(winner)  # another driver's record, if it won the create
        self._last_trigger = self._clock()
        self._log_planned(begin, winner)
        return winner.to_json()

    def _log_planned(self, begin: SourceOffset, end: SourceOffset) -> None:
        """One DEBUG line per epoch planned here, its size and its lag behind Kafka's end
        (:mod:`state.lag`; Python sources cannot report metrics to Spark), and the
        pipeline's INFO summary when one is due (:mod:`state.log_summary`)."""
        pipeline = self.options.pipeline_id
        assert pipeline is not None
        records = backlog(dict(begin.offsets), dict(end.offsets))
        if log.isEnabledFor(logging.DEBUG):
            _, latest = self.offset_reader.latest_cached()
            lag = Lag.between(end.offsets, latest)
            log.debug(
                "gtkafka: pipeline %s: epoch %d planned, %d record(s); %s",
                pipeline,
                begin.epoch,
                records,
                lag.describe(),
                extra=fields(
                    pipeline=pipeline,
                    epoch=begin.epoch,
                    event="epoch_planned",
                    records=records,
                    max_behind=lag.maximum,
                    total_behind=lag.total,
                ),
            )
        SUMMARIES.planned(pipeline, begin.epoch, records)

    def reportLatestOffset(self) -> dict[str, Any] | None:
        """The broker's latest offsets as last fetched (no new request); no epoch yet."""
        if self._offsets is None:
            return None
        _, latest = self.offset_reader.latest_cached()
        return {"offsets": frontier_json(latest)}

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> Sequence[InputPartition]:
        """The ranges of the epoch, split as the options say; a marker if all are empty.

        A pure function of ``(start, end, options)`` and the epoch's record, which never
        changes, so a replay reads the same splits. Each partition carries the topic ids
        recorded with the epoch: a pooled consumer that read a topic under another id is
        not used for it (:mod:`datasource.consumer_pool`).
        """
        with span("driver.partitions"):
            begin, finish = from_checkpoint(start), from_checkpoint(end)
            ids = self.epoch_log.topic_ids_at(finish) if not begin.same_as(finish) else None
            return plan_partitions(self.options, begin, finish, topic_ids=ids)

    def read(self, partition: InputPartition) -> Iterator[Any]:
        """The partition's rows; the marked partition of a streaming batch writes the batch
        record while its first rows are fetched, and yields nothing before it is written."""
        assert isinstance(partition, KafkaInputPartition)
        return read_partition(
            self.options, partition, arrow_schema(self.schema), task=StreamingTask.current()
        )

    def commit(self, end: dict[str, Any]) -> None:
        """Publish progress to ``commitOffsetsToGroup`` (monitoring only, never recovery),
        and prune the epoch log if it is due (:mod:`datasource.log_pruner`, in the
        background)."""
        with span("driver.commit"):
            committed = from_checkpoint(end)
            if self.options.commit_offsets_to_group is not None:
                commit_to_group(
                    self.options, self.options.commit_offsets_to_group, committed.offsets
                )
            self.pruner.after_commit(committed.epoch)

    def stop(self) -> None:
        # the epochs planned since the last summary are reported before the process may end
        SUMMARIES.flush()
        if self._pruner is not None:
            self._pruner.close()
            self._pruner = None
        if self._offsets is not None:
            self._offsets.close()
            self._offsets = None

    # --- the next end frontier -------------------------------------------------------

    def _next_end(self, start: SourceOffset, limit: ReadLimit, *, fresh: bool) -> Frontier | None:
        """The end of the epoch starting at ``start``, or ``None`` if there is nothing to read;
        from the broker's ends as they are now if ``fresh``, else possibly cached ones.

        The decision is :func:`datasource.offsets.plan_end`'s, over the settled answer."""
        begin = dict(start.offsets)
        self._check_subscribed(begin)
        settled = self._ends.settle(
            self.offset_reader, start, self._reference_ids(start), fresh=fresh, sleep=self._sleep
        )
        self._pending_ids = settled.topic_ids
        latest, restart = settled.latest, settled.restart

        def delay_passed() -> bool:
            waited = self._clock() - self._since_last_trigger()
            return waited >= self.options.max_trigger_delay_s

        # Looked up through its module when called, as every decision the protocol's
        # simulator runs is, so that a test can replace it there.
        end = offsets.plan_end(
            begin,
            latest,
            restart=restart,
            target=self._target,
            max_rows=self._max_rows(limit),
            min_rows=limit.min_rows if isinstance(limit, ReadMinRows) else None,
            delay_passed=delay_passed,
        )
        if end is not None:
            self._ends.check_retention(self.offset_reader, begin, end)
        return end

    def _max_rows(self, limit: ReadLimit) -> int | None:
        """The most records the next epoch may take under ``limit`` (None: no cap)."""
        if isinstance(limit, ReadMaxRows):
            return limit.max_rows
        if isinstance(limit, ReadMinRows):
            return self.options.max_offsets_per_trigger
        return None

    def _capped_by_cached_ends(self, begin: Frontier, limit: ReadLimit) -> bool:
        """Whether the young cached ends already hold more records past ``begin`` than the
        read limit takes: a fresher answer could not make the next epoch larger, so a
        backlog read ``maxOffsetsPerTrigger`` at a time costs no request per epoch."""
        if self._target is not None:
            return False
        max_rows = self._max_rows(limit)
        view = self.offset_reader.young_view()
        if max_rows is None or view is None:
            return False
        growing = {tp: off for tp, off in view.latest.items() if tp in begin}
        return backlog(begin, growing) >= max_rows

    def _reference_ids(self, start: SourceOffset) -> dict[str, str]:
        """The topic ids under which ``start`` was computed: those the epoch log recorded
        with it where it has them (a driver that starts again knows no others), else the
        ones this process saw."""
        cached = self._recorded_ids
        if cached is None or not cached[0].same_as(start):
            with span("driver.epoch_log", op="topic_ids"):
                cached = self._recorded_ids = (start, self.epoch_log.topic_ids_at(start))
        return {**self._topic_ids, **(cached[1] or {})}

    def _adopt_recorded_ids(self, end: SourceOffset) -> None:
        """Take the ids recorded with the epoch that ends at ``end`` as this process's:
        the next frontier starts there (a replayed epoch, or another driver's record)."""
        recorded = self.epoch_log.topic_ids_at(end)
        if recorded:
            self._topic_ids.update(recorded)

    def _since_last_trigger(self) -> float:
        if self._last_trigger is None:
            self._last_trigger = self._clock()
        return self._last_trigger

    def _check_subscribed(self, frontier: Frontier) -> None:
        sub = self.options.subscription
        foreign = sorted({t for t, _ in frontier if not sub.matches(t)})
        if foreign:
            raise ConfigError(
                sub.kind,
                sub.describe().split("=", 1)[1],
                f"a subscription that includes the topics this query already reads ("
                f"{', '.join(foreign)} are in its offsets but not subscribed); use a new "
                "pipeline.id and checkpoint to change the subscription",
                where=WHERE,
            )

    def _check_compatible(self, start: SourceOffset) -> None:
        """The persisted start must belong to the same topics as the options name."""
        sub = self.options.subscription
        recorded = {t for t, _ in start.offsets}
        self._check_subscribed(dict(start.offsets))
        named = set(sub.named_topics())
        if sub.kind != "subscribePattern" and named - recorded:
            raise ConfigError(
                sub.kind,
                sub.describe().split("=", 1)[1],
                f"the topics of pipeline {self.layout.pipeline_id!r}, whose start is recorded "
                f"at {self.options.store.uri if self.options.store else ''}/"
                f"{self.layout.source_start} "
                f"for topics {sorted(recorded)}; use a new pipeline.id to change the subscription",
                where=WHERE,
            )


def from_checkpoint(value: Any) -> SourceOffset:
    """An offset Spark handed back from the query's checkpoint (its offset log).

    :class:`MalformedOffset` names the checkpoint as the cause: a checkpointLocation
    written by a query with another source cannot be reused by gtkafka.
    """
    try:
        return SourceOffset.from_json(value)
    except MalformedOffset as err:
        raise MalformedOffset(
            f"gtkafka: the checkpointLocation holds an offset of another source: {err}. "
            "Start this query on a new checkpointLocation: gtkafka resumes from its epoch "
            "log in state.uri, not from Spark's checkpoint"
        ) from err
