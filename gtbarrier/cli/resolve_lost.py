"""``gtbarrier resolve-lost``: the way past an in-flight bundle that nothing can deliver.

When an in-flight bundle's staged parts are gone (deleted by hand or by a storage lifecycle
rule) and the consumer does not have it, every restart stops with a ``StateError`` that
names this command. Without ``--acknowledge-loss`` it reports what is lost and changes
nothing; with it, the bundle is skipped: ``GT_last`` moves to it, the in-flight record is
cleared and the loss is recorded under ``skipped`` in the barrier state, in one
compare-and-swap (``gtbarrier.resolve_lost_inflight``, docs/sink.md "A lost in-flight
bundle"). Stop the query first: a commit running meanwhile makes the command fail rather
than race.

Give the sink's consumer options (``--option consumer=file --option
consumer.path=/data/billing``): the command asks the consumer whether it has the bundle.
"""

from __future__ import annotations

import argparse
from typing import Any

from gtbarrier.cli.common import (
    CLI_STORE_DEFAULTS,
    PipelineArgs,
    UsageError,
    add_pipeline_arguments,
)
from gtbarrier.cli.output import Result, Table
from gtbarrier.help_text import plain_help
from sink.lost_bundle import LostBundle, resolve_lost_inflight
from sink.options import SinkOptions

COMMAND = "resolve-lost"


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        COMMAND,
        help="report, or skip with --acknowledge-loss, an in-flight bundle whose parts are gone",
        description=plain_help(__doc__),
    )
    add_pipeline_arguments(parser)
    parser.add_argument(
        "--bundle",
        type=int,
        required=True,
        metavar="ID",
        help="the in-flight bundle the driver's error names",
    )
    parser.add_argument(
        "--acknowledge-loss",
        action="store_true",
        help="skip the bundle and accept the loss of its rows (without it: report only)",
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> Result:
    pipeline = PipelineArgs.parse(args, check=False)
    if args.bundle < 0:
        raise UsageError(f"--bundle {args.bundle}: expected a bundle id, 0 or more")
    sink = SinkOptions.parse(
        {
            **CLI_STORE_DEFAULTS,
            **pipeline.options,
            "pipeline.id": pipeline.pipeline_id,
            "state.uri": args.state_uri,
        }
    )
    lost = resolve_lost_inflight(
        sink, bundle_id=args.bundle, acknowledge_loss=args.acknowledge_loss
    )
    return _result(lost)


def _result(lost: LostBundle) -> Result:
    data = {
        "pipeline": lost.pipeline_id,
        "bundle": lost.bundle_id,
        "batch": lost.batch_id,
        "query": lost.query_id,
        "run": lost.run_id,
        "consumer": lost.consumer,
        "consumer_last": lost.consumer_last,
        "rows": lost.rows,
        "parts": list(lost.parts),
        "parts_missing": list(lost.parts_missing),
        "rows_missing": lost.rows_missing,
        "applied": lost.applied,
        "description": lost.describe(),
    }
    action = (
        "skipped, the loss acknowledged"
        if lost.applied
        else "reported only (--acknowledge-loss skips it)"
    )
    table = Table.fields(
        f"lost in-flight bundle {lost.bundle_id} of {lost.pipeline_id}: {action}",
        [
            ("consumer", lost.consumer),
            ("consumer's last bundle", lost.consumer_last),
            ("batch", lost.batch_id),
            ("rows", lost.rows),
            ("staged parts", len(lost.parts)),
            ("parts gone", len(lost.parts_missing)),
            ("what it means", lost.describe()),
        ],
    )
    return Result(data, (table,))
