"""What ``gtkafka`` reads and from where: the subscription and the offset specs.

:class:`Subscription` (``subscribe``, ``subscribePattern`` or ``assign``) and
:class:`OffsetSpec` (``startingOffsets``/``endingOffsets`` and their timestamp forms, with
Spark's precedence) as parsed by :mod:`datasource.options`, and the per-partition JSON
they are written in. Pure: no I/O; :mod:`datasource.offset_specs` resolves specs against
a broker.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from state.errors import ConfigError
from state.option_table import IntegerOption, JsonOption, StringOption
from state.options import Options

WHERE = "gtkafka"

# -1 and -2 in offset JSON, as in Spark's Kafka source.
LATEST = -1
EARLIEST = -2

SubscriptionKind = Literal["subscribe", "subscribePattern", "assign"]
OffsetSpecKind = Literal["earliest", "latest", "offsets", "timestamp", "timestamps"]

_OFFSETS_FORM = '{"topic": {"0": 42, "1": -2}} with -2 for earliest and -1 for latest'
_TIMESTAMPS_FORM = '{"topic": {"0": 1700000000000}} (milliseconds since the epoch)'


@dataclass(frozen=True)
class Subscription:
    """What to read: listed topics, a topic regex, or fixed topic-partitions."""

    kind: SubscriptionKind
    topics: tuple[str, ...] = ()
    pattern: str | None = None
    assignment: tuple[tuple[str, tuple[int, ...]], ...] = ()

    def matches(self, topic: str) -> bool:
        if self.pattern is not None:  # kind subscribePattern
            return re.fullmatch(self.pattern, topic) is not None
        return topic in self.named_topics()

    def named_topics(self) -> tuple[str, ...]:
        """The topics named by ``subscribe`` or ``assign`` (empty for a pattern)."""
        if self.kind == "assign":
            return tuple(t for t, _ in self.assignment)
        return self.topics

    def describe(self) -> str:
        if self.kind == "subscribePattern":
            return f"subscribePattern={self.pattern!r}"
        if self.kind == "assign":
            return "assign=" + json.dumps({t: list(ps) for t, ps in self.assignment})
        return "subscribe=" + ",".join(self.topics)


@dataclass(frozen=True)
class OffsetSpec:
    """Where to start or end: earliest, latest, per-partition offsets, or timestamps.

    ``offsets`` maps ``(topic, partition)`` to an offset (-2 earliest, -1 latest) for kind
    ``offsets`` and to a timestamp in ms for kind ``timestamps``; ``timestamp`` is the one
    timestamp of kind ``timestamp``. ``option`` names the option the spec came from.
    """

    kind: OffsetSpecKind
    option: str
    offsets: Mapping[tuple[str, int], int] = field(default_factory=dict)
    timestamp: int | None = None

    def describe(self) -> str:
        if self.kind in ("earliest", "latest"):
            return self.kind
        if self.kind == "timestamp":
            return f"timestamp {self.timestamp}"
        return json.dumps(offsets_json(self.offsets))


def offsets_json(offsets: Mapping[tuple[str, int], int]) -> dict[str, dict[str, int]]:
    """``{topic: {str(partition): offset}}`` with keys inserted in sorted order."""
    nested: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in offsets.items():
        nested.setdefault(topic, {})[str(partition)] = offset
    return {t: dict(sorted(nested[t].items())) for t in sorted(nested)}


def parse_partition_json(
    value: str, *, option: str, form: str, minimum: int
) -> dict[tuple[str, int], int]:
    """``{"topic": {"0": n}}`` -> ``{(topic, 0): n}``; errors name the option and the form."""
    try:
        doc = json.loads(value)
    except json.JSONDecodeError as err:
        raise ConfigError(
            option, value, f"JSON like {form} ({err.msg} at {err.pos})", where=WHERE
        ) from None
    if not isinstance(doc, dict) or not doc:
        raise ConfigError(option, value, f"a non-empty JSON object like {form}", where=WHERE)
    result: dict[tuple[str, int], int] = {}
    for topic, parts in doc.items():
        if not isinstance(parts, dict) or not parts:
            raise ConfigError(
                option, value, f"a JSON object per topic like {form} (topic {topic!r})", where=WHERE
            )
        for p, n in parts.items():
            if not (isinstance(p, str) and p.isdigit()):
                raise ConfigError(
                    option, value, f"partition numbers as keys like {form} (got {p!r})", where=WHERE
                )
            if isinstance(n, bool) or not isinstance(n, int) or n < minimum:
                raise ConfigError(
                    option,
                    value,
                    f"integer values >= {minimum} like {form} (got {n!r} for {topic}-{p})",
                    where=WHERE,
                )
            result[(topic, int(p))] = n
    return result


def parse_subscription(
    opts: Options, subscribe: StringOption, pattern: StringOption, assign: JsonOption
) -> Subscription:
    """Exactly one of ``subscribe``, ``subscribePattern`` or ``assign``, checked."""
    which = opts.exactly_one_of(subscribe.name, pattern.name, assign.name)
    value = opts.required(which)
    if which == subscribe.name:
        topics = tuple(t.strip() for t in value.split(","))
        if any(not t for t in topics) or len(set(topics)) != len(topics):
            raise opts.error(subscribe.name, "a comma-separated list of distinct topic names")
        return Subscription("subscribe", topics=tuple(sorted(topics)))
    if which == pattern.name:
        try:
            re.compile(value)
        except re.error as err:
            raise opts.error(pattern.name, f"a regular expression ({err})") from None
        return Subscription("subscribePattern", pattern=value)
    form = '{"topic": [0, 1]}'
    try:
        doc = json.loads(value)
    except json.JSONDecodeError as err:
        raise opts.error(assign.name, f"JSON like {form} ({err.msg} at {err.pos})") from None
    if not isinstance(doc, dict) or not doc:
        raise opts.error(assign.name, f"a non-empty JSON object like {form}")
    assignment = []
    for topic, parts in sorted(doc.items()):
        if (
            not isinstance(parts, list)
            or not parts
            or not all(isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts)
            or len(set(parts)) != len(parts)
        ):
            raise opts.error(
                assign.name, f"a list of distinct partition numbers per topic, like {form}"
            )
        assignment.append((topic, tuple(sorted(parts))))
    return Subscription("assign", assignment=tuple(assignment))


def parse_spec(
    opts: Options,
    by_timestamp: JsonOption,
    timestamp: IntegerOption[None],
    offsets: JsonOption,
) -> OffsetSpec | None:
    """Spark's precedence: ``*ByTimestamp`` over ``*Timestamp`` over ``*Offsets``."""
    raw = by_timestamp.read(opts)
    if raw is not None:
        stamps = parse_partition_json(
            raw, option=by_timestamp.name, form=_TIMESTAMPS_FORM, minimum=0
        )
        return OffsetSpec("timestamps", by_timestamp.name, offsets=stamps)
    if timestamp.is_set(opts) and (ts := timestamp.read(opts)) is not None:
        return OffsetSpec("timestamp", timestamp.name, timestamp=ts)
    raw = offsets.read(opts)
    if raw is None:
        return None
    low = raw.strip().lower()
    if low in ("earliest", "latest"):
        return OffsetSpec("earliest" if low == "earliest" else "latest", offsets.name)
    if not raw.lstrip().startswith("{"):
        raise opts.error(offsets.name, f"'earliest', 'latest' or JSON like {_OFFSETS_FORM}")
    parsed = parse_partition_json(raw, option=offsets.name, form=_OFFSETS_FORM, minimum=EARLIEST)
    return OffsetSpec("offsets", offsets.name, offsets=parsed)
