"""A Kafka client's secrets are never shown: not in a ``repr``, not in a client's log.

:class:`Secret` is a secret setting's text (a password, ``sasl.jaas.config``): a client
gets the text, while its ``repr`` (options, settings, pool keys, error messages) is a
fingerprint, which tells two secrets apart within a process and says nothing outside it.
:data:`REDACT` (:class:`RedactSecrets`) is the process's one log filter: every secret
handed to a client (:func:`~state.kafka_settings.resolve_secrets`) is taken out of the
records of kafka-python's loggers, which log each request (a SASL PLAIN authentication's
password among them) and the bytes on the wire at DEBUG, and out of librdkafka's messages
(:mod:`datasource.librdkafka_consumer`), shown as its fingerprint. Which settings are
secrets, and where a reference becomes one, is :mod:`state.kafka_settings`'s.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import secrets
import threading
from typing import Any

# A key for fingerprints that lives as long as the process: a fingerprint tells two
# secrets apart within a process (pool keys) and says nothing outside it.
_FINGERPRINT_KEY = secrets.token_bytes(16)

# kafka-python's loggers that log what goes on the wire: each request (connection), the
# bytes (parser). Every other logger of the kafka package present when a secret is
# resolved gets the filter too.
_WIRE_LOGGERS = ("kafka.net.connection", "kafka.protocol.parser")


class Secret(str):
    """A secret setting's text. Clients get the text; ``repr`` shows a fingerprint only."""

    __slots__ = ()

    def __repr__(self) -> str:
        digest = hmac.new(_FINGERPRINT_KEY, self.encode(), hashlib.sha256).hexdigest()
        return f"<secret {digest[:12]}>"

    def __reduce__(self) -> tuple[Any, ...]:
        return (Secret, (str.__str__(self),))


class RedactSecrets(logging.Filter):
    """Takes the secrets given to it (:meth:`add`) out of the log records of the loggers it
    is installed on: each is replaced by its fingerprint (``<secret 1f3a...>``), as text
    and as a ``bytes`` repr shows it (quotes and backslashes escaped, UTF-8 as ``\\x..``).

    Installed on kafka-python's loggers when a Kafka client is given a secret: at DEBUG it
    logs each request (a SASL PLAIN authentication holds the password) and the bytes it
    sends. A record is only formatted here when its logger is enabled for its level, so
    the filter costs nothing at INFO.
    """

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        # (form as it may appear, replacement); replaced whole, never changed in place:
        # kafka-python's IO threads read it while a client of another thread adds one
        self._forms: tuple[tuple[str, str], ...] = ()
        self._secrets: tuple[str, ...] = ()

    def add(self, secret: str) -> None:
        """Redact ``secret`` from now on (an empty one is nothing to hide), and make sure the
        filter is on every kafka-python logger."""
        if not secret:
            return
        text = str.__str__(secret)
        with self._lock:
            if text not in self._secrets:
                # every secret given, never forgotten: a client made with one may log it
                # for as long as it lives (the reasons in state.secrets, "no secret is
                # ever forgotten")
                kept = (*self._secrets, text)
                self._secrets = kept
                self._forms = tuple(
                    (form, repr(Secret(s)))
                    for s in sorted(kept, key=len, reverse=True)  # a longer one first
                    for form in _shown_forms(s)
                )
        self.install()

    def install(self) -> None:
        """Put the filter on kafka-python's wire loggers and on every other logger of the
        ``kafka`` package that exists (loggers are made when their modules are imported)."""
        names = {
            name
            for name, logger in list(logging.root.manager.loggerDict.items())
            if (name == "kafka" or name.startswith("kafka.")) and isinstance(logger, logging.Logger)
        }
        for name in names.union(_WIRE_LOGGERS):
            logger = logging.getLogger(name)
            if self not in logger.filters:
                logger.addFilter(self)

    def redact(self, text: str) -> str:
        """``text`` with every secret given replaced by its fingerprint."""
        for form, shown in self._forms:
            if form in text:
                text = text.replace(form, shown)
        return text

    def filter(self, record: logging.LogRecord) -> bool:
        if not self._forms:
            return True
        try:
            message = record.getMessage()
        except Exception:  # a malformed call: the handler reports it when it formats it
            return True
        redacted = self.redact(message)
        if redacted != message:
            record.msg, record.args = redacted, None
        return True


def _shown_forms(secret: str) -> set[str]:
    """How ``secret`` may appear in a log line: as text, in a ``str`` repr, and in a
    ``bytes``/``bytearray`` repr quoted either way (its UTF-8 bytes)."""
    raw = secret.encode()
    forms = {
        secret,
        repr(secret)[1:-1],
        repr(raw)[2:-1],
        # with both quote characters about, a repr quotes with ' and escapes it
        repr(b"'\"" + raw)[5:-1],
    }
    return {form for form in forms if form}


REDACT = RedactSecrets()
"""The one filter of the process: every secret a Kafka client was given."""
