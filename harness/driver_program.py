"""What a driver program started by :class:`harness.driver.DriverRunner` does around its
streaming query, so that every such program reports the same way.

* :func:`program_session`: a local SparkSession with :func:`harness.spark.local_spark_conf`
  in a new work directory under the current one (the runner's), gtbarrier's data sources
  registered unless told otherwise;
* :func:`emit`: one JSON event line on stdout (``event``, the wall time ``t``, fields),
  the lines a test reads from a program it drives;
* :func:`run_query`: prints ``STARTED query <id> run <runId>``, waits for the query to
  end and stops the session. Exit code 0 after ``QUERY FINISHED``; 1 after
  ``QUERY FAILED: <error>`` on stderr. A test that SIGKILLs the program sees neither.

Imported inside a program's ``main`` after its arguments are parsed: pyspark is loaded
only then.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any


def emit(event: str, **fields: Any) -> None:
    """Print one event line (flushed at once: the program may be SIGKILLed next)."""
    print(json.dumps({"event": event, "t": time.time(), **fields}, default=str), flush=True)


def program_session(prefix: str, *, master: str = "local[2]", register: bool = True) -> Any:
    """A SparkSession for a driver program; ``prefix`` names its work directory."""
    from pyspark.sql import SparkSession

    from harness.spark import local_spark_conf

    workdir = Path(tempfile.mkdtemp(prefix=f"{prefix}-", dir=Path.cwd()))
    builder = SparkSession.builder
    for key, value in {**local_spark_conf(workdir), "spark.master": master}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if register:
        import gtbarrier

        gtbarrier.register_all(spark)
    return spark


def run_query(spark: Any, query: Any) -> int:
    """Wait for ``query`` to end, stop ``spark``; the program's exit code."""
    print(f"STARTED query {query.id} run {query.runId}", flush=True)
    try:
        query.awaitTermination()
    except Exception as err:
        print(f"QUERY FAILED: {err}", file=sys.stderr, flush=True)
        return 1
    finally:
        spark.stop()
    print("QUERY FINISHED", flush=True)
    return 0
