"""A ZooKeeper that refuses the credentials is reported as a refusal, never as "could not
be reached", whichever of the refusal and a connection loss comes first.

The decision is :func:`decide_start` (pure); :class:`ZooKeeperSession` feeds it what its
client saw, here from a scripted stand-in for kazoo's client that orders the two events
both ways. The real server's refusal is in ``integration_tests/test_zookeeper_acls.py``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from kazoo.exceptions import AuthFailedError, ConnectionLoss
from kazoo.protocol.states import KazooState, KeeperState

from state.coordinator import zookeeper_session
from state.coordinator.config import ZooKeeperAuth
from state.coordinator.zookeeper_session import ZooKeeperSession
from state.coordinator.zookeeper_start import StartEvent, StartOutcome, decide_start
from state.errors import CoordinationError, ZooKeeperUnavailable

CONNECTED, AUTHENTICATED = StartEvent.CONNECTED, StartEvent.AUTHENTICATED
REFUSED, LOST = StartEvent.AUTH_REFUSED, StartEvent.CONNECTION_LOST


@pytest.mark.parametrize(
    "events",
    [
        (CONNECTED, REFUSED, LOST),
        (CONNECTED, LOST, REFUSED),
        (CONNECTED, LOST, CONNECTED, REFUSED),
        (CONNECTED, REFUSED, LOST, CONNECTED),
    ],
    ids=["refusal-then-loss", "loss-then-refusal", "loss-reconnect-refusal", "refusal-reconnect"],
)
@pytest.mark.parametrize("deadline_passed", [False, True])
def test_a_refusal_wins_over_a_connection_loss_in_either_order(
    events: tuple[StartEvent, ...], deadline_passed: bool
) -> None:
    outcome = decide_start(events, authenticating=True, deadline_passed=deadline_passed)
    assert outcome is StartOutcome.REFUSED


def test_a_loss_alone_waits_for_the_answer_until_the_deadline() -> None:
    for events in [(), (CONNECTED,), (CONNECTED, LOST), (LOST, CONNECTED)]:
        assert decide_start(events, authenticating=True, deadline_passed=False) is (
            StartOutcome.WAIT
        )
        assert decide_start(events, authenticating=True, deadline_passed=True) is (
            StartOutcome.UNREACHABLE
        )


def test_ready_once_the_credentials_are_answered_or_without_credentials_once_connected() -> None:
    assert decide_start((CONNECTED, AUTHENTICATED), authenticating=True, deadline_passed=False) is (
        StartOutcome.READY
    )
    assert decide_start((CONNECTED,), authenticating=False, deadline_passed=False) is (
        StartOutcome.READY
    )
    assert decide_start((CONNECTED, LOST), authenticating=False, deadline_passed=True) is (
        StartOutcome.UNREACHABLE
    )
    # answered, then lost: not ready until connected again
    assert decide_start(
        (CONNECTED, AUTHENTICATED, LOST), authenticating=True, deadline_passed=False
    ) is (StartOutcome.WAIT)


class _Answer:
    def __init__(self, fn: Callable[[], Any]) -> None:
        self.fn = fn

    def get(self, timeout: float | None = None) -> Any:
        return self.fn()


class _ScriptedClient:
    """kazoo's client as :meth:`ZooKeeperSession.start` uses it, the server refusing the
    credentials and the connection dropping, in the order ``refusal_first`` says."""

    refusal_first = True

    def __init__(self, **arguments: Any) -> None:
        self.listeners: list[Callable[[str], Any]] = []
        self.client_state = KeeperState.CONNECTING
        self.connected = False
        self.probes = 0
        self.stopped = False

    def add_listener(self, listener: Callable[[str], Any]) -> None:
        self.listeners.append(listener)

    def remove_listener(self, listener: Callable[[str], Any]) -> None:
        self.listeners.remove(listener)

    def _to(self, keeper: str, state: str) -> None:
        self.client_state = keeper
        self.connected = state == KazooState.CONNECTED
        for listener in list(self.listeners):
            listener(state)

    def _refuse(self) -> None:
        self._to(KeeperState.AUTH_FAILED, KazooState.LOST)

    def start_async(self) -> threading.Event:
        self._to(KeeperState.CONNECTED, KazooState.CONNECTED)
        live = threading.Event()
        live.set()
        return live

    def exists_async(self, path: str) -> _Answer:
        self.probes += 1
        if self.client_state == KeeperState.AUTH_FAILED:
            return _Answer(lambda: (_ for _ in ()).throw(AuthFailedError()))
        if self.probes > 1:
            return _Answer(lambda: (_ for _ in ()).throw(ConnectionLoss()))

        def first() -> None:
            if self.refusal_first:
                self._refuse()  # the server's answer, then the socket it closed
                raise ConnectionLoss()
            self._to(KeeperState.CONNECTING, KazooState.SUSPENDED)  # dropped unanswered
            # kazoo connects again and the server refuses the credentials once more
            threading.Timer(0.1, self._reconnect_and_refuse).start()
            raise ConnectionLoss()

        return _Answer(first)

    def _reconnect_and_refuse(self) -> None:
        self._to(KeeperState.CONNECTED, KazooState.CONNECTED)
        self._refuse()

    def stop(self) -> None:
        self.stopped = True

    def close(self) -> None:
        pass


@pytest.mark.parametrize("refusal_first", [True, False], ids=["refusal-first", "loss-first"])
def test_the_session_reports_the_refusal_whichever_event_comes_first(
    refusal_first: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    made: list[_ScriptedClient] = []

    class Client(_ScriptedClient):
        def __init__(self, **arguments: Any) -> None:
            super().__init__(**arguments)
            self.refusal_first = refusal_first
            made.append(self)

    monkeypatch.setattr(zookeeper_session, "KazooClient", Client)
    session = ZooKeeperSession(
        "127.0.0.1:2181", call_timeout=1.0, auth=ZooKeeperAuth.parse("kerberos:someone")
    )
    with pytest.raises(CoordinationError) as info:
        session.start(timeout=5.0)
    assert not isinstance(info.value, ZooKeeperUnavailable), str(info.value)
    assert "refused the authentication" in str(info.value)
    assert "'kerberos'" in str(info.value) and "someone" not in str(info.value)
    assert not info.value.retriable
    assert made and made[0].stopped
