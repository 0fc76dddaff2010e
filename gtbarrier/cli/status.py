"""``gtbarrier status``: where a pipeline stands.

``GT_last`` (the last bundle the consumer acknowledged), the bundle in flight, the driver
run that owns the barrier and its generation, the fencing token, the newest epochs, the
resume point and its snapshots (from ZooKeeper with ``--zookeeper``, else from the state
store when the coordinator ran without ZooKeeper), with ``--bootstrap`` how far the
source is behind Kafka's end, per partition, and with ``--dead-letters`` (the sink's
``errors.deadLetter.path``) how many rows the consumer refused, in how many bundles. The
in-flight bundle's refused rows are shown in any case.
"""

from __future__ import annotations

import argparse
import os
import time
from typing import Any

from gtbarrier.cli.common import (
    PipelineArgs,
    PipelineRecords,
    UsageError,
    add_dead_letters_argument,
    add_pipeline_arguments,
    open_dead_letter_files,
    read_pipeline,
)
from gtbarrier.cli.deadletters import pipeline_files
from gtbarrier.cli.epochs import (
    EPOCH_COLUMNS,
    epoch_json,
    epoch_numbers,
    epoch_row,
    floor_epoch,
    read_epochs,
)
from gtbarrier.cli.kafka_ends import end_offsets, source_options
from gtbarrier.cli.output import Result, Table
from gtbarrier.cli.zookeeper import add_zookeeper_auth_argument, open_session
from gtbarrier.help_text import plain_help
from state.lag import Lag
from state.layout import PipelineLayout
from state.protocol.fencing import read_driver_record
from state.protocol.resume_point import ResumePointBackend, StoreResumePoints, read_resume_point
from state.records.barrier import BarrierState
from state.records.driver import DriverRecord
from state.records.epoch import EpochRecord
from state.records.resume_point import ResumePoint
from state.records.source_offset import Frontier
from state.stores import StateStore

ZOOKEEPER_ENV = "GTBARRIER_ZOOKEEPER"
BOOTSTRAP_ENV = "GTBARRIER_BOOTSTRAP"
NEWEST_EPOCHS = 5
ZOOKEEPER_TIMEOUT = 5.0


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "status",
        help="GT_last, in-flight bundle, owner, epochs, resume point, lag",
        description=plain_help(__doc__),
    )
    add_pipeline_arguments(parser)
    parser.add_argument(
        "--zookeeper",
        default=os.environ.get(ZOOKEEPER_ENV),
        metavar="HOSTS",
        help=f"the coordinator's zookeeper_hosts, for the resume point (default: ${ZOOKEEPER_ENV})",
    )
    add_zookeeper_auth_argument(parser)
    parser.add_argument(
        "--bootstrap",
        default=os.environ.get(BOOTSTRAP_ENV),
        metavar="SERVERS",
        help="kafka.bootstrap.servers, for the lag per partition "
        f"(default: ${BOOTSTRAP_ENV}; kafka.* settings via --option)",
    )
    parser.add_argument(
        "--epochs", type=int, default=NEWEST_EPOCHS, metavar="N", help="newest epochs to show"
    )
    add_dead_letters_argument(parser, what="to count the rows the consumer refused")
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> Result:
    pipeline = PipelineArgs.parse(args, prefixes=("kafka.",))
    if args.epochs < 0:
        raise UsageError(f"--epochs {args.epochs}: expected a number >= 0")
    if args.bootstrap:  # the kafka.* options are checked before anything is read
        source_options(args.bootstrap, ["-"], pipeline.options)
    dead_letters = (
        open_dead_letter_files(args.dead_letters, pipeline.config) if args.dead_letters else None
    )
    store = pipeline.open_store()
    try:
        records = read_pipeline(store, pipeline.layout)
        driver = _driver_record(store, pipeline.layout)
        floor = floor_epoch(store, pipeline.layout)
        numbers = [n for n in epoch_numbers(store, pipeline.layout) if n >= (floor or 0)]
        # the newest epoch is read even with --epochs 0: its end is where the source stands
        read = read_epochs(store, pipeline.layout, numbers[-max(args.epochs, 1) :])
        acknowledged = _acknowledged_position(store, pipeline.layout, records)
        resume, resume_from = read_resume(
            args.zookeeper, store, pipeline.layout, args.zookeeper_auth
        )
        refused = None
        if dead_letters is not None:
            files = pipeline_files(dead_letters, pipeline.pipeline_id)
            refused = {
                "uri": dead_letters.uri,
                "bundles": len(files),
                "rows": sum(f.rows for f in files),
                "last_bundle": files[-1].bundle_id if files else None,
            }
    finally:
        store.close()
        if dead_letters is not None:
            dead_letters.close()
    newest = read[-args.epochs :] if args.epochs else []
    planned = read[-1].end.offsets if read else (records.start.offsets if records.start else {})
    lag = None
    if args.bootstrap:
        topics = {t for t, _ in planned}
        ends = (
            end_offsets(source_options(args.bootstrap, topics, pipeline.options)) if topics else {}
        )
        lag = _lag_json(dict(planned), acknowledged, ends)
    data: dict[str, Any] = {
        "pipeline": pipeline.pipeline_id,
        "state_uri": pipeline.config.uri,
        "barrier": _barrier_json(records.barrier, records.barrier_written),
        "driver": None if driver is None else driver.to_json(),
        "epochs": {
            "recorded": len(numbers),
            "last_recorded": numbers[-1] if numbers else None,
            "pruned_below": floor,
            "newest": [epoch_json(e, records.barrier.gt_last) for e in newest],
        },
        "resume_point": None
        if resume is None
        else {"from": resume_from, **resume.to_json(), "snapshot": _snapshot(resume)},
        "lag": lag,
        "dead_letters": refused,
    }
    return Result(data, _tables(data))


