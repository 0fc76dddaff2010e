"""The driver's view of the Kafka cluster: partitions, earliest and latest offsets.

Mirrors Spark's ``KafkaOffsetReader``. One kafka-python consumer (no group, nothing
committed) is created lazily on first use and kept for the life of the driver-side reader.
Every call is retried ``fetchOffset.numRetries`` times, ``fetchOffset.retryIntervalMs``
apart, and bounded by ``kafkaConsumer.pollTimeoutMs`` in all; an unreachable cluster raises
:class:`SourceUnavailable` naming the bootstrap servers.

Latest offsets are cached for ``fetchOffset.refreshIntervalMs``: Spark calls
``latestOffset`` every few milliseconds while a query is idle, and an idle query must not
hammer the broker. Only that idle polling reuses a cached answer
(:func:`may_reuse_cached_ends`): the call after a planned epoch, or after a pause (a
processing-time trigger's wait), plans from ends fetched then, so that a record waits for
the micro-batch it missed and not also for the cache. :attr:`OffsetReader.requests`
counts the calls made to the cluster.

One answer (Metadata, then ListOffsets and the end probe) is a :class:`ClusterView`: the
partitions, their ends, the topic ids the broker gave (Metadata v10+) and the ends that may
be too small (the probe got no answer). The stream reader judges gaps with it.
"""

from __future__ import annotations

import logging
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from datasource import record_rows
from datasource.offsets import Frontier, TopicPartitionKey
from datasource.options import KafkaSourceOptions
from state.kafka_errors import kafka_call as translated_call
from state.retry import Retry, kafka_requests

log = logging.getLogger(__name__)

T = TypeVar("T")

# The longest a partition's corrected end is trusted while ListOffsets answers the same.
PROBE_MAX_AGE_S = 30.0

#: Spark asks an idle micro-batch source again after ``spark.sql.streaming.pollingDelay``
#: (10 ms by default); a ``latestOffset`` call that comes longer than this after the
#: previous one ended follows a micro-batch or a processing-time trigger's wait.
IDLE_POLL_GAP_S = 0.1


def may_reuse_cached_ends(now: float, previous_end: float | None, previous_planned: bool) -> bool:
    """Whether a ``latestOffset`` call at ``now`` may plan from a cached answer (one
    younger than ``fetchOffset.refreshIntervalMs``).

    Only while Spark polls an idle source back to back: the previous call, which ended at
    ``previous_end``, planned nothing new (``previous_planned`` false) and ended less than
    :data:`IDLE_POLL_GAP_S` ago. The first call, the call after a planned epoch and the
    call after a pause ask the broker again.
    """
    if previous_end is None or previous_planned:
        return False
    return now - previous_end < IDLE_POLL_GAP_S


def kafka_call(options: KafkaSourceOptions, what: str, fn: Callable[[], T], *, retry: Retry) -> T:
    """Run ``fn``; retriable Kafka failures become :class:`SourceUnavailable` (and are retried)."""
    return retry(lambda: translated_call(options.bootstrap_servers, what, fn))


def driver_retry(options: KafkaSourceOptions) -> Retry:
    """``fetchOffset.numRetries`` retries, ``retryIntervalMs`` apart, within the poll timeout."""
    return kafka_requests(
        options.fetch_offset_num_retries,
        options.fetch_offset_retry_interval_ms / 1000.0,
        options.poll_timeout_ms / 1000.0,
    )


