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
minimal-time event (:mod:`state.listener`). When ``snapshot_period`` has passed or a
snapshot was requested, the coordinator snapshots that batch on a background thread
while later batches run (:mod:`state.snapshot`). It is accepted only when the upload
is complete and verified and the barrier has no in-flight bundle at or below the
batch's epoch; then the resume point (:mod:`state.resume`) moves forward in ZooKeeper
(or the store) and snapshots beyond ``retain`` are pruned. A snapshot not accepted
within ``drain_timeout`` is abandoned with a warning; the previous point stays valid.

One driver per pipeline: a ZooKeeper lock (:class:`state.zookeeper.DriverLock`) plus a
fencing token (:mod:`state.fencing`) that the query hands to the barrier sink. A lost
ZooKeeper session (expired, not merely disconnected) stops the watched query: another
driver may own the pipeline now.
"""

from __future__ import annotations

import inspect
import json
import logging
import os
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlparse

from state.errors import (
    ConcurrentModification,
    ConfigError,
    CoordinationError,
    GtBarrierError,
    PipelineFenced,
    RetriableError,
    SnapshotIncomplete,
    StateError,
    ZooKeeperUnavailable,
)
from state.fencing import check_token, take_token
from state.layout import PipelineLayout, validate_pipeline_id
from state.options import Options, parse_duration
from state.recovery import MODES, RecoveryResult, recover_checkpoint
from state.resume import (
    ResumePoint,
    ResumePointBackend,
    SnapshotRef,
    StoreResumePoints,
    advance_resume_point,
    read_resume_point,
)
from state.retry import Retry
from state.snapshot import Manifest, SnapshotWriter, checkpoint_files, prune
from state.store import StateStore, StoreConfig, open_store

if TYPE_CHECKING:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming.query import StreamingQuery

    from state.listener import CompletedBatch, SnapshotListener
    from state.zookeeper import DriverLock, ZooKeeperSession

log = logging.getLogger("gtbarrier.coordinator")

_HOSTS = r"^[A-Za-z0-9.\-\[\]:]+:\d+(,[A-Za-z0-9.\-\[\]:]+:\d+)*(/[A-Za-z0-9._\-/]*)?$"


class _NotDrainedError(RetriableError):
    """The barrier still has a bundle in flight at or below the snapshot's epoch."""


@dataclass(frozen=True)
class SnapshotStats:
    snapshot_id: int
    epoch: int
    batch_id: int
    started_at: float
    accepted_at: float
    duration_s: float
    copy_s: float
    files: int
    bytes: int
    uploaded_files: int
    uploaded_bytes: int


