"""``gtbarrier epochs``: the source's epoch log, or a range of it.

Each epoch is one micro-batch's offset range, recorded before Spark runs it; epochs at
or below ``GT_last`` were acknowledged by the consumer.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from typing import Any

from datasource.offsets import backlog
from gtbarrier.cli.common import PipelineArgs, UsageError, add_pipeline_arguments, read_pipeline
from gtbarrier.cli.output import Result, Table
from gtbarrier.help_text import plain_help
from state.layout import PipelineLayout
from state.protocol.epoch_log import EpochLog
from state.records.epoch import EpochRecord
from state.records.source_offset import frontier_json
from state.stores import StateStore

DEFAULT_LAST = 20


@dataclass(frozen=True)
class EpochRange:
    """Which epochs to show: ``first..last`` (inclusive, None: open), or the ``newest`` N."""

    first: int | None = None
    last: int | None = None
    newest: int | None = DEFAULT_LAST

    def select(self, numbers: list[int]) -> list[int]:
        chosen = [
            n
            for n in numbers
            if (self.first is None or n >= self.first) and (self.last is None or n <= self.last)
        ]
        return chosen[-self.newest :] if self.newest else chosen


def epoch_numbers(store: StateStore, layout: PipelineLayout) -> list[int]:
    """The recorded epochs, ascending, compacted or not (one list request and a read)."""
    return EpochLog(store, layout).epoch_numbers()


def floor_epoch(store: StateStore, layout: PipelineLayout) -> int | None:
    """The epoch the pruned log begins at (:mod:`state.protocol.epoch_floor`); None if
    nothing was pruned. Records left below it by an interrupted pruning are not shown."""
    floor = EpochLog(store, layout).floor()
    return None if floor is None or not floor.pruned else floor.epoch


def read_epochs(store: StateStore, layout: PipelineLayout, numbers: list[int]) -> list[EpochRecord]:
    """The records of the epochs ``numbers`` that are recorded."""
    return list(EpochLog(store, layout).read_epochs(numbers).values())


def epoch_json(record: EpochRecord, gt_last: int) -> dict[str, Any]:
    return {
        "epoch": record.epoch,
        "records": backlog(dict(record.start.offsets), dict(record.end.offsets)),
        "acknowledged": record.epoch <= gt_last,
        "start": frontier_json(record.start.offsets),
        "end": frontier_json(record.end.offsets),
    }


def epoch_row(e: dict[str, Any]) -> tuple[Any, ...]:
    partitions = sum(len(p) for p in e["end"].values())
    return (e["epoch"], e["records"], partitions, e["acknowledged"], _ranges(e))


def _ranges(e: dict[str, Any]) -> str:
    """``orders[0:100-150 1:90-120]``: each partition's range that moved."""
    out = []
    for topic, ends in e["end"].items():
        starts = e["start"].get(topic, {})
        moved = [
            f"{p}:{starts.get(p, end)}-{end}" for p, end in ends.items() if starts.get(p) != end
        ]
        if moved:
            out.append(f"{topic}[{' '.join(moved)}]")
    return " ".join(out) or "(empty)"


EPOCH_COLUMNS = ("epoch", "records", "partitions", "acknowledged", "ranges (partition:start-end)")


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "epochs", help="the epoch log (a range of it)", description=plain_help(__doc__)
    )
    add_pipeline_arguments(parser)
    parser.add_argument("--from", dest="first", type=int, metavar="K", help="first epoch")
    parser.add_argument("--to", dest="last", type=int, metavar="K", help="last epoch")
    parser.add_argument(
        "--newest",
        type=int,
        default=None,
        metavar="N",
        help=f"only the newest N of the range (default {DEFAULT_LAST} without --from/--to; 0: all)",
    )
    parser.set_defaults(run=run)


def epoch_range(args: argparse.Namespace) -> EpochRange:
    for flag, value in (("--from", args.first), ("--to", args.last), ("--newest", args.newest)):
        if value is not None and value < 0:
            raise UsageError(f"{flag} {value}: expected a number >= 0")
    if args.first is not None and args.last is not None and args.first > args.last:
        raise UsageError(f"--from {args.first} is after --to {args.last}")
    newest = args.newest
    if newest is None:
        newest = DEFAULT_LAST if args.first is None and args.last is None else 0
    return EpochRange(args.first, args.last, newest or None)


def run(args: argparse.Namespace) -> Result:
    pipeline = PipelineArgs.parse(args)
    chosen = epoch_range(args)
    store = pipeline.open_store()
    try:
        records = read_pipeline(store, pipeline.layout)
        floor = floor_epoch(store, pipeline.layout)
        numbers = [n for n in epoch_numbers(store, pipeline.layout) if n >= (floor or 0)]
        epochs = read_epochs(store, pipeline.layout, chosen.select(numbers))
    finally:
        store.close()
    gt_last = records.barrier.gt_last
    shown = [epoch_json(e, gt_last) for e in epochs]
    data = {
        "pipeline": pipeline.pipeline_id,
        "state_uri": pipeline.config.uri,
        "recorded": len(numbers),
        "first_recorded": numbers[0] if numbers else None,
        "last_recorded": numbers[-1] if numbers else None,
        "pruned_below": floor,
        "gt_last": gt_last,
        "epochs": shown,
    }
    pruned = f"; pruned below epoch {floor}" if floor is not None else ""
    title = (
        f"epochs of {pipeline.pipeline_id} ({len(shown)} shown of {len(numbers)} recorded"
        f"{pruned}; GT_last={gt_last})"
    )
    return Result(data, (Table(title, EPOCH_COLUMNS, tuple(epoch_row(e) for e in shown)),))
