"""The one place that decides what gtbarrier's log lines look like: text or JSON.

``$GTBARRIER_LOG_FORMAT`` (``text``, the default, or ``json``) picks the format of the
handler :func:`state.worker_logging.ensure_worker_logging` installs. It is an environment
variable, not a source or sink option, because logging is set up once per process,
before (and apart from) any query's options: one Python worker serves the source's and
the sink's hooks of several queries, and logs before any option is parsed. Spark hands
the driver's environment to the Python workers it starts on the driver, and
``spark.executorEnv.GTBARRIER_LOG_FORMAT`` to the executors' workers.

In JSON, each record is one line holding one object (:class:`JsonFormatter`):

``time`` (ISO 8601, UTC, milliseconds), ``level``, ``logger``, ``message``, the context
fields :data:`CONTEXT` (``pipeline``, ``query``, ``batch``, ``epoch``, ``bundle``,
``event``; ``null`` when the record has none), ``figures`` (counts and durations, an
object, empty when there are none), and, when the record carries them, ``exception``
(the traceback) and ``stack``. A call site passes its fields with :func:`fields`::

    log.debug("...", ..., extra=fields(pipeline=p, epoch=7, event="epoch_planned", records=100))

No secret reaches a line: the message, the traceback, the stack and every text field are
redacted as :func:`state.secrets.redact` and :data:`state.kafka_redaction.REDACT` redact
(the record factory of :mod:`state.secrets` has redacted message and traceback already;
the fields given with ``extra=`` come after it, and a record may come from elsewhere).
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from state.errors import ConfigError
from state.kafka_redaction import REDACT
from state.secrets import redact

FORMAT_ENV = "GTBARRIER_LOG_FORMAT"
FORMATS = ("text", "json")
TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
CONTEXT = ("pipeline", "query", "batch", "epoch", "bundle", "event")
"""The context fields of every JSON line, in order (``null`` when not given)."""

# The attribute of a log record that holds the fields of :func:`fields`: one attribute
# under a name of ours, so that nothing else a record carries is mistaken for a field.
_ATTRIBUTE = "gtbarrier_fields"

Figure = int | float | str | bool | None


@dataclass(frozen=True)
class LogFields:
    """A record's structured fields: its context (:data:`CONTEXT`) and its figures."""

    context: dict[str, Figure]
    figures: dict[str, Figure]


def fields(  # noqa: PLR0913 - the context fields, each by name (keyword-only)
    *,
    pipeline: str | None = None,
    query: str | None = None,
    batch: int | None = None,
    epoch: int | None = None,
    bundle: int | None = None,
    event: str | None = None,
    **figures: Figure,
) -> dict[str, Any]:
    """The ``extra=`` of a log call: its context fields, and its figures (counts,
    durations in seconds) by name. A text line shows none of them (its message says what
    matters); a JSON line shows them all."""
    context: dict[str, Figure] = {
        "pipeline": pipeline,
        "query": query,
        "batch": batch,
        "epoch": epoch,
        "bundle": bundle,
        "event": event,
    }
    return {_ATTRIBUTE: LogFields(context, dict(figures))}


def log_format(environ: Mapping[str, str] | None = None) -> str:
    """The format ``$GTBARRIER_LOG_FORMAT`` names (``text`` if unset or empty).

    Raises :class:`~state.errors.ConfigError` for another value: a typo must not leave an
    operator's log pipeline without the JSON it parses."""
    env = os.environ if environ is None else environ
    name = env.get(FORMAT_ENV, "").strip().lower() or "text"
    if name not in FORMATS:
        raise ConfigError(
            FORMAT_ENV,
            env.get(FORMAT_ENV),
            f"one of {', '.join(FORMATS)}",
            where="environment variable",
        )
    return name


def formatter(name: str) -> logging.Formatter:
    """The formatter of format ``name`` (one of :data:`FORMATS`)."""
    if name == "json":
        return JsonFormatter()
    if name == "text":
        return logging.Formatter(TEXT_FORMAT)
    raise ValueError(f"unknown log format {name!r}")


def hidden(text: str) -> str:
    """``text`` without any secret this process knows (both redactions)."""
    return REDACT.redact(redact(text))


class JsonFormatter(logging.Formatter):
    """One JSON object per record, on one line (module docstring); no secret in it."""

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": hidden(record.getMessage()),
        }
        given = getattr(record, _ATTRIBUTE, None)
        context = given.context if isinstance(given, LogFields) else {}
        figures = given.figures if isinstance(given, LogFields) else {}
        for name in CONTEXT:
            line[name] = _shown(context.get(name))
        line["figures"] = {name: _shown(value) for name, value in figures.items()}
        if record.exc_info and record.exc_info[1] is not None and not record.exc_text:
            record.exc_text = self.formatException(record.exc_info)
        if record.exc_text:
            line["exception"] = hidden(record.exc_text)
        if record.stack_info:
            line["stack"] = hidden(self.formatStack(record.stack_info))
        # default=str: a figure of another type (a path, a decimal) is shown, not dropped
        return json.dumps(line, ensure_ascii=False, default=lambda v: hidden(str(v)))


def _shown(value: Any) -> Any:
    return hidden(value) if isinstance(value, str) else value