class SnapshotCoordinator:
    """Snapshots, resume points, recovery and supervised runs for one pipeline.

    Arguments (durations accept ``"500ms"``, ``"30s"``, ``"5m"`` or seconds):

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
    """

    def __init__(  # noqa: PLR0917 - the public signature of issue 5
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
        store: StateStore | None = None,
    ) -> None:
        where = "SnapshotCoordinator"
        self.spark = spark
        try:
            self.pipeline_id = validate_pipeline_id(pipeline_id, where=where)
        except ConfigError as err:
            raise ConfigError("pipeline_id", pipeline_id, err.expected, where=where) from None
        self.layout = PipelineLayout(self.pipeline_id)
        if not isinstance(state_uri, str) or not state_uri.strip():
            raise ConfigError(
                "state_uri",
                state_uri,
                "a store URI: file:///abs/path or s3://bucket/prefix",
                where=where,
            )
        opts = Options({"state_uri": state_uri, **dict(state_options or {})}, where=where)
        opts.check_known(["state_uri", *StoreConfig.OPTIONS])
        self.store_config = StoreConfig.from_options(opts, uri_option="state_uri")
        self.checkpoint = _checkpoint_path(checkpoint_location, where)
        if zookeeper_hosts is not None:
            import re

            if (
                not isinstance(zookeeper_hosts, str)
                or not re.match(_HOSTS, zookeeper_hosts.strip())
                or {".", ".."} & set(zookeeper_hosts.strip().partition("/")[2].split("/"))
            ):
                raise ConfigError(
                    "zookeeper_hosts",
                    zookeeper_hosts,
                    "'host:port[,host:port...][/chroot]' (a chroot without '.' or '..') or None",
                    where=where,
                )
            zookeeper_hosts = zookeeper_hosts.strip()
        self.zookeeper_hosts = zookeeper_hosts
        self.snapshot_period = _positive_duration(snapshot_period, "snapshot_period", where)
        if not isinstance(retain, int) or isinstance(retain, bool) or retain < 1:
            raise ConfigError("retain", retain, "an integer >= 1", where=where)
        self.retain = retain
        self.drain_timeout = _positive_duration(drain_timeout, "drain_timeout", where)
        self.reset_timeout = _positive_duration(reset_timeout, "reset_timeout", where)
        self.driver_wait = (
            None
            if driver_wait is None
            else parse_duration(driver_wait, option="driver_wait", where=where)
        )
        self.zookeeper_session_timeout = _positive_duration(
            zookeeper_session_timeout, "zookeeper_session_timeout", where
        )

        self.store: StateStore = store if store is not None else open_store(self.store_config)
        self._writer = SnapshotWriter(self.store, self.layout)
        self._zk: ZooKeeperSession | None = None
        self._lock_zk: DriverLock | None = None
        self._backend: ResumePointBackend = StoreResumePoints(self.store, self.layout)
        self._token: int | None = None
        self._generation = 0
        self._own = threading.RLock()

        self._cv = threading.Condition()
        self._query: StreamingQuery | None = None
        self._query_id: str | None = None
        self._listener: SnapshotListener | None = None
        self._latest: CompletedBatch | None = None
        self._last_done: tuple[str, int] | None = None  # last accepted: (query/run, batch)
        self._last_tried: tuple[str, int] | None = None  # last attempted
        self._tried_ticket = 0
        self._retry_next = False
        self._requested = 0
        self._served = 0
        self._served_error: str | None = None
        self._last_attempt = time.monotonic()
        self._worker: threading.Thread | None = None
        self._stopping = False
        self._stop_error: GtBarrierError | None = None

        self.accepted = 0
        self.abandoned = 0
        self.last_snapshot: SnapshotStats | None = None
        self.history: deque[SnapshotStats] = deque(maxlen=1000)  # accepted snapshots
        self.last_error: str | None = None
        self.last_recovery: RecoveryResult | None = None
        self._cached_point: ResumePoint | None = None

    # --- ownership ---------------------------------------------------------------------

    @property
    def fencing_token(self) -> int:
        """This driver's fencing token; pass it to the barrier sink as option ``fencing.token``.

        Taking it makes this coordinator the pipeline's driver (the ZooKeeper lock first,
        if configured); ``recover()`` does that too.
        """
        self._ensure_owner()
        assert self._token is not None
        return self._token

    def _owner_ok(self) -> bool:
        if self._token is None:
            return False
        return self._lock_zk is None or self._lock_zk.held

    def _ensure_owner(self) -> None:
        with self._own:
            if self._owner_ok():
                return
            if self.zookeeper_hosts is not None:
                from state.zookeeper import DriverLock, ZooKeeperResumePoints, ZooKeeperSession

                if self._zk is None:
                    session = ZooKeeperSession(
                        self.zookeeper_hosts,
                        session_timeout=self.zookeeper_session_timeout,
                        call_timeout=min(10.0, self.reset_timeout),
                    )
                    session.start(timeout=min(0.8 * self.reset_timeout, 30.0))
                    session.on_lost(self._on_session_lost)
                    self._zk = session
                    self._backend = ZooKeeperResumePoints(session, self.layout.zookeeper_resume)
                self._lock_zk = DriverLock(
                    self._zk, self.layout.zookeeper_driver_lock, self.pipeline_id
                )
                self._lock_zk.acquire(self.driver_wait)
            self._token = take_token(self.store, self.layout, identifier=self._identity())
            point, _ = read_resume_point(self._backend)
            self._cached_point = point
            self._generation = point.generation if point else 0
            self._stop_error = None
            log.info(
                "pipeline %s: this driver holds fencing token %d", self.pipeline_id, self._token
            )

    def _identity(self) -> str:
        return self._lock_zk.identifier if self._lock_zk is not None else f"pid {os.getpid()}"

    def _on_session_lost(self) -> None:
        reason = (
            f"the ZooKeeper session to {self.zookeeper_hosts} expired: the driver lock of "
            f"pipeline '{self.pipeline_id}' is lost and another driver may take over"
        )
        log.error("%s; stopping the query", reason)
        with self._cv:
            self._stop_error = ZooKeeperUnavailable(reason)
            self._token = None
            query = self._query
            self._cv.notify_all()
        if query is not None:
            _stop_query(query)

    # --- recovery ----------------------------------------------------------------------

    def recover(self, mode: str = "restore") -> RecoveryResult:
        """Make the checkpoint directory ready for the query to start; see :mod:`state.recovery`.

        ``mode="restore"`` (default) resumes from the newest usable snapshot;
        ``mode="replay"`` starts a new query version on a fresh checkpoint. Bounded by
        ``reset_timeout``: on expiry a :class:`CoordinationError` names what it was
        waiting for (the ZooKeeper or S3 server).
        """
        if mode not in MODES:
            raise ConfigError("mode", mode, "'restore' or 'replay'", where="recover()")
        if self._query is not None and self._query.isActive:
            raise CoordinationError("recover() must run before the query starts; stop it first")
        step = ["starting"]
        outcome: list[RecoveryResult] = []
        failure: list[BaseException] = []
        cancelled = threading.Event()

        def body() -> None:
            try:
                step[0] = self._describe_zk("connecting to / locking on")
                self._ensure_owner()
                step[0] = f"reading the resume point from {self._backend.description}"
                point, _ = read_resume_point(self._backend)
                if mode == "replay":
                    step[0] = f"removing the old checkpoint {self.checkpoint}"
                    result = recover_checkpoint(
                        self.store, self.layout, point, self.checkpoint, mode
                    )
                    step[0] = f"starting a new generation in {self._backend.description}"
                    self._new_generation()
                else:
                    step[0] = f"materialising the checkpoint from {self._store_description()}"
                    result = recover_checkpoint(
                        self.store,
                        self.layout,
                        point,
                        self.checkpoint,
                        mode,
                        cancelled=cancelled.is_set,
                    )
                outcome.append(result)
            except BaseException as err:
                failure.append(err)

        started = time.monotonic()
        worker = threading.Thread(target=body, name="gtbarrier-recover", daemon=True)
        worker.start()
        worker.join(self.reset_timeout)
        if worker.is_alive():
            cancelled.set()
            raise CoordinationError(
                f"recover() of pipeline '{self.pipeline_id}' did not finish within "
                f"reset_timeout={self.reset_timeout:g}s while {step[0]}"
            )
        if failure:
            raise failure[0]
        result = outcome[0]
        self.last_recovery = result
        log.info(
            "recover() of pipeline %s: %s in %.2fs (%s)",
            self.pipeline_id,
            result.action,
            time.monotonic() - started,
            result.reason,
        )
        return result

    def _new_generation(self) -> None:
        assert self._token is not None
        token = self._token

        def make(current: ResumePoint | None) -> ResumePoint:
            check_token(self.store, self.layout, token)
            gen = current.generation + 1 if current is not None else 1
            return ResumePoint.empty(generation=gen, token=token, created_at=time.time())

        written = advance_resume_point(self._backend, make)
        if written is not None:
            self._generation = written.generation
            self._cached_point = written
        with self._cv:
            self._last_done = self._last_tried = None

    def _describe_zk(self, what: str) -> str:
        if self.zookeeper_hosts is None:
            return f"taking the fencing token in {self._store_description()}"
        return f"{what} ZooKeeper at {self.zookeeper_hosts}"

    def _store_description(self) -> str:
        endpoint = (
            self.store_config.s3.endpoint
            or os.environ.get("AWS_ENDPOINT_URL_S3")
            or os.environ.get("AWS_ENDPOINT_URL")
        )
        if self.store_config.uri.startswith("s3://") and endpoint:
            return f"the state store {self.store_config.uri} (S3 endpoint {endpoint})"
        return f"the state store {self.store_config.uri}"

    # --- watching a query ------------------------------------------------------------

    def watch(self, query: StreamingQuery) -> None:
        """Snapshot ``query`` on completed batches, every ``snapshot_period`` or on request."""
        self._ensure_owner()
        from state.listener import SnapshotListener

        with self._cv:
            self._query = query
            self._query_id = str(query.id)
            self._stopping = False
            self._last_attempt = time.monotonic()
            if self._listener is None:
                if self.spark is None:
                    raise CoordinationError(
                        "watch() needs the SparkSession given to the coordinator"
                    )
                self._listener = SnapshotListener(self.on_batch_completed, self._on_terminated)
                self.spark.streams.addListener(self._listener)
            if self._worker is None or not self._worker.is_alive():
                self._worker = threading.Thread(
                    target=self._work, name="gtbarrier-snapshots", daemon=True
                )
                self._worker.start()

    def unwatch(self) -> None:
        """Stop snapshotting; a snapshot in progress finishes or is abandoned."""
        with self._cv:
            self._query = None
            self._query_id = None
            self._cv.notify_all()

    def on_batch_completed(self, batch: CompletedBatch) -> None:
        """The minimal-time event (called by the listener; tests may call it directly)."""
        with self._cv:
            if batch.query_id != self._query_id:
                return
            if (
                self._latest is None
                or batch.batch_id >= self._latest.batch_id
                or batch.run_id != self._latest.run_id
            ):
                self._latest = batch
            self._cv.notify_all()

    def _catch_up_with_query(self) -> None:
        """Feed the watched query's ``lastProgress`` to :meth:`on_batch_completed`.

        Listener events arrive asynchronously, so a request made right after a batch
        finished (or after the query terminated) could otherwise be served with an older
        batch than the caller has already seen complete.
        """
        from state.listener import completed_batch_from_progress

        with self._cv:
            query = self._query
        if query is None:
            return
        progress = query.lastProgress
        if not progress:
            return
        raw = getattr(progress, "json", None)  # StreamingQueryProgress, as the listener sees it
        parsed = json.loads(raw) if isinstance(raw, str) else dict(progress)
        self.on_batch_completed(completed_batch_from_progress(parsed))

    def _on_terminated(self, query_id: str, exception: str | None) -> None:
        with self._cv:
            if query_id == self._query_id:
                log.info(
                    "watched query %s terminated%s", query_id, f": {exception}" if exception else ""
                )
                self._cv.notify_all()

    def request_snapshot(self, wait: str | float | None = None) -> dict[str, Any] | None:
        """Snapshot the newest completed batch (the next one, if none completed yet).

        If that batch is already snapshotted, its snapshot answers the request. With
        ``wait`` (a duration), block until the snapshot is accepted and return the resume
        point; :class:`CoordinationError` if it is abandoned or not accepted in time.
        """
        self._catch_up_with_query()
        with self._cv:
            self._requested += 1
            ticket = self._requested
            self._cv.notify_all()
        if wait is None:
            return None
        timeout = parse_duration(wait, option="wait", where="request_snapshot()")
        deadline = time.monotonic() + timeout
        with self._cv:
            while self._served < ticket:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise CoordinationError(
                        f"requested snapshot of pipeline '{self.pipeline_id}' not accepted within "
                        f"{timeout:g}s (last error: {self.last_error})"
                    )
                self._cv.wait(min(left, 1.0))
            if self._served_error is not None:
                raise CoordinationError(
                    f"requested snapshot of pipeline '{self.pipeline_id}' was abandoned: "
                    f"{self._served_error}"
                )
        return self.resume_point()

    # --- the snapshot thread -----------------------------------------------------------

    def _due(self, now: float) -> bool:
        return (
            self._retry_next
            or self._requested > self._served
            or now - self._last_attempt >= self.snapshot_period
        )

    @staticmethod
    def _newer(b: CompletedBatch, than: tuple[str, int] | None) -> bool:
        return than is None or than[0] != f"{b.query_id}/{b.run_id}" or b.batch_id > than[1]

    def _serve(self, ticket: int, error: str | None) -> None:
        """Answer the requests up to ``ticket`` (holding ``_cv``)."""
        if ticket > self._served:
            self._served = ticket
            self._served_error = error
        self._cv.notify_all()

    def _next_batch(self) -> tuple[CompletedBatch, int] | None:
        """Wait (holding ``_cv``) for a batch to snapshot; None when stopping.

        A batch is tried once; it is tried again only if a snapshot is requested after
        that attempt failed (a later batch is preferred whenever one completes).
        """
        while not self._stopping:
            now = time.monotonic()
            b = self._latest
            if b is not None and self._query_id == b.query_id:
                if not self._newer(b, self._last_done) and self._requested > self._served:
                    # Nothing completed since the last snapshot: that one answers the request.
                    self._serve(self._requested, None)
                    continue
                eligible = self._newer(b, self._last_done) and (
                    self._newer(b, self._last_tried) or self._requested > self._tried_ticket
                )
                if eligible and self._due(now):
                    return b, self._requested
            wait = max(0.05, self.snapshot_period - (now - self._last_attempt))
            self._cv.wait(min(wait, 1.0))
        return None

    def _work(self) -> None:
        while True:
            with self._cv:
                picked = self._next_batch()
                if picked is None:
                    return
                batch, ticket = picked
                self._last_attempt = time.monotonic()
                self._last_tried = (f"{batch.query_id}/{batch.run_id}", batch.batch_id)
                self._tried_ticket = ticket
                self._retry_next = False
            try:
                self._snapshot(batch)
                with self._cv:
                    self._last_done = self._last_tried
                    self.last_error = None
                    self._serve(ticket, None)
            except SnapshotIncomplete as err:
                log.info(
                    "snapshot of batch %d skipped: %s; trying the next batch", batch.batch_id, err
                )
                with self._cv:
                    self.last_error = str(err)
                    self._retry_next = True
            except PipelineFenced as err:
                log.error(
                    "snapshot of batch %d refused: %s; stopping the query", batch.batch_id, err
                )
                with self._cv:
                    self.last_error = str(err)
                    self._stop_error = err
                    self._token = None
                    self.abandoned += 1
                    query, self._query, self._query_id = self._query, None, None
                    self._serve(ticket, str(err))
                if query is not None:
                    _stop_query(query)
            except Exception as err:  # abandoned: logged, counted, the previous point stays
                log.warning(
                    "snapshot of batch %d (epoch %d) abandoned: %s; the resume point stays at %s",
                    batch.batch_id,
                    batch.epoch,
                    err,
                    self._describe_point(self._cached_point),
                )
                with self._cv:
                    self.last_error = f"{type(err).__name__}: {err}"
                    self.abandoned += 1
                    self._serve(ticket, self.last_error)

    def _snapshot(self, batch: CompletedBatch) -> None:
        started_at = time.time()
        t0 = time.monotonic()
        deadline = t0 + self.drain_timeout
        token = self._token
        if token is None or not self._owner_ok():
            raise CoordinationError(
                "this driver does not hold the pipeline (ZooKeeper session lost)"
            )

        def left() -> float:
            return max(0.0, deadline - time.monotonic())

        # The commit entry is written before the progress event is posted; allow a little slack.
        Retry(
            max_attempts=1000,
            base_delay=0.05,
            max_delay=0.5,
            deadline=min(10.0, left()),
            is_retriable=lambda e: isinstance(e, SnapshotIncomplete),
        )(lambda: checkpoint_files(self.checkpoint, batch.batch_id))
        manifest = self._writer.write(
            self.checkpoint,
            batch_id=batch.batch_id,
            epoch=batch.epoch,
            frontier=batch.frontier,
            generation=self._generation,
            token=token,
            query_id=batch.query_id,
        )
        log.info(
            "snapshot %d of batch %d (epoch %d): %d files, %d bytes, %d uploaded in %.2fs",
            manifest.snapshot_id,
            batch.batch_id,
            batch.epoch,
            len(manifest.files),
            manifest.total_bytes,
            manifest.uploaded_bytes,
            manifest.copy_seconds,
        )
        if left() <= 0:
            raise CoordinationError(f"drain_timeout={self.drain_timeout:g}s passed while uploading")
        self._await_drained(batch.epoch, left())
        point = self._accept(manifest, token, left())
        kept = [r.snapshot_id for r in point.retained]
        pruned, deleted = prune(self.store, self.layout, kept, self._writer.manifests)
        self._writer.forget_blobs(deleted)
        accepted_at = time.time()
        stats = SnapshotStats(
            snapshot_id=manifest.snapshot_id,
            epoch=batch.epoch,
            batch_id=batch.batch_id,
            started_at=started_at,
            accepted_at=accepted_at,
            duration_s=time.monotonic() - t0,
            copy_s=manifest.copy_seconds,
            files=len(manifest.files),
            bytes=manifest.total_bytes,
            uploaded_files=manifest.uploaded_files,
            uploaded_bytes=manifest.uploaded_bytes,
        )
        with self._cv:
            self.last_snapshot = stats
            self.history.append(stats)
            self._cached_point = point
            self.accepted += 1
            self._cv.notify_all()
        log.info(
            "snapshot %d accepted: resume point at epoch %d (batch %d) in %s; "
            "pruned %d snapshot(s), %d blob(s)",
            manifest.snapshot_id,
            batch.epoch,
            batch.batch_id,
            self._backend.description,
            pruned.snapshots,
            pruned.blobs,
        )

    def _check_not_closing(self) -> None:
        if self._stopping:
            raise CoordinationError("the coordinator is closing")

    def _await_drained(self, epoch: int, timeout: float) -> None:
        key = self.layout.barrier_state

        def check() -> None:
            self._check_not_closing()
            hit = self.store.get_json_or_none(key)
            inflight = None if hit is None else hit[0].get("inflight")
            if inflight and int(inflight.get("epoch", -1)) <= epoch:
                raise _NotDrainedError(
                    f"barrier bundle {inflight.get('bundle_id')} (epoch {inflight.get('epoch')}) "
                    f"still in flight at or below the snapshot's epoch {epoch}"
                )

        Retry(max_attempts=100000, base_delay=0.05, max_delay=1.0, deadline=timeout)(check)

    def _accept(self, manifest: Manifest, token: int, timeout: float) -> ResumePoint:
        ref = SnapshotRef(
            snapshot_id=manifest.snapshot_id,
            manifest=self._writer.manifest_key(manifest.snapshot_id),
            manifest_sha256=_sha(manifest.to_bytes()),
            epoch=manifest.epoch,
            batch_id=manifest.batch_id,
        )

        def make(current: ResumePoint | None) -> ResumePoint:
            self._check_not_closing()
            if not self._owner_ok():
                raise CoordinationError("the driver lock was lost before the snapshot was accepted")
            check_token(self.store, self.layout, token)
            older = (
                current.retained
                if current is not None and current.generation == self._generation
                else ()
            )
            return ResumePoint(
                generation=self._generation,
                token=token,
                epoch=manifest.epoch,
                batch_id=manifest.batch_id,
                query_id=manifest.query_id,
                frontier=manifest.frontier,
                created_at=time.time(),
                retained=(ref, *older)[: self.retain],
            )

        retry = Retry(
            max_attempts=100000,
            base_delay=0.1,
            max_delay=1.0,
            deadline=timeout,
            is_retriable=lambda e: (
                isinstance(e, ConcurrentModification) or bool(getattr(e, "retriable", False))
            ),
        )
        written = advance_resume_point(self._backend, make, retry=retry)
        if written is None:
            raise CoordinationError(
                f"the resume point is already at or past epoch {manifest.epoch}; snapshot "
                f"{manifest.snapshot_id} is not needed"
            )
        return written

    # --- supervised runs ---------------------------------------------------------------

    def run(
        self,
        build_query: Callable[..., StreamingQuery],
        max_consecutive_reset_attempts: int = 5,
        *,
        mode: str = "restore",
        backoff: str | float = "1s",
        max_backoff: str | float = "60s",
    ) -> StreamingQuery:
        """Recover, start, watch and restart the query; see :mod:`state.supervisor`."""
        from state.supervisor import Supervisor

        return Supervisor(
            self,
            build_query,
            max_consecutive_reset_attempts,
            mode=mode,
            backoff=backoff,
            max_backoff=max_backoff,
        ).run()

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
        with self._cv:
            error, self._stop_error = self._stop_error, None
            return error

    # --- reading -----------------------------------------------------------------------

    def resume_point(self) -> dict[str, Any] | None:
        """``{epoch, frontier, batch_id, created_at, manifest, ...}``; None if no snapshot."""
        if self.zookeeper_hosts is not None and self._zk is None:
            from state.zookeeper import ZooKeeperResumePoints, ZooKeeperSession

            session = ZooKeeperSession(
                self.zookeeper_hosts, session_timeout=self.zookeeper_session_timeout
            )
            session.start(timeout=min(0.8 * self.reset_timeout, 30.0))
            try:
                point, _ = read_resume_point(
                    ZooKeeperResumePoints(session, self.layout.zookeeper_resume)
                )
            finally:
                session.stop()
        else:
            point, _ = read_resume_point(self._backend)
        if point is None or point.snapshot is None:
            return None
        return point.to_json()

    def status(self) -> dict[str, Any]:
        """Last snapshot (epoch, age, duration, bytes), the barrier's GT_last and in-flight
        bundle, the resume point last seen, counters and the last error. Never raises for
        an unreachable server: the error is reported in the result."""
        now = time.time()
        with self._cv:
            last = self.last_snapshot
            out: dict[str, Any] = {
                "pipeline_id": self.pipeline_id,
                "query_id": self._query_id,
                "fencing_token": self._token,
                "owner": self._owner_ok(),
                "zookeeper": None if self._zk is None else self._zk.state,
                "snapshots_accepted": self.accepted,
                "snapshots_abandoned": self.abandoned,
                "last_error": self.last_error,
                "last_snapshot": None
                if last is None
                else {
                    "snapshot_id": last.snapshot_id,
                    "epoch": last.epoch,
                    "batch_id": last.batch_id,
                    "age_s": round(now - last.accepted_at, 3),
                    "duration_s": round(last.duration_s, 3),
                    "copy_s": round(last.copy_s, 3),
                    "files": last.files,
                    "bytes": last.bytes,
                    "uploaded_files": last.uploaded_files,
                    "uploaded_bytes": last.uploaded_bytes,
                },
                "resume_point": None
                if self._cached_point is None
                else self._cached_point.to_json(),
            }
        try:
            hit = self.store.get_json_or_none(self.layout.barrier_state)
            out["gt_last"] = None if hit is None else hit[0].get("gt_last")
            out["inflight"] = None if hit is None else hit[0].get("inflight")
        except StateError as err:
            out["gt_last"] = out["inflight"] = None
            out["barrier_error"] = str(err)
        return out

    @staticmethod
    def _describe_point(point: ResumePoint | None) -> str:
        if point is None or point.snapshot is None:
            return "the persisted start (no snapshot)"
        return (
            f"epoch {point.epoch} (batch {point.batch_id}, snapshot {point.snapshot.snapshot_id})"
        )

    # --- shutting down -----------------------------------------------------------------

    def close(self) -> None:
        """Stop the snapshot thread, remove the listener, release the lock, close ZooKeeper."""
        with self._cv:
            self._stopping = True
            self._query = None
            self._cv.notify_all()
            worker = self._worker
        if worker is not None:
            worker.join(timeout=self.drain_timeout + 5)
        if self._listener is not None and self.spark is not None:
            self.spark.streams.removeListener(self._listener)
            self._listener = None
        with self._own:
            if self._lock_zk is not None:
                self._lock_zk.release()
                self._lock_zk = None
            if self._zk is not None:
                self._zk.stop()
                self._zk = None
            self._token = None
        self.store.close()

    def __enter__(self) -> SnapshotCoordinator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _stop_query(query: StreamingQuery) -> None:
    try:
        query.stop()
    except Exception as err:  # the query may be gone already; record why it could not stop
        log.warning("could not stop query %s: %s", getattr(query, "id", "?"), err)


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _positive_duration(value: str | float, name: str, where: str) -> float:
    seconds = parse_duration(value, option=name, where=where)
    if seconds <= 0:
        raise ConfigError(
            name, value, "a positive duration such as '500ms', '30s', '5m'", where=where
        )
    return seconds


def _checkpoint_path(value: str | os.PathLike[str], where: str) -> Path:
    text = os.fspath(value) if isinstance(value, os.PathLike | str) else None
    if not text:
        raise ConfigError(
            "checkpoint_location", value, "a local directory path or file:// URI", where=where
        )
    parsed = urlparse(text)
    if parsed.scheme and parsed.scheme != "file" and len(parsed.scheme) > 1:
        raise ConfigError(
            "checkpoint_location",
            value,
            "a local directory on the driver (path or file:// URI); the coordinator copies it to "
            "the state store, so a remote checkpoint file system is not needed",
            where=where,
        )
    path = Path(parsed.path) if parsed.scheme == "file" else Path(text)
    # A file where the directory (or one of its parents) should be: Spark would fail later.
    existing = next((p for p in (path, *path.parents) if p.exists()), None)
    if existing is not None and not existing.is_dir():
        raise ConfigError(
            "checkpoint_location",
            value,
            f"a directory on the driver (or a path where one can be created): {existing} is a file",
            where=where,
        )
    return path


__all__ = ["SnapshotCoordinator", "SnapshotStats"]
