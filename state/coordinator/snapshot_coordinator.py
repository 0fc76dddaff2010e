"""The snapshot coordinator: consistent resume points for a gtkafka -> barrier query.

::

    coord = SnapshotCoordinator(spark, pipeline_id="orders-to-billing",
                                state_uri="s3://bucket/gtbarrier", checkpoint_location=cp,
                                zookeeper_hosts="127.0.0.1:2181", snapshot_period="30s")
    coord.recover()                       # before start: materialise the checkpoint if needed
    q = build_query(coord.fencing_token)  # readStream gtkafka ... writeStream barrier ... start()
    coord.watch(q)                        # snapshot on completed batches, every snapshot_period
    ...
    coord.run(build_query)                # or all of it, supervised, with restarts

The protocol (the paper's snapshot protocol on Spark): a completed micro-batch is the
minimal-time event (:mod:`state.coordinator.listener`). When ``snapshot_period`` has
passed or a snapshot was requested (:mod:`state.coordinator.scheduler`), the coordinator
snapshots that batch on a background thread while later batches run
(:mod:`state.coordinator.worker`). It is accepted only when the upload is complete and
verified and the barrier has no in-flight bundle at or below the batch's epoch; then the
resume point moves forward in ZooKeeper (or the store) and snapshots beyond ``retain``
are pruned (:mod:`state.coordinator.snapshot.attempt`). A snapshot not accepted within
``drain_timeout`` is abandoned with a warning; the previous point stays valid.

One driver per pipeline (:mod:`state.coordinator.driver_ownership`): a ZooKeeper lock plus a
fencing token that the query hands to the barrier sink. A lost ZooKeeper session
(expired, not merely disconnected) stops the watched query: another driver may own the
pipeline now.

This class is the facade: it checks the arguments once (:mod:`state.coordinator.config`)
and delegates to those parts.
"""

from __future__ import annotations

import inspect
import os
import signal
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent import futures
from pathlib import Path
from typing import TYPE_CHECKING, Any

from state.coordinator.batches import CompletedBatch
from state.coordinator.checkpoint_recovery import MODES, RecoveryResult
from state.coordinator.config import CoordinatorConfig
from state.coordinator.driver_ownership import DriverOwnership
from state.coordinator.graceful_stop import GracefulStop, stopping_on
from state.coordinator.readiness import QueryLiveness, readiness
from state.coordinator.recovery_future import Recoverer, RecoveryFuture
from state.coordinator.scheduler import SnapshotScheduler
from state.coordinator.snapshot.attempt import Lineage, SnapshotPipeline, SnapshotStats
from state.coordinator.supervisor import Supervisor
from state.coordinator.worker import SnapshotWorker
from state.errors import (
    ConfigError,
    CoordinationError,
    GtBarrierError,
    StateError,
    ZooKeeperUnavailable,
)
from state.layout import PipelineLayout
from state.metrics.probes import Readiness
from state.metrics.source_lag import SourceEnds
from state.options import parse_duration
from state.protocol.barrier_state import load_barrier_state
from state.stores import StateStore, StoreConfig, open_store

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from state.coordinator.driver_metrics import DriverMetrics
    from state.coordinator.listener import SnapshotListener


