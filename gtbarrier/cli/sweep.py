"""``gtbarrier sweep``: staged parts and consumer leftovers that no bundle references.

A driver that dies before its first commit leaves its staged parts behind (nothing can
tell them from the parts of a driver starting up, so the sink never deletes them), and a
consumer's failed attempts can leave files of their own: ``.tmp-*`` files in a file
consumer's directory (a process killed mid-write), data files no Iceberg snapshot
references (a zombie driver's). This lists both, the second as the consumer's kind finds
them (:meth:`~sink.consumers.consumer_kind.ConsumerKind.find_leftovers`); the parts of the
bundle in flight, and consumer files that may belong to it, are kept.

``--delete`` deletes what it lists, only when no driver runs: with ``--zookeeper`` it
checks that the pipeline's driver lock is free, without it ``--force`` says you checked.
Neither check can see a driver that runs without the coordinator, so the sweep also takes
the pipeline before it deletes: it takes the next fencing token and claims the barrier
with it (:meth:`~state.protocol.barrier_state.BarrierStateStore.claim_driver`), as a new
driver does (the driver record keeps saying whether a snapshot coordinator runs the
pipeline: without one, the driver's source still prunes the epoch log). A driver still
running is then fenced at its next commit, before it records anything in flight, so
nothing it staged can become a bundle; the next driver replays its batch. A driver that
took a newer token meanwhile makes the sweep refuse. The barrier state is read again after
the claim (:mod:`sink.cleanup`), so a bundle recorded in flight before it is kept.

Give the sink's consumer options (``--option consumer=file --option
consumer.path=/data/billing``): file, s3 and iceberg consumers stage under their own path.
"""

from __future__ import annotations

import argparse
import os
import socket
from dataclasses import dataclass
from typing import Any

from gtbarrier.cli.common import (
    CLI_STORE_DEFAULTS,
    PipelineArgs,
    UsageError,
    add_pipeline_arguments,
    read_pipeline,
)
from gtbarrier.cli.output import Result, Table
from gtbarrier.cli.zookeeper import add_zookeeper_auth_argument, open_session
from gtbarrier.help_text import plain_help
from sink.cleanup import Authority, StagingCleanup
from sink.consumers import open_staging
from sink.consumers.consumer_kind import ConsumerLeftover
from sink.options import SinkOptions
from sink.staging import Staging, part_run_id
from state.errors import PipelineFenced
from state.layout import PipelineLayout
from state.protocol.barrier_state import BarrierStateStore
from state.protocol.fencing import SWEEP_IDENTITY, take_token
from state.stores import StateStore

ZOOKEEPER_TIMEOUT = 5.0
STAGED_PART = "staged part"


@dataclass(frozen=True)
class Leftover:
    """One thing the sweep found: a staged part or a consumer's own leftover."""

    kind: str  # "staged part", or what the consumer's kind calls it ("consumer temp file"...)
    location: str
    run_id: str | None
    query_id: str | None
    batch_id: int | None
    in_flight: bool

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "location": self.location,
            "run_id": self.run_id,
            "query_id": self.query_id,
            "batch_id": self.batch_id,
            "in_flight": self.in_flight,
        }


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "sweep",
        help="staged parts and consumer leftovers no bundle references",
        description=plain_help(__doc__),
    )
    add_pipeline_arguments(parser)
    parser.add_argument("--delete", action="store_true", help="delete what is listed")
    parser.add_argument(
        "--zookeeper",
        default=os.environ.get("GTBARRIER_ZOOKEEPER"),
        metavar="HOSTS",
        help="with --delete: check that no driver holds the pipeline's lock",
    )
    add_zookeeper_auth_argument(parser)
    parser.add_argument(
        "--force",
        action="store_true",
        help="with --delete and without --zookeeper: you checked that no driver runs",
    )
    parser.set_defaults(run=run)


def staged_part(staging: Staging, location: str, keep: frozenset[str]) -> Leftover:
    """A part location ``<root>/<queryId>/<batchId>/p...parquet`` as a :class:`Leftover`."""
    rel = location[len(staging.root_prefix) :].split("/")
    query_id = rel[0] if len(rel) >= 3 else None
    batch_id = int(rel[1]) if len(rel) >= 3 and rel[1].isdigit() else None
    return Leftover(
        STAGED_PART, location, part_run_id(location), query_id, batch_id, location in keep
    )


def consumer_leftover(leftover: ConsumerLeftover) -> Leftover:
    """A consumer's own leftover as a :class:`Leftover` (a kept one shows as in flight)."""
    return Leftover(leftover.what, leftover.location, None, None, None, leftover.kept)


