"""``consumer=postgres``: its connections, kept per process, and its error translation.

Spark runs the sink's commits in one Python worker that it reuses for every micro-batch,
so a connection is kept from one commit to the next (a pool with the Kafka producers'
policy, :func:`sink.consumers.producer_pool.client_pool`: one idle connection per DSN,
taken out while in use, closed after a minute idle, forgotten in a forked child, closed at
exit). A connection is given back only when it is idle outside a transaction; one that saw
an error is closed.

psycopg's errors become those of :mod:`state.errors`:

* the connection could not be made or was lost, the server is shutting down or starting,
  a serialization failure or deadlock: :class:`~state.errors.DeliveryFailed` (retriable);
* anything the server refused (a type error in the data, a missing column, no
  permission): :class:`~state.errors.CommitFailed` (fatal: the same bundle fails again);
* a connection lost while ``COMMIT`` was under way is neither: the consumer resolves it by
  reading its bookkeeping table
  (:meth:`~sink.consumers.postgres.postgres_consumer.PostgresConsumer.deliver`).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import TransactionStatus

from sink.consumers.producer_pool import client_pool
from state.errors import CommitFailed, DeliveryFailed, GtBarrierError

CONNECT_TIMEOUT_S = 10
# Server answers that a retry can cure: connection exceptions (class 08), serialization
# failure, deadlock, insufficient resources (class 53), operator intervention (57P01-3:
# shutdown, crash, starting up), lock not available.
_RETRIABLE_PREFIXES = ("08", "53")
_RETRIABLE_STATES = {"40001", "40P01", "57P01", "57P02", "57P03", "55P03"}
UNIQUE_VIOLATION = "23505"


def _close(conn: psycopg.Connection[Any]) -> None:
    conn.close()


CONNECTIONS = client_pool("postgres connections", _close)
"""Idle connections by DSN."""


def connect(dsn: str) -> psycopg.Connection[Any]:
    """A new connection (not autocommit: every delivery is one explicit transaction),
    whose client encoding is UTF8 whatever the DSN or the database say."""
    params = conninfo_to_dict(dsn)
    params.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
    params.setdefault("application_name", "gtbarrier")
    # The COPY data is UTF-8 (Arrow strings): the server must read it as such and convert
    # it to the database's encoding. Left to libpq, the client encoding is the database's,
    # and a LATIN1 database would store each UTF-8 byte as a character of its own.
    params["client_encoding"] = "UTF8"
    return psycopg.connect(make_conninfo("", **params), autocommit=False)


def take(dsn: str) -> psycopg.Connection[Any]:
    """An idle pooled connection to ``dsn`` or a new one (now the caller's)."""
    while True:
        pooled = CONNECTIONS.take(dsn)
        if pooled is None:
            return connect(dsn)
        if not pooled.closed:  # else it broke while idle: dropped, and the next take connects
            return pooled


def give_back(dsn: str, conn: psycopg.Connection[Any]) -> None:
    """Pool ``conn`` if it is idle outside a transaction, else close it."""
    if conn.closed or conn.info.transaction_status != TransactionStatus.IDLE:
        conn.close()
        return
    CONNECTIONS.give_back(dsn, conn)


def sqlstate(err: BaseException) -> str | None:
    return getattr(err, "sqlstate", None)


def is_retriable(err: BaseException) -> bool:
    """True if the same statement may succeed on a new connection, later."""
    state = sqlstate(err)
    if state is None:
        return isinstance(err, psycopg.OperationalError | psycopg.InterfaceError)
    return state.startswith(_RETRIABLE_PREFIXES) or state in _RETRIABLE_STATES


def translate(err: BaseException, what: str) -> GtBarrierError:
    """``err`` (from psycopg) as :class:`DeliveryFailed` or :class:`CommitFailed`."""
    state = sqlstate(err)
    code = f" [SQLSTATE {state}]" if state else ""
    message = f"{what}: {type(err).__name__}{code}: {str(err).strip()}"
    if is_retriable(err):
        return DeliveryFailed(message)
    return CommitFailed(message)
