"""ZooKeeper for the coordinator (kazoo): the session, the driver lock and the resume point.

* :class:`ZooKeeperSession` owns one ``KazooClient``. Every call has a deadline
  (kazoo's async API with a timeout), so a ZooKeeper that is down makes calls fail
  with :class:`ZooKeeperUnavailable` instead of hanging. The session's state is
  tracked: ``SUSPENDED`` (connection lost, the session and its ephemeral lock node may
  still be alive) and ``LOST`` (the session expired: the lock is gone and another
  driver may already own the pipeline). Callbacks run on a thread of their own, never
  on kazoo's event thread.
* :class:`DriverLock` is kazoo's ``Lock`` recipe on ``/gtbarrier/<pipeline>/driver``.
  ``acquire(wait=None)`` fails fast with :class:`DriverLockHeld` naming the holder;
  ``acquire(wait=seconds)`` waits that long (e.g. for a crashed driver's session to
  expire).
* :class:`ZooKeeperResumePoints` keeps the resume point in ``/gtbarrier/<pipeline>/resume``
  and compare-and-swaps it on the znode version.

**ACLs** (``zookeeper_auth``, :class:`~state.coordinator.config.ZooKeeperAuth`). With
credentials the session authenticates on every connection (kazoo's ``auth_data``) and
every znode it creates gets ``CREATOR_ALL_ACL``: ZooKeeper's ``auth`` id, which the server
records as the identity the client authenticated as, with every permission; other
clients get none, so they can neither read nor change the pipeline's znodes (not even
list the lock's holders, or queue up for the lock). :meth:`ZooKeeperSession.prepare_pipeline`
creates the pipeline's root that way before anything else and requires the root, the lock
node and the resume point to carry exactly this identity's ACL: another ACL (another
tenant created the node first, or changed it) is refused naming the node and its ACL, a
digest's hash hidden (:func:`shown_acl`); ZooKeeper's open ACL (a pipeline that ran
without credentials) is restricted, with a warning. The shared parent ``/gtbarrier`` is
created create-only for everybody (:data:`SHARED_PARENT_ACL`), so that nobody may delete a
pipeline's root under it; a chroot keeps ZooKeeper's default ACL. Without credentials
nothing changes: ZooKeeper's open ACL, nothing checked. A refusal (``NoAuth``) is a fatal
:class:`CoordinationError` that names the node and says whether this client
authenticated; a server that refuses the credentials is reported as such, never as
unreachable, whichever of the refusal and the connection loss comes first
(:func:`~state.coordinator.zookeeper_start.decide_start`). The credentials never appear in
a message or a log (kazoo logs the ``Auth`` packet it sends at DEBUG:
:class:`_HideCredentials` blanks it).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import socket
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    AuthFailedError,
    BadVersionError,
    ConnectionClosedError,
    ConnectionLoss,
    KazooException,
    NoAuthError,
    NodeExistsError,
    NoNodeError,
    OperationTimeoutError,
    SessionExpiredError,
)
from kazoo.handlers.threading import KazooTimeoutError
from kazoo.protocol.serialization import Auth
from kazoo.protocol.states import KazooState, KeeperState
from kazoo.recipe.lock import Lock
from kazoo.retry import KazooRetry
from kazoo.security import (
    ACL,
    CREATOR_ALL_ACL,
    OPEN_ACL_UNSAFE,
    Id,
    Permissions,
    make_digest_acl_credential,
)

from state import retry
from state.coordinator.config import ZooKeeperAuth
from state.coordinator.zookeeper_start import StartEvent, StartOutcome, decide_start
from state.errors import (
    ConcurrentModification,
    CoordinationError,
    DriverLockHeld,
    ZooKeeperUnavailable,
)
from state.records.codec import dumps

log = logging.getLogger(__name__)

# Errors that mean "ZooKeeper did not answer"; the same call may work later.
_UNAVAILABLE: tuple[type[BaseException], ...] = (
    ConnectionLoss,
    ConnectionClosedError,
    SessionExpiredError,
    OperationTimeoutError,
    KazooTimeoutError,
)


class _HideCredentials(logging.Filter):
    """Blanks the credentials of the ``Auth`` packets kazoo logs (``Sending request(xid=-4):
    Auth(auth_type=0, scheme='digest', auth='user:password')`` at DEBUG)."""

    def filter(self, record: logging.LogRecord) -> bool:
        if isinstance(record.args, tuple) and any(isinstance(a, Auth) for a in record.args):
            record.args = tuple(
                a._replace(auth="<credentials hidden>") if isinstance(a, Auth) else a
                for a in record.args
            )
        return True


#: The logger of the coordinator's kazoo clients: a child of ``kazoo.client``, so kazoo's
#: logging configuration applies, with the credentials filter attached.
KAZOO_LOG = logging.getLogger("kazoo.client.gtbarrier")
KAZOO_LOG.addFilter(_HideCredentials())


# How long a start waits for the connection at a time before it looks at what the client
# saw again (a refusal may have come meanwhile).
_START_SLICE_S = 0.25


class _StartPending(Exception):
    """A start that has not decided yet: connected with no answer to the credentials, or
    connecting again (:func:`decide_start` said ``WAIT``); retried until its deadline."""


class _StartWatch:
    """What a starting client saw, in order, for :func:`decide_start`: a kazoo listener
    (called on kazoo's connection thread, right after the client's state changed, so the
    state it reads is the one of that change) and the answers of :meth:`probe`."""

    def __init__(self, client: KazooClient) -> None:
        self.client = client
        self._lock = threading.Lock()
        self._events: list[StartEvent] = []

    def __call__(self, state: str) -> None:
        if state == KazooState.CONNECTED:
            self.add(StartEvent.CONNECTED)
        elif state == KazooState.LOST and self.client.client_state == KeeperState.AUTH_FAILED:
            self.add(StartEvent.AUTH_REFUSED)
        else:
            self.add(StartEvent.CONNECTION_LOST)

    def add(self, event: StartEvent) -> None:
        with self._lock:
            self._events.append(event)

    @property
    def events(self) -> tuple[StartEvent, ...]:
        with self._lock:
            return tuple(self._events)

    def probe(self, timeout: float) -> None:
        """One request on the connection: kazoo reports the session connected before the
        server has answered the credentials, and a request waits for that answer. A lost
        connection is recorded by the listener (the start waits for the next one)."""
        if self.client.client_state == KeeperState.AUTH_FAILED:
            self.add(StartEvent.AUTH_REFUSED)
            return
        try:
            self.client.exists_async("/").get(timeout=timeout)
        except AuthFailedError:
            self.add(StartEvent.AUTH_REFUSED)
        except (*_UNAVAILABLE, KazooException):
            return  # no answer on this connection: the next attempt asks again
        else:
            self.add(StartEvent.AUTHENTICATED)


def split_hosts(hosts: str) -> tuple[str, str]:
    """``"h1:2181,h2:2181/chroot"`` -> ``("h1:2181,h2:2181", "/chroot")`` (chroot may be "")."""
    if "/" in hosts:
        servers, chroot = hosts.split("/", 1)
        return servers, "/" + chroot.strip("/") if chroot.strip("/") else ""
    return hosts, ""


class ZooKeeperSession:
    """One kazoo session with bounded calls and state callbacks.

    ``on_lost`` is called (once per loss, on a thread of its own) when the session
    expires; ``on_connected`` whenever the client is connected again. With ``auth`` the
    session authenticates and creates its znodes for that identity alone (see the
    module docstring).
    """

    def __init__(
        self,
        hosts: str,
        *,
        session_timeout: float = 10.0,
        call_timeout: float = 10.0,
        auth: ZooKeeperAuth | None = None,
    ) -> None:
        self.hosts = hosts
        self.servers, self.chroot = split_hosts(hosts)
        self.session_timeout = session_timeout
        self.call_timeout = call_timeout
        self.auth = auth
        self._client: KazooClient | None = None
        self._state = KazooState.LOST
        self._lost_generation = 0
        self._listeners_lost: list[Callable[[], None]] = []
        self._listeners_connected: list[Callable[[], None]] = []
        self._lock = threading.Lock()
        self.connected = threading.Event()

    # --- lifecycle ---------------------------------------------------------------------

    def client_arguments(self) -> dict[str, Any]:
        """The keyword arguments of this session's ``KazooClient`` (the credentials
        resolved now): the authentication and the ACL of new znodes only with ``auth``."""
        arguments: dict[str, Any] = {
            "hosts": self.hosts,
            "timeout": self.session_timeout,
            "connection_retry": KazooRetry(max_tries=-1, delay=0.1, max_delay=1.0),
            "command_retry": None,
            "logger": KAZOO_LOG,
        }
        if self.auth is not None:
            arguments["auth_data"] = [(self.auth.scheme, self.auth.credentials())]
            arguments["default_acl"] = CREATOR_ALL_ACL
        return arguments

    @property
    def identity(self) -> str:
        """Who this client is to ZooKeeper's ACLs, for messages (never the credentials)."""
        if self.auth is None:
            return "an anonymous client (no zookeeper_auth given)"
        return f"a client with zookeeper_auth credentials of scheme '{self.auth.scheme}'"

    def start(self, timeout: float) -> None:
        """Connect within ``timeout`` s, else :class:`ZooKeeperUnavailable` naming the
        servers; a server that refuses the credentials is a fatal :class:`CoordinationError`,
        whether the refusal or a connection loss comes first (:func:`decide_start`)."""
        if self._client is not None:
            return
        client = KazooClient(**self.client_arguments())
        watch = _StartWatch(client)
        client.add_listener(watch)
        with warnings.catch_warnings():
            # kazoo warns if the chroot does not exist yet; it is created just below.
            warnings.simplefilter("ignore")
            live = client.start_async()
        authenticating = self.auth is not None
        deadline = time.monotonic() + timeout

        def attempt() -> StartOutcome:
            outcome = decide_start(
                watch.events, authenticating=authenticating, deadline_passed=False
            )
            remaining = deadline - time.monotonic()
            if outcome is StartOutcome.WAIT and remaining > 0:
                # short waits: a refusal recorded meanwhile is reported at once
                if live.wait(timeout=min(remaining, _START_SLICE_S)) and authenticating:
                    watch.probe(min(self.call_timeout, max(remaining, _START_SLICE_S)))
                outcome = decide_start(
                    watch.events, authenticating=authenticating, deadline_passed=False
                )
            if outcome is StartOutcome.WAIT:
                raise _StartPending
            return outcome

        try:
            outcome = retry.poll_until(
                timeout, is_retriable=lambda err: isinstance(err, _StartPending)
            )(attempt)
        except _StartPending:
            outcome = decide_start(
                watch.events, authenticating=authenticating, deadline_passed=True
            )
        client.remove_listener(watch)
        if outcome is not StartOutcome.READY:
            client.stop()
            client.close()
            if outcome is StartOutcome.REFUSED:
                raise CoordinationError(
                    f"ZooKeeper at {self.servers} refused the authentication of {self.identity}: "
                    "the server has no authProvider for that scheme, or the credentials are "
                    "not valid for it"
                )
            raise ZooKeeperUnavailable(
                f"ZooKeeper at {self.servers} could not be reached within {timeout:g}s "
                f"(zookeeper_hosts={self.hosts!r})"
            )
        client.add_listener(self._on_state)
        self._client = client
        self._state = KazooState.CONNECTED
        self.connected.set()
        if self.chroot:
            self._ensure_chroot(timeout)

    def _ensure_chroot(self, timeout: float) -> None:
        if self.exists("/"):
            return
        # A client without the chroot creates it (a chrooted client cannot create its own root).
        # It authenticates too (a parent may admit only this identity), but the chroot keeps
        # ZooKeeper's default ACL: other pipelines share it.
        arguments = {**self.client_arguments(), "hosts": self.servers}
        arguments.pop("default_acl", None)
        arguments.pop("connection_retry")
        root = KazooClient(**arguments)
        try:
            root.start(timeout=timeout)
            root.ensure_path(self.chroot)
        except KazooTimeoutError:
            raise ZooKeeperUnavailable(f"ZooKeeper at {self.servers} unreachable") from None
        except NoAuthError as err:
            raise self.refused("creating the chroot", self.chroot) from err
        finally:
            root.stop()
            root.close()

    def stop(self) -> None:
        """Close the session (its ephemeral nodes, the driver lock among them, vanish)."""
        client, self._client = self._client, None
        self.connected.clear()
        if client is not None:
            client.remove_listener(self._on_state)
            client.stop()
            client.close()

    @property
    def client(self) -> KazooClient:
        if self._client is None:
            raise CoordinationError(f"ZooKeeper session to {self.hosts} is not started")
        return self._client

    @property
    def state(self) -> str:
        """``"CONNECTED"``, ``"SUSPENDED"`` or ``"LOST"``."""
        return str(self._state)

    @property
    def lost_generation(self) -> int:
        """How many times the session was lost; a lock taken before a loss is gone."""
        return self._lost_generation

    def on_lost(self, callback: Callable[[], None]) -> None:
        self._listeners_lost.append(callback)

    def on_connected(self, callback: Callable[[], None]) -> None:
        self._listeners_connected.append(callback)

    def _on_state(self, state: str) -> None:
        # kazoo's event thread: record and hand the work to another thread.
        with self._lock:
            self._state = state
            if state == KazooState.CONNECTED:
                self.connected.set()
                callbacks = list(self._listeners_connected)
            else:
                self.connected.clear()
                callbacks = []
                if state == KazooState.LOST:
                    self._lost_generation += 1
                    callbacks = list(self._listeners_lost)
        level = logging.INFO if state == KazooState.CONNECTED else logging.WARNING
        log.log(level, "ZooKeeper %s: session %s", self.hosts, state)
        for cb in callbacks:
            threading.Thread(target=cb, name=f"gtbarrier-zk-{state.lower()}", daemon=True).start()

    # --- bounded calls -----------------------------------------------------------------

    def _wait(self, what: str, path: str, async_result: Any) -> Any:
        try:
            return async_result.get(timeout=self.call_timeout)
        except _UNAVAILABLE as err:
            raise ZooKeeperUnavailable(
                f"ZooKeeper at {self.hosts}: {what} {path} failed: {type(err).__name__}: {err}"
            ) from err
        except NoAuthError as err:
            raise self.refused(what, path) from err

    def refused(self, what: str, path: str) -> CoordinationError:
        """The fatal error of a ``NoAuth`` answer: ``path``'s ACL does not admit this client."""
        return CoordinationError(
            f"ZooKeeper at {self.hosts}: {what} {path} was refused (NoAuth): the node's ACL "
            f"does not admit {self.identity}. Give the credentials the pipeline's znodes were "
            "created with (SnapshotCoordinator's zookeeper_auth, the CLI's --zookeeper-auth "
            "or $GTBARRIER_ZOOKEEPER_AUTH)"
        )

    def exists(self, path: str) -> bool:
        return self._wait("exists", path, self.client.exists_async(path)) is not None

    def get(self, path: str) -> tuple[bytes, int] | None:
        """The data and znode version, or None if the node does not exist."""
        try:
            data, stat = self._wait("get", path, self.client.get_async(path))
        except NoNodeError:
            return None
        return bytes(data), int(stat.version)

    def create(self, path: str, data: bytes) -> int:
        """Create a node (and parents); version 0. NodeExistsError if present."""
        self.ensure_path(path.rsplit("/", 1)[0] or "/")
        self._wait("create", path, self.client.create_async(path, data))
        return 0

    def set(self, path: str, data: bytes, version: int) -> int:
        stat = self._wait("set", path, self.client.set_async(path, data, version=version))
        return int(stat.version)

    def delete(self, path: str) -> bool:
        """Delete ``path`` alone (kazoo's ``NotEmptyError`` if it has children, so that a
        node made meanwhile is never deleted unseen); False if it did not exist."""
        try:
            self._wait("deleting", path, self.client.delete_async(path))
        except NoNodeError:
            return False
        return True

    def ensure_path(self, path: str) -> None:
        if path in ("", "/"):
            return
        with contextlib.suppress(NodeExistsError):
            self._wait("ensure_path", path, self.client.ensure_path_async(path))

    def children(self, path: str) -> list[str]:
        """The children of ``path`` (sorted); ``[]`` if it does not exist."""
        try:
            return sorted(self._wait("listing", path, self.client.get_children_async(path)))
        except NoNodeError:
            return []

    def prepare_pipeline(self, root: str, nodes: tuple[str, ...] = ()) -> None:
        """With ``auth``: before anything is created under the pipeline's ``root``, make
        sure that its shared parent lets nobody delete or re-ACL what is under it
        (:data:`SHARED_PARENT_ACL` when this session creates it, or restricts ZooKeeper's
        open ACL), that ``root`` exists, and that ``root`` and each of ``nodes`` that
        exists carries this identity's ACL exactly (:func:`acl_is_own`). A node with
        ZooKeeper's open ACL (a pipeline that ran without credentials) is restricted to
        this identity, with a warning; any other ACL is refused with a fatal
        :class:`CoordinationError` naming the node and its ACL, and nothing is changed.
        Without ``auth``: nothing (znodes get ZooKeeper's open ACL, as they always did)."""
        if self.auth is None:
            return
        parent = root.rsplit("/", 1)[0]
        if parent:
            self._prepare_shared_parent(parent)
        if not self.exists(root):
            with contextlib.suppress(NodeExistsError):
                self._wait("creating", root, self.client.create_async(root, b""))
        own = own_acl(self.auth)
        for node in (root, *nodes):
            self._require_own(node, own)

    def _prepare_shared_parent(self, parent: str) -> None:
        if not self.exists(parent):
            with contextlib.suppress(NodeExistsError):
                self._wait(
                    "creating",
                    parent,
                    self.client.create_async(parent, b"", acl=SHARED_PARENT_ACL, makepath=True),
                )
        try:
            acl, stat = self._wait("reading the ACL of", parent, self.client.get_acls_async(parent))
        except NoNodeError:
            return
        except CoordinationError as err:
            if isinstance(err.__cause__, NoAuthError):
                return  # nobody without a right on it may read it, so nobody may change it
            raise
        if list(acl) == OPEN_ACL_UNSAFE:
            self._set_acl(parent, SHARED_PARENT_ACL, stat.aversion, "created without credentials")
            return
        if shared_parent_admits_anybody(acl):
            raise CoordinationError(
                f"ZooKeeper at {self.hosts}: the shared parent {parent} has the ACL "
                f"{shown_acl(acl)}, which lets any client delete a pipeline's root under it "
                "and make it again with an ACL of its own, or change the parent's ACL. "
                f"Refused; as ZooKeeper's superuser, set its ACL to {shown_acl(SHARED_PARENT_ACL)} "
                "(anybody may create under it, nobody list, delete or re-ACL), or give this "
                "pipeline a chroot of its own in zookeeper_hosts"
            )

    def _require_own(self, path: str, own: list[ACL] | None) -> None:
        try:
            acl, stat = self._wait("reading the ACL of", path, self.client.get_acls_async(path))
        except NoNodeError:
            return
        if acl_is_own(acl, own, self.auth):
            return
        if list(acl) == OPEN_ACL_UNSAFE:
            self._set_acl(path, CREATOR_ALL_ACL, stat.aversion, "created without zookeeper_auth")
            return
        expected = (
            shown_acl(own)
            if own is not None
            else f"one '{self.auth.scheme if self.auth else ''}' identity with every permission"
        )
        raise CoordinationError(
            f"ZooKeeper at {self.hosts}: node {path} has the ACL {shown_acl(acl)}, not this "
            f"identity's alone ({expected}): another client created it or changed its ACL, "
            "and keeps what that ACL gives it. Refused, nothing changed: as ZooKeeper's "
            "superuser, delete the node or set its ACL to this identity's, or use another "
            "pipeline id or a chroot of your own"
        )

    def _set_acl(self, path: str, acl: list[ACL], version: int, why: str) -> None:
        self._wait("restricting the ACL of", path, self.client.set_acls_async(path, acl, version))
        log.warning(
            "ZooKeeper %s: node %s had an open ACL (%s); it is now %s",
            self.hosts,
            path,
            why,
            shown_acl(acl) if acl is SHARED_PARENT_ACL else "restricted to this client's identity",
        )


