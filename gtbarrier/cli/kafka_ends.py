"""Kafka's end offsets for ``gtbarrier status --bootstrap``, read the way the source reads
them (:class:`datasource.offset_reader.OffsetReader`: every end confirmed by a fetch, since
some brokers answer ListOffsets with a batch's base offset)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from datasource.offset_reader import OffsetReader
from datasource.options import KafkaSourceOptions
from state.records.source_offset import Frontier

# Fail in seconds when the brokers do not answer (an operator is waiting).
CLI_KAFKA_DEFAULTS = {"kafkaConsumer.pollTimeoutMs": "8000", "fetchOffset.numRetries": "1"}


def source_options(
    bootstrap: str,
    topics: Iterable[str],
    options: Mapping[str, str],
    *,
    defaults: Mapping[str, str] = CLI_KAFKA_DEFAULTS,
) -> KafkaSourceOptions:
    """The ``kafka.*`` options given (checked as the source checks them) for ``topics``,
    the reader's bound from ``defaults`` (every other option given is left out)."""
    kafka_only = {k: v for k, v in options.items() if k.lower().startswith("kafka.")}
    return KafkaSourceOptions.parse(
        {
            **defaults,
            **kafka_only,
            "kafka.bootstrap.servers": bootstrap,
            "subscribe": ",".join(sorted(set(topics))),
        }
    )


def end_offsets(options: KafkaSourceOptions) -> Frontier:
    """Every partition of the subscribed topics with its end (the next offset written)."""
    reader = OffsetReader(options)
    try:
        return dict(reader.view(fresh=True, verify=True).latest)
    finally:
        reader.close()