# --- reading ------------------------------------------------------------------------


def _driver_record(store: StateStore, layout: PipelineLayout) -> DriverRecord | None:
    return read_driver_record(store, layout)


def _acknowledged_position(
    store: StateStore, layout: PipelineLayout, records: PipelineRecords
) -> Frontier | None:
    """Where the acknowledged output ends in Kafka: the end of epoch ``GT_last`` (the
    source's start before any bundle); None if that record is missing."""
    gt_last = records.barrier.gt_last
    if gt_last < 0:
        return None if records.start is None else dict(records.start.offsets)
    found: list[EpochRecord] = read_epochs(store, layout, [gt_last])
    return dict(found[0].end.offsets) if found else None


def read_resume(
    zookeeper: str | None, store: StateStore, layout: PipelineLayout, auth: str | None = None
) -> tuple[ResumePoint | None, str | None]:
    """The resume point from ZooKeeper when ``zookeeper`` is given (as ``auth``, the
    coordinator's ``zookeeper_auth``), else the store's."""
    if not zookeeper:
        backend: ResumePointBackend = StoreResumePoints(store, layout)
        point, _ = read_resume_point(backend)
        return point, None if point is None else backend.description
    from state.coordinator.zookeeper_resume_points import ZooKeeperResumePoints

    session = open_session(zookeeper, auth, ZOOKEEPER_TIMEOUT)
    try:
        zk_backend = ZooKeeperResumePoints(session, layout.zookeeper_resume)
        point, _ = read_resume_point(zk_backend)
        return point, zk_backend.description
    finally:
        session.stop()


# --- shaping ------------------------------------------------------------------------


def _barrier_json(state: BarrierState, written: bool) -> dict[str, Any]:
    inflight = state.inflight
    return {
        "written": written,
        "gt_last": state.gt_last,
        # how far epochs are done, empty bundles included: what pruning goes by
        "progress": state.progress,
        "inflight": None
        if inflight is None
        else {
            "bundle_id": inflight.bundle_id,
            "batch_id": inflight.batch_id,
            "query_id": inflight.query_id,
            "run_id": inflight.run_id,
            "rows": inflight.rows,
            "parts": list(inflight.locations),
            "dead_letter_rows": inflight.dead_letter_rows,
        },
        "owner": None if state.owner is None else state.owner.to_json(),
        "skipped": [s.to_json() for s in state.skipped],
    }


def _snapshot(point: ResumePoint) -> dict[str, Any] | None:
    snap = point.snapshot
    return None if snap is None else snap.to_json()


def _lag_json(planned: Frontier, acknowledged: Frontier | None, ends: Frontier) -> dict[str, Any]:
    """Per partition: Kafka's end, the end of the newest planned epoch and of epoch
    ``GT_last``; ``behind`` is Kafka's end minus the planned end (what the source has not
    read yet), summarised under the names of Spark's Kafka source metrics."""
    planned_lag = Lag.between(planned, ends)
    partitions = [
        {
            "topic": topic,
            "partition": partition,
            "kafka_end": end,
            "planned_end": planned.get((topic, partition)),
            "acknowledged_end": None
            if acknowledged is None
            else acknowledged.get((topic, partition)),
            "behind": planned_lag.behind.get((topic, partition)),
        }
        for (topic, partition), end in sorted(ends.items())
    ]
    ack = Lag.between(acknowledged or {}, ends)
    return {
        **planned_lag.metrics(),
        "behind_total": planned_lag.total,
        "acknowledged_behind_total": ack.total if acknowledged is not None else None,
        "partitions": partitions,
    }


