"""The driver's reading of the cluster's ends against a frontier: what the next epoch may
read up to, which partitions restart, and the data loss that the answer reveals.

:class:`EndSettler` holds no client: the stream reader hands it its
:class:`~datasource.offset_reader.OffsetReader` at each call, so the settler pickles with
the reader. It remembers what it reported (a partition that vanished, a stale answer), so
that one event is reported once while it lasts, and counts the data-loss events
(:attr:`EndSettler.lost_events`) that ``failOnDataLoss=false`` let through.

The frontier never loses a partition and never goes backwards on one answer: a partition
missing from the cluster's answer keeps its offset, and an end below the start counts only
once a recreation of the topic is confirmed, by its topic id where the broker gives one,
else by a second, fresh answer that agrees (:meth:`EndSettler.settle`).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from datasource.offset_reader import ClusterView, OffsetReader
from datasource.offsets import ranges_between
from datasource.options import KafkaSourceOptions
from state.errors import DataLossError
from state.records.source_offset import Frontier, SourceOffset, TopicPartitionKey

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SettledEnds:
    """The cluster's ends under the frontier rules (every partition of the start in it),
    the partitions to restart and where, and the topic ids of the answer behind them."""

    latest: Frontier
    restart: Frontier
    topic_ids: dict[str, str]


class EndSettler:
    """Settles the cluster's ends against a frontier, and reports data loss as
    ``failOnDataLoss`` says: :class:`DataLossError`, or a warning and a count."""

    def __init__(self, options: KafkaSourceOptions) -> None:
        self.options = options
        self.lost_events = 0
        self._vanished: set[TopicPartitionKey] = set()  # reported missing, still missing
        self._stale: set[TopicPartitionKey] = set()  # reported below the frontier

    def settle(
        self,
        reader: OffsetReader,
        start: SourceOffset,
        reference: Mapping[str, str],
        *,
        fresh: bool,
        sleep: Callable[[float], None],
    ) -> SettledEnds:
        """The cluster's ends against ``start``, whose frontier was computed under the
        topic ids ``reference``; from the broker's ends as they are now if ``fresh``.

        A topic whose id changed since was deleted and created again (data loss): its
        partitions restart at the new log start, whatever their ends say. One answer that
        lacks a partition, or puts its end below ``start``, is checked against a second,
        fresh answer (its ends all probed now) before anything else is concluded:

        * still missing: the partition vanished (data loss, reported once); it keeps its
          offset, so that it continues from there if it comes back;
        * still below ``start`` with an end the probe could not confirm: a stale answer
          (Tansu's ListOffsets when the end probe failed); the partition keeps its offset;
        * still below ``start``, confirmed, under the same topic id: asked again up to
          ``fetchOffset.numRetries`` times, ``fetchOffset.retryIntervalMs`` apart (a new
          leader's high watermark catches up within moments of a failover). Back at or
          above ``start``: nothing happened. Still below in every answer: the log was
          truncated (data loss); the partition goes on from its new end;
        * still below ``start``, confirmed, where no topic id tells: recreated or
          truncated (data loss); it restarts at the new log start.
        """
        begin = dict(start.offsets)
        view = reader.view(fresh=fresh)
        if _suspects(begin, view):
            view = reader.view(verify=True)
        retries = self.options.fetch_offset_num_retries
        answers = 1
        while retries > 0 and _behind_under_same_id(begin, view, reference):
            retries -= 1
            answers += 1
            sleep(self.options.fetch_offset_retry_interval_ms / 1000.0)
            view = reader.view(fresh=True, verify=True)
        settled: Frontier = dict(view.latest)

        missing = sorted(tp for tp in begin if tp not in view.latest)
        self._report_vanished(start, missing)
        for tp in missing:
            settled[tp] = begin[tp]

        recreated = sorted(
            t
            for t, tid in view.topic_ids.items()
            if reference.get(t, tid) != tid and any(tp[0] == t for tp in begin)
        )
        behind = sorted(
            tp
            for tp in begin
            if tp in view.latest and view.latest[tp] < begin[tp] and tp[0] not in recreated
        )
        stale = [tp for tp in behind if tp in view.unsure]
        self._report_stale(begin, view, stale)
        for tp in stale:
            settled[tp] = begin[tp]
        truncated = _behind_under_same_id(begin, view, reference)
        by_offsets = [tp for tp in behind if tp not in stale and tp not in truncated]

        by_id = sorted(tp for tp in view.latest if tp[0] in recreated)
        for topic in recreated:
            self.data_loss(
                f"topic '{topic}' was deleted and created again on Kafka at "
                f"{self.options.bootstrap_servers}: its topic id is {view.topic_ids[topic]}, "
                f"not {reference[topic]} as when the frontier {_frontier_of(begin, topic)} "
                f"(the start of epoch {start.epoch}) was computed; it now ends at "
                f"{_frontier_of(view.latest, topic)}. Records of the old topic after the "
                "frontier may have been missed, and the new topic must be read from its log "
                "start, not from the frontier"
            )
        if truncated:
            self.data_loss(
                f"the log of {_moves(begin, view.latest, truncated)} was truncated on Kafka at "
                f"{self.options.bootstrap_servers}: the end stayed below the frontier (the "
                f"start of epoch {start.epoch}) in {answers} answer(s) confirmed by a fetch, "
                f"{self.options.fetch_offset_retry_interval_ms} ms apart, under the topic "
                "id the frontier was computed under (not a recreation). Records written "
                "after the truncation below the new end may have been missed; the "
                "partition goes on from its new end"
            )
        if by_offsets:
            self.data_loss(
                "offsets went backwards for "
                + _moves(begin, view.latest, by_offsets)
                + " (topic recreated or truncated; the broker gives no topic id to tell); "
                "records may have been missed"
            )
        restart = reader.earliest([*by_id, *by_offsets])
        restart.update({tp: view.latest[tp] for tp in truncated})
        return SettledEnds(settled, restart, {**reference, **view.topic_ids})

    def check_retention(self, reader: OffsetReader, begin: Frontier, end: Frontier) -> None:
        """Ranges that start below their partition's log start lost records to retention."""
        reading = [(r.topic, r.partition) for r in ranges_between(begin, end)]
        if not reading:
            return
        earliest = reader.earliest(reading)
        lost = sorted(tp for tp in reading if begin.get(tp, 0) < earliest[tp])
        if lost:
            self.data_loss(
                "records were deleted before they were read: "
                + ", ".join(
                    f"{t}-{p} starts at {earliest[(t, p)]}, the epoch at {begin.get((t, p), 0)}"
                    for t, p in lost
                )
            )

    def data_loss(self, message: str) -> None:
        """:class:`DataLossError` with ``failOnDataLoss=true``; else a warning, counted."""
        if self.options.fail_on_data_loss:
            raise DataLossError(
                f"gtkafka: {message}. Set failOnDataLoss=false to skip lost data with a warning."
            )
        self.lost_events += 1
        log.warning("gtkafka: %s; continuing (failOnDataLoss=false)", message)

    def _report_vanished(self, start: SourceOffset, missing: list[TopicPartitionKey]) -> None:
        self._vanished &= set(missing)
        new = [tp for tp in missing if tp not in self._vanished]
        if new:
            self.data_loss(
                f"partition(s) {_tps(new)} no longer exist on Kafka at "
                f"{self.options.bootstrap_servers} (topic or partition deleted); "
                f"the epoch starting at {start} cannot read them (they keep their offsets)"
            )
            self._vanished.update(new)

    def _report_stale(
        self, begin: Frontier, view: ClusterView, stale: list[TopicPartitionKey]
    ) -> None:
        self._stale &= set(stale)
        new = [tp for tp in stale if tp not in self._stale]
        if new:
            log.warning(
                "gtkafka: Kafka at %s answers ends below the frontier for %s, twice, and "
                "the end could not be confirmed by a fetch: taken as a stale answer, the "
                "frontier stays",
                self.options.bootstrap_servers,
                _moves(begin, view.latest, new),
            )
            self._stale.update(new)


def _behind_under_same_id(
    begin: Frontier, view: ClusterView, reference: Mapping[str, str]
) -> list[TopicPartitionKey]:
    """Partitions whose confirmed end is below ``begin`` under the topic id ``begin`` was
    computed under."""
    return sorted(
        tp
        for tp, off in begin.items()
        if tp in view.latest
        and view.latest[tp] < off
        and tp not in view.unsure
        and tp[0] in view.topic_ids
        and reference.get(tp[0]) == view.topic_ids[tp[0]]
    )


def _suspects(begin: Frontier, view: ClusterView) -> bool:
    """Does the answer lack a partition of ``begin``, or put one below it?"""
    return any(tp not in view.latest or view.latest[tp] < off for tp, off in begin.items())


def _tps(tps: list[TopicPartitionKey]) -> str:
    return ", ".join(f"{t}-{p}" for t, p in tps)


def _frontier_of(begin: Frontier, topic: str) -> str:
    return ", ".join(f"{t}-{p}={off}" for (t, p), off in sorted(begin.items()) if t == topic)


def _moves(begin: Frontier, latest: Frontier, tps: list[TopicPartitionKey]) -> str:
    return ", ".join(f"{t}-{p} (from {begin.get((t, p), 0)} to {latest[(t, p)]})" for t, p in tps)
