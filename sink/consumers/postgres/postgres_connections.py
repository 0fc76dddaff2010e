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

Making a connection is where the DSN's secret references are resolved
(:func:`resolved_conninfo`): the settings, which Spark pickles and plans, keep them. A
connection the server or libpq refuses for a reason no retry can cure (the credentials,
the server's certificate, TLS, the database: :func:`connection_refusal`) is a
:class:`~state.errors.ConfigError` naming ``consumer.postgres.dsn`` and the server, fatal;
any other failure to connect is a retriable :class:`~state.errors.DeliveryFailed`. Both
messages are scrubbed of the password and of every resolved secret
(:func:`~sink.consumers.postgres.postgres_options.redact_text`).
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.pq import TransactionStatus

from sink.consumers.postgres.postgres_options import DSN, parseable, redact_dsn, redact_text
from sink.consumers.producer_pool import client_pool
from state.errors import CommitFailed, ConfigError, DeliveryFailed, GtBarrierError
from state.secrets import has_reference, hide_in_logs, resolve

CONNECT_TIMEOUT_S = 10
# Server answers that a retry can cure: connection exceptions (class 08), serialization
# failure, deadlock, insufficient resources (class 53), operator intervention (57P01-3:
# shutdown, crash, starting up), lock not available.
_RETRIABLE_PREFIXES = ("08", "53")
_RETRIABLE_STATES = {"40001", "40P01", "57P01", "57P02", "57P03", "55P03"}
UNIQUE_VIOLATION = "23505"
WHERE = "barrier"

# libpq's words for a connection refused for good (it gives no SQLSTATE before a session
# exists), each with what the DSN must have instead. Checked in this order.
_CERTIFICATE = (
    "sslrootcert naming the CA that signed the server's TLS certificate, and a host name "
    "the certificate holds (sslmode=verify-full checks both)"
)
_REFUSALS = (
    ("certificate verify failed", _CERTIFICATE),
    ("does not match host name", _CERTIFICATE),
    ("root certificate file", _CERTIFICATE),
    ("certificate", _CERTIFICATE),
    ("server does not support SSL", "a server that speaks TLS, as the DSN's sslmode requires"),
    ("password authentication failed", "credentials the server accepts (user and password)"),
    ("authentication failed", "credentials the server accepts (user and password)"),
    ("no password supplied", "credentials the server accepts (a password: it asked for one)"),
    (
        "no pg_hba.conf entry",
        "credentials the server accepts: its pg_hba.conf admits no connection of this user, "
        "database and encryption from this host (it may require TLS: sslmode)",
    ),
    ("does not exist", "a database and user that exist on the server"),
)


def _close(conn: psycopg.Connection[Any]) -> None:
    conn.close()


CONNECTIONS = client_pool("postgres connections", _close)
"""Idle connections by DSN."""


def resolved_conninfo(dsn: str) -> tuple[str, tuple[str, ...]]:
    """The connection string libpq gets for ``dsn``, and the secrets resolved into it.

    The DSN is parsed with its references kept as values
    (:func:`~sink.consumers.postgres.postgres_options.parseable`), then each value's
    references are resolved (:func:`state.secrets.resolve`) and the string is made anew, so
    a secret is one parameter's value whatever characters it holds. Raises
    :class:`~state.errors.SecretReferenceError` naming ``consumer.postgres.dsn`` and the
    reference. The client encoding is UTF8 whatever the DSN or the database say."""
    params = conninfo_to_dict(parseable(dsn))
    secrets: list[str] = []
    for key, value in params.items():
        if isinstance(value, str) and has_reference(value):
            secret = resolve(value, option=DSN.name, where=WHERE)  # hidden from log records
            params[key] = secret
            secrets.append(secret)
    if isinstance(password := params.get("password"), str):
        hide_in_logs(password)  # a password given inline, too
    params.setdefault("connect_timeout", CONNECT_TIMEOUT_S)
    params.setdefault("application_name", "gtbarrier")
    # The COPY data is UTF-8 (Arrow strings): the server must read it as such and convert
    # it to the database's encoding. Left to libpq, the client encoding is the database's,
    # and a LATIN1 database would store each UTF-8 byte as a character of its own.
    params["client_encoding"] = "UTF8"
    return make_conninfo("", **params), tuple(secrets)


def connection_refusal(text: str) -> str | None:
    """What the DSN must have instead, when libpq's ``text`` says the connection was
    refused for a reason no retry can cure; None when a retry may succeed (unreachable,
    starting up, too many connections)."""
    for words, expected in _REFUSALS:
        if words in text:
            return expected
    return None


def server_of(dsn: str) -> str:
    """``host:port`` of ``dsn`` (libpq's defaults where it says nothing), for messages."""
    try:
        params = conninfo_to_dict(parseable(dsn))
    except Exception:
        return "<unparseable DSN>"
    host = str(params.get("host") or params.get("hostaddr") or "localhost (unix socket)")
    return f"{host}:{params.get('port') or 5432}"


def connect(dsn: str) -> psycopg.Connection[Any]:
    """A new connection to ``dsn`` (not autocommit: every delivery is one explicit
    transaction), its references resolved here (:func:`resolved_conninfo`).

    Raises :class:`~state.errors.ConfigError` naming ``consumer.postgres.dsn`` (shown
    without its password), the server and the reason when the connection is refused for
    good (:func:`connection_refusal`), or when a reference cannot be resolved;
    :class:`~state.errors.DeliveryFailed` (retriable) when it cannot be made for now.
    Neither message holds the password or a resolved secret."""
    conninfo, secrets = resolved_conninfo(dsn)
    try:
        return psycopg.connect(conninfo, autocommit=False)
    except psycopg.Error as err:
        raw = str(err).strip()
        said = redact_text(raw, dsn, secrets)
        server = server_of(dsn)
        expected = connection_refusal(raw)
        failure: GtBarrierError
        if expected is not None:
            failure = ConfigError(
                DSN.name,
                redact_dsn(dsn),
                f"{expected}: PostgreSQL server {server} refused the connection ({said})",
                where=WHERE,
            )
        else:
            failure = DeliveryFailed(
                f"cannot connect to PostgreSQL server {server}: {type(err).__name__}: {said}"
            )
        # psycopg's error is kept as the cause (tracebacks show it) only when it holds no
        # secret, which its text would if libpq quoted one.
        if said != raw:
            raise failure from None
        raise failure from err


def take(dsn: str) -> psycopg.Connection[Any]:
    """An idle pooled connection to ``dsn`` or a new one (now the caller's); raises as
    :func:`connect`."""
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
