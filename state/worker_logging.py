"""Make gtbarrier's INFO lines visible in the Python workers Spark starts.

The source plans epochs and the sink commits bundles in Python workers that Spark's JVM
starts on the driver; their stderr goes to the driver's stderr (the driver log), but
nothing configures :mod:`logging` in them, so INFO records would be dropped. The first
hook that logs calls :func:`ensure_worker_logging`: unless the process configured logging
itself (the root logger has a handler), the ``gtbarrier``, ``datasource``, ``sink`` and
``state`` loggers get one stderr handler at ``$GTBARRIER_LOG_LEVEL`` (default ``INFO``;
``OFF`` adds nothing, ``WARNING`` keeps only warnings and errors), in the format
``$GTBARRIER_LOG_FORMAT`` names (:mod:`state.log_format`: ``text`` or ``json``).
``$GTBARRIER_LOG_SUMMARY_SECONDS`` (:mod:`state.log_summary`) is checked here too, so that
a wrong value fails the first hook before it does anything, not a commit half-way.
"""

from __future__ import annotations

import logging
import os
import sys

from state.log_format import formatter, log_format
from state.log_summary import summary_interval

LEVEL_ENV = "GTBARRIER_LOG_LEVEL"
DEFAULT_LEVEL = "INFO"
PRODUCT_LOGGERS = ("gtbarrier", "datasource", "sink", "state")

_configured = False


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is when a record is emitted (PySpark swaps it)."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> object:
        return sys.stderr

    @stream.setter
    def stream(self, value: object) -> None:
        pass


def worker_log_level() -> int | None:
    """The level ``$GTBARRIER_LOG_LEVEL`` names (None: ``OFF``); INFO if unset or unknown."""
    name = os.environ.get(LEVEL_ENV, DEFAULT_LEVEL).strip().upper()
    if name == "OFF":
        return None
    level = logging.getLevelNamesMapping().get(name)
    return logging.INFO if level is None else level


def ensure_worker_logging() -> None:
    """Once per process: a stderr handler for gtbarrier's loggers, in the format of
    ``$GTBARRIER_LOG_FORMAT``, unless logging is configured already or
    ``$GTBARRIER_LOG_LEVEL`` is ``OFF``.

    Raises :class:`~state.errors.ConfigError` if ``$GTBARRIER_LOG_FORMAT`` or
    ``$GTBARRIER_LOG_SUMMARY_SECONDS`` holds a value they do not take (every call, until
    it is set right: the process is not marked configured)."""
    global _configured  # noqa: PLW0603 - once per process
    if _configured:
        return
    name = log_format()
    summary_interval()
    _configured = True
    level = worker_log_level()
    if level is None or logging.getLogger().handlers:
        return
    handler = _StderrHandler()
    handler.setFormatter(formatter(name))
    for name in PRODUCT_LOGGERS:
        logger = logging.getLogger(name)
        if not logger.handlers:
            logger.addHandler(handler)
            logger.setLevel(level)
