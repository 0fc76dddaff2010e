"""Whether a ZooKeeper session has started, from what its client saw (pure, no kazoo).

A server that refuses the credentials answers the authentication with ``AuthFailed`` and
closes the connection. The client may see the refusal first, or the connection lost first
(the answer unread, or the request that waited for it failed with the connection), and
then connect again and be refused again. Which comes first depends on the threads and the
load, so the decision does not: a refusal seen at any time during the start is the
outcome, never "could not be reached" (an operator with a wrong scheme or password would
look for a network problem).
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import Enum

__all__ = ["StartEvent", "StartOutcome", "decide_start"]


class StartEvent(Enum):
    """What the client saw, in order."""

    CONNECTED = "connected"
    """A connection is up (the server's answer to the credentials may still be pending)."""
    AUTHENTICATED = "authenticated"
    """A request on the connection was answered: the server took the credentials."""
    AUTH_REFUSED = "auth refused"
    """The server refused the credentials (``AuthFailed``)."""
    CONNECTION_LOST = "connection lost"
    """The connection dropped (the client connects again by itself)."""


class StartOutcome(Enum):
    READY = "ready"
    REFUSED = "refused"
    UNREACHABLE = "unreachable"
    WAIT = "wait"


def decide_start(
    events: Sequence[StartEvent], *, authenticating: bool, deadline_passed: bool
) -> StartOutcome:
    """The start's outcome after ``events``.

    * ``REFUSED`` if the server refused the credentials at any point, whatever came
      before or after it (a connection loss, a reconnection, the deadline);
    * ``READY`` if connected now and, with credentials (``authenticating``), a request
      was answered since the start;
    * otherwise ``UNREACHABLE`` once ``deadline_passed``, else ``WAIT`` (a lost
      connection is tried again, and its answer may yet be a refusal).
    """
    if StartEvent.AUTH_REFUSED in events:
        return StartOutcome.REFUSED
    states = [e for e in events if e in (StartEvent.CONNECTED, StartEvent.CONNECTION_LOST)]
    connected = bool(states) and states[-1] is StartEvent.CONNECTED
    if connected and (not authenticating or StartEvent.AUTHENTICATED in events):
        return StartOutcome.READY
    return StartOutcome.UNREACHABLE if deadline_passed else StartOutcome.WAIT
