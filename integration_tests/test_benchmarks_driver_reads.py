"""benchmarks.driver_reads' prototype reader against the harness's Kafka broker, without
Spark: read after read, it returns every record once, exactly its range of each partition in
offset order, and a replay of a range returns the same records."""

from __future__ import annotations

from benchmarks.driver_reads import KafkaDriverReader
from harness.kafka import KafkaHelper


def test_reads_cover_the_topic_exactly_and_replay(kafka: KafkaHelper) -> None:
    topic = kafka.create_topic(4)
    kafka.produce(topic, ((None, b"%d" % i, None, i % 4) for i in range(203)))
    reader = KafkaDriverReader(kafka.bootstrap, topic, 50)
    try:
        start = reader.initialOffset()
        seen: list[tuple[int, int]] = []
        reads = []
        for _ in range(20):
            rows, end = reader.read(start)
            got = [(r[2], r[3]) for r in rows]
            assert len(got) <= 50
            for p in start:  # exactly [start, end) of each partition, in offset order
                offsets = [o for q, o in got if str(q) == p]
                assert offsets == list(range(int(start[p]), int(end[p])))
            reads.append((start, end, got))
            seen += got
            start = end
        assert sorted(seen) == sorted({(i % 4, i // 4) for i in range(203)})
        first_start, first_end, first_rows = next(r for r in reads if r[2])
        again = [(r[2], r[3]) for r in reader.readBetweenOffsets(first_start, first_end)]
        assert sorted(again) == sorted(first_rows)
    finally:
        reader.stop()


def test_a_read_that_leaves_partitions_out_needs_no_position_for_them(kafka: KafkaHelper) -> None:
    """Partitions with nothing to read in a range have no position yet: a poll must not
    ask for one (the consumer has no reset policy) nor fetch them."""
    topic = kafka.create_topic(4)
    kafka.produce(topic, ((None, b"%d" % i, None, i % 2) for i in range(40)))
    reader = KafkaDriverReader(kafka.bootstrap, topic, 1_000)
    try:
        start = reader.initialOffset()
        seen: list[tuple[int, int]] = []
        for _ in range(5):  # Tansu's ListOffsets may trail: a read can end short of the log
            rows, end = reader.read(start)
            seen += [(r[2], r[3]) for r in rows]
            assert end["2"] == end["3"] == 0
            start = end
        assert sorted(seen) == sorted((i % 2, i // 2) for i in range(40))
    finally:
        reader.stop()