#: The ACL of the shared parent ``/gtbarrier`` that a session with credentials creates, or
#: makes of ZooKeeper's open ACL: anybody may create a pipeline's root under it (pipelines
#: of other identities, and without credentials, share it); nobody may list, delete or
#: re-ACL what is there (deleting a child needs DELETE on the parent, whatever the child's
#: own ACL), not even this identity: the parent is nobody's.
SHARED_PARENT_ACL: list[ACL] = [ACL(Permissions.CREATE, Id("world", "anyone"))]

# Ids that admit clients without credentials: anybody (world) or any address (ip).
_ANYBODY_SCHEMES = ("world", "ip")
_PERMISSION_LETTERS = (
    (Permissions.CREATE, "c"),
    (Permissions.DELETE, "d"),
    (Permissions.READ, "r"),
    (Permissions.WRITE, "w"),
    (Permissions.ADMIN, "a"),
)


def own_acl(auth: ZooKeeperAuth) -> list[ACL] | None:
    """The ACL ZooKeeper records for a node this identity creates with ``CREATOR_ALL_ACL``:
    for ``digest``, ``digest:<user>:<base64 sha1 of user:password>`` with every
    permission; None for another scheme, whose id only the server's provider knows."""
    if auth.scheme != "digest":
        return None
    user, _, password = auth.credentials().partition(":")
    return [ACL(Permissions.ALL, Id("digest", make_digest_acl_credential(user, password)))]


