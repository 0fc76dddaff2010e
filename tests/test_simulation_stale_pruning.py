"""A driver that accepted a snapshot and then paused (a zombie, or the old version's
snapshot thread after ``recover(mode="replay")``) must not prune with what it knew then:
in the simulator (which runs the product's ``SnapshotPipeline``), it never deletes a
snapshot that the current resume point retains, and it never raises the epoch log's floor
above what the current generation's restore needs."""

from __future__ import annotations

import json

from simulation.explore import run_schedule
from simulation.query import SimConfig
from simulation.scheduler import Event
from simulation.world import Outcome, Schedule

#: p1's snapshot thread accepts snapshot 1 and pauses before its retention; the operator
#: upgrades the query (generation 1), whose drivers accept snapshots 2, 3 and 4. p1s then
#: wakes up with its retained list of generation 0, ``[1]``.
PAUSED_RETENTION = (
    '{"events": [["p1", 1, "switch", "p1s"], ["p1", 36, "switch", "p1s"], '
    '["p1s", 7, "upgrade", ""], ["p1s", 8, "switch", "p1u"], ["p1u", 19, "zombie", "lost"], '
    '["p1s", 8, "switch", "p2"], ["p1s", 8, "switch", "p2s"]], "heal": "lose"}'
)

#: p3's snapshot thread is raising the epoch log's floor (its oldest retained snapshot
#: allows epoch 1) when the operator upgrades the query: the new generation has no
#: snapshot and replays from the persisted start, epoch 0.
PAUSED_FLOOR_RAISE = (
    '{"events": [["p1", 36, "switch", "p1s"], ["p1", 40, "zombie", "shared"], '
    '["p1", 41, "switch", "p2"], ["p2", 34, "switch", "p2s"], ["p2s", 2, "zombie", "shared"], '
    '["p2", 34, "switch", "p3"], ["p3", 23, "zombie", "shared"], ["p3s", 16, "upgrade", ""], '
    '["p3s", 17, "switch", "p4u"]], "heal": "lose", "config": {"epochs_retained": 1}}'
)


def _run(raw_json: str) -> tuple[str, Outcome]:
    raw = json.loads(raw_json)
    config = SimConfig.from_json(raw.get("config", {}))
    schedule = Schedule(tuple(Event.from_json(e) for e in raw["events"]), raw["heal"])
    outcome, _ = run_schedule(config, schedule)
    return str(schedule), outcome


def test_a_paused_drivers_retention_spares_the_snapshots_the_resume_point_retains() -> None:
    schedule, outcome = _run(PAUSED_RETENTION)
    assert outcome.violation is None, f"{schedule}: {outcome.violation}"
    assert outcome.healed


def test_a_paused_drivers_floor_raise_spares_a_new_generations_replay() -> None:
    schedule, outcome = _run(PAUSED_FLOOR_RAISE)
    assert outcome.violation is None, f"{schedule}: {outcome.violation}"
    assert outcome.healed