class SnapshotCoordinator:
    """Snapshots, resume points, recovery and supervised runs for one pipeline.

    Arguments (durations accept ``"500ms"``, ``"30s"``, ``"5m"`` or seconds; each one is
    described in :data:`state.coordinator.config.PARAMETERS`):

    * ``pipeline_id``, ``state_uri``: as the source and sink options ``pipeline.id`` and
      ``state.uri``; ``state_options`` holds ``s3.*`` store options if needed.
    * ``checkpoint_location``: the query's local checkpoint directory (a path or
      ``file://`` URI on the driver's host).
    * ``zookeeper_hosts``: ``"host:port[,host:port...][/chroot]"``; None keeps the resume
      point in the state store and fences by token only (no mutual exclusion).
    * ``snapshot_period`` (30s), ``retain`` (3), ``drain_timeout`` (180s),
      ``reset_timeout`` (180s: bounds each ``recover()``).
    * ``driver_wait``: None (default) fails fast if another driver holds the pipeline;
      a duration waits that long for its lock.
    * ``zookeeper_session_timeout`` (10s): how soon a crashed driver's lock is released.
    * ``zookeeper_auth``: ``"scheme:credentials"`` (``"digest:user:${env:ZK_PASSWORD}"``);
      the pipeline's znodes are then created with an ACL for that identity alone.
    * ``metrics_port``: serve Prometheus metrics at ``/metrics`` on this port (0: a free
      one, :attr:`metrics_port` tells which) on ``metrics_address`` (``127.0.0.1``) until
      :meth:`close` (:mod:`state.coordinator.driver_metrics`); HTTPS with
      ``metrics_tls_cert``/``metrics_tls_key``, client certificates required with
      ``metrics_tls_client_ca``, basic authentication with ``metrics_basic_auth``
      (``"user:password"``, the password may be a secret reference).
    * ``source_ends``: the source's Kafka settings for that endpoint,
      ``gtbarrier.kafka_ends(options)`` with the gtkafka options the query reads with:
      each scrape then reads Kafka's end offsets (kept at most a few seconds) against the
      newest planned epoch, so the lag grows while the query is stuck; closed by
      :meth:`close`. Without it the lag is the one each completed batch reported.
    """

    def __init__(  # noqa: PLR0913, PLR0917 - the public signature, keyword arguments as documented
        self,
        spark: SparkSession | None,
        pipeline_id: str,
        state_uri: str,
        checkpoint_location: str | os.PathLike[str],
        zookeeper_hosts: str | None = None,
        snapshot_period: str | float = "30s",
        retain: int = 3,
        drain_timeout: str | float = "180s",
        reset_timeout: str | float = "180s",
        *,
        state_options: Mapping[str, str] | None = None,
        driver_wait: str | float | None = None,
        zookeeper_session_timeout: str | float = "10s",
        zookeeper_auth: str | None = None,
        metrics_port: int | None = None,
        metrics_address: str = "127.0.0.1",
        metrics_tls_cert: str | None = None,
        metrics_tls_key: str | None = None,
        metrics_tls_client_ca: str | None = None,
        metrics_basic_auth: str | None = None,
        source_ends: SourceEnds | None = None,
        epochs_retained: int = 1000,
        store: StateStore | None = None,
    ) -> None:
        self.spark = spark
        self.source_ends = _checked_source_ends(source_ends, metrics_port)
        self.config = CoordinatorConfig.from_arguments(
            pipeline_id,
            state_uri,
            checkpoint_location,
            zookeeper_hosts,
            snapshot_period,
            retain,
            drain_timeout,
            reset_timeout,
            state_options=state_options,
            driver_wait=driver_wait,
            zookeeper_session_timeout=zookeeper_session_timeout,
            zookeeper_auth=zookeeper_auth,
            metrics_port=metrics_port,
            metrics_address=metrics_address,
            metrics_tls_cert=metrics_tls_cert,
            metrics_tls_key=metrics_tls_key,
            metrics_tls_client_ca=metrics_tls_client_ca,
            metrics_basic_auth=metrics_basic_auth,
            epochs_retained=epochs_retained,
        )
        self.layout: PipelineLayout = self.config.layout
        self.store: StateStore = store if store is not None else open_store(self.config.store)
        self._lineage = Lineage()
        self.ownership = DriverOwnership(
            self.config, self.store, on_acquired=self._acquired, on_lost=self._session_lost
        )
        self._worker = SnapshotWorker(
            SnapshotScheduler(self.config.snapshot_period),
            SnapshotPipeline(self.config, self.store, self.ownership, self._lineage),
            self._lineage,
            pipeline_id=self.config.pipeline_id,
            on_fenced=self.ownership.revoke,
        )
        self._recoverer = Recoverer(
            self.config,
            self.store,
            self.ownership,
            self._lineage,
            stop_snapshots=self._worker.end_generation,
            on_new_generation=self._worker.forget_snapshots,
        )
        self._graceful = GracefulStop(
            self.config.pipeline_id, announce=self.ownership.announce_stopping
        )
        self._heard: float | None = None  # the watched query's last commit or idle trigger
        self._trigger_interval: float | None = None
        self._closed = False
        self._listener: SnapshotListener | None = None
        self._metrics: DriverMetrics | None = None
        if self.config.metrics_port is not None:
            try:
                from state.coordinator.driver_metrics import DriverMetrics
            except ImportError as err:  # prometheus_client, an optional extra
                self._close_early()
                raise ConfigError(
                    "metrics_port",
                    self.config.metrics_port,
                    f"a port, with {err.name} installed: pip install 'gtbarrier[metrics]'",
                    where="SnapshotCoordinator",
                ) from None
            try:
                self._metrics = DriverMetrics.start(self, self.config.metrics_port)
            except BaseException:
                self._close_early()
                raise

    def _close_early(self) -> None:
        """What the constructor opened, closed when it fails."""
        try:
            if self.source_ends is not None:
                self.source_ends.close()
        finally:
            self.store.close()

    # --- the arguments, checked --------------------------------------------------------

    @property
    def pipeline_id(self) -> str:
        return self.config.pipeline_id

    @property
    def store_config(self) -> StoreConfig:
        return self.config.store

    @property
    def checkpoint(self) -> Path:
        return self.config.checkpoint

    @property
    def zookeeper_hosts(self) -> str | None:
        return self.config.zookeeper_hosts

    @property
    def snapshot_period(self) -> float:
        return self.config.snapshot_period

    @property
    def retain(self) -> int:
        return self.config.retain

    @property
    def drain_timeout(self) -> float:
        return self.config.drain_timeout

    @property
    def reset_timeout(self) -> float:
        return self.config.reset_timeout

    @property
    def driver_wait(self) -> float | None:
        return self.config.driver_wait

    @property
    def zookeeper_session_timeout(self) -> float:
        return self.config.zookeeper_session_timeout

    # --- outcomes ----------------------------------------------------------------------

    @property
    def accepted(self) -> int:
        """Snapshots accepted so far."""
        return self._worker.accepted

    @property
    def abandoned(self) -> int:
        """Snapshots abandoned so far (logged with the reason; the resume point stayed)."""
        return self._worker.abandoned

    @property
    def last_snapshot(self) -> SnapshotStats | None:
        return self._worker.last_snapshot

    @property
    def history(self) -> deque[SnapshotStats]:
        """The accepted snapshots, oldest first (the last 1000)."""
        return self._worker.history

    @property
    def last_error(self) -> str | None:
        """Why the last snapshot attempt failed; None after an accepted one."""
        return self._worker.last_error

    @property
    def last_recovery(self) -> RecoveryResult | None:
        return self._recoverer.last

    # --- ownership ---------------------------------------------------------------------

    @property
    def metrics_port(self) -> int | None:
        """The port the metrics endpoint listens on (the one chosen for ``metrics_port=0``);
        None without one, or after :meth:`close`."""
        return None if self._metrics is None else self._metrics.server.port

    @property
    def fencing_token(self) -> int:
        """This driver's fencing token; pass it to the barrier sink as option ``fencing.token``.

        Taking it makes this coordinator the pipeline's driver (the ZooKeeper lock first,
        if configured); ``recover()`` does that too.
        """
        return self.ownership.acquire()

    def _acquired(self, token: int) -> None:
        point = self.ownership.read_resume_point()
        # Read again after the token: a replay may have slipped in without a lock.
        self.ownership.check_generation(point)
        self._lineage.seen(point)
        self._worker.clear_stop_error()

    def _session_lost(self, reason: str) -> None:
        self._worker.stop_query(ZooKeeperUnavailable(reason))

    # --- recovery ----------------------------------------------------------------------

    def recover(self, mode: str = "restore") -> RecoveryResult:
        """Make the checkpoint directory ready for the query to start
        (:mod:`state.coordinator.checkpoint_recovery`).

        ``mode="restore"`` (default) resumes from the newest usable snapshot;
        ``mode="replay"`` starts a new query version on a fresh checkpoint. Bounded by
        ``reset_timeout``: on expiry a :class:`CoordinationError` names what it was
        waiting for (the ZooKeeper or S3 server).

        Raises :class:`~state.errors.GenerationSuperseded` (fatal, nothing written) if
        another driver's ``recover(mode="replay")`` began a newer generation of the resume
        point after this coordinator started (its first acquisition of the pipeline,
        before waiting for the lock): this driver may run the previous query version.
        """
        future = self._start_recovery(mode)
        done, _ = futures.wait([future], timeout=self.config.reset_timeout)
        if not done:
            future.cancel()
            raise CoordinationError(
                f"recover() of pipeline '{self.pipeline_id}' did not finish within "
                f"reset_timeout={self.config.reset_timeout:g}s while {future.step}"
            )
        return future.result()

    def recover_async(self, mode: str = "restore") -> futures.Future[RecoveryResult]:
        """:meth:`recover` without waiting: a future of its result, not bounded by
        ``reset_timeout``. Cancelling it stops a running recovery before its next file."""
        return self._start_recovery(mode)

    def _start_recovery(self, mode: str) -> RecoveryFuture:
        if mode not in MODES:
            raise ConfigError("mode", mode, "'restore' or 'replay'", where="recover()")
        query = self._worker.query
        if query is not None and query.isActive:
            raise CoordinationError("recover() must run before the query starts; stop it first")
        return self._recoverer.start(mode)

    # --- watching a query ------------------------------------------------------------

    def watch(self, query: StreamingQuery) -> None:
        """Snapshot ``query`` on completed batches, every ``snapshot_period`` or on request."""
        self.ownership.acquire()
        if self._listener is None:
            if self.spark is None:
                raise CoordinationError("watch() needs the SparkSession given to the coordinator")
            from state.coordinator.listener import SnapshotListener

            self._listener = SnapshotListener(
                self.on_batch_completed, self._worker.on_terminated, on_idle=self.on_idle
            )
            self.spark.streams.addListener(self._listener)
        self._worker.watch(query)
        self._heard = time.time()
        self._trigger_interval = _trigger_interval(query)
        self._graceful.watch(query)

    def unwatch(self) -> None:
        """Stop snapshotting; a snapshot in progress finishes or is abandoned."""
        self._worker.unwatch()

    def on_batch_completed(self, batch: CompletedBatch) -> None:
        """The minimal-time event (called by the listener; tests may call it directly)."""
        # the listener hears every query of the session: only the watched one is measured
        if batch.query_id == self._worker.query_id:
            self._heard = time.time()
            self._graceful.on_batch_completed()
            if self._metrics is not None:
                self._metrics.observe(batch)
        self._worker.offer(batch)

    def on_idle(self, query_id: str) -> None:
        """A trigger of a query found no new data (the listener's idle event)."""
        if query_id == self._worker.query_id:
            self._heard = time.time()

    def request_snapshot(self, wait: str | float | None = None) -> dict[str, Any] | None:
        """Snapshot the newest completed batch (the next one, if none completed yet).

        If that batch is already snapshotted, its snapshot answers the request. With
        ``wait`` (a duration), block until the snapshot is accepted and return the resume
        point; :class:`CoordinationError` if it is abandoned or not accepted in time.
        """
        self._worker.catch_up()
        ticket = self._worker.request()
        if wait is None:
            return None
        timeout = parse_duration(wait, option="wait", where="request_snapshot()")
        self._worker.await_answer(ticket, timeout)
        return self.resume_point()

    # --- supervised runs ---------------------------------------------------------------

    def run(  # noqa: PLR0913 - the public signature, keyword arguments as documented
        self,
        build_query: Callable[..., StreamingQuery],
        max_consecutive_reset_attempts: int = 5,
        *,
        mode: str = "restore",
        backoff: str | float = "1s",
        max_backoff: str | float = "60s",
        stop_signals: tuple[signal.Signals, ...] = (signal.SIGTERM,),
    ) -> StreamingQuery:
        """Recover, start, watch and restart the query; see :mod:`state.coordinator.supervisor`.

        While it runs on the main thread, each of ``stop_signals`` (SIGTERM; ``()``: none)
        requests a graceful stop (:meth:`request_stop`; the second one: at once). The run
        then returns the stopped query with this coordinator closed (:meth:`close`): the
        ZooKeeper lock is released at once, so the program may exit 0 and the next driver
        take over without waiting for the session to time out.
        """
        with stopping_on(stop_signals, self._graceful):
            query = Supervisor(
                self,
                build_query,
                max_consecutive_reset_attempts,
                mode=mode,
                backoff=backoff,
                max_backoff=max_backoff,
            ).run()
        if self._graceful.requested:
            self.close()
        return query

    def request_stop(self, *, now: bool = False) -> None:
        """Stop the watched query gracefully: at its next batch boundary (within
        :data:`~state.coordinator.graceful_stop.STOP_GRACE`), at once with ``now`` or on a
        second request (:mod:`state.coordinator.graceful_stop`). With ZooKeeper, the lock
        says this driver is stopping, so a driver started meanwhile waits for it. Returns
        at once; :meth:`run` then returns without restarting the query."""
        self._graceful.request(now=now)

    @property
    def stop_requested(self) -> bool:
        """:meth:`request_stop` was called (or a stop signal arrived during :meth:`run`)."""
        return self._graceful.requested

    def call_build_query(self, build_query: Callable[..., StreamingQuery]) -> StreamingQuery:
        """``build_query(coord)`` if it takes an argument, else ``build_query()``.

        The session is made the JVM thread's active session first: ``run()`` may be
        called from any Python thread, and Spark 4.3 looks Python data sources (gtkafka,
        barrier) up in the active session when a query starts.
        """
        self._activate_session()
        try:
            params = inspect.signature(build_query).parameters.values()
            takes_arg = any(
                p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)
                for p in params
            )
        except (TypeError, ValueError):
            takes_arg = False
        return build_query(self) if takes_arg else build_query()

    def _activate_session(self) -> None:
        jsession = getattr(self.spark, "_jsparkSession", None)
        jvm = getattr(self.spark, "_jvm", None)
        if jsession is not None and jvm is not None:
            jvm.org.apache.spark.sql.SparkSession.setActiveSession(jsession)

    def take_stop_error(self) -> GtBarrierError | None:
        """Why the coordinator stopped the query (session lost: retriable; fenced: fatal),
        once; else None."""
        return self._worker.take_stop_error()

    # --- reading -----------------------------------------------------------------------

    def resume_point(self) -> dict[str, Any] | None:
        """``{epoch, frontier, batch_id, created_at, manifest, ...}``; None if no snapshot."""
        point = self.ownership.read_resume_point()
        if point is None or point.snapshot is None:
            return None
        return point.to_json()

    def status(self) -> dict[str, Any]:
        """Last snapshot (epoch, age, duration, bytes), the barrier's GT_last and in-flight
        bundle, the resume point last seen, counters and the last error. Never raises for
        an unreachable server: the error is reported in the result."""
        point = self._lineage.point
        out: dict[str, Any] = {
            "pipeline_id": self.pipeline_id,
            "query_id": self._worker.query_id,
            "fencing_token": self.ownership.token,
            "owner": self.ownership.held,
            "zookeeper": self.ownership.zookeeper_state,
            **self._worker.counters(time.time()),
            "resume_point": None if point is None else point.to_json(),
        }
        try:
            held = load_barrier_state(self.store, self.layout)
            state, version = held.state, held.version
            out["gt_last"] = None if version is None else state.gt_last
            out["inflight"] = None if state.inflight is None else state.inflight.to_json()
        except StateError as err:
            out["gt_last"] = out["inflight"] = None
            out["barrier_error"] = str(err)
        return out

    def readiness(self) -> Readiness:
        """``/ready`` of the metrics endpoint (:mod:`state.coordinator.readiness`)."""
        query = self._worker.query
        try:
            active = query is not None and bool(query.isActive)
        except Exception:  # a Spark that cannot answer runs no query for this probe
            active = False
        liveness = QueryLiveness(
            active=active,
            owner=self.ownership.held,
            stopping=self._graceful.requested,
            trigger_interval=self._trigger_interval,
            heard=self._heard,
        )
        return readiness(liveness, time.time())

    # --- shutting down -----------------------------------------------------------------

    def close(self) -> None:
        """Stop the snapshot thread, remove the listener, release the lock, close ZooKeeper,
        stop the metrics endpoint (once; later calls do nothing)."""
        if self._closed:
            return
        self._closed = True
        if self._metrics is not None:
            self._metrics.stop()
            self._metrics = None
        self._worker.close(timeout=self.config.drain_timeout + 5)
        if self._listener is not None and self.spark is not None:
            from state.coordinator.listener import remove_listener

            remove_listener(self.spark, self._listener)
            self._listener = None
        self.ownership.release()
        self.store.close()

    def __enter__(self) -> SnapshotCoordinator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _checked_source_ends(value: object, metrics_port: int | None) -> SourceEnds | None:
    """``source_ends`` checked: a :class:`SourceEnds`, for a metrics endpoint."""
    if value is None:
        return None
    if not isinstance(value, SourceEnds):
        raise ConfigError(
            "source_ends",
            f"<a {type(value).__name__}>",
            "gtbarrier.kafka_ends(options), with the gtkafka source's options",
            where="SnapshotCoordinator",
        )
    if metrics_port is None:
        raise ConfigError(
            "source_ends",
            "kafka_ends(...)",
            "a metrics endpoint to serve the lag it reads: give metrics_port too",
            where="SnapshotCoordinator",
        )
    return value


def _trigger_interval(query: StreamingQuery) -> float | None:
    """The query's processing-time interval in seconds; None if unknown (a Spark Connect
    query, another trigger) or 0 (the default trigger)."""
    try:
        trigger = query._jsq.streamingQuery().trigger()
        return float(trigger.intervalMs()) / 1000.0
    except Exception:
        return None


__all__ = ["SnapshotCoordinator", "SnapshotStats"]
