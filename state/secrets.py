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

Which files and variables a reference may read is the operator's choice, like Kafka
Connect's ``allowed.paths`` of its ``FileConfigProvider``, through the environment of the
process that resolves it (the driver, each executor, a CLI command):

* ``GTBARRIER_SECRET_FILE_DIRS``: the directories (absolute, ``os.pathsep``-separated) a
  ``${file:...}`` reference may read below; the path is resolved (``..``, symbolic links)
  before it is checked;
* ``GTBARRIER_SECRET_ENV_NAMES``: the variables (comma-separated; ``PREFIX*`` matches a
  prefix) an ``${env:...}`` reference may read.

Unset, a list allows every file (or variable), as a single-tenant deployment expects; set,
only those (empty: none). It is an environment variable of the server's processes, not an
option: whoever writes the pipeline sets its options (and, on Spark Connect, the session's
runtime configuration), and the allowlist exists to bound what they can read. A reference
outside it is refused before the file or variable is looked at, naming the reference's
kind and the allowlist.

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
FILE_DIRS_ENV = "GTBARRIER_SECRET_FILE_DIRS"
"""The directories ``${file:...}`` references may read (unset: any)."""
ENV_NAMES_ENV = "GTBARRIER_SECRET_ENV_NAMES"
"""The variables ``${env:...}`` references may read (unset: any)."""


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
            _check_variable_allowed(env, target, option, reference, where)
            return hide_in_logs(_from_environment(env, target, option, reference, where))
        if provider == "file":
            _check_file_allowed(env, target, option, reference, where)
            return hide_in_logs(_from_file(target, option, reference, where))
        raise SecretReferenceError(
            option,
            reference,
            "names an unknown provider (expected ${env:NAME}, ${file:/path} or ${file:/path:key})",
            where=where,
        )

    return REFERENCE.sub(secret, value)


def _check_variable_allowed(
    env: Mapping[str, str], name: str, option: str, reference: str, where: str
) -> None:
    """Refuse ``name`` unless :data:`ENV_NAMES_ENV` is unset or lists it (checked before
    the variable is read, so that an unlisted one is never told apart from an unset one)."""
    listed = env.get(ENV_NAMES_ENV)
    if listed is None:
        return
    patterns = [p.strip() for p in listed.split(",") if p.strip()]
    for pattern in patterns:
        if name == pattern or (pattern.endswith("*") and name.startswith(pattern[:-1])):
            return
    allowed = ", ".join(patterns) if patterns else "no variable"
    raise SecretReferenceError(
        option,
        reference,
        f"is not allowed: an environment reference may name only the variables of "
        f"{ENV_NAMES_ENV} ({allowed}), set where the reference is resolved",
        where=where,
    )


def _check_file_allowed(
    env: Mapping[str, str], target: str, option: str, reference: str, where: str
) -> None:
    """Refuse a file reference unless :data:`FILE_DIRS_ENV` is unset or the file, its
    ``..`` and symbolic links resolved, lies below one of its directories. Checked before
    the file is opened: whether a file outside exists is not told."""
    listed = env.get(FILE_DIRS_ENV)
    if listed is None:
        return
    dirs = [d.strip() for d in listed.split(os.pathsep) if d.strip()]
    relative = [d for d in dirs if not os.path.isabs(d)]
    if relative:
        raise SecretReferenceError(
            option,
            reference,
            f"cannot be checked: {FILE_DIRS_ENV} holds {', '.join(relative)}; expected "
            f"absolute directories separated by {os.pathsep!r}",
            where=where,
        )
    path, _ = _path_and_key(target)
    if not os.path.isabs(path):
        return  # refused by _from_file before any file is opened
    real = Path(os.path.realpath(path))
    for d in dirs:
        if real.is_relative_to(os.path.realpath(d)):
            return
    allowed = ", ".join(dirs) if dirs else "no directory"
    raise SecretReferenceError(
        option,
        reference,
        f"is not allowed: a file reference may name only files below the directories of "
        f"{FILE_DIRS_ENV} ({allowed}), set where the reference is resolved",
        where=where,
    )


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
