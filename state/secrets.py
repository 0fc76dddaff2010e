"""Secret references in option values, resolved where the client is created.

An option value may refer to a secret instead of holding it, in the syntax of Kafka's
``ConfigProvider``s:

* ``${env:NAME}``: the environment variable ``NAME`` of the process that creates the client;
* ``${file:/abs/path}``: the whole file, without its trailing line break;
* ``${file:/abs/path:key}``: ``key`` of a Java-style properties file (``key=value`` or
  ``key: value`` lines; ``#`` and ``!`` start comments).

A reference may stand for the whole value or be part of it
(``postgresql://app:${env:PGPASSWORD}@db/orders``). The value that Spark plans, checkpoints
and logs keeps the reference; :func:`resolve` turns it into the secret only where a client
is made, on the driver or in an executor's task, so the secret never sits in the query
plan, the checkpoint or Spark's event log.

A reference that cannot be resolved (an unset variable, a missing file or key, another
provider than ``env`` and ``file``) raises
:class:`~state.errors.SecretReferenceError`, which names the option and the reference,
never a value.

A secret a client is given must not come back in a log record: the client's library may
log it (botocore logs every request it signs at DEBUG, its ``Authorization`` header naming
the access key id; kafka-python and kazoo log their authentication packets).
:func:`hide_in_logs` takes a secret out of every log record the process makes from then
on, whichever logger makes it; :func:`resolve` hides every secret it resolves, and the
places that hand a client a secret given inline hide it themselves. :func:`redact` takes
the hidden secrets out of a text (an error message that quotes what a client said).
"""

from __future__ import annotations

import logging
import os
import re
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

from state.errors import SecretReferenceError

REFERENCE = re.compile(r"\$\{([A-Za-z][A-Za-z0-9_]*):([^}]*)\}")
PROVIDERS = ("env", "file")


def has_reference(value: str) -> bool:
    """Whether ``value`` holds a secret reference."""
    return REFERENCE.search(value) is not None


def resolve(
    value: str,
    *,
    option: str,
    where: str = "",
    environ: Mapping[str, str] | None = None,
) -> str:
    """``value`` with every secret reference replaced by the secret it names, each secret
    hidden from log records (:func:`hide_in_logs`).

    ``environ`` stands in for ``os.environ`` (tests). Raises
    :class:`~state.errors.SecretReferenceError` naming ``option`` and the reference.
    """
    env = os.environ if environ is None else environ

    def secret(match: re.Match[str]) -> str:
        provider, target = match.group(1), match.group(2)
        reference = match.group(0)
        if provider == "env":
            return hide_in_logs(_from_environment(env, target, option, reference, where))
        if provider == "file":
            return hide_in_logs(_from_file(target, option, reference, where))
        raise SecretReferenceError(
            option,
            reference,
            "names an unknown provider (expected ${env:NAME}, ${file:/path} or ${file:/path:key})",
            where=where,
        )

    return REFERENCE.sub(secret, value)


def _from_environment(
    env: Mapping[str, str], name: str, option: str, reference: str, where: str
) -> str:
    if not name:
        raise SecretReferenceError(option, reference, "names no variable", where=where)
    found = env.get(name)
    if found is None:
        raise SecretReferenceError(
            option, reference, "names an environment variable that is not set", where=where
        )
    return found


def _from_file(target: str, option: str, reference: str, where: str) -> str:
    path, key = _path_and_key(target)
    if not os.path.isabs(path):
        raise SecretReferenceError(
            option, reference, "must name an absolute path (${file:/abs/path[:key]})", where=where
        )
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SecretReferenceError(
            option, reference, "names a file that does not exist", where=where
        ) from None
    except OSError as err:
        raise SecretReferenceError(
            option,
            reference,
            f"names a file that cannot be read ({type(err).__name__})",
            where=where,
        ) from None
    except UnicodeDecodeError:
        raise SecretReferenceError(
            option, reference, "names a file that is not UTF-8 text", where=where
        ) from None
    if key is None:
        return text.removesuffix("\n").removesuffix("\r")
    properties = parse_properties(text)
    if key not in properties:
        raise SecretReferenceError(
            option, reference, "names a key that the properties file does not have", where=where
        )
    return properties[key]


def _path_and_key(target: str) -> tuple[str, str | None]:
    """``/path`` or ``/path:key`` (a key is what follows the last ``:`` after the last
    ``/``, so paths with ``:`` in a directory name still work)."""
    slash = target.rfind("/")
    colon = target.rfind(":")
    if colon > slash:
        return target[:colon], target[colon + 1 :]
    return target, None


