"""The driver record: ``<pipeline>/coordinator/driver.json``, the pipeline's fencing token.

``{"coordinated": true, "token": 3, "owner": {"host": "...", "pid": 4242, "id": "...",
"since": 1760000000.0}}`` (docs/PROTOCOL.md, "Driver record"). Every driver that takes the
pipeline bumps ``token`` by compare-and-swap and passes it to the barrier sink as option
``fencing.token``; so does ``gtbarrier sweep --delete``. ``coordinated`` says whether a
snapshot coordinator ever took a token (it then prunes the epoch log, not the driver's
source); it is absent in records written before it existed, which
:func:`state.protocol.fencing.coordinated` reads from the record's owner.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from state.records.codec import Fields

NO_TOKEN = 0


@dataclass(frozen=True)
class DriverOwner:
    """Who took the token: host, process id, the coordinator's identifier, Unix time."""

    host: str
    pid: int
    identifier: str
    since: float

    def to_json(self) -> dict[str, Any]:
        return {"host": self.host, "id": self.identifier, "pid": self.pid, "since": self.since}

    @classmethod
    def from_json(cls, raw: object) -> DriverOwner:
        f = Fields(raw, "driver record owner")
        return cls(
            host=f.string("host", ""),
            pid=f.integer("pid", 0),
            identifier=f.string("id", ""),
            since=f.number("since", 0.0),
        )


@dataclass(frozen=True)
class DriverRecord:
    """The highest fencing token handed out, and the driver that took it.

    ``coordinated``: a snapshot coordinator took a token of this pipeline, this one or an
    earlier one (it stays true); None in a record written before the field existed.
    """

    token: int
    owner: DriverOwner | None = None
    coordinated: bool | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "owner": None if self.owner is None else self.owner.to_json(),
            "token": self.token,
        }
        if self.coordinated is not None:
            out["coordinated"] = self.coordinated
        return out

    @classmethod
    def from_json(cls, raw: object) -> DriverRecord:
        f = Fields(raw, "driver record")
        owner = f.value("owner")
        return cls(
            token=f.integer("token", NO_TOKEN, minimum=NO_TOKEN),
            owner=None if owner is None else DriverOwner.from_json(owner),
            coordinated=None if f.value("coordinated") is None else f.boolean("coordinated"),
        )
