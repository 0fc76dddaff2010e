"""Two kinds of stateless round beyond the plain one, a consumer setting that changes
between driver starts and sparse output, and, for any round, the source read on the
driver.

* **A setting change** (:class:`SettingChange`, ``stateless -> postgres`` rounds): the
  query adds a string column ``label`` of ``n % modulus`` characters to row ``n``, and the
  round creates the table with ``label varchar(before)``, so that the rows whose label is
  longer are refused (dead letters, ``errors.tolerance=all``). At a drawn moment the round
  SIGKILLs the driver, widens the column to ``varchar(after)`` (``ALTER TABLE``) and
  restarts it: the refused set shrinks between two driver starts, possibly in the middle
  of a bundle whose dead-letter file was written under the old setting. The verdict:
  every row in exactly one of the table and the dead letters; a row refused under one
  setting only may be in either (:meth:`SettingChange.refused`: None), but a bundle's
  rows all follow one setting.
* **Sparse output** (:class:`Sparse`): the query keeps only the records ``n`` with
  ``n % divisor == 0`` (and the ticks), so most micro-batches deliver an empty bundle,
  batches are small (many epochs) and the epoch log is pruned ``retained`` epochs below
  the barrier's progress and compacted, under the round's faults. The verdict adds that
  state stays bounded: at the end at most :meth:`Sparse.bound` epochs are stored.

* **Reads on the driver** (:func:`draw_read_mode`): gtkafka's ``readMode=driver``, where
  the driver's planner process reads each new batch and no read task runs, so the barrier
  learns the batch's epoch from Spark's offset log (a batch run again after a restart is
  read by a read task, which writes its batch record). Every fault applies: a killed
  Python worker may be the planner in the middle of a read.

Each is drawn from a seeded generator of its own (``"<seed>:<round>:setting"``,
``"<seed>:<round>:sparse"``), so a round's query, consumer, sizes and faults' draws are
what they would be without it.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

#: The query and consumer a setting change applies to (a varchar column's length).
SETTING_QUERY = "stateless"
SETTING_CONSUMER = "postgres"
#: The query whose rounds may be sparse (a filter keeps its rows as they are).
SPARSE_QUERY = "stateless"
#: The share of eligible rounds with a setting change / sparse output, unless the command
#: line says otherwise.
DEFAULT_SETTING_SHARE = 0.5
DEFAULT_SPARSE_SHARE = 0.3
#: The share of rounds (of any query) whose source reads on the driver.
DEFAULT_DRIVER_READ_SHARE = 0.25
#: The fault kind that applies a setting change (:mod:`.faults`).
SETTING_FAULT = "setting_change"


@dataclass(frozen=True)
class SettingChange:
    """Row ``n``'s ``label`` has ``n % modulus`` characters; the table's ``label`` column
    is ``varchar(before)`` until the round widens it to ``varchar(after)``."""

    modulus: int
    before: int
    after: int

    def __post_init__(self) -> None:
        if not 1 <= self.before < self.after < self.modulus - 1:
            raise ValueError(
                f"a setting change needs 1 <= before < after < modulus - 1 (varchar(0) "
                f"does not exist; some rows are refused under each setting), not {self}"
            )

    def label_length(self, n: int) -> int:
        return n % self.modulus

    def refused(self, n: int) -> bool | None:
        """Whether row ``n`` is refused: True under both settings, False under neither,
        None under the first one only (it may be in the consumer or the dead letters)."""
        length = self.label_length(n)
        if length > self.after:
            return True
        if length <= self.before:
            return False
        return None

    def describe(self) -> str:
        return (
            f"label of n % {self.modulus} characters into varchar({self.before}), "
            f"widened to varchar({self.after})"
        )


@dataclass(frozen=True)
class Sparse:
    """Keep records ``n % divisor == 0`` (and the ticks); ``max_offsets`` records per
    micro-batch; the epoch log pruned ``retained`` epochs below the barrier's progress."""

    divisor: int
    max_offsets: int
    retained: int

    def keeps(self, n: int, tick_base: int) -> bool:
        return n >= tick_base or n % self.divisor == 0

    def bound(self) -> int:
        """The most epochs that may be stored once the last epoch was committed and the
        pruning after it ran: ``retained`` below the barrier's progress, plus a pruning
        step's slack (a quarter of the window, :func:`~state.protocol.epoch_floor.
        pruning_step`), plus the epoch past the progress."""
        return math.floor(1.25 * self.retained) + 1

    def describe(self) -> str:
        return (
            f"sparse: 1 record in {self.divisor} kept, {self.max_offsets}/batch, "
            f"epochsRetained={self.retained}"
        )


def draw_setting(
    seed: int, index: int, query: str, consumer: str, share: float
) -> SettingChange | None:
    """Round ``index``'s setting change (None: it has none): for a ``stateless ->
    postgres`` round with probability ``share``. Drawn from
    ``random.Random(f"{seed}:{index}:setting")``, which no other draw uses."""
    if query != SETTING_QUERY or consumer != SETTING_CONSUMER or share <= 0:
        return None
    rng = random.Random(f"{seed}:{index}:setting")
    if rng.random() >= share:
        return None
    modulus = rng.choice((7, 9, 11))
    before = rng.randrange(1, modulus - 3)
    after = rng.randrange(before + 1, modulus - 1)
    return SettingChange(modulus, before, after)


def draw_sparse(seed: int, index: int, query: str, share: float) -> Sparse | None:
    """Round ``index``'s sparse output (None: it has none): for a ``stateless`` round
    with probability ``share``. Drawn from ``random.Random(f"{seed}:{index}:sparse")``."""
    if query != SPARSE_QUERY or share <= 0:
        return None
    rng = random.Random(f"{seed}:{index}:sparse")
    if rng.random() >= share:
        return None
    return Sparse(
        divisor=rng.choice((37, 53, 97)),
        max_offsets=rng.choice((20, 25, 30)),
        retained=rng.choice((8, 12, 20, 40)),
    )


def draw_read_mode(seed: int, index: int, share: float) -> str:
    """Round ``index``'s gtkafka ``readMode``: ``driver`` with probability ``share``, else
    ``executors``. Drawn from ``random.Random(f"{seed}:{index}:readmode")``."""
    if share <= 0:
        return "executors"
    return "driver" if random.Random(f"{seed}:{index}:readmode").random() < share else "executors"


def setting_fault_position(seed: int, index: int, armed: int, others: int) -> int:
    """Where the setting change goes among a round's faults: after the ``armed`` ones
    (they go into the environment of the drivers the round starts first), anywhere among
    the ``others``; drawn from the setting's generator."""
    rng = random.Random(f"{seed}:{index}:setting:at")
    return armed + rng.randint(0, others)
