"""An in-memory stand-in for a Kafka cluster and kafka-python's KafkaConsumer.

Just enough of the consumer API for gtkafka's unit tests, with the Tansu ListOffsets
defect switchable (``tansu=True``: "latest" is the base offset of the last record batch
plus one) and every call counted in ``FakeBroker.calls``. Topics get topic ids (as in
Metadata v10+) unless ``topic_ids=False``; :meth:`FakeBroker.hide` drops a partition from
the next Metadata answers and :meth:`FakeBroker.fail_probes` leaves the fetches of the
next end probes unanswered. :meth:`FakeBroker.truncate` cuts a partition's log under the
same topic id; :meth:`FakeBroker.lag` plays a new leader whose high watermark has not
caught up yet (a lower end for a few answers).
"""

from __future__ import annotations

import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import kafka.errors as kerr
from kafka import TopicPartition
from kafka.consumer.fetcher import ConsumerRecord
from kafka.structs import OffsetAndTimestamp


@dataclass
class FakePartition:
    records: dict[int, ConsumerRecord] = field(default_factory=dict)
    end: int = 0
    log_start: int = 0
    batch_bases: list[int] = field(default_factory=list)


class FakeBroker:
    def __init__(self, *, tansu: bool = False, down: bool = False, topic_ids: bool = True) -> None:
        self.tansu = tansu
        self.down = down
        self.with_ids = topic_ids
        self.topics: dict[str, dict[int, FakePartition]] = {}
        self.ids: dict[str, uuid.UUID] = {}
        self.calls: Counter[str] = Counter()
        self.committed: dict[str, dict[TopicPartition, int]] = {}
        self.consumers: list[FakeConsumer] = []
        self.hidden: dict[tuple[str, int], int] = {}  # partition -> Metadata answers to skip
        self.unanswered_probes = 0
        self.tick: Callable[[float], None] | None = None  # advances the test's clock
        # partition -> (the end it answers, ListOffsets answers left), see lag()
        self.lagging: dict[tuple[str, int], tuple[int, int]] = {}
        self.lying: set[tuple[str, int]] = set()  # fetches see the lagging end

    def create(self, topic: str, partitions: int) -> None:
        self.topics[topic] = {p: FakePartition() for p in range(partitions)}
        if self.with_ids:
            self.ids[topic] = uuid.uuid4()

    def hide(self, topic: str, partition: int, answers: int = 1) -> None:
        """Leave ``topic``-``partition`` out of the next ``answers`` Metadata answers."""
        self.hidden[(topic, partition)] = answers

    def fail_probes(self, n: int) -> None:
        """The next ``n`` assignments (each end probe makes one) get no fetch answers: their
        polls return nothing and take their whole timeout."""
        self.unanswered_probes = n

    def produce(
        self,
        topic: str,
        partition: int,
        n: int,
        *,
        timestamp: int = 1_000,
        batch: int | None = None,
        headers: list[tuple[str, bytes]] | None = None,
    ) -> None:
        """Append ``n`` records in batches of ``batch`` (default: one batch)."""
        part = self.topics[topic][partition]
        size = batch or n
        for i in range(n):
            off = part.end
            if i % size == 0:
                part.batch_bases.append(off)
            part.records[off] = ConsumerRecord(
                topic,
                partition,
                0,
                off,
                timestamp + i,
                0,
                b"k%d" % off,
                b"v%d" % off,
                list(headers or []),
                None,
                2,
                2,
                0,
            )
            part.end += 1

    def skip(self, topic: str, partition: int, n: int) -> None:
        """Advance the end by ``n`` offsets that hold no records (compaction, markers)."""
        self.topics[topic][partition].end += n

    def delete_before(self, topic: str, partition: int, offset: int) -> None:
        part = self.topics[topic][partition]
        part.log_start = offset
        for off in [o for o in part.records if o < offset]:
            del part.records[off]

    def recreate(self, topic: str, partitions: int) -> None:
        self.create(topic, partitions)

    def truncate(self, topic: str, partition: int, offset: int) -> None:
        """Cut the log at ``offset`` (an unclean leader election): the records from there
        on are gone, the next record gets ``offset``; the topic id stays."""
        part = self.topics[topic][partition]
        for off in [o for o in part.records if o >= offset]:
            del part.records[off]
        part.end = offset
        part.batch_bases = [b for b in part.batch_bases if b < offset]

    def lag(self, topic: str, partition: int, end: int, answers: int) -> None:
        """The next ``answers`` ListOffsets answers put the partition's end at ``end``, and
        fetches until the next honest ListOffsets answer see that high watermark and no
        record from there on (a new leader right after a failover)."""
        self.lagging[(topic, partition)] = (end, answers)

    def answered_end(self, tp: TopicPartition) -> int:
        """The end a ListOffsets answer gives, lagging or not (see :meth:`lag`)."""
        key = (tp.topic, tp.partition)
        listed = self.listed_end(tp)
        end, left = self.lagging.get(key, (listed, 0))
        if left > 0 and end < listed:
            self.lagging[key] = (end, left - 1)
            self.lying.add(key)
            return end
        self.lying.discard(key)
        return listed

    def visible_end(self, tp: TopicPartition) -> int:
        """The partition's end as fetches see it."""
        key = (tp.topic, tp.partition)
        end = self.topics[tp.topic][tp.partition].end
        return min(end, self.lagging[key][0]) if key in self.lying else end

    def listed_end(self, tp: TopicPartition) -> int:
        part = self.topics[tp.topic][tp.partition]
        if self.tansu and part.batch_bases:
            return part.batch_bases[-1] + 1
        return part.end


