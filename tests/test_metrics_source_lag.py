"""The source's lag at a scrape (:mod:`state.metrics.source_lag`): one reader per set of
topics, an answer kept ``max_age`` seconds, a Kafka that does not answer leaving the lag
out with the error named; and how a scrape shows a reading that left a part out."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from gtbarrier import kafka_ends
from state.coordinator import SnapshotCoordinator
from state.errors import ConfigError, SourceUnavailable
from state.metrics.reading import PipelineReading, StoreFacts
from state.metrics.server import PipelineCollector
from state.metrics.source_lag import SourceEnds, SourceLag
from state.records.barrier import BarrierState
from state.records.source_offset import Frontier
from state.secrets import hide_in_logs

SECRET = "kafka-password-never-shown-0123"


class FakeReader:
    """Kafka's ends as the test sets them; counts its calls, fails while ``down``."""

    def __init__(self, topics: frozenset[str], ends: dict[str, Frontier]) -> None:
        self.topics = topics
        self.ends = ends
        self.calls = 0
        self.closed = False
        self.down = False

    def end_offsets(self) -> Frontier:
        assert not self.closed
        self.calls += 1
        if self.down:
            raise SourceUnavailable(f"brokers at b:9092 (sasl password {SECRET}) did not answer")
        return {tp: n for t in sorted(self.topics) for tp, n in self.ends[t].items()}

    def close(self) -> None:
        self.closed = True


class Opened:
    def __init__(self, ends: dict[str, Frontier]) -> None:
        self.ends = ends
        self.readers: list[FakeReader] = []

    def __call__(self, topics: frozenset[str]) -> FakeReader:
        reader = FakeReader(topics, self.ends)
        self.readers.append(reader)
        return reader


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_an_answer_is_kept_max_age_seconds_then_kafka_is_asked_again() -> None:
    ends = {"t": {("t", 0): 50, ("t", 1): 7}}
    opened, clock = Opened(ends), Clock()
    source = SourceEnds(opened, max_age=2.0, clock=clock)
    planned = {("t", 0): 40, ("t", 1): 7}
    assert source.read(planned) == SourceLag(
        ends={("t", 0): 50, ("t", 1): 7}, behind={("t", 0): 10, ("t", 1): 0}
    )
    ends["t"][("t", 0)] = 90
    clock.now += 1.5
    assert source.read(planned).behind == {("t", 0): 10, ("t", 1): 0}  # kept
    assert source.read({("t", 0): 45, ("t", 1): 7}).behind == {("t", 0): 5, ("t", 1): 0}
    clock.now += 0.6
    assert source.read(planned).behind == {("t", 0): 50, ("t", 1): 0}  # asked again
    assert len(opened.readers) == 1 and opened.readers[0].calls == 2


def test_nothing_is_read_before_the_source_planned() -> None:
    opened = Opened({})
    assert SourceEnds(opened).read(None) == SourceLag()
    assert opened.readers == []


def test_new_topics_close_the_old_reader_and_open_one() -> None:
    opened = Opened({"a": {("a", 0): 3}, "b": {("b", 0): 9}})
    source = SourceEnds(opened, max_age=60.0)
    assert source.read({("a", 0): 1}).behind == {("a", 0): 2}
    assert source.read({("b", 0): 1}).behind == {("b", 0): 8}  # not the kept answer of a
    first, second = opened.readers
    assert first.topics == {"a"} and first.closed and second.topics == {"b"}
    source.close()
    assert second.closed
    with pytest.raises(RuntimeError):
        source.read({("b", 0): 1})