def parse_properties(text: str) -> dict[str, str]:
    """The keys and values of a Java-style properties file (one ``key=value`` or
    ``key: value`` per line; blank lines and ``#``/``!`` comments skipped; surrounding
    whitespace trimmed). Line continuations and escapes are not supported."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line[0] in "#!":
            continue
        cut = min((i for i in (line.find("="), line.find(":")) if i >= 0), default=-1)
        if cut < 0:
            out[line] = ""
            continue
        out[line[:cut].strip()] = line[cut + 1 :].strip()
    return out


# --- secrets out of log records --------------------------------------------------------------

# Shorter secrets are not taken out of log records: masking every occurrence of two or three
# characters would garble the records and hide next to nothing.
MIN_HIDDEN = 4
# No secret is ever forgotten: a process cannot know when one is out of use (a cached
# client, a library's connection or an error raised later may still show it), and
# forgetting one that is in use is the leak this guards against. The set grows only with
# the distinct secrets the process is given (one per credential, and one per rotation),
# each with at most six forms: a long-lived worker of many pipelines keeps hundreds, not
# millions, and a record's redaction costs one substring search per form.
MASK = "***"


class _Hidden:
    """The secrets of this process that no log record may show, and the forms each may take
    in a record's text: every secret it was given, for its whole life (none is forgotten).
    Replaced whole under a lock, read without one (the log record factory runs on every
    thread that logs)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.secrets: tuple[str, ...] = ()
        self.forms: tuple[str, ...] = ()
        self.installed = False

    def add(self, secret: str) -> None:
        with self.lock:
            if secret in self.secrets:
                return
            self.secrets = (*self.secrets, secret)
            # a longer form first: a secret that holds another is masked whole
            forms = set(self.forms).union(_forms(secret))
            self.forms = tuple(sorted(forms, key=len, reverse=True))
            if not self.installed:
                _install_record_factory()
                self.installed = True


_HIDDEN = _Hidden()


def _forms(secret: str) -> set[str]:
    """How ``secret`` may stand in a log record's text: as is, escaped as a ``str`` or a
    ``bytes`` repr shows it (quotes and backslashes escaped, UTF-8 as ``\\x..``), and
    URL-encoded (a DSN's or a catalog URI's password, a query string)."""
    raw = secret.encode()
    forms = {
        secret,
        repr(secret)[1:-1],
        repr(raw)[2:-1],
        repr(b"'\"" + raw)[5:-1],  # with both quotes about, a repr escapes the '
        quote(secret, safe=""),
        quote_plus(secret, safe=""),
    }
    return {f for f in forms if len(f) >= MIN_HIDDEN}


def hide_in_logs(secret: str) -> str:
    """Take ``secret`` out of every log record this process makes from now on, whichever
    logger makes it (gtbarrier's, kafka-python's, botocore's, kazoo's, psycopg's...), and
    return it. Called where a client is given a secret, resolved from a reference or given
    inline: the client's library may log it (botocore logs the access key id of every
    request it signs at DEBUG). A secret shorter than :data:`MIN_HIDDEN` characters is not
    taken out."""
    if len(secret) >= MIN_HIDDEN:
        _HIDDEN.add(secret)
    return secret


def resolve_secret(
    value: str, *, option: str, where: str = "", environ: Mapping[str, str] | None = None
) -> str:
    """A value that is a secret as a whole (a password, a key, a token), its references
    resolved (:func:`resolve`) and hidden from log records (:func:`hide_in_logs`)."""
    return hide_in_logs(resolve(value, option=option, where=where, environ=environ))


def redact(text: str) -> str:
    """``text`` with every secret hidden so far (:func:`hide_in_logs`) replaced by ``***``:
    for an error message that may quote what a client was given."""
    for form in _HIDDEN.forms:
        if form in text:
            text = text.replace(form, MASK)
    return text


def _install_record_factory() -> None:
    """Wrap the process's log record factory once: each record's message (and the text of
    the exception it carries) is made secret-free when it is made. A record is made only
    when its logger is enabled for its level, so at INFO the DEBUG chatter costs nothing."""
    make = logging.getLogRecordFactory()

    def factory(*args: Any, **kwargs: Any) -> logging.LogRecord:
        record = make(*args, **kwargs)
        if _HIDDEN.forms:
            _redact_record(record)
        return record

    logging.setLogRecordFactory(factory)


def _redact_record(record: logging.LogRecord) -> None:
    try:
        message = record.getMessage()
    except Exception:  # a record that cannot be formatted: logging reports it, as ever
        return
    hidden = redact(message)
    if hidden != message:
        record.msg, record.args = hidden, None
    if record.exc_info and record.exc_info[1] is not None:
        text = logging.Formatter().formatException(record.exc_info)
        hidden = redact(text)
        if hidden != text:
            # a formatter shows exc_text when it is set, rather than formatting anew
            record.exc_text = hidden
    if record.stack_info:
        record.stack_info = redact(record.stack_info)
