"""The coordinator's ZooKeeper session (kazoo), with deadlines, state and ACLs.

:class:`ZooKeeperSession` owns one ``KazooClient``. Every call has a deadline (kazoo's
async API with a timeout), so a ZooKeeper that is down makes calls fail with
:class:`ZooKeeperUnavailable` instead of hanging. The session's state is tracked:
``SUSPENDED`` (connection lost, the session and its ephemeral lock node may still be
alive) and ``LOST`` (the session expired: the lock is gone and another driver may already
own the pipeline). Callbacks run on a thread of their own, never on kazoo's event thread.
What is kept on the session lives beside it: the driver lock
(:mod:`state.coordinator.driver_lock`) and the resume point
(:mod:`state.coordinator.zookeeper_resume_points`).

**ACLs** (``zookeeper_auth``, :class:`~state.coordinator.config.ZooKeeperAuth`). With
credentials the session authenticates on every connection (kazoo's ``auth_data``) and
every znode it creates gets ``CREATOR_ALL_ACL``: ZooKeeper's ``auth`` id, which the server
records as the identity the client authenticated as, with every permission; other
clients get none, so they can neither read nor change the pipeline's znodes (not even
list the lock's holders, or queue up for the lock). :meth:`ZooKeeperSession.prepare_pipeline`
creates the pipeline's root that way before anything else and requires the root, the lock
node and the resume point to carry exactly this identity's ACL: another ACL (another
tenant created the node first, or changed it) is refused naming the node and its ACL, a
digest's hash hidden (:func:`~state.coordinator.zookeeper_acl.shown_acl`); ZooKeeper's
open ACL (a pipeline that ran without credentials) is restricted, with a warning. The
shared parent ``/gtbarrier`` is created create-only for everybody
(:data:`~state.coordinator.zookeeper_acl.SHARED_PARENT_ACL`), so that nobody may delete a
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
import logging
import threading
import time
import warnings
from collections.abc import Callable
from typing import Any

from kazoo.client import KazooClient
from kazoo.exceptions import (
    AuthFailedError,
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
from kazoo.retry import KazooRetry
from kazoo.security import ACL, CREATOR_ALL_ACL, OPEN_ACL_UNSAFE

from state import retry
from state.coordinator.config import ZooKeeperAuth
from state.coordinator.zookeeper_acl import (
    SHARED_PARENT_ACL,
    acl_is_own,
    own_acl,
    shared_parent_admits_anybody,
    shown_acl,
)
from state.coordinator.zookeeper_start import StartEvent, StartOutcome, decide_start
from state.errors import CoordinationError, ZooKeeperUnavailable

log = logging.getLogger(__name__)

#: Errors that mean "ZooKeeper did not answer"; the same call may work later. The driver
#: lock's calls on the session's client translate them as the session's own calls do.
UNAVAILABLE_ERRORS: tuple[type[BaseException], ...] = (
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
        except (*UNAVAILABLE_ERRORS, KazooException):
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
        except UNAVAILABLE_ERRORS as err:
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
