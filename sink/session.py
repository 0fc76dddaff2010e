"""The session settings the barrier sink needs, and the check that they hold.

A no-data micro-batch reads no epoch, so its output is not replay-stable and the barrier
refuses it (docs/PROTOCOL.md, "Batch records"): Spark must not run such batches. Only a
session can turn them off (``gtbarrier.register_all(spark)`` does, or the user with
``spark.conf.set``); the sink's own code runs in Python workers that cannot. Spark hands a
query's explicitly set SQL settings to its tasks as local properties, so every write task
checks the setting there, and the query's first batch fails, before anything is
delivered, with an error that says what to set.
"""

from __future__ import annotations

from collections.abc import Callable

from state.errors import ConfigError

NO_DATA_MICRO_BATCHES = "spark.sql.streaming.noDataMicroBatches.enabled"
REQUIRED = {NO_DATA_MICRO_BATCHES: "false"}


def check_session(local_property: Callable[[str], str | None]) -> None:
    """Raise :class:`ConfigError` naming the setting if the task's session does not have
    every :data:`REQUIRED` value; ``local_property`` is the task's
    ``TaskContext.getLocalProperty`` (None: the setting is not set, Spark's default)."""
    for key, required in REQUIRED.items():
        value = local_property(key)
        if value is None or value.strip().lower() != required:
            shown = "unset (Spark's default: true)" if value is None else value
            raise ConfigError(
                key,
                shown,
                f"{required}: the barrier sink refuses no-data micro-batches. Set it on the "
                f"session before the query starts: spark.conf.set({key!r}, {required!r}) "
                f"(or --conf {key}={required}, or call gtbarrier.register_all(spark))",
                where="barrier",
            )