def attempt_timeout_ms(options: KafkaSourceOptions) -> int:
    """One attempt's share of the poll timeout, so that all attempts fit within it."""
    return max(1_000, options.poll_timeout_ms // (options.fetch_offset_num_retries + 1))


@dataclass(frozen=True)
class ClusterView:
    """One answer of the cluster about the subscribed topics."""

    at: float
    partitions: dict[str, set[int]]
    latest: Frontier
    topic_ids: dict[str, str]
    """The id of each topic whose Metadata answer carried one (v10+; Tansu and Kafka 2.8+)."""
    unsure: frozenset[TopicPartitionKey]
    """Partitions whose end may be too small: ListOffsets only, the probe got no answer."""
    verified: bool = False
    """Every end was probed for this answer (none remembered from an earlier probe)."""


def topic_id(consumer: Any, topic: str) -> str | None:
    """The topic id of ``topic`` in the consumer's last Metadata answer, if it had one.

    kafka-python 3 keeps the ids of Metadata v10+ answers in its cluster metadata
    (``KafkaConsumer._cluster.topic_id``), the only place the consumer exposes them.
    """
    cluster = getattr(consumer, "_cluster", None)
    lookup = getattr(cluster, "topic_id", None)
    found = lookup(topic) if callable(lookup) else None
    if found is None or getattr(found, "int", 1) == 0:  # the zero UUID means "no id"
        return None
    return str(found)


def _offset(record: Any) -> int:
    """The offset of a polled record: kafka-python's ``ConsumerRecord`` (a named tuple
    with ``offset``), or a :data:`~datasource.record_rows.Row` (a consumer with
    record_rows installed), whose first field is the offset."""
    found = getattr(record, "offset", None)
    return int(record[0] if found is None else found)


class OffsetReader:
    """Partitions and offsets of the subscribed topics; one instance per driver-side reader."""

    def __init__(
        self,
        options: KafkaSourceOptions,
        *,
        consumer_factory: Callable[..., Any] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.options = options
        self.requests: Counter[str] = Counter()
        self._factory = consumer_factory
        self._clock = clock
        self._consumer: Any = None
        self._cache: ClusterView | None = None
        # (ListOffsets answer, corrected end, when probed) per partition, to skip the
        # fetch probe while a partition's ListOffsets answer does not change.
        self._ends: dict[TopicPartitionKey, tuple[int, int, float]] = {}
        self._ids: dict[str, str] = {}  # the last id seen per topic
        self._retry = driver_retry(options)

    # --- lifecycle -------------------------------------------------------------------

    def _client(self) -> Any:
        if self._consumer is None:
            timeout = attempt_timeout_ms(self.options)
            overrides = {
                k: v
                for k, v in {
                    "request_timeout_ms": timeout,
                    "bootstrap_timeout_ms": timeout,
                    "fetch_max_wait_ms": min(100, timeout // 2),
                    "max_poll_records": 100_000,
                }.items()
                if k not in self.options.kafka
            }
            config = self.options.consumer_config(**overrides)
            factory = self._factory
            if factory is None:
                from kafka import KafkaConsumer

                factory = KafkaConsumer
            self.requests["connect"] += 1
            self._consumer = self._call("connect", lambda: factory(**config))
            # The end probe needs offsets only: its records are decoded without their
            # headers, which could otherwise fail it (kafka-python refuses a header key
            # that is not UTF-8) and cost time for nothing.
            record_rows.install(self._consumer, headers=False)
        return self._consumer

    def close(self) -> None:
        if self._consumer is not None:
            consumer, self._consumer = self._consumer, None
            consumer.close()

    def _call(self, what: str, fn: Callable[[], T]) -> T:
        return kafka_call(self.options, what, fn, retry=self._retry)

    # --- partitions ------------------------------------------------------------------

    def topic_partitions(self) -> dict[str, set[int]]:
        """Existing topics of the subscription and their partitions (one Metadata request).

        Subscribed or assigned topics that do not exist are absent from the answer; the
        caller decides whether that is an error (at start) or data loss (later).
        """
        return self._metadata()[0]

    @property
    def topic_ids(self) -> dict[str, str]:
        """The last topic id seen per topic (empty where the broker gives none)."""
        return dict(self._ids)

    def _metadata(self) -> tuple[dict[str, set[int]], dict[str, str]]:
        """Partitions and topic ids of the subscription, from one fresh Metadata request.

        A topic whose id changed was recreated: its remembered probe results are dropped.
        """
        consumer = self._client()
        sub = self.options.subscription

        def fetch() -> tuple[dict[str, set[int]], dict[str, str]]:
            self.requests["metadata"] += 1
            topics = consumer.topics()  # always a fresh Metadata request
            found: dict[str, set[int]] = {}
            ids: dict[str, str] = {}
            for topic in sorted(topics):
                if not sub.matches(topic):
                    continue
                parts = set(consumer.partitions_for_topic(topic) or ())
                if sub.kind == "assign":
                    parts &= set(dict(sub.assignment)[topic])
                if parts:
                    found[topic] = parts
                    tid = topic_id(consumer, topic)
                    if tid is not None:
                        ids[topic] = tid
            return found, ids

        found, ids = self._call("fetching topic metadata", fetch)
        for topic, tid in ids.items():
            if self._ids.get(topic, tid) != tid:
                self._ends = {tp: e for tp, e in self._ends.items() if tp[0] != topic}
            self._ids[topic] = tid
        return found, ids

    # --- offsets ---------------------------------------------------------------------

    def earliest(self, tps: Iterable[TopicPartitionKey]) -> Frontier:
        """The log start offset of each partition (ListOffsets "earliest")."""
        wanted = sorted(tps)
        if not wanted:
            return {}
        consumer = self._client()
        from kafka import TopicPartition

        def fetch() -> Frontier:
            self.requests["list_offsets"] += 1
            answer = consumer.beginning_offsets(
                [TopicPartition(t, p) for t, p in wanted],
                timeout_ms=attempt_timeout_ms(self.options),
            )
            return {(tp.topic, tp.partition): int(off) for tp, off in answer.items()}

        return self._call("ListOffsets(earliest)", fetch)

    def latest(self, tps: Iterable[TopicPartitionKey]) -> Frontier:
        """The end of each partition (the offset the next record will get), uncached."""
        return self._latest(tps)[0]

    def _latest(
        self, tps: Iterable[TopicPartitionKey], *, probe_all: bool = False
    ) -> tuple[Frontier, frozenset[TopicPartitionKey]]:
        """Ends, and the partitions whose end may be too small (see :meth:`_correct_ends`)."""
        wanted = sorted(tps)
        if not wanted:
            return {}, frozenset()
        consumer = self._client()
        from kafka import TopicPartition

        def fetch() -> Frontier:
            self.requests["list_offsets"] += 1
            answer = consumer.end_offsets(
                [TopicPartition(t, p) for t, p in wanted],
                timeout_ms=attempt_timeout_ms(self.options),
            )
            return {(tp.topic, tp.partition): int(off) for tp, off in answer.items()}

        listed = self._call("ListOffsets(latest)", fetch)
        return self._correct_ends(listed, probe_all=probe_all)

    def latest_cached(self, *, fresh: bool = False) -> tuple[dict[str, set[int]], Frontier]:
        """Partitions and latest offsets, refreshed at most every ``refreshIntervalMs``."""
        view = self.view(fresh=fresh)
        return view.partitions, dict(view.latest)

    def young_view(self) -> ClusterView | None:
        """The cached answer if it is younger than ``refreshIntervalMs`` (no request)."""
        cache = self._cache
        interval = self.options.fetch_offset_refresh_interval_ms / 1000.0
        if cache is None or self._clock() - cache.at >= interval:
            return None
        return cache

    def view(self, *, fresh: bool = False, verify: bool = False) -> ClusterView:
        """The cluster's answer, refreshed at most every ``refreshIntervalMs``.

        ``fresh``: a new answer now. ``verify``: an answer whose ends all come from a fetch
        (no remembered probe), to check a suspicious one; a verified answer younger than
        the refresh interval is reused, so a lasting gap costs no more requests than an
        idle query.
        """
        now = self._clock()
        interval = self.options.fetch_offset_refresh_interval_ms / 1000.0
        cache = self._cache
        young = cache is not None and now - cache.at < interval
        if fresh or not young or (verify and not (cache is not None and cache.verified)):
            partitions, ids = self._metadata()
            latest, unsure = self._latest(
                ((t, p) for t, ps in partitions.items() for p in ps), probe_all=verify
            )
            cache = self._cache = ClusterView(
                self._clock(), partitions, latest, ids, unsure, verified=verify
            )
        assert cache is not None
        return cache

    def _correct_ends(
        self, listed: Mapping[TopicPartitionKey, int], *, probe_all: bool = False
    ) -> tuple[Frontier, frozenset[TopicPartitionKey]]:
        """Work around the Tansu broker's wrong ListOffsets "latest".

        Tansu answers the base offset of the partition's *last record batch* plus one,
        not the last offset plus one (Apache Kafka answers the latter). A fetch's high
        watermark is right on both, so the end of a partition is the largest of the
        ListOffsets answer, the high watermark and the last offset + 1 of a fetch from
        ``listed - 1`` (which returns the last batch on Tansu and the last record on
        Kafka). The fetch is made when a partition's ListOffsets answer changed, at least
        every :data:`PROBE_MAX_AGE_S`, after its topic's id changed, and always with
        ``probe_all``. A fetch that got no answer is not remembered: such a partition's
        end is the ListOffsets answer, possibly too small, and reported as unsure.
        """
        now = self._clock()
        ends: Frontier = {}
        probe: dict[TopicPartitionKey, int] = {}
        for tp, listed_end in listed.items():
            known = self._ends.get(tp)
            if listed_end <= 0:
                ends[tp] = listed_end
            elif (
                not probe_all
                and known is not None
                and known[0] == listed_end
                and now - known[2] < PROBE_MAX_AGE_S
            ):
                ends[tp] = known[1]
            else:
                probe[tp] = listed_end
        unsure: set[TopicPartitionKey] = set()
        if probe:
            probed = self._call("fetching high watermarks", lambda: self._probe(probe))
            for tp, listed_end in probe.items():
                if tp in probed:
                    end = max(listed_end, probed[tp])
                    self._ends[tp] = (listed_end, end, now)
                else:
                    end = listed_end
                    unsure.add(tp)
                ends[tp] = end
        return ends, frozenset(unsure)

    def _probe(self, listed: Mapping[TopicPartitionKey, int]) -> Frontier:
        import kafka.errors as kerr
        from kafka import TopicPartition

        consumer = self._client()
        tps = {tp: TopicPartition(*tp) for tp in listed}
        consumer.assign(list(tps.values()))
        for tp, listed_end in listed.items():
            consumer.seek(tps[tp], listed_end - 1)
        found: Frontier = {}
        pending = set(listed)
        deadline = self._clock() + attempt_timeout_ms(self.options) / 1000.0
        self.requests["fetch"] += 1
        try:
            while pending:
                remaining_ms = int((deadline - self._clock()) * 1000)
                if remaining_ms <= 0:
                    break
                try:
                    batch = consumer.poll(timeout_ms=min(remaining_ms, 200))
                except kerr.OffsetOutOfRangeError as err:
                    # ``listed - 1`` is gone (retention raced us): the listed end stands.
                    for ktp in err.args[0] if err.args and isinstance(err.args[0], dict) else {}:
                        key = (ktp.topic, ktp.partition)
                        pending.discard(key)
                        consumer.pause(ktp)
                    continue
                for ktp, records in batch.items():
                    key = (ktp.topic, ktp.partition)
                    if key not in pending:
                        continue
                    last = _offset(records[-1]) + 1 if records else 0
                    found[key] = max(last, consumer.highwater(ktp) or 0)
                    pending.discard(key)
                    consumer.pause(ktp)
            for key in pending:
                # No records came back (e.g. the last batch is a transaction marker):
                # the high watermark of an empty fetch, if one arrived, still counts.
                hw = consumer.highwater(tps[key])
                if hw is not None:
                    found[key] = hw
        finally:
            consumer.assign([])
        return found

    def offsets_for_times(
        self, stamps: Mapping[TopicPartitionKey, int]
    ) -> dict[TopicPartitionKey, int | None]:
        """The first offset with a timestamp >= the given one, or ``None`` if there is none."""
        if not stamps:
            return {}
        consumer = self._client()
        from kafka import TopicPartition

        def fetch() -> dict[TopicPartitionKey, int | None]:
            self.requests["list_offsets"] += 1
            answer = consumer.offsets_for_times(
                {TopicPartition(t, p): ts for (t, p), ts in stamps.items()},
                timeout_ms=attempt_timeout_ms(self.options),
            )
            result: dict[TopicPartitionKey, int | None] = {}
            for t, p in stamps:
                hit = answer.get(TopicPartition(t, p))
                # Tansu answers offset 0 with timestamp -1 where Kafka answers "none".
                if hit is None or hit.offset is None or hit.offset < 0 or hit.timestamp < 0:
                    result[(t, p)] = None
                else:
                    result[(t, p)] = int(hit.offset)
            return result

        return self._call("ListOffsets(timestamp)", fetch)
