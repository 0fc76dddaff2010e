"""The consumer contract: ``deliver(bundle) -> Ack`` and ``last_bundle()``.

A consumer stores a bundle's items together with the bundle's id, atomically, so that
``last_bundle()`` tells the barrier, after a crash, whether the in-flight bundle arrived.
Delivering the same bundle id again must never duplicate items (``redelivery=True`` says
that an earlier attempt may have delivered part or all of it).

Errors: a consumer raises :class:`~state.errors.DeliveryFailed` when the bundle was
certainly not stored, :class:`~state.errors.CommitStateUnknown` when it may have been (a
timeout after sending); anything else is treated as a failed attempt.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

from sink.bundle import Bundle
from sink.faults import FaultInjector
from sink.staging import Staging
from state.records.codec import Fields

POINTER = "_last_bundle.json"


@dataclass(frozen=True)
class Ack:
    """The consumer's acknowledgement of a bundle."""

    bundle_id: int
    rows: int
    driver_bytes: int = 0
    """Item bytes that passed through the driver process to deliver the bundle."""


@dataclass(frozen=True)
class LastBundle:
    """The last bundle a consumer stored completely: its id and global time."""

    bundle_id: int
    gt: int


@dataclass(frozen=True)
class BundlePointer:
    """``_last_bundle.json`` of the file and s3 consumers: the newest bundle they stored.

    ``{"bundle_id": 7, "file": "bundle-000000000007.parquet", "gt": 7, "pipeline_id":
    "orders", "rows": 1000}``, replaced atomically after the bundle's file is in place.
    Written with sorted keys and ``json.dumps``' default separators, the bytes every
    release has written (golden in ``tests/golden/consumers/``); read for ``bundle_id``
    and ``gt`` only, ignoring fields it does not know. It has no format field: a change an
    older reader must not ignore would need one first.
    """

    bundle_id: int
    gt: int
    file: str
    rows: int
    pipeline_id: str

    @classmethod
    def of(cls, bundle: Bundle, file: str) -> BundlePointer:
        """The pointer to ``bundle``, stored as ``file``."""
        return cls(bundle.bundle_id, bundle.gt, file, bundle.rows, bundle.pipeline_id)

    def to_json(self) -> dict[str, Any]:
        return {
            "bundle_id": self.bundle_id,
            "file": self.file,
            "gt": self.gt,
            "pipeline_id": self.pipeline_id,
            "rows": self.rows,
        }

    def to_bytes(self) -> bytes:
        return json.dumps(self.to_json(), sort_keys=True).encode()

    @classmethod
    def from_json(cls, raw: object) -> BundlePointer:
        """Decode a pointer; :class:`~state.errors.MalformedRecord` if it is not one."""
        f = Fields(raw, "consumer's last-bundle pointer")
        return cls(
            bundle_id=f.integer("bundle_id", minimum=0),
            gt=f.integer("gt", minimum=0),
            file=f.string("file", ""),
            rows=f.integer("rows", 0, minimum=0),
            pipeline_id=f.string("pipeline_id", ""),
        )

    @property
    def last_bundle(self) -> LastBundle:
        return LastBundle(self.bundle_id, self.gt)


class Consumer(ABC):
    """One delivery target. Created in the commit process; never pickled."""

    name: str = "consumer"

    def __init__(self, staging: Staging, faults: FaultInjector) -> None:
        self.staging = staging
        self.faults = faults

    @abstractmethod
    def deliver(self, bundle: Bundle, *, redelivery: bool = False) -> Ack:
        """Store the bundle (idempotently on its id) and return the acknowledgement."""

    @abstractmethod
    def last_bundle(self) -> LastBundle | None:
        """The last bundle stored completely, or None if the consumer has none."""

    def missing_parts(self, bundle: Bundle) -> tuple[str, ...]:
        """The locations of ``bundle``'s parts that a delivery could not find: neither
        staged any more nor already moved into place by an earlier attempt, in the
        bundle's order. Empty if the bundle can still be delivered. By default, the parts
        that are not staged."""
        return self.staging.missing(part.location for part in bundle.parts)

    def check(self) -> None:  # noqa: B027 - optional hook
        """Fail fast with a clear error if the consumer cannot be written (called at start)."""

    def describe(self) -> str:
        return self.name

    def close(self) -> None:  # noqa: B027 - optional hook
        """Release clients."""
