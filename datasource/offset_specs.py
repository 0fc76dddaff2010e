"""Turning ``startingOffsets`` / ``endingOffsets`` (and their timestamp forms) into frontiers.

Spark's rules: explicit JSON offsets and per-partition timestamps must name every
partition of the subscription; -2 is earliest and -1 latest. A timestamp resolves to the
first offset whose record timestamp is at or after it; where no record is that late,
a start follows ``startingOffsetsByTimestampStrategy`` (``error`` or ``latest``) and an
end is the latest offset.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Literal

from datasource.offset_reader import OffsetReader
from datasource.options import KafkaSourceOptions
from datasource.subscription import EARLIEST, LATEST, WHERE, OffsetSpec
from state.errors import ConfigError, DataLossError
from state.records.source_offset import Frontier, TopicPartitionKey

log = logging.getLogger(__name__)


def subscribed_partitions(
    options: KafkaSourceOptions, found: Mapping[str, set[int]]
) -> list[TopicPartitionKey]:
    """The partitions to read; named topics (and assigned partitions) must exist."""
    sub = options.subscription
    if sub.kind == "subscribe":
        missing = [t for t in sub.topics if t not in found]
        if missing:
            raise ConfigError(
                "subscribe",
                ",".join(sub.topics),
                f"existing topics: {', '.join(repr(t) for t in missing)} "
                f"does not exist on Kafka at {options.bootstrap_servers}",
                where=WHERE,
            )
    elif sub.kind == "assign":
        absent = [
            f"{t}-{p}" for t, parts in sub.assignment for p in parts if p not in found.get(t, set())
        ]
        if absent:
            raise ConfigError(
                "assign",
                sub.describe().removeprefix("assign="),
                f"existing topic-partitions: {', '.join(absent)} does not exist on Kafka at "
                f"{options.bootstrap_servers}",
                where=WHERE,
            )
    return sorted((t, p) for t, parts in found.items() for p in parts)


def resolve(  # noqa: PLR0913 - keyword-only role and strategy of Spark's offset rules
    spec: OffsetSpec,
    tps: list[TopicPartitionKey],
    reader: OffsetReader,
    *,
    role: Literal["start", "end"],
    strategy: Literal["error", "latest"] = "error",
    fail_on_data_loss: bool = True,
) -> Frontier:
    """The concrete frontier that ``spec`` names for partitions ``tps``.

    Explicit start offsets are checked against each partition's range before anything
    is persisted (see :func:`_check_in_range`).
    """
    if not tps:
        return {}
    if spec.kind == "earliest":
        return reader.earliest(tps)
    if spec.kind == "latest":
        return reader.latest(tps)
    if spec.kind == "offsets":
        _check_covers(spec, tps)
        frontier: Frontier = {}
        wants_earliest = [tp for tp in tps if spec.offsets[tp] == EARLIEST]
        wants_latest = [tp for tp in tps if spec.offsets[tp] == LATEST]
        frontier.update(reader.earliest(wants_earliest))
        frontier.update(reader.latest(wants_latest))
        explicit = {tp: spec.offsets[tp] for tp in tps if spec.offsets[tp] >= 0}
        if role == "start":
            _check_in_range(spec, explicit, reader, fail_on_data_loss)
        frontier.update(explicit)
        return frontier
    if spec.kind == "timestamp":
        assert spec.timestamp is not None
        stamps = {tp: spec.timestamp for tp in tps}
    else:
        _check_covers(spec, tps)
        stamps = {tp: spec.offsets[tp] for tp in tps}
    found = reader.offsets_for_times(stamps)
    none_found = sorted(tp for tp, off in found.items() if off is None)
    if none_found and role == "start" and strategy == "error":
        shown = ", ".join(f"{t}-{p}" for t, p in none_found)
        raise ConfigError(
            spec.option,
            spec.describe(),
            f"a timestamp at or before the last record of every partition: no record of {shown} "
            "is that late (set startingOffsetsByTimestampStrategy=latest to start such "
            "partitions at their latest offset)",
            where=WHERE,
        )
    frontier = {tp: off for tp, off in found.items() if off is not None}
    frontier.update(reader.latest(none_found))
    return frontier


def _check_in_range(
    spec: OffsetSpec, explicit: Frontier, reader: OffsetReader, fail_on_data_loss: bool
) -> None:
    """Explicit start offsets must lie within ``[log start, end]`` of their partition.

    Past the end is a mistake (no such record exists yet): a :class:`ConfigError`.
    Below the log start, the records were deleted by retention: a :class:`DataLossError`,
    or with ``failOnDataLoss=false`` a warning (the first read skips and counts them).
    Checked before the start is persisted, so fixing the option and restarting works.
    """
    if not explicit:
        return
    ends = reader.latest(explicit)
    beyond = sorted(tp for tp, off in explicit.items() if off > ends[tp])
    if beyond:
        shown = ", ".join(f"{t}-{p} = {explicit[(t, p)]} > end {ends[(t, p)]}" for t, p in beyond)
        raise ConfigError(
            spec.option,
            spec.describe(),
            f"offsets within each partition's range, at most its end ({shown}; -1 starts at "
            "the end, -2 at the log start)",
            where=WHERE,
        )
    starts = reader.earliest(explicit)
    below = sorted(tp for tp, off in explicit.items() if off < starts[tp])
    if not below:
        return
    shown = ", ".join(
        f"{t}-{p} = {explicit[(t, p)]} < log start {starts[(t, p)]}" for t, p in below
    )
    message = (
        f"{WHERE}: option '{spec.option}' = {spec.describe()!r} names records deleted by "
        f"retention ({shown}); expected offsets within each partition's range"
    )
    if fail_on_data_loss:
        raise DataLossError(
            f"{message}. Use -2 to start at the log start, or set failOnDataLoss=false to "
            "skip the lost records with a warning."
        )
    log.warning("%s; the first epoch skips them (failOnDataLoss=false)", message)


def _check_covers(spec: OffsetSpec, tps: list[TopicPartitionKey]) -> None:
    missing = sorted(set(tps) - set(spec.offsets))
    extra = sorted(set(spec.offsets) - set(tps))
    if missing or extra:
        parts = []
        if missing:
            parts.append("missing " + ", ".join(f"{t}-{p}" for t, p in missing))
        if extra:
            parts.append(
                "not subscribed or not existing " + ", ".join(f"{t}-{p}" for t, p in extra)
            )
        raise ConfigError(
            spec.option,
            spec.describe(),
            "a value for every partition of the subscription, as in Spark's Kafka source ("
            + "; ".join(parts)
            + ")",
            where=WHERE,
        )