def _since(t: float | None) -> str | None:
    if not t:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t))


def _tables(data: dict[str, Any]) -> tuple[Table, ...]:
    barrier = data["barrier"]
    owner = barrier["owner"] or {}
    inflight = barrier["inflight"]
    driver = data["driver"] or {}
    epochs = data["epochs"]
    summary = [
        ("pipeline", data["pipeline"]),
        ("state.uri", data["state_uri"]),
        ("GT_last", barrier["gt_last"] if barrier["gt_last"] >= 0 else "none (-1)"),
        (
            "epochs committed",
            f"to {barrier['progress']} (empty bundles included)"
            if barrier["progress"] > barrier["gt_last"]
            else "to GT_last",
        ),
        (
            "in-flight bundle",
            None
            if inflight is None
            else f"{inflight['bundle_id']} (batch {inflight['batch_id']}, {inflight['rows']} rows, "
            f"{len(inflight['parts'])} part(s)"
            + (f"; {inflight['dead_letter_rows']} refused" if inflight["dead_letter_rows"] else "")
            + ")",
        ),
        ("owner run", owner.get("run_id") or owner.get("driver")),
        ("owner query", owner.get("query_id") or None),
        ("generation", owner.get("generation")),
        ("owner since", _since(owner.get("since"))),
        ("fencing token (barrier)", owner.get("token")),
        ("fencing token (driver record)", driver.get("token")),
        ("skipped bundles", len(barrier["skipped"]) or None),
        ("epochs recorded", epochs["recorded"]),
        ("last epoch", epochs["last_recorded"]),
        ("epochs pruned below", epochs["pruned_below"]),
    ]
    refused = data["dead_letters"]
    if refused is not None:
        newest = refused["last_bundle"]
        summary.append(
            (
                "dead letters",
                f"{refused['rows']} row(s) in {refused['bundles']} bundle(s)"
                + ("" if newest is None else f", newest {newest}"),
            )
        )
    tables = [Table.fields(f"pipeline {data['pipeline']}", summary)]
    tables.append(
        Table(
            f"newest epochs ({len(epochs['newest'])} of {epochs['recorded']})",
            EPOCH_COLUMNS,
            tuple(epoch_row(e) for e in epochs["newest"]),
        )
    )
    tables.extend(_resume_tables(data["resume_point"]))
    if data["lag"] is not None:
        tables.append(_lag_table(data["lag"]))
    return tuple(tables)


def _resume_tables(point: dict[str, Any] | None) -> list[Table]:
    if point is None:
        return [Table.fields("resume point", [])]
    fields = [
        ("read from", point["from"]),
        ("generation", point["generation"]),
        ("fencing token", point["token"]),
        ("epoch", point["epoch"]),
        ("batch id", point["batch_id"]),
        ("query id", point["query_id"]),
        ("created", _since(point["created_at"])),
        ("snapshot", point["snapshot_id"]),
    ]
    snapshots = Table(
        "snapshots (newest first)",
        ("snapshot", "epoch", "batch id", "manifest"),
        tuple(
            (r["snapshot_id"], r["epoch"], r["batch_id"], r["manifest"]) for r in point["retained"]
        ),
    )
    return [Table.fields("resume point", fields), snapshots]


def _lag_table(lag: dict[str, Any]) -> Table:
    title = (
        f"lag behind Kafka's end: {lag['behind_total']} offsets "
        f"(min {lag['minOffsetsBehindLatest']}, max {lag['maxOffsetsBehindLatest']}, "
        f"avg {_avg(lag['avgOffsetsBehindLatest'])})"
    )
    return Table(
        title,
        ("topic", "partition", "kafka end", "planned end", "acknowledged end", "behind"),
        tuple(
            (
                p["topic"],
                p["partition"],
                p["kafka_end"],
                p["planned_end"],
                p["acknowledged_end"],
                p["behind"],
            )
            for p in lag["partitions"]
        ),
    )


def _avg(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"
