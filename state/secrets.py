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
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

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
    """``value`` with every secret reference replaced by the secret it names.

    ``environ`` stands in for ``os.environ`` (tests). Raises
    :class:`~state.errors.SecretReferenceError` naming ``option`` and the reference.
    """
    env = os.environ if environ is None else environ

    def secret(match: re.Match[str]) -> str:
        provider, target = match.group(1), match.group(2)
        reference = match.group(0)
        if provider == "env":
            return _from_environment(env, target, option, reference, where)
        if provider == "file":
            return _from_file(target, option, reference, where)
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