class FakeConsumer:
    """The subset of ``kafka.KafkaConsumer`` that gtkafka uses."""

    def __init__(self, broker: FakeBroker, **config: Any) -> None:
        from kafka import KafkaConsumer

        unknown = set(config) - set(KafkaConsumer.DEFAULT_CONFIG)
        assert not unknown, unknown
        broker.calls["connect"] += 1
        if broker.down:
            raise kerr.KafkaTimeoutError("Unable to bootstrap from fake")
        self.broker = broker
        self.config = config
        self.assigned: list[TopicPartition] = []
        self.positions: dict[TopicPartition, int] = {}
        self.high: dict[TopicPartition, int] = {}
        self.paused: set[TopicPartition] = set()
        self.closed = False
        self.view: dict[str, set[int]] = {}  # the last Metadata answer
        self.unanswered = False
        #: The offset up to which a poll with ``timeout_ms=0`` returns records: what
        #: kafka-python's fetcher holds already (``None``: everything).
        self.fetched_to: int | None = None
        self._cluster = FakeCluster(self)
        broker.consumers.append(self)

    def _check(self, what: str) -> None:
        assert not self.closed
        self.broker.calls[what] += 1
        if self.broker.down:
            raise kerr.KafkaConnectionError("111 ECONNREFUSED")

    def _part(self, tp: TopicPartition) -> FakePartition:
        try:
            return self.broker.topics[tp.topic][tp.partition]
        except KeyError:
            raise kerr.UnknownTopicOrPartitionError(str(tp)) from None

    def topics(self) -> set[str]:
        self._check("metadata")
        self.view = {t: set(parts) for t, parts in self.broker.topics.items()}
        for (t, p), left in list(self.broker.hidden.items()):
            if left > 0 and t in self.view:
                self.view[t].discard(p)
                self.broker.hidden[(t, p)] = left - 1
        return set(self.view)

    def partitions_for_topic(self, topic: str) -> set[int]:
        return set(self.view.get(topic, self.broker.topics.get(topic, {})))

    def beginning_offsets(
        self, tps: list[TopicPartition], timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        self._check("list_offsets")
        return {tp: self._part(tp).log_start for tp in tps}

    def end_offsets(
        self, tps: list[TopicPartition], timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        self._check("list_offsets")
        return {tp: self.broker.answered_end(tp) for tp in tps}

    def offsets_for_times(
        self, stamps: dict[TopicPartition, int], timeout_ms: int | None = None
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        self._check("list_offsets")
        out: dict[TopicPartition, OffsetAndTimestamp | None] = {}
        for tp, ts in stamps.items():
            hits = sorted(r for r in self._part(tp).records.values() if r.timestamp >= ts)
            out[tp] = OffsetAndTimestamp(hits[0].offset, hits[0].timestamp, 0) if hits else None
        return out

    def assign(self, tps: list[TopicPartition]) -> None:
        self.unanswered = bool(tps) and self.broker.unanswered_probes > 0
        if self.unanswered:
            self.broker.unanswered_probes -= 1
        self.assigned = list(tps)
        self.positions = {tp: self.positions.get(tp, 0) for tp in tps}
        # kafka-python keeps a partition's state (its high watermark) only while assigned
        self.high = {tp: hw for tp, hw in self.high.items() if tp in tps}
        self.paused = set()

    def seek(self, tp: TopicPartition, offset: int) -> None:
        assert tp in self.assigned
        self.positions[tp] = offset

    def pause(self, *tps: TopicPartition) -> None:
        self.paused.update(tps)

    def position(self, tp: TopicPartition, timeout_ms: int | None = None) -> int:
        return self.positions[tp]

    def highwater(self, tp: TopicPartition) -> int | None:
        return self.high.get(tp)

    def poll(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord]]:
        self._check("fetch")
        if self.unanswered:
            if self.broker.tick is not None:
                self.broker.tick(timeout_ms / 1000.0)
            return {}
        limit = max_records or self.config.get("max_poll_records", 500)
        fetched_to = self.fetched_to if timeout_ms == 0 else None
        out: dict[TopicPartition, list[ConsumerRecord]] = {}
        for tp in self.assigned:
            if tp in self.paused or tp.partition not in self.broker.topics.get(tp.topic, {}):
                continue  # kafka-python sends no fetch for a partition missing from metadata
            part = self._part(tp)
            pos = self.positions[tp]
            if pos < part.log_start or (pos > part.end and not self.broker.tansu):
                raise kerr.OffsetOutOfRangeError({tp: pos})
            visible = self.broker.visible_end(tp)
            self.high[tp] = visible
            got: list[ConsumerRecord] = []
            off = pos
            end = visible if fetched_to is None else min(visible, fetched_to)
            while off < end and len(got) < limit:
                rec = part.records.get(off)
                if rec is not None:
                    got.append(rec)
                off += 1
            if off != pos:
                self.positions[tp] = off
            if got:
                out[tp] = got
        return out

    def commit(self, offsets: dict[TopicPartition, Any]) -> None:
        self._check("commit")
        group = self.config["group_id"]
        assert group
        self.broker.committed.setdefault(group, {}).update(
            {tp: om.offset for tp, om in offsets.items()}
        )

    def close(self, autocommit: bool = True, timeout_ms: int | None = None) -> None:
        self.closed = True


class FakeCluster:
    """kafka-python's cluster metadata, as far as topic ids go."""

    def __init__(self, consumer: FakeConsumer) -> None:
        self.consumer = consumer

    def topic_id(self, topic: str) -> uuid.UUID | None:
        if topic not in self.consumer.view:
            return None
        return self.consumer.broker.ids.get(topic)


def factory(broker: FakeBroker) -> Any:
    return lambda **config: FakeConsumer(broker, **config)
