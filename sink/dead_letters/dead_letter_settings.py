"""Dead letters: ``errors.*`` as parsed: the tolerance, the destination and the optional
topic with its producer's settings (:class:`DeadLetterSettings`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Tolerance = Literal["none", "all"]
TOLERANCES: tuple[Tolerance, ...] = ("none", "all")
KAFKA_PREFIX = "errors.deadLetter.kafka."
"""The options of the dead-letter topic's producer."""


@dataclass(frozen=True)
class DeadLetterSettings:
    """``errors.*``: what happens to rows the target refuses, and where they go."""

    tolerance: Tolerance = "none"
    path: str | None = None
    """``file:///dir`` or ``s3://bucket/prefix``; set exactly when ``tolerance`` is all."""
    topic: str | None = None
    bootstrap: str | None = None
    """``errors.deadLetter.kafka.bootstrap.servers``: set exactly when ``topic`` is."""
    retention: float | None = None
    """``errors.deadLetter.retention`` in seconds: files older than this are deleted once
    their bundle is at or below ``GT_last`` (None: kept)."""
    kafka: tuple[tuple[str, str], ...] = ()
    """The other ``errors.deadLetter.kafka.*`` producer settings (names lower-cased), sorted,
    as given: a secret reference unresolved, a secret a
    :class:`~state.kafka_redaction.Secret` (its ``repr`` a fingerprint)."""

    @property
    def tolerant(self) -> bool:
        """Refused rows go to dead letters (``all``) rather than failing the bundle."""
        return self.tolerance == "all"
