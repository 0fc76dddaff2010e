"""One driver per pipeline: the ZooKeeper lock, the fencing token and where the resume point lives.

:class:`DriverOwnership` works like a kazoo recipe::

    with DriverOwnership(config, store) as owner:     # acquire(): lock, then a new token
        sink_options["fencing.token"] = owner.token
        ...                                           # release(): lock and session closed

With ZooKeeper it owns the session
(:class:`state.coordinator.zookeeper_session.ZooKeeperSession`), takes the driver lock
(:class:`state.coordinator.driver_lock.DriverLock`) and keeps the resume point in ZooKeeper
(:class:`state.coordinator.zookeeper_resume_points.ZooKeeperResumePoints`); without, the
resume point lives in the state store and the fencing token (:mod:`state.protocol.fencing`)
is the only protection. Every new token is also recorded as the barrier's owner at once
(:meth:`~state.protocol.barrier_state.BarrierStateStore.claim_driver`), so a zombie driver
is refused at its next commit, before this driver's query has committed anything. An
expired session (``LOST``, not a mere disconnection) voids the token at once and calls
``on_lost``: another driver may own the pipeline now. The ZooKeeper modules (kazoo) are
imported only when ZooKeeper is used. With ``zookeeper_auth`` every session
authenticates, and the pipeline's znodes are prepared (created, or restricted if they
were open) for that identity alone before the lock is taken.

A driver works only in the resume point generation it observed when it started, or in one
it began itself (:func:`~state.protocol.resume_point.check_driver_generation`): the first
:meth:`~DriverOwnership.acquire` reads the generation before it waits for the lock, and
every acquisition checks it again once the lock is held, before any write. A driver of
the old query version queued on the lock when ``recover(mode="replay")`` began a new
generation is refused then (:class:`~state.errors.GenerationSuperseded`), with no token
taken, no barrier claim, no resume point or checkpoint written, and its lock released.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from state.coordinator.config import CoordinatorConfig
from state.errors import GenerationSuperseded, ZooKeeperUnavailable
from state.protocol.barrier_state import BarrierStateStore
from state.protocol.fencing import take_token
from state.protocol.resume_point import (
    ResumePointBackend,
    StoreResumePoints,
    check_driver_generation,
    generation_of,
    read_resume_point,
)
from state.records.resume_point import ResumePoint
from state.retry import Retry, lost_race
from state.stores import StateStore

if TYPE_CHECKING:
    from state.coordinator.driver_lock import DriverLock
    from state.coordinator.zookeeper_session import ZooKeeperSession

log = logging.getLogger(__name__)


def _ignore_token(token: int) -> None:
    pass


def _ignore_reason(reason: str) -> None:
    pass


class DriverOwnership:
    """This driver's claim on one pipeline.

    ``on_acquired(token)`` runs (inside :meth:`acquire`) each time a new token is taken;
    ``on_lost(reason)`` runs on a thread of its own when the ZooKeeper session expires.
    """

    def __init__(  # noqa: PLR0913 - its collaborators, and the simulation's seams
        self,
        config: CoordinatorConfig,
        store: StateStore,
        *,
        on_acquired: Callable[[int], None] = _ignore_token,
        on_lost: Callable[[str], None] = _ignore_reason,
        races: Retry | None = None,
        clock: Callable[[], float] = time.time,
        identifier: str | None = None,
    ) -> None:
        """``races`` retries the lost races of the token and the barrier claim (default
        :func:`~state.retry.cas_loop`), ``clock`` stamps the claim, ``identifier`` names
        this driver where no ZooKeeper lock does (default ``pid N``): seams for a
        deterministic simulation, which runs many drivers in one process."""
        self.config = config
        self._races = races
        self._clock = clock
        self._identifier = identifier
        self.store = store
        self.layout = config.layout
        self.backend: ResumePointBackend = StoreResumePoints(store, self.layout)
        self._on_acquired = on_acquired
        self._on_lost = on_lost
        self._session: ZooKeeperSession | None = None
        self._lock: DriverLock | None = None
        self._token: int | None = None
        #: The resume point generation this driver observed when it started (its first
        #: acquire, before the lock), or the newest one it began itself.
        self.started_generation: int | None = None
        self._mutex = threading.RLock()

    # --- the recipe --------------------------------------------------------------------

    def acquire(self) -> int:
        """Take the pipeline if this driver does not hold it: the ZooKeeper lock (failing
        fast with :class:`DriverLockHeld`, or waiting up to ``driver_wait``), then a new
        fencing token, recorded as the barrier's owner (older drivers are fenced from
        their next commit on). Returns the token.

        Raises :class:`GenerationSuperseded` (the lock released, nothing written) if the
        resume point is in a generation newer than the one this driver started in
        (:meth:`check_generation`)."""
        with self._mutex:
            token = self._token
            if token is not None and self.held:
                return token
            if self.config.zookeeper_hosts is not None:
                self._lock_zookeeper(self.config.zookeeper_hosts)
            try:
                self.check_generation(self._observe())
            except GenerationSuperseded:
                self.release()
                raise
            token = take_token(
                self.store,
                self.layout,
                identifier=self.identity,
                races=self._races,
                coordinator=True,
            )
            BarrierStateStore(
                self.store, self.layout, clock=self._clock, races=self._races
            ).claim_driver(token, driver=self.identity)
            self._token = token
            try:
                self._on_acquired(token)
            except GenerationSuperseded:
                # A replay between the check and the token (no lock, or a lost one): this
                # driver's token is voided and the pipeline left to the replaying driver.
                self.release()
                raise
            log.info(
                "pipeline %s: this driver holds fencing token %d", self.layout.pipeline_id, token
            )
            return token

    def _lock_zookeeper(self, hosts: str) -> None:
        from state.coordinator.driver_lock import DriverLock
        from state.coordinator.zookeeper_resume_points import ZooKeeperResumePoints

        if self._session is None:
            session = self._start_session(hosts, call_timeout=min(10.0, self.config.reset_timeout))
            try:
                # Before the lock's recipe creates anything under the root: with credentials,
                # the root must be this identity's first.
                session.prepare_pipeline(
                    self.layout.zookeeper_root,
                    (self.layout.zookeeper_driver_lock, self.layout.zookeeper_resume),
                )
            except BaseException:
                session.stop()
                raise
            session.on_lost(self._session_lost)
            self._session = session
            self.backend = ZooKeeperResumePoints(session, self.layout.zookeeper_resume)
        if self.started_generation is None:
            self._observe()  # before the wait: what this driver started in
        self._lock = DriverLock(
            self._session, self.layout.zookeeper_driver_lock, self.layout.pipeline_id
        )
        self._lock.acquire(self.config.driver_wait)

    def _observe(self) -> ResumePoint | None:
        """The resume point now; the first read is the generation this driver started in."""
        point = read_resume_point(self.backend)[0]
        if self.started_generation is None:
            self.started_generation = generation_of(point)
            log.info(
                "pipeline %s: this driver starts at generation %d of the resume point",
                self.layout.pipeline_id,
                self.started_generation,
            )
        return point

    def check_generation(self, point: ResumePoint | None) -> None:
        """Raise :class:`GenerationSuperseded` if ``point`` is in a generation newer than
        the one this driver started in and did not begin itself (see the module
        docstring). Before the first acquire, ``point`` is what the driver starts in."""
        if self.started_generation is None:
            self.started_generation = generation_of(point)
        check_driver_generation(
            point, started=self.started_generation, pipeline_id=self.layout.pipeline_id
        )

    def began_generation(self, point: ResumePoint) -> None:
        """This driver wrote ``point``, the first of a new generation
        (``recover(mode="replay")``): it runs the version that generation belongs to."""
        self.started_generation = point.generation

    def _start_session(self, hosts: str, *, call_timeout: float = 10.0) -> ZooKeeperSession:
        from state.coordinator.zookeeper_session import ZooKeeperSession

        session = ZooKeeperSession(
            hosts,
            session_timeout=self.config.zookeeper_session_timeout,
            call_timeout=call_timeout,
            auth=self.config.zookeeper_auth,
        )
        session.start(timeout=min(0.8 * self.config.reset_timeout, 30.0))
        return session

    def release(self) -> None:
        """Give the pipeline up: delete the lock node, close the session, forget the token."""
        with self._mutex:
            if self._lock is not None:
                self._lock.release()
                self._lock = None
            if self._session is not None:
                self._session.stop()
                self._session = None
            self._token = None

    def announce_stopping(self) -> None:
        """Say on the ZooKeeper lock that this driver stops: a driver started meanwhile
        waits for the lock instead of failing (no-op without ZooKeeper)."""
        lock = self._lock
        if lock is not None:
            lock.announce_stopping()

    def revoke(self) -> None:
        """Forget the token: a newer driver took the pipeline (or the session expired)."""
        self._token = None

    def __enter__(self) -> DriverOwnership:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def _session_lost(self) -> None:
        # Not under the mutex: an acquire() in progress may hold it while waiting for ZooKeeper.
        reason = (
            f"the ZooKeeper session to {self.config.zookeeper_hosts} expired: the driver lock of "
            f"pipeline '{self.layout.pipeline_id}' is lost and another driver may take over"
        )
        log.error("%s; stopping the query", reason)
        self._token = None
        self._on_lost(reason)

    # --- reading -----------------------------------------------------------------------

    @property
    def token(self) -> int | None:
        """The fencing token while this driver holds the pipeline, else None."""
        return self._token

    @property
    def held(self) -> bool:
        """A token is held and, with ZooKeeper, so is the lock (no session loss since)."""
        if self._token is None:
            return False
        return self._lock is None or self._lock.held

    @property
    def session(self) -> ZooKeeperSession | None:
        """The ZooKeeper session, once :meth:`acquire` started it."""
        return self._session

    @property
    def zookeeper_state(self) -> str | None:
        return None if self._session is None else self._session.state

    @property
    def identity(self) -> str:
        """Who this driver is, as recorded with its token (``host:pid:id`` with ZooKeeper)."""
        if self._lock is not None:
            return self._lock.identifier
        return self._identifier if self._identifier is not None else f"pid {os.getpid()}"

    def describe_acquire(self) -> str:
        """What :meth:`acquire` waits for, for a timeout message."""
        if self.config.zookeeper_hosts is None:
            return f"taking the fencing token in {self.config.store_description()}"
        return f"connecting to / locking on ZooKeeper at {self.config.zookeeper_hosts}"

    def read_resume_point(self) -> ResumePoint | None:
        """The resume point, through a short-lived ZooKeeper session if none is open."""
        hosts = self.config.zookeeper_hosts
        if hosts is None or self._session is not None:
            return read_resume_point(self.backend)[0]
        from state.coordinator.zookeeper_resume_points import ZooKeeperResumePoints

        session = self._start_session(hosts)
        try:
            return read_resume_point(ZooKeeperResumePoints(session, self.layout.zookeeper_resume))[
                0
            ]
        finally:
            session.stop()

    def resume_point_writes(
        self,
        deadline: float,
        *,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> Retry:
        """The compare-and-swap loop that moves the resume point, for ``deadline`` seconds.

        It retries lost races and, in ZooKeeper, an unreachable server (the session's calls
        are bounded but not retried). A state store retries its own requests, so its
        transient errors are not retried again here.
        """
        retry_zookeeper = self.config.zookeeper_hosts is not None

        def retriable(err: BaseException) -> bool:
            return lost_race(err) or (retry_zookeeper and isinstance(err, ZooKeeperUnavailable))

        return Retry.until(
            deadline,
            base_delay=0.1,
            max_delay=1.0,
            is_retriable=retriable,
            sleep=sleep,
            clock=clock,
        )


__all__ = ["DriverOwnership"]
