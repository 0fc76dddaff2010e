"""A driver of the old query version that started before ``recover(mode="replay")`` began
a new generation of the resume point must not take the pipeline afterwards: in the
simulator (which drives the product's rules), it is refused before it writes anything, and
no snapshot of its old-version state becomes the new generation's."""

from __future__ import annotations

import json

from simulation.choosers import ReplayChooser
from simulation.query import SimConfig
from simulation.scheduler import Event
from simulation.world import Schedule, World

#: p2 and p3 start as second drivers of version 1 while p1 runs; the operator upgrades p3
#: (p3u writes generation 1 and runs version 2); p2, a version-1 process that had not run
#: yet, then takes the pipeline. Poison rows at errors.tolerance=none hold bundle 1 back.
STANDBY_AFTER_A_REPLAY = json.loads(
    '{"events": [["p1", 13, "zombie", "shared"], ["p1", 14, "zombie", "shared"], '
    '["p1", 17, "switch", "p3"], ["p3", 4, "upgrade", ""], ["p1s", 4, "switch", "p3u"]], '
    '"heal": "lose", "config": {"poison": [[0, 1]], "no_gt": [[1, 2]]}}'
)


def test_a_driver_started_before_a_replay_is_refused_and_its_state_never_reaches_the_new_generation() -> (  # noqa: E501 - the test's name states the guarantee
    None
):
    config = SimConfig.from_json(STANDBY_AFTER_A_REPLAY["config"])
    events = tuple(Event.from_json(e) for e in STANDBY_AFTER_A_REPLAY["events"])
    schedule = Schedule(events, STANDBY_AFTER_A_REPLAY["heal"])
    world = World(config, ReplayChooser(schedule.events), heal=schedule.heal)
    outcome = world.run()

    assert outcome.violation is None, f"{schedule}: {outcome.violation}"
    p2 = next(p for p in world.procs if p.name == "p2")
    refusals = [e for e in p2.errors if e.startswith("GenerationSuperseded")]
    assert refusals, f"p2 (version 1, started at generation 0) was not refused: {p2.errors}"
    assert "generation 1" in refusals[0] and "generation 0" in refusals[0], refusals[0]
    assert p2.token is None and p2.accepted == 0, "p2 took the pipeline before refusing"
    assert outcome.healed and outcome.delivered == [0, 1, 2]
