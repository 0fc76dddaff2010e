"""Supervised runs: recover, start, watch, and restart a failed query with backoff.

``SnapshotCoordinator.run(build_query, max_consecutive_reset_attempts=5)``:

1. ``recover()`` (the first time with ``mode``, afterwards ``"restore"``), bounded by
   ``reset_timeout``;
2. ``build_query(coord)`` (or ``build_query()``) starts the query; pass
   ``coord.fencing_token`` to the barrier sink as option ``fencing.token``;
3. ``watch()`` it and wait for it to end.

A query that ends by itself (``Trigger.AvailableNow``, or ``stop()`` from elsewhere) ends
the run: the query is returned; so does one stopped on request (SIGTERM, see
:mod:`state.coordinator.graceful_stop`), even if a second request stopped it inside a
batch. A query that fails, or that the coordinator stopped because its ZooKeeper session
expired, is a *failure*: after a backoff (``backoff`` doubling up to ``max_backoff``) it
is reset (recovered and started again). At most
``max_consecutive_reset_attempts`` resets follow each other without an accepted snapshot
in between: an accepted snapshot shows the pipeline makes progress and sets the count
back to zero. One failure more, and the run stops with
:class:`ResetAttemptsExhausted`, whose message gives the count and the last error.
Errors that retrying cannot fix (a bad option, another driver holding the pipeline,
a fenced driver) end the run at once.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

from state.errors import ConfigError, GtBarrierError, PipelineFenced, ResetAttemptsExhausted
from state.options import parse_duration
from state.retry import backoff as backoff_policy

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery

log = logging.getLogger(__name__)


class Supervised(Protocol):
    """What the supervisor needs of the coordinator."""

    @property
    def pipeline_id(self) -> str:
        """For messages."""

    @property
    def accepted(self) -> int:
        """Snapshots accepted so far: a rising count shows progress."""

    def recover(self, mode: str = ...) -> object:
        """Prepare the checkpoint (bounded by ``reset_timeout``)."""

    def call_build_query(self, build_query: Callable[..., StreamingQuery]) -> StreamingQuery:
        """Start the query."""

    def watch(self, query: StreamingQuery) -> None:
        """Snapshot the query."""

    def unwatch(self) -> None:
        """Stop snapshotting it."""

    def take_stop_error(self) -> GtBarrierError | None:
        """Why the coordinator stopped the query, once."""

    @property
    def stop_requested(self) -> bool:
        """A graceful stop was asked for (SIGTERM): the run ends with its query."""


class Supervisor:
    """One supervised run of a pipeline (see the module docstring)."""

    def __init__(  # noqa: PLR0913 - run()'s public arguments
        self,
        coord: Supervised,
        build_query: Callable[..., StreamingQuery],
        max_consecutive_reset_attempts: int,
        *,
        mode: str = "restore",
        backoff: str | float = "1s",
        max_backoff: str | float = "60s",
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        where = "run()"
        if not callable(build_query):
            raise ConfigError(
                "build_query", build_query, "a function that starts the query", where=where
            )
        if (
            not isinstance(max_consecutive_reset_attempts, int)
            or isinstance(max_consecutive_reset_attempts, bool)
            or max_consecutive_reset_attempts < 0
        ):
            raise ConfigError(
                "max_consecutive_reset_attempts",
                max_consecutive_reset_attempts,
                "an integer >= 0",
                where=where,
            )
        self.coord = coord
        self.build_query = build_query
        self.max_resets = max_consecutive_reset_attempts
        self.mode = mode
        base = parse_duration(backoff, option="backoff", where=where)
        cap = parse_duration(max_backoff, option="max_backoff", where=where)
        self._backoff = backoff_policy(base, cap)
        self._sleep = sleep
        self.failures: list[str] = []

    def run(self) -> StreamingQuery:
        consecutive = 0
        mode = self.mode
        while True:
            accepted_before = self.coord.accepted
            try:
                self.coord.recover(mode)
                mode = "restore"
                query = self.coord.call_build_query(self.build_query)
            except GtBarrierError as err:
                if not err.retriable or self.coord.stop_requested:
                    raise
                error = f"recovery failed: {type(err).__name__}: {err}"
            else:
                failed = self._await(query)
                if failed is None or self.coord.stop_requested:
                    how = "stopped on request" if self.coord.stop_requested else "finished"
                    log.info("pipeline %s: query %s %s", self.coord.pipeline_id, query.id, how)
                    return query
                error = failed
            if self.coord.accepted > accepted_before:
                consecutive = 0  # progress was made since the last failure
            self.failures.append(error)
            if consecutive >= self.max_resets:
                raise ResetAttemptsExhausted(
                    f"pipeline '{self.coord.pipeline_id}': the query failed {consecutive + 1} "
                    f"consecutive time(s) without an accepted snapshot in between, and "
                    f"max_consecutive_reset_attempts={self.max_resets} resets were used; "
                    f"last error: {error}"
                )
            consecutive += 1
            pause = self._backoff.delay(consecutive)
            log.warning(
                "pipeline %s: query failed (%s); reset attempt %d of %d in %.1fs",
                self.coord.pipeline_id,
                error,
                consecutive,
                self.max_resets,
                pause,
            )
            self._sleep(pause)

    def _await(self, query: StreamingQuery) -> str | None:
        """Wait for ``query`` to end: None if it finished, else why it failed.

        Raises at once what a restart cannot cure: the driver was fenced (in the sink or by
        a newer resume point).
        """
        from pyspark.errors import StreamingQueryException

        self.coord.watch(query)
        try:
            query.awaitTermination()
        except StreamingQueryException as err:
            if self.coord.stop_requested:
                # stopped at once (a second SIGTERM) inside a batch: the next driver's
                # recovery resolves that batch, as after a crash
                log.info("pipeline %s: query stopped on request: %s", self.coord.pipeline_id, err)
                return None
            stopped = self.coord.take_stop_error()
            if stopped is not None and not stopped.retriable:
                raise stopped from err
            text = str(err)
            if "PipelineFenced" in text:
                raise PipelineFenced(
                    f"pipeline '{self.coord.pipeline_id}': the barrier sink fenced this driver "
                    f"(a newer driver took the pipeline): {_first_line(text)}"
                ) from err
            return (
                str(stopped)
                if stopped is not None
                else f"{type(err).__name__}: {_first_line(text)}"
            )
        finally:
            self.coord.unwatch()
        stopped = self.coord.take_stop_error()
        if stopped is None:
            return None
        if not stopped.retriable:
            raise stopped
        return str(stopped)


_CAUSE = re.compile(
    r"^\s*([A-Za-z_][\w.]*(?:Error|Exception|Failed|Fenced|Unavailable|Unknown))(: .*)$"
)


def _first_line(text: str, limit: int = 300) -> str:
    """The first line of Spark's error, plus the innermost Python error in its traceback
    (for a failed sink commit, e.g. ``DeliveryFailed: http consumer ... refused``)."""
    lines = text.strip().splitlines()
    head = lines[0][:limit] if lines else text[:limit]
    causes = [m.group(1) + m.group(2) for m in map(_CAUSE.match, lines) if m]
    if causes and causes[-1][:limit] not in head:
        return f"{head} ... caused by {causes[-1][:limit]}"
    return head


__all__ = ["Supervisor"]