def run(args: argparse.Namespace) -> Result:
    pipeline = PipelineArgs.parse(args, check=False)
    if args.delete and not args.zookeeper and not args.force:
        raise UsageError(
            "--delete needs --zookeeper HOSTS (to check that no driver holds the pipeline's "
            "lock) or --force (you checked that no driver runs): a starting driver's parts "
            "look like leftovers"
        )
    sink = SinkOptions.parse(
        {
            **CLI_STORE_DEFAULTS,
            **pipeline.options,
            "pipeline.id": pipeline.pipeline_id,
            "state.uri": args.state_uri,
        }
    )
    store = pipeline.open_store()
    staging = open_staging(sink, store)
    try:
        records = read_pipeline(store, pipeline.layout)
        inflight = records.barrier.inflight
        keep = frozenset(inflight.staged_locations if inflight else ())
        found = [staged_part(staging, loc, keep) for loc in staging.list(staging.root_prefix)]
        own = sink.kind.find_leftovers(sink)
        found += [consumer_leftover(leftover) for leftover in own]
        deleted: list[str] = []
        if args.delete:
            if args.zookeeper:
                _check_no_driver(args.zookeeper, pipeline.layout, args.zookeeper_auth)
            take_pipeline(store, pipeline.layout)
            deleted = _delete_parts(store, pipeline.layout, staging, found)
            deleted += sink.kind.delete_leftovers(sink, [o for o in own if not o.kept])
    finally:
        staging.close()
        store.close()
    return _result(pipeline, sink, found, deleted, deleting=args.delete)


def _check_no_driver(zookeeper: str, layout: PipelineLayout, auth: str | None = None) -> None:
    """:class:`UsageError` if a driver holds the pipeline's ZooKeeper lock (read as
    ``auth``, the coordinator's ``zookeeper_auth``)."""
    from kazoo.exceptions import NoAuthError
    from kazoo.recipe.lock import Lock

    session = open_session(zookeeper, auth, ZOOKEEPER_TIMEOUT)
    try:
        try:
            holders = Lock(session.client, layout.zookeeper_driver_lock).contenders()
        except NoAuthError as err:
            raise session.refused("listing the holders of", layout.zookeeper_driver_lock) from err
    finally:
        session.stop()
    if holders:
        raise UsageError(
            f"pipeline {layout.pipeline_id!r} has a running driver ({holders[0]} holds "
            f"{layout.zookeeper_driver_lock} on ZooKeeper {zookeeper}): nothing deleted"
        )


def take_pipeline(store: StateStore, layout: PipelineLayout, taker: str = SWEEP_IDENTITY) -> int:
    """Take the next fencing token and claim the barrier with it, as ``taker:<host>:<pid>``,
    so that a driver still running is fenced before it can record a batch in flight; the
    token. :class:`UsageError` if a driver with a newer token holds the pipeline."""
    identity = f"{taker}:{socket.gethostname()}:{os.getpid()}"
    # not a coordinator: a pipeline without one is still pruned by its driver's source
    token = take_token(store, layout, identifier=identity, coordinator=False)
    try:
        BarrierStateStore(store, layout).claim_driver(token, driver=identity)
    except PipelineFenced as err:
        raise UsageError(
            f"a driver took pipeline {layout.pipeline_id!r}: {err}; nothing deleted"
        ) from err
    return token


def _delete_parts(
    store: StateStore, layout: PipelineLayout, staging: Staging, found: list[Leftover]
) -> list[str]:
    """Delete the staged parts found, but those of the bundle in flight on a fresh read."""
    cleanup = StagingCleanup(BarrierStateStore(store, layout), staging)
    fresh = cleanup.verify(None, "gtbarrier-sweep")
    auth = Authority(run_id=None, generation=None, keep=fresh.keep)
    parts = [f.location for f in found if f.kind == STAGED_PART and f.location not in auth.keep]
    cleanup.discard(parts, auth)
    return parts


def _result(
    pipeline: PipelineArgs,
    sink: SinkOptions,
    found: list[Leftover],
    deleted: list[str],
    *,
    deleting: bool,
) -> Result:
    leftovers = [f for f in found if not f.in_flight]
    data = {
        "pipeline": pipeline.pipeline_id,
        "consumer": sink.consumer,
        "consumer_path": sink.kind.consumer_path(sink),
        "found": [f.to_json() for f in found],
        "leftovers": len(leftovers),
        "kept_in_flight": len(found) - len(leftovers),
        "deleted": deleted,
    }
    if deleting:
        title = f"sweep of {pipeline.pipeline_id}: {len(deleted)} deleted"
    else:
        title = (
            f"sweep of {pipeline.pipeline_id}: {len(leftovers)} leftover(s) "
            "(nothing deleted; --delete deletes them)"
        )
    rows = tuple(
        (
            f.kind,
            f.location,
            f.run_id,
            f.query_id,
            f.batch_id,
            "kept: in flight" if f.in_flight else ("deleted" if f.location in deleted else "-"),
        )
        for f in found
    )
    table = Table(title, ("kind", "location", "run", "query", "batch", "action"), rows)
    return Result(data, (table,))
