"""Kafka's end offsets for the metrics endpoints, read with the source's own offset reader.

``kafka_ends(options)`` is what a program gives the coordinator as ``source_ends`` (the
gtkafka options its query reads with), and ``gtbarrier exporter --bootstrap`` makes the
same from its arguments: a :class:`~state.metrics.source_lag.SourceEnds` whose readers
are :class:`datasource.offset_reader.OffsetReader` (every end confirmed by a fetch, as
the source plans with), with the source's ``kafka.*`` settings (security settings and
their secret references included: resolved where the client is made, never shown) and a
bound of its own (:data:`SCRAPE_KAFKA_DEFAULTS`) so that a scrape answers within
Prometheus's default scrape timeout (10 s) when the brokers do not.
"""

from __future__ import annotations

from collections.abc import Mapping

from datasource.offset_reader import OffsetReader
from gtbarrier.cli.kafka_ends import source_options
from state.errors import ConfigError
from state.metrics.source_lag import DEFAULT_MAX_AGE, EndsOpener, EndsReader, SourceEnds
from state.records.source_offset import Frontier

__all__ = ["SCRAPE_KAFKA_DEFAULTS", "kafka_ends", "kafka_ends_opener"]

#: One retry within 4 s in all per call to the cluster: a scrape waits at most that long
#: for brokers that do not answer.
SCRAPE_KAFKA_DEFAULTS = {"kafkaConsumer.pollTimeoutMs": "4000", "fetchOffset.numRetries": "1"}

BOOTSTRAP = "kafka.bootstrap.servers"


class _OffsetReaderEnds(EndsReader):
    """The ends of the reader's subscribed topics, each confirmed by a fetch."""

    def __init__(self, reader: OffsetReader) -> None:
        self._reader = reader

    def end_offsets(self) -> Frontier:
        return dict(self._reader.view(fresh=True, verify=True).latest)

    def close(self) -> None:
        self._reader.close()


def kafka_ends_opener(bootstrap: str, options: Mapping[str, str]) -> EndsOpener:
    """Readers of ``bootstrap`` with the ``kafka.*`` settings of ``options``, checked now
    as the source checks them (:class:`ConfigError` naming the option)."""
    source_options(bootstrap, ["-"], options, defaults=SCRAPE_KAFKA_DEFAULTS)

    def open_reader(topics: frozenset[str]) -> EndsReader:
        checked = source_options(bootstrap, topics, options, defaults=SCRAPE_KAFKA_DEFAULTS)
        return _OffsetReaderEnds(OffsetReader(checked))

    return open_reader


def kafka_ends(options: Mapping[str, str], *, max_age: float = DEFAULT_MAX_AGE) -> SourceEnds:
    """The coordinator's ``source_ends``: Kafka's ends read at each scrape (an answer kept
    ``max_age`` seconds) with the gtkafka source's ``options`` (``kafka.bootstrap.servers``
    and the other ``kafka.*`` settings; its other options are not needed and left out).
    No connection is made until the first scrape."""
    bootstrap = next((v for k, v in options.items() if k.lower() == BOOTSTRAP), None)
    if not bootstrap:
        raise ConfigError(
            BOOTSTRAP,
            bootstrap,
            "the source's bootstrap servers (host:port,...)",
            where="kafka_ends()",
        )
    if not isinstance(max_age, int | float) or isinstance(max_age, bool) or not 0 <= max_age <= 60:
        raise ConfigError("max_age", max_age, "seconds, 0-60", where="kafka_ends()")
    return SourceEnds(kafka_ends_opener(bootstrap, options), max_age=float(max_age))
