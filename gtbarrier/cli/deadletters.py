"""``gtbarrier deadletters``: the rows a pipeline's consumer refused, bundle by bundle.

With ``errors.tolerance=all`` the barrier writes the rows a consumer's target refuses to
``errors.deadLetter.path``, one Parquet file per bundle, before the bundle is delivered
(docs/sink.md, "Bad rows and dead letters"). This lists those files (bundle, rows, size,
and whether the bundle is at or below ``GT_last``), or with ``--bundle K`` reads one: each
row's ``gt``, the column and the reason it was refused, and its values (binary base64,
strings whose bytes are not UTF-8 with ``\\x..`` escapes).

Give the sink's destination with ``--dead-letters URI`` (or ``$GTBARRIER_DEAD_LETTERS``)
and, for ``s3://``, the S3 settings as for the store (``--option s3.endpoint=...``).
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from gtbarrier.cli.common import (
    PipelineArgs,
    UsageError,
    add_dead_letters_argument,
    add_pipeline_arguments,
    open_dead_letter_files,
    read_pipeline,
)
from gtbarrier.cli.output import Result, Table
from gtbarrier.help_text import plain_help
from sink.dead_letters.dead_letter_files import DeadLetterFile, DeadLetters
from sink.dead_letters.dead_letter_format import (
    ADDED_COLUMNS,
    BUNDLE_COLUMN,
    COLUMN_COLUMN,
    REASON_COLUMN,
    json_rows,
)
from state.errors import KeyNotFound
from state.records.gt import GT_COLUMN

COMMAND = "deadletters"
DEFAULT_LIMIT = 20


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        COMMAND,
        help="the rows the consumer refused (dead letters): list, or read one bundle's",
        description=plain_help(__doc__),
    )
    add_pipeline_arguments(parser)
    add_dead_letters_argument(parser, what="where the dead letters are")
    parser.add_argument("--bundle", type=int, metavar="K", help="read bundle K's dead letters")
    parser.add_argument(
        "--limit",
        type=int,
        default=DEFAULT_LIMIT,
        metavar="N",
        help=f"with --bundle: rows to show (default {DEFAULT_LIMIT}; 0: all)",
    )
    parser.set_defaults(run=run)


def pipeline_files(destination: DeadLetters, pipeline_id: str) -> list[DeadLetterFile]:
    """The dead-letter files of ``pipeline_id`` at ``destination``, by bundle."""
    return [f for f in destination.files() if f.pipeline_id in (None, pipeline_id)]


def run(args: argparse.Namespace) -> Result:
    pipeline = PipelineArgs.parse(args)
    if not args.dead_letters:
        raise UsageError(
            "--dead-letters is required (or $GTBARRIER_DEAD_LETTERS): the sink's "
            "errors.deadLetter.path"
        )
    if args.limit < 0:
        raise UsageError(f"--limit {args.limit}: expected a number >= 0")
    destination = open_dead_letter_files(args.dead_letters, pipeline.config)
    store = pipeline.open_store()
    try:
        records = read_pipeline(store, pipeline.layout)
        if args.bundle is not None:
            return _one(destination, pipeline.pipeline_id, args.bundle, args.limit)
        files = pipeline_files(destination, pipeline.pipeline_id)
    finally:
        store.close()
        destination.close()
    gt_last = records.barrier.gt_last
    data: dict[str, Any] = {
        "pipeline": pipeline.pipeline_id,
        "dead_letters": destination.uri,
        "gt_last": gt_last,
        "bundles": [
            {
                "bundle_id": f.bundle_id,
                "rows": f.rows,
                "size": f.size,
                "location": f.location,
                "acknowledged": f.bundle_id <= gt_last,
            }
            for f in files
        ],
        "total_rows": sum(f.rows for f in files),
    }
    title = (
        f"dead letters of pipeline {pipeline.pipeline_id} in {destination.uri}: "
        f"{data['total_rows']} row(s) in {len(files)} bundle(s)"
    )
    table = Table(
        title,
        ("bundle", "rows", "size", "at or below GT_last", "file"),
        tuple(
            (b["bundle_id"], b["rows"], b["size"], b["acknowledged"], b["location"])
            for b in data["bundles"]
        ),
    )
    return Result(data, (table,))


def _one(destination: DeadLetters, pipeline_id: str, bundle_id: int, limit: int) -> Result:
    """Bundle ``bundle_id``'s dead letters, the first ``limit`` rows shown (0: all)."""
    try:
        table = destination.read(bundle_id)
    except KeyNotFound:
        raise UsageError(f"bundle {bundle_id} has no dead letters in {destination.uri}") from None
    shown = table if limit == 0 else table.slice(0, limit)
    items = json_rows(shown)
    data: dict[str, Any] = {
        "pipeline": pipeline_id,
        "bundle_id": bundle_id,
        "location": destination.location(bundle_id),
        "rows": table.num_rows,
        "columns": table.column_names,
        "shown": len(items),
        "items": items,
    }
    inputs = [n for n in table.column_names if n not in ADDED_COLUMNS and n != GT_COLUMN]
    rows = tuple(
        (
            _gt(item.get(GT_COLUMN)),
            item[COLUMN_COLUMN] or "(row)",
            item[REASON_COLUMN],
            ", ".join(f"{n}={_shown(item[n])}" for n in inputs),
        )
        for item in items
    )
    title = (
        f"bundle {bundle_id}: {table.num_rows} refused row(s) in {data['location']} "
        f"(showing {len(items)})"
    )
    assert BUNDLE_COLUMN in table.column_names
    return Result(data, (Table(title, ("gt", "column", "reason", "values"), rows),))


def _shown(value: Any) -> str:
    if isinstance(value, dict | list):
        return json.dumps(value, separators=(",", ":"), default=str)
    return "null" if value is None else str(value)


def _gt(value: Any) -> str:
    if not isinstance(value, dict) or None in value.values():
        return "null"
    return f"{value['epoch']} {value['topic']}-{value['partition']}@{value['offset']}"