def acl_is_own(acl: list[ACL], own: list[ACL] | None, auth: ZooKeeperAuth | None) -> bool:
    """Whether ``acl`` is this identity's alone: exactly ``own`` (``digest``), or, for a
    scheme whose id cannot be known here, one entry of that scheme with every permission."""
    if own is not None:
        return list(acl) == own
    return (
        auth is not None
        and len(acl) == 1
        and acl[0].perms == Permissions.ALL
        and acl[0].id.scheme == auth.scheme
    )


def shared_parent_admits_anybody(acl: list[ACL]) -> bool:
    """Whether the shared parent lets a client without credentials (``world``, ``ip``)
    delete, write or re-ACL under it; creating and reading are shared by design."""
    harmful = Permissions.DELETE | Permissions.WRITE | Permissions.ADMIN
    return any(a.id.scheme in _ANYBODY_SCHEMES and a.perms & harmful for a in acl)


def shown_acl(acl: list[ACL]) -> str:
    """``acl`` as ZooKeeper's CLI shows it (``scheme:id:cdrwa``), a digest's hash hidden:
    ``digest:user:<hash hidden>`` (the hash of the password can be attacked offline)."""
    shown = []
    for entry in acl:
        if entry.id.scheme == "digest":
            ident = f"digest:{entry.id.id.partition(':')[0]}:<hash hidden>"
        else:
            ident = f"{entry.id.scheme}:{entry.id.id}"
        letters = "".join(c for bit, c in _PERMISSION_LETTERS if entry.perms & bit)
        shown.append(f"{ident}:{letters or '-'}")
    return "[" + ", ".join(shown) + "]"


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
        except _UNAVAILABLE as err:
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
        except (KazooException, *_UNAVAILABLE) as err:
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
        except (KazooException, *_UNAVAILABLE) as err:
            # The node is ephemeral: it goes with the session, which the caller closes next.
            log.info(
                "driver lock %s not released explicitly (%s); it ends with the session",
                self.path,
                err,
            )


class ZooKeeperResumePoints:
    """The resume point as JSON in one znode; versions are znode versions."""

    def __init__(self, session: ZooKeeperSession, path: str) -> None:
        self.session = session
        self.path = path

    @property
    def description(self) -> str:
        return f"ZooKeeper {self.session.hosts} node {self.path}"

    def read(self) -> tuple[dict[str, Any] | None, str | None]:
        hit = self.session.get(self.path)
        if hit is None:
            return None, None
        data, version = hit
        return json.loads(data), str(version)

    def write(self, record: dict[str, Any], expected_version: str | None) -> str:
        data = dumps(record)
        try:
            if expected_version is None:
                return str(self.session.create(self.path, data))
            return str(self.session.set(self.path, data, int(expected_version)))
        except (NodeExistsError, BadVersionError, NoNodeError) as err:
            raise ConcurrentModification(
                f"zookeeper://{self.session.hosts}", self.path, expected_version
            ) from err
