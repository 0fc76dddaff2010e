"""Turning ``startingOffsets`` / ``endingOffsets`` (and their timestamp forms) into frontiers.

Spark's rules: explicit JSON offsets and per-partition timestamps must name every
partition of the subscription; -2 is earliest and -1 latest. A timestamp resolves to the
first offset whose record timestamp is at or after it; where no record is that late,
a start follows ``startingOffsetsByTimestampStrategy`` (``error`` or ``latest``) and an
end is the latest offset.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from datasource.offset_reader import OffsetReader
from datasource.options import EARLIEST, LATEST, WHERE, KafkaSourceOptions, OffsetSpec
from state.errors import ConfigError
from state.records.source_offset import Frontier, TopicPartitionKey


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


def resolve(
    spec: OffsetSpec,
    tps: list[TopicPartitionKey],
    reader: OffsetReader,
    *,
    role: Literal["start", "end"],
    strategy: Literal["error", "latest"] = "error",
) -> Frontier:
    """The concrete frontier that ``spec`` names for partitions ``tps``."""
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
        for tp in tps:
            if spec.offsets[tp] >= 0:
                frontier[tp] = spec.offsets[tp]
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
