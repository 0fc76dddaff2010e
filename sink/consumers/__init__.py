"""Consumers of the barrier sink: one module or sub-package per kind, named by the registry.

:mod:`sink.consumers.registry` maps each ``consumer`` option value to its kind
(:class:`~sink.consumers.consumer_kind.ConsumerKind`); the two functions here open what
the sink's options name, through that kind.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sink.consumers.base import Ack, Consumer, LastBundle
from sink.faults import FaultInjector
from sink.staging import Staging
from state.stores import StateStore

if TYPE_CHECKING:
    from sink.options import SinkOptions

__all__ = ["Ack", "Consumer", "LastBundle", "open_consumer", "open_staging"]


def open_staging(options: SinkOptions, store: StateStore) -> Staging:
    """Where write tasks stage parts: the consumer's own hidden prefix (file, s3, iceberg)
    or the state store."""
    return options.kind.open_staging(options, store)


def open_consumer(
    options: SinkOptions, store: StateStore, faults: FaultInjector | None = None
) -> Consumer:
    """The consumer named by ``options.consumer`` (created in the commit process), with
    the staging its write tasks used."""
    faults = faults if faults is not None else FaultInjector.from_environment()
    kind = options.kind
    return kind.open_consumer(options, kind.open_staging(options, store), faults)