def test_a_kafka_that_does_not_answer_leaves_the_lag_out_and_names_the_error(
    caplog: pytest.LogCaptureFixture,
) -> None:
    hide_in_logs(SECRET)
    opened, clock = Opened({"t": {("t", 0): 5}}), Clock()
    source = SourceEnds(opened, max_age=2.0, clock=clock)
    assert source.read({("t", 0): 1}).behind == {("t", 0): 4}
    clock.now += 5
    opened.readers[0].down = True
    with caplog.at_level(logging.WARNING, logger="gtbarrier.metrics"):
        lag = source.read({("t", 0): 1})
    # absent, not the last value read
    assert lag == SourceLag(errors=("SourceUnavailable",))
    assert "SourceUnavailable" in caplog.text and SECRET not in caplog.text
    # the failure is kept too: a fast scraper does not wait on the brokers each time
    assert source.read({("t", 0): 1}).errors == ("SourceUnavailable",)
    assert opened.readers[0].calls == 2
    opened.readers[0].down = False
    clock.now += 2.0
    assert source.read({("t", 0): 1}).behind == {("t", 0): 4}


def _scrape(registry: CollectorRegistry) -> tuple[str, dict[tuple[str, tuple[str, ...]], float]]:
    text = generate_latest(registry).decode()
    return text, {
        (s.name, tuple(f"{k}={v}" for k, v in sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_a_reading_without_the_lag_serves_the_rest_with_up_0_and_the_error_counted() -> None:
    facts = StoreFacts(barrier=BarrierState(gt_last=4), planned_epoch=6)
    readings = [
        PipelineReading("p1", facts, errors=("SourceUnavailable",)),
        PipelineReading("p1", facts, behind={("t", 0): 3}, ends={("t", 0): 9}),
    ]
    registry = CollectorRegistry(auto_describe=False)
    registry.register(PipelineCollector(lambda: readings[0], pipeline="p1", clock=lambda: 0.0))
    text, got = _scrape(registry)
    p1 = ("pipeline=p1",)
    assert got[("gtbarrier_up", p1)] == 0
    assert got[("gtbarrier_scrape_errors_total", ("error=SourceUnavailable", *p1))] == 1
    assert got[("gtbarrier_gt_last", p1)] == 4 and got[("gtbarrier_planned_epoch", p1)] == 6
    assert "gtbarrier_source_offsets_behind" not in text
    readings.pop(0)
    text, got = _scrape(registry)
    assert got[("gtbarrier_up", p1)] == 1
    assert got[("gtbarrier_source_offsets_behind", ("partition=0", *p1, "topic=t"))] == 3
    assert got[("gtbarrier_scrape_errors_total", ("error=SourceUnavailable", *p1))] == 1


def test_kafka_ends_needs_the_bootstrap_servers_and_checks_the_kafka_settings() -> None:
    with pytest.raises(ConfigError) as err:
        kafka_ends({"subscribe": "t"})
    assert err.value.option == "kafka.bootstrap.servers"
    with pytest.raises(ConfigError) as err:
        kafka_ends({"kafka.bootstrap.servers": "b:9092", "kafka.security.protocol": "PLAINTEXTY"})
    assert err.value.option == "kafka.security.protocol"
    with pytest.raises(ConfigError) as err:
        kafka_ends({"kafka.bootstrap.servers": "b:9092"}, max_age=-1)
    assert err.value.option == "max_age"
    kafka_ends({"kafka.bootstrap.servers": "b:9092", "subscribe": "t", "pipeline.id": "p"}).close()


def test_the_coordinator_takes_source_ends_only_with_a_metrics_endpoint(tmp_path: Path) -> None:
    ends = kafka_ends({"kafka.bootstrap.servers": "127.0.0.1:9"})
    with pytest.raises(ConfigError) as err:
        SnapshotCoordinator(None, "p1", "memory://lag-a", tmp_path / "cp", source_ends=ends)
    assert err.value.option == "source_ends" and "metrics_port" in str(err.value)
    with pytest.raises(ConfigError) as err:
        SnapshotCoordinator(
            None,
            "p1",
            "memory://lag-b",
            tmp_path / "cp",
            metrics_port=0,
            source_ends={"kafka.bootstrap.servers": "x:1"},  # type: ignore[arg-type]
        )
    assert err.value.option == "source_ends" and "kafka_ends" in str(err.value)
