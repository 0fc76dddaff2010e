"""The source's lag read at a scrape: Kafka's end offsets of the source's topics against
the end of the newest planned epoch (``gtbarrier_source_offsets_behind``,
``gtbarrier_source_end_offset``).

Both endpoints read it here, with :class:`SourceEnds`: the driver's (the coordinator's
``source_ends``, :mod:`state.coordinator.driver_metrics`) and ``gtbarrier exporter
--bootstrap``. The Kafka client is made by an :data:`EndsOpener` the composition root
gives (``gtbarrier.kafka_ends``, on the source's own offset reader), so this module needs
neither Kafka nor ``prometheus_client``. One reader per process and per set of topics:
made at the first scrape that needs it, kept across scrapes, made again only when the
topics change, closed by :meth:`SourceEnds.close`.

Kafka's answer (or its failure) is kept for ``max_age`` seconds, so that a scraper that
asks every second, or several scrapers, cost the brokers one request per ``max_age``.
A broker that does not answer within the reader's own bound leaves the lag out of the
scrape (absent, never the last value) and names the error (:attr:`SourceLag.errors`),
which the collector counts and reports as ``gtbarrier_up`` 0; the store's metrics are
served all the same.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

from state.errors import GtBarrierError
from state.lag import Lag
from state.records.source_offset import Frontier, TopicPartitionKey
from state.secrets import redact

__all__ = ["DEFAULT_MAX_AGE", "EndsOpener", "EndsReader", "SourceEnds", "SourceLag"]

log = logging.getLogger("gtbarrier.metrics")

DEFAULT_MAX_AGE = 2.0
"""Seconds a reading of Kafka's ends (or its failure) answers later scrapes."""


class EndsReader(Protocol):
    """A Kafka client for the end offsets of a fixed set of topics."""

    def end_offsets(self) -> Frontier:
        """Kafka's end (the next offset written) of every partition of the topics; raises
        a :class:`~state.errors.GtBarrierError` (``SourceUnavailable``) when the brokers
        do not answer within the reader's bound."""
        ...

    def close(self) -> None: ...


#: Makes the reader of a set of topics (called when the topics change).
EndsOpener = Callable[[frozenset[str]], EndsReader]


@dataclass(frozen=True)
class SourceLag:
    """What a scrape read of the source: Kafka's ``ends`` and the offsets ``behind`` them
    (None: not read), and the type names of the errors that kept them out."""

    ends: Frontier | None = None
    behind: dict[TopicPartitionKey, int] | None = None
    errors: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Answer:
    topics: frozenset[str]
    at: float
    ends: Frontier | None
    error: str | None


class SourceEnds:
    """Kafka's end offsets of the planned topics and the lag against them, for the
    scrapes of one process (thread-safe)."""

    def __init__(
        self,
        open_reader: EndsOpener,
        *,
        max_age: float = DEFAULT_MAX_AGE,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._open = open_reader
        self._max_age = max_age
        self._clock = clock
        self._lock = threading.Lock()
        self._reader: EndsReader | None = None
        self._topics: frozenset[str] = frozenset()
        self._answer: _Answer | None = None
        self._closed = False

    def read(self, planned: Frontier | None) -> SourceLag:
        """The lag of ``planned`` (the end of the newest planned epoch, per partition;
        None before the source started: nothing is read)."""
        if planned is None:
            return SourceLag()
        topics = frozenset(t for t, _ in planned)
        answer = self._ends(topics)
        if answer.ends is None:
            return SourceLag(errors=(answer.error or "SourceUnavailable",))
        return SourceLag(
            ends=dict(answer.ends), behind=dict(Lag.between(planned, answer.ends).behind)
        )

    def _ends(self, topics: frozenset[str]) -> _Answer:
        with self._lock:
            now = self._clock()
            kept = self._answer
            if kept is not None and kept.topics == topics and now - kept.at < self._max_age:
                return kept
            try:
                ends: Frontier | None = self._reader_of(topics).end_offsets()
                error = None
            except GtBarrierError as err:
                ends, error = None, type(err).__name__
                log.warning(
                    "gtbarrier metrics: Kafka's end offsets of %s could not be read, the "
                    "lag is left out: %s: %s",
                    ", ".join(sorted(topics)),
                    error,
                    redact(str(err)),
                )
            self._answer = _Answer(topics, self._clock(), ends, error)
            return self._answer

    def _reader_of(self, topics: frozenset[str]) -> EndsReader:
        if self._closed:
            raise RuntimeError("SourceEnds is closed")
        if self._reader is None or topics != self._topics:
            old, self._reader = self._reader, None
            if old is not None:
                old.close()
            self._reader = self._open(topics)
            self._topics = topics
        return self._reader

    def close(self) -> None:
        """Close the reader (idempotent); a later :meth:`read` raises RuntimeError."""
        with self._lock:
            self._closed = True
            reader, self._reader = self._reader, None
            self._answer = None
        if reader is not None:
            reader.close()
