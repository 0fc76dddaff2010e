"""The metrics' pure computation: families from a reading, the driver's observations, the
collector's answer to a failed read, the latest offsets taken from Spark's progress, and
what the state reader makes of the records in a memory store."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from state.coordinator.batches import completed_batch_from_progress
from state.errors import CoordinationError
from state.layout import PipelineLayout
from state.metrics.definitions import SCRAPE_SERIES, SERIES_NAMES
from state.metrics.families import (
    ProgressTimes,
    ProgressWatch,
    bundles_delivered,
    metric_families,
    replays_dropped,
    scrape_families,
)
from state.metrics.reading import (
    DriverObservations,
    EpochFacts,
    PipelineReading,
    SnapshotCounts,
    StateReader,
    StoreFacts,
)
from state.metrics.server import PipelineCollector
from state.protocol.batch_records import write_batch_record
from state.protocol.epoch_log import EpochLog
from state.records.barrier import BarrierState, Owner, SkippedBundle
from state.records.resume_point import ResumePoint, SnapshotRef
from state.records.source_offset import SourceOffset
from state.stores import new_store


def _samples(
    reading: PipelineReading, now: float = 1000.0, progress: ProgressTimes | None = None
) -> dict[tuple[str, tuple[str, ...]], float]:
    out: dict[tuple[str, tuple[str, ...]], float] = {}
    for family in metric_families(reading, now, progress):
        for s in family.samples:
            out[(s.name, tuple(f"{k}={v}" for k, v in sorted(s.labels.items())))] = s.value
    return out


def _skipped(bundle: int) -> SkippedBundle:
    return SkippedBundle(bundle, bundle, "q", None, 10, ("p",), 10, 1.0)


def test_bundles_delivered_counts_epochs_that_read_records_less_skipped() -> None:
    barrier = BarrierState(gt_last=4, skipped=(_skipped(3),))
    epochs = [EpochFacts(0, 5), EpochFacts(1, 0), EpochFacts(2, 7), EpochFacts(3, 1)]
    epochs += [EpochFacts(4, 2), EpochFacts(5, 9)]  # 5 is above GT_last
    assert bundles_delivered(barrier, epochs) == 3  # 0, 2, 4 (1 read nothing, 3 skipped)
    assert bundles_delivered(BarrierState(), epochs) == 0


def test_replays_dropped_are_later_batches_of_an_acknowledged_epoch() -> None:
    assert replays_dropped(3, {0: 1, 1: 3, 3: 2, 4: 5}) == 3  # 1: two replays, 3: one
    assert replays_dropped(-1, {0: 4}) == 0


def test_families_from_a_full_reading() -> None:
    owner = Owner("run", "q", generation=4, since=1.0)
    point = ResumePoint(
        generation=4,
        token=2,
        epoch=3,
        batch_id=3,
        query_id="q",
        frontier=None,
        created_at=990.0,
        retained=(SnapshotRef(1, "m", "sha", 3, 3),),
    )
    obs = DriverObservations(bounds=(1.0, 5.0))
    obs.observe_batch(rows=10, seconds=0.5, end={("t", 0): 5}, latest={("t", 0): 9, ("t", 1): 2})
    obs.observe_batch(rows=10, seconds=3.0, end=None, latest=None)
    obs.observe_batch(rows=0, seconds=100.0, end=None, latest=None)  # no rows: not observed
    reading = PipelineReading(
        pipeline="p1",
        facts=StoreFacts(
            barrier=BarrierState(gt_last=3, owner=owner),
            epochs=tuple(EpochFacts(n, 1) for n in range(4)),
            batches_per_epoch={0: 1, 1: 2, 2: 1, 3: 1},
            planned_epoch=4,
        ),
        resume=point,
        behind={("t", 0): 4, ("t", 1): 0},
        dead_letter_rows=7,
        microbatches=obs.histogram(),
        snapshots=SnapshotCounts(accepted=2, abandoned=1),
        ends={("t", 0): 9, ("t", 1): 2},
    )
    got = _samples(reading, progress=ProgressTimes(inflight_since=None, progressed_at=950.0))
    p = ("pipeline=p1",)
    assert got[("gtbarrier_gt_last", p)] == 3
    assert got[("gtbarrier_owner_generation", p)] == 4
    assert got[("gtbarrier_bundles_delivered_total", p)] == 4
    assert got[("gtbarrier_replayed_bundles_dropped_total", p)] == 1
    assert got[("gtbarrier_deadletter_rows_total", p)] == 7
    assert got[("gtbarrier_snapshot_age_seconds", p)] == 10.0
    assert got[("gtbarrier_source_offsets_behind", ("partition=0", "pipeline=p1", "topic=t"))] == 4
    assert got[("gtbarrier_source_offsets_behind", ("partition=1", "pipeline=p1", "topic=t"))] == 0
    assert got[("gtbarrier_snapshots_total", ("outcome=accepted", "pipeline=p1"))] == 2
    assert got[("gtbarrier_snapshots_total", ("outcome=abandoned", "pipeline=p1"))] == 1
    batches = "gtbarrier_microbatch_duration_seconds"
    assert got[(f"{batches}_bucket", ("le=1.0", "pipeline=p1"))] == 1
    assert got[(f"{batches}_bucket", ("le=5.0", "pipeline=p1"))] == 2
    assert got[(f"{batches}_bucket", ("le=+Inf", "pipeline=p1"))] == 2
    assert got[(f"{batches}_count", p)] == 2
    assert got[(f"{batches}_sum", p)] == 3.5
    assert {name for name, _ in got} == SERIES_NAMES - SCRAPE_SERIES
    # the observed lag is Kafka's latest minus the batch's end, per partition of the end
    assert obs.behind() == {("t", 0): 4}


def test_what_was_not_read_is_left_out() -> None:
    assert _samples(PipelineReading(pipeline="p1")) == {}
    bare = _samples(PipelineReading(pipeline="p1", facts=StoreFacts(barrier=BarrierState())))
    assert bare == {
        **{
            (name, ("pipeline=p1",)): -1
            for name in (
                "gtbarrier_gt_last",
                "gtbarrier_delivered_epoch",
                "gtbarrier_inflight_epoch",
            )
        },
        # the store was read and holds no epoch: nothing delivered, nothing dropped
        ("gtbarrier_bundles_delivered_total", ("pipeline=p1",)): 0,
        ("gtbarrier_replayed_bundles_dropped_total", ("pipeline=p1",)): 0,
    }
    no_snapshot = ResumePoint.empty(generation=1, token=1, created_at=5.0)
    assert _samples(PipelineReading(pipeline="p1", resume=no_snapshot)) == {}


def test_a_snapshot_from_the_future_is_age_zero() -> None:
    point = ResumePoint(1, 1, 0, 0, "q", None, 2000.0, (SnapshotRef(1, "m", "sha", 0, 0),))
    got = _samples(PipelineReading(pipeline="p", resume=point), now=1000.0)
    assert got[("gtbarrier_snapshot_age_seconds", ("pipeline=p",))] == 0.0


def test_observations_ignore_negative_and_infinite_durations() -> None:
    obs = DriverObservations(bounds=(1.0,))
    obs.observe_batch(rows=1, seconds=-1.0, end=None, latest=None)
    obs.observe_batch(rows=1, seconds=math.inf, end=None, latest=None)
    assert obs.histogram().count == 0


def test_a_failed_read_shows_as_up_0_and_a_counted_scrape_error() -> None:
    # An empty answer would look like a pipeline with nothing to say: the scrape says it
    # could not read, and how often that happened, so that an alert can fire on it.
    fail = [True]

    def read() -> PipelineReading:
        if fail[0]:
            raise CoordinationError("ZooKeeper 127.0.0.1:1 cannot be reached")
        return PipelineReading(pipeline="p1", facts=StoreFacts(barrier=BarrierState(gt_last=4)))

    registry = CollectorRegistry(auto_describe=False)
    registry.register(PipelineCollector(read, pipeline="p1"))

    def scrape() -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
        text = generate_latest(registry).decode()
        return {
            (s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text)
            for s in family.samples
        }

    first = scrape()
    p1 = (("pipeline", "p1"),)
    assert first[("gtbarrier_up", p1)] == 0
    assert first[("gtbarrier_scrape_errors_total", (("error", "CoordinationError"), *p1))] == 1
    assert ("gtbarrier_gt_last", p1) not in first
    second = scrape()
    assert second[("gtbarrier_scrape_errors_total", (("error", "CoordinationError"), *p1))] == 2
    fail[0] = False
    third = scrape()
    assert third[("gtbarrier_up", p1)] == 1 and third[("gtbarrier_gt_last", p1)] == 4
    # the count stays, as a counter does
    assert third[("gtbarrier_scrape_errors_total", (("error", "CoordinationError"), *p1))] == 2


def test_the_exposition_parses_back() -> None:
    registry = CollectorRegistry(auto_describe=False)
    reading = PipelineReading(pipeline="p1", facts=StoreFacts(barrier=BarrierState(gt_last=2)))
    registry.register(PipelineCollector(lambda: reading, pipeline="p1", clock=lambda: 0.0))
    text = generate_latest(registry).decode()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert families["gtbarrier_gt_last"].samples[0].value == 2
    assert "# HELP gtbarrier_gt_last GT_last" in text


def test_the_latest_offsets_come_from_the_gtkafka_source_progress() -> None:
    progress = {
        "id": "q",
        "runId": "r",
        "batchId": 3,
        "numInputRows": 5,
        "batchDuration": 1200,
        "sources": [
            {
                "description": "gtkafka",
                "endOffset": '{"epoch": 4, "offsets": {"t": {"0": 10}}}',
                "latestOffset": '{"offsets": {"t": {"0": 15}}}',
            }
        ],
    }
    batch = completed_batch_from_progress(progress)
    assert batch.latest == {"offsets": {"t": {"0": 15}}}
    progress["sources"][0]["latestOffset"] = None  # type: ignore[index]
    assert completed_batch_from_progress(progress).latest is None


def test_the_state_reader_counts_bundles_and_replays_from_the_records() -> None:
    store = new_store("memory://metrics-reader")
    layout = PipelineLayout("p1")
    log = EpochLog(store, layout)
    ends = [{("t", 0): 0, ("t", 1): 0}, {("t", 0): 5, ("t", 1): 2}, {("t", 0): 5, ("t", 1): 2}]
    ends += [{("t", 0): 9, ("t", 1): 2}]
    log.create_start(SourceOffset(0, ends[0]))
    for k in range(3):  # epoch 1 reads nothing
        log.record(SourceOffset(k, ends[k]), SourceOffset(k + 1, ends[k + 1]))
    for query, batch_id, epoch in [("q1", 0, 0), ("q1", 1, 1), ("q2", 0, 0), ("q2", 1, 1)]:
        write_batch_record(store, layout, query, batch_id, epoch)
    reader = StateReader(store, layout)
    before = reader.read()
    assert before.barrier is None and before.epochs == ()
    assert before.planned == ends[3]  # the newest epoch's end
    assert before.planned_epoch == 2  # three epochs recorded, 0 to 2
    store.put_json(layout.barrier_state, BarrierState(gt_last=1).to_json())
    facts = reader.read()
    assert facts.barrier == BarrierState(gt_last=1)
    assert facts.epochs == (EpochFacts(0, 7), EpochFacts(1, 0))
    assert facts.batches_per_epoch == {0: 2, 1: 2}
    assert bundles_delivered(facts.barrier, facts.epochs) == 1
    assert replays_dropped(facts.barrier.gt_last, facts.batches_per_epoch) == 2
    store.close()


def test_an_unexpected_error_of_a_read_is_logged_without_the_secret_and_answered(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from state.secrets import hide_in_logs

    hide_in_logs("s3cr3t-value-for-metrics")

    def failing() -> PipelineReading:
        raise RuntimeError("the client said: key s3cr3t-value-for-metrics refused")

    registry = CollectorRegistry(auto_describe=False)
    registry.register(PipelineCollector(failing, pipeline="p1"))
    with caplog.at_level("WARNING", logger="gtbarrier.metrics"):
        answered = generate_latest(registry).decode()
    assert 'gtbarrier_up{pipeline="p1"} 0.0' in answered
    assert 'error="RuntimeError"' in answered and "s3cr3t" not in answered
    logged = "\n".join(r.getMessage() + (r.exc_text or "") for r in caplog.records)
    assert "RuntimeError" in logged and "s3cr3t-value-for-metrics" not in logged


def test_the_progress_watch_dates_the_bundle_in_flight_and_the_last_progress() -> None:
    watch = ProgressWatch()
    first = watch.observe(progress=3, inflight=4, now=100.0)
    assert (first.inflight_since, first.progressed_at) == (100.0, 100.0)
    later = watch.observe(progress=3, inflight=4, now=160.0)
    assert (later.inflight_since, later.progressed_at) == (100.0, 100.0)  # nothing moved
    moved = watch.observe(progress=4, inflight=None, now=200.0)
    assert (moved.inflight_since, moved.progressed_at) == (None, 200.0)
    nxt = watch.observe(progress=4, inflight=5, now=300.0)
    assert (nxt.inflight_since, nxt.progressed_at) == (300.0, 200.0)


def test_progress_families_tell_planned_delivered_and_in_flight_apart() -> None:
    from state.records.inflight_bundle import InflightBundle

    inflight = InflightBundle(
        epoch=4, query_id="q", batch_id=4, run_id=None, parts=(), has_gt=True, ordered=True
    )
    reading = PipelineReading(
        pipeline="p1",
        facts=StoreFacts(barrier=BarrierState(gt_last=3, inflight=inflight), planned_epoch=6),
        ends={("t", 0): 120, ("t", 1): 80},
    )
    watch = ProgressWatch()
    watch.observe(progress=3, inflight=4, now=900.0)
    got = {
        (s.name, tuple(f"{k}={v}" for k, v in sorted(s.labels.items()))): s.value
        for family in metric_families(
            reading, 1000.0, progress=watch.observe(progress=3, inflight=4, now=1000.0)
        )
        for s in family.samples
    }
    p = ("pipeline=p1",)
    assert got[("gtbarrier_planned_epoch", p)] == 6
    assert got[("gtbarrier_delivered_epoch", p)] == 3
    assert got[("gtbarrier_inflight_epoch", p)] == 4
    assert got[("gtbarrier_inflight_age_seconds", p)] == 100.0
    assert got[("gtbarrier_last_progress_timestamp_seconds", p)] == 900.0
    assert got[("gtbarrier_source_end_offset", ("partition=0", "pipeline=p1", "topic=t"))] == 120
    # nothing in flight: the epoch is -1 and the age 0, so an alert's expression needs no absent()
    idle = PipelineReading(
        pipeline="p1", facts=StoreFacts(barrier=BarrierState(gt_last=6), planned_epoch=6)
    )
    quiet = {
        (s.name, tuple(f"{k}={v}" for k, v in sorted(s.labels.items()))): s.value
        for family in metric_families(
            idle, 1000.0, progress=ProgressWatch().observe(progress=6, inflight=None, now=1000.0)
        )
        for s in family.samples
    }
    assert quiet[("gtbarrier_inflight_epoch", p)] == -1
    assert quiet[("gtbarrier_inflight_age_seconds", p)] == 0
    assert quiet[("gtbarrier_planned_epoch", p)] == quiet[("gtbarrier_delivered_epoch", p)] == 6


def test_the_collector_dates_progress_across_scrapes() -> None:
    from state.records.inflight_bundle import InflightBundle

    inflight = InflightBundle(
        epoch=2, query_id="q", batch_id=2, run_id=None, parts=(), has_gt=True, ordered=True
    )
    facts = StoreFacts(barrier=BarrierState(gt_last=1, inflight=inflight), planned_epoch=2)
    readings = iter([PipelineReading("p1", facts), PipelineReading("p1", facts)])
    clock = iter([50.0, 80.0])
    registry = CollectorRegistry(auto_describe=False)
    registry.register(
        PipelineCollector(lambda: next(readings), pipeline="p1", clock=lambda: next(clock))
    )
    generate_latest(registry)
    text = generate_latest(registry).decode()
    assert 'gtbarrier_inflight_age_seconds{pipeline="p1"} 30.0' in text
    assert 'gtbarrier_last_progress_timestamp_seconds{pipeline="p1"} 50.0' in text


def test_every_family_a_scrape_serves_is_its_definition() -> None:
    # One declaration per metric: the name, type, labels and HELP a scrape serves are the
    # definition's, and the docs table is rendered from the same definitions.
    from state.metrics.definitions import METRICS, markdown_table

    obs = DriverObservations(bounds=(1.0,))
    obs.observe_batch(rows=1, seconds=0.5, end={("t", 0): 1}, latest={("t", 0): 2})
    point = ResumePoint(1, 1, 0, 0, "q", None, 990.0, (SnapshotRef(1, "m", "sha", 0, 0),))
    reading = PipelineReading(
        pipeline="p1",
        facts=StoreFacts(
            barrier=BarrierState(gt_last=0, owner=Owner("run", "q", generation=1, since=1.0)),
            epochs=(EpochFacts(0, 1),),
            batches_per_epoch={0: 1},
            planned_epoch=1,
        ),
        resume=point,
        behind={("t", 0): 1},
        dead_letter_rows=0,
        microbatches=obs.histogram(),
        snapshots=SnapshotCounts(accepted=1, abandoned=0),
        ends={("t", 0): 2},
    )
    served = [
        *metric_families(reading, 1000.0, ProgressTimes(None, 999.0)),
        *scrape_families("p1", up=True, errors={"StoreUnavailable": 1}),
    ]
    defined = {m.name: m for m in METRICS}
    assert sorted(f.name for f in served) == sorted(defined)
    for family in served:
        metric = defined[family.name]
        assert (family.type, family.documentation) == (metric.kind, metric.help)
        for sample in family.samples:
            assert set(sample.labels) - {"le"} == set(metric.labels), (family.name, sample)
    table = markdown_table()
    assert all(f"`{m.series[0] if m.kind == 'counter' else m.name}`" in table for m in METRICS)
