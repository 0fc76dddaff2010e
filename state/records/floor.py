"""The floor record: ``<pipeline>/source/floor.json``, where the pruned epoch log begins.

``{"epoch": F, "epochs_with_records": 57, "format": 1, "replays_dropped": 3, "start":
{...offset...}}`` (docs/PROTOCOL.md, "Pruning"). Epochs below ``F`` and the batch records
that read them may be deleted; ``start`` is where epoch ``F`` starts, which is where a
query on a new checkpoint may begin once the epochs before it are gone. The two counts
keep what the metrics derived from the deleted records: how many pruned epochs read
records (each made one bundle) and how many batches replayed a pruned epoch (the barrier
dropped their bundles), so that counters never go down. The floor only rises.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from state.records.codec import FORMAT_FIELD, Fields
from state.records.source_offset import SourceOffset

FLOOR_RECORD_FORMAT = 1


@dataclass(frozen=True)
class FloorRecord:
    """Epochs below ``epoch`` are pruned; epoch ``epoch`` starts at ``start``.

    ``epochs_with_records``: pruned epochs that read at least one record.
    ``replays_dropped``: batches, beyond the first, that read a pruned epoch.
    """

    epoch: int
    start: SourceOffset
    epochs_with_records: int = 0
    replays_dropped: int = 0

    def __post_init__(self) -> None:
        if self.start.epoch != self.epoch:
            raise ValueError(f"the floor {self.epoch} must start at its own epoch: {self.start}")

    def to_json(self) -> dict[str, Any]:
        return {
            "epoch": self.epoch,
            "epochs_with_records": self.epochs_with_records,
            FORMAT_FIELD: FLOOR_RECORD_FORMAT,
            "replays_dropped": self.replays_dropped,
            "start": self.start.to_json(),
        }

    @classmethod
    def from_json(cls, raw: object) -> FloorRecord:
        f = Fields(raw, "floor record")
        f.format(FLOOR_RECORD_FORMAT)
        epoch = f.integer("epoch", minimum=1)
        start = SourceOffset.from_json(f.required("start", "a gtkafka offset"))
        if start.epoch != epoch:
            raise f.invalid("start", f"the offset at which epoch {epoch} starts")
        return cls(
            epoch=epoch,
            start=start,
            epochs_with_records=f.integer("epochs_with_records", minimum=0),
            replays_dropped=f.integer("replays_dropped", minimum=0),
        )
