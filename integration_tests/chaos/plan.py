"""What a chaos round does, drawn from the run's seed before it starts: :class:`RoundPlan`.

Round ``i`` of a run with seed ``s`` draws everything from ``random.Random(f"{s}:{i}")``
(its query/consumer pair from a list shuffled once by ``s``), so ``--seed s
--first-round i --rounds 1`` plans the same round again.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field, replace
from typing import Any

from integration_tests.chaos.faults import FAULTS, FaultKind
from integration_tests.chaos.queries import QUERIES


@dataclass(frozen=True)
class FaultSpec:
    """One fault of a round: its kind (a name in :data:`FAULTS`) and drawn parameters
    (a kind armed at start adds the bundle it chose when the driver starts)."""

    kind: str
    params: dict[str, Any]


@dataclass(frozen=True)
class Sizing:
    """How big rounds are: records per round, per micro-batch, in how many chunks."""

    max_offsets: int = 400
    min_batches: int = 3  # records per round: min_batches..max_batches x max_offsets
    max_batches: int = 5
    chunks: int = 3
    fault_counts: tuple[int, ...] = (1, 2, 3)
    fault_count_weights: tuple[float, ...] = (1.0, 2.0, 4.0)


@dataclass(frozen=True)
class RoundPlan:
    index: int
    seed: int
    query: str
    consumer: str
    partitions: int
    records: int
    chunks: int
    max_offsets: int
    cluster: bool
    faults: tuple[FaultSpec, ...] = field(default_factory=tuple)

    @property
    def round_id(self) -> str:
        return f"r{self.index:03d}"

    def describe(self) -> str:
        where = "cluster" if self.cluster else "local"
        return (
            f"{self.query} -> {self.consumer}, {self.records} records in {self.partitions} "
            f"partition(s), {self.max_offsets}/batch, {where}"
        )


def draw_plan(
    seed: int,
    index: int,
    *,
    queries: list[str],
    consumers: list[str],
    sizing: Sizing,
    cluster_share: float,
    fault_kinds: list[str] | None = None,
) -> RoundPlan:
    """Round ``index`` of the run with ``seed`` (see the module docstring)."""
    pairs = [(q, c) for q in queries for c in consumers]
    random.Random(f"{seed}:pairs").shuffle(pairs)
    query, consumer = pairs[index % len(pairs)]
    rng = random.Random(f"{seed}:{index}")
    partitions = 1 if QUERIES[query].single_partition else rng.choice((2, 3))
    plan = RoundPlan(
        index=index,
        seed=seed,
        query=query,
        consumer=consumer,
        partitions=partitions,
        records=rng.randint(sizing.min_batches, sizing.max_batches) * sizing.max_offsets
        + rng.randrange(sizing.max_offsets),
        chunks=sizing.chunks,
        max_offsets=sizing.max_offsets,
        cluster=cluster_share > 0 and rng.random() < cluster_share,
    )

    def applicable(plan: RoundPlan) -> list[FaultKind]:
        return [
            k
            for k in FAULTS.values()
            if k.applies(plan) and (fault_kinds is None or k.name in fault_kinds)
        ]

    kinds = applicable(plan)
    if not kinds and cluster_share > 0:  # only kinds that need the cluster were chosen
        plan = replace(plan, cluster=True)
        kinds = applicable(plan)
    if not kinds:
        raise ValueError(f"no fault kind of {fault_kinds} applies to round {plan.describe()}")
    count = rng.choices(sizing.fault_counts, weights=sizing.fault_count_weights)[0]
    drawn = rng.choices(kinds, weights=[k.weight for k in kinds], k=count)
    # A kind armed at start goes into the environment of the next driver: the first one,
    # or the restart after the previous armed fault killed its driver.
    drawn.sort(key=lambda k: not k.armed_at_start)
    faults = tuple(FaultSpec(k.name, k.params(rng, plan)) for k in drawn)
    return replace(plan, faults=faults)
