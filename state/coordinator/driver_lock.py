"""The one-driver-per-pipeline lock on ``/gtbarrier/<pipeline>/driver`` (kazoo's ``Lock``).

:class:`DriverLock` takes the lock on a
:class:`~state.coordinator.zookeeper_session.ZooKeeperSession`: ``acquire(wait=None)``
fails fast with :class:`DriverLockHeld` naming the holder, unless the holder announced
that it is stopping (then it waits up to :data:`HANDOVER_WAIT`); ``acquire(wait=seconds)``
waits that long (e.g. for a crashed driver's session to expire). A lock taken before the
session was lost is no longer held: its ephemeral node went with the session.
"""

from __future__ import annotations

import logging
import os
import socket
import uuid

from kazoo.exceptions import KazooException, NoAuthError
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.states import KazooState
from kazoo.recipe.lock import Lock

from state.coordinator.zookeeper_session import UNAVAILABLE_ERRORS, ZooKeeperSession
from state.errors import DriverLockHeld, ZooKeeperUnavailable

log = logging.getLogger(__name__)


STOPPING = " (stopping)"
"""Appended to a lock node's identifier by a driver that stops gracefully."""

HANDOVER_WAIT = 60.0
"""Seconds a new driver (``driver_wait=None``) waits for the lock of a driver that stops:
more than :data:`state.coordinator.graceful_stop.STOP_GRACE` plus the time to close."""


def driver_identifier() -> str:
    """Who holds the lock, for error messages: ``host:pid:random``."""
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class DriverLock:
    """The one-driver-per-pipeline lock (kazoo ``Lock`` recipe; ephemeral sequential nodes)."""

    def __init__(self, session: ZooKeeperSession, path: str, pipeline_id: str) -> None:
        self.session = session
        self.path = path
        self.pipeline_id = pipeline_id
        self.identifier = driver_identifier()
        self._lock: Lock | None = None
        self._session_generation = -1

    @property
    def held(self) -> bool:
        """Held and not invalidated by a session loss since it was taken."""
        return (
            self._lock is not None
            and self._lock.is_acquired
            and self._session_generation == self.session.lost_generation
        )

    def acquire(self, wait: float | None) -> None:
        """Take the lock. ``wait=None``: fail fast with :class:`DriverLockHeld`, unless the
        holder announced that it is stopping (:meth:`announce_stopping`): then wait up to
        :data:`HANDOVER_WAIT` seconds for it. Else wait up to ``wait`` seconds."""
        if self.held:
            return
        lock = Lock(self.session.client, self.path, self.identifier)
        got = self._take(lock, wait)
        holders = "" if got else self._holders(lock)
        if not got and wait is None and holders.endswith(STOPPING):
            log.info(
                "pipeline %s: the driver holding lock %s is stopping (%s); waiting up to %gs "
                "for it",
                self.pipeline_id,
                self.path,
                holders,
                HANDOVER_WAIT,
            )
            lock = Lock(self.session.client, self.path, self.identifier)
            got = self._take(lock, HANDOVER_WAIT)
            holders = "" if got else self._holders(lock)
        if not got:
            how = "is held" if wait is None else f"was not released within {wait:g}s"
            raise DriverLockHeld(
                f"pipeline '{self.pipeline_id}' already has a driver: the lock {self.path} on "
                f"ZooKeeper {self.session.hosts} {how} (holder: {holders or 'unknown'}). "
                "Stop that driver, or pass driver_wait='60s' to wait for it (a crashed "
                "driver's lock is released when its ZooKeeper session times out)."
            )
        self._lock = lock
        self._session_generation = self.session.lost_generation
        log.info(
            "pipeline %s: driver lock %s taken by %s", self.pipeline_id, self.path, self.identifier
        )

    def _take(self, lock: Lock, wait: float | None) -> bool:
        try:
            if wait is None:
                return bool(lock.acquire(blocking=False))
            return bool(lock.acquire(blocking=True, timeout=wait))
        except KazooTimeoutError:
            return False
        except UNAVAILABLE_ERRORS as err:
            raise ZooKeeperUnavailable(
                f"ZooKeeper at {self.session.hosts}: taking lock {self.path} failed: {err}"
            ) from err
        except NoAuthError as err:
            raise self.session.refused("taking the driver lock", self.path) from err

    def announce_stopping(self) -> None:
        """Mark this driver's lock node as stopping: a driver started now waits for the
        lock (:data:`HANDOVER_WAIT`) instead of failing. Best effort: an unreachable
        ZooKeeper leaves the node as it was."""
        lock = self._lock
        if lock is None or lock.node is None or not self.held:
            return
        node = f"{self.path}/{lock.node}"
        try:
            self.session.client.set(node, f"{self.identifier}{STOPPING}".encode())
        except (KazooException, *UNAVAILABLE_ERRORS) as err:
            log.info("driver lock %s: could not mark it as stopping: %s", node, err)

    @staticmethod
    def _holders(lock: Lock) -> str:
        try:
            return ", ".join(str(c) for c in lock.contenders()[:1])
        except KazooException:
            return ""

    def release(self) -> None:
        """Delete the lock node if ZooKeeper is reachable; otherwise the node ends with the
        session (closing the session is what releases it then)."""
        lock, self._lock = self._lock, None
        if lock is None:
            return
        if self.session.state != KazooState.CONNECTED:
            return  # a release would wait for a connection that may never come
        try:
            lock.release()
        except (KazooException, *UNAVAILABLE_ERRORS) as err:
            # The node is ephemeral: it goes with the session, which the caller closes next.
            log.info(
                "driver lock %s not released explicitly (%s); it ends with the session",
                self.path,
                err,
            )
