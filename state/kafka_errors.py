"""The one translation of kafka-python's errors into gtbarrier's (:mod:`state.errors`).

Used by the source (``datasource``) and by the sink's Kafka consumer. kafka-python is
imported lazily: a process that never talks to Kafka never imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TypeVar

from state.errors import GtBarrierError, SourceUnavailable

T = TypeVar("T")


def is_retriable_kafka_error(err: BaseException) -> bool:
    """Connection problems, time-outs and the errors Kafka itself marks retriable."""
    import kafka.errors as kerr

    if isinstance(err, kerr.KafkaError):
        # kafka-python 3 (pyproject) has no NoBrokersAvailable: an unreachable cluster is a
        # KafkaTimeoutError or a KafkaConnectionError.
        return bool(getattr(err, "retriable", False)) or isinstance(
            err, kerr.KafkaTimeoutError | kerr.KafkaConnectionError
        )
    return isinstance(err, OSError)


def translate_kafka_error(
    err: BaseException,
    *,
    servers: str,
    what: str,
    retriable: Callable[[str], GtBarrierError] = SourceUnavailable,
) -> BaseException:
    """The error to raise for ``err``, met while doing ``what`` on Kafka at ``servers``.

    A retriable failure becomes ``retriable(message)`` (:class:`SourceUnavailable` unless
    the caller names another class), chained to ``err`` by the caller's ``raise ... from``;
    any other error is returned unchanged with a note saying what was being done.
    gtbarrier's own errors pass through untouched.
    """
    if isinstance(err, GtBarrierError):
        return err
    if is_retriable_kafka_error(err):
        return retriable(
            f"Kafka at {servers} is unavailable: {what} failed: {type(err).__name__}: {err}"
        )
    err.add_note(f"gtbarrier: {what} on Kafka at {servers}")
    return err


def kafka_call(servers: str, what: str, fn: Callable[[], T]) -> T:
    """``fn()``, with a kafka-python failure translated by :func:`translate_kafka_error`."""
    try:
        return fn()
    except Exception as err:
        translated = translate_kafka_error(err, servers=servers, what=what)
        if translated is err:
            raise
        raise translated from err
