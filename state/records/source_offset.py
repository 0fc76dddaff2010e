"""The source offset: what Spark checkpoints for gtkafka, and the source's resolved start.

``{"epoch": 7, "offsets": {"orders": {"0": 1200, "1": 1187}}}`` (docs/PROTOCOL.md, "Source
offsets"): a *frontier* (topic -> partition -> next offset to read, Spark's Kafka-source
shape) and the number of the epoch that starts at it. Spark compares offsets as JSON text,
so keys are emitted in sorted order, and the format carries no version field: adding one
would change every offset Spark has checkpointed.

``<pipeline>/source/start.json`` holds the resolved initial offset in the same form (epoch
0), created once so that ``initialOffset()`` answers the same after a restart.

Decoding errors are :class:`~state.errors.MalformedOffset`: an offset Spark hands back may
come from a checkpoint written by another source.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from state.errors import MalformedOffset

TopicPartitionKey = tuple[str, int]
Frontier = dict[TopicPartitionKey, int]

INITIAL_EPOCH = 0


@dataclass(frozen=True)
class SourceOffset:
    """An epoch number and the frontier at which that epoch starts."""

    epoch: int
    offsets: Mapping[TopicPartitionKey, int]

    def to_json(self) -> dict[str, Any]:
        """The offset as Spark stores it, keys inserted in sorted order."""
        return {"epoch": self.epoch, "offsets": frontier_json(self.offsets)}

    @classmethod
    def from_json(cls, raw: object) -> SourceOffset:
        """Parse an offset that Spark (or the epoch log) hands back.

        :class:`MalformedOffset` if it is not a gtkafka offset, e.g. a checkpoint written
        by another source.
        """
        if not isinstance(raw, dict) or set(raw) != {"epoch", "offsets"}:
            raise MalformedOffset(f"not a gtkafka offset (expected keys epoch, offsets): {raw!r}")
        epoch = raw["epoch"]
        if isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 0:
            raise MalformedOffset(f"gtkafka offset with an invalid epoch: {raw!r}")
        return cls(epoch, parse_frontier_json(raw["offsets"]))

    def same_as(self, other: SourceOffset) -> bool:
        return self.epoch == other.epoch and dict(self.offsets) == dict(other.offsets)

    def __str__(self) -> str:
        return f"epoch {self.epoch} at {frontier_json(self.offsets)}"


def frontier_json(frontier: Mapping[TopicPartitionKey, int]) -> dict[str, dict[str, int]]:
    """``{topic: {str(partition): offset}}``, topics and partitions in sorted (text) order."""
    nested: dict[str, dict[str, int]] = {}
    for (topic, partition), offset in frontier.items():
        nested.setdefault(topic, {})[str(partition)] = int(offset)
    return {t: dict(sorted(nested[t].items())) for t in sorted(nested)}


def parse_frontier_json(value: object) -> Frontier:
    """The frontier of ``{topic: {partition: offset}}``; :class:`MalformedOffset` if it is not."""
    if not isinstance(value, dict):
        raise MalformedOffset(f"gtkafka offsets must be a JSON object: {value!r}")
    frontier: Frontier = {}
    for topic, parts in value.items():
        if not isinstance(topic, str) or not isinstance(parts, dict):
            raise MalformedOffset(
                f"gtkafka offsets must map topic -> {{partition: offset}}: {value!r}"
            )
        for p, off in parts.items():
            if (
                not isinstance(p, str)
                or not p.isdigit()
                or isinstance(off, bool)
                or not isinstance(off, int)
                or off < 0
            ):
                raise MalformedOffset(f"gtkafka offset {topic}-{p} = {off!r} is invalid: {value!r}")
            frontier[(topic, int(p))] = off
    return frontier
