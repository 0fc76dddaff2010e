"""The driver program of ``test_secrets_never_leak.py`` (run by the ``driver`` fixture).

Everything it is to do comes in a JSON file (``--config``), never on its command line (the
harness logs that) nor in its environment: the options hold the secrets, inline or as
references. It

1. starts a SparkSession with the given settings (the test's: a standalone cluster, the
   event log on, logs at INFO) and logs every Python record of this process at DEBUG to
   ``python_log`` (the third-party clients' included: kazoo, kafka-python, botocore,
   psycopg, urllib3, pyiceberg);
2. runs the snapshot coordinator for the pipeline named by ``coordinator.pipeline``
   (``recover()`` with ``zookeeper_auth``, its fencing token given to that query's sink,
   ``watch``, one ``request_snapshot`` after the query), if any;
3. starts every query of ``queries`` (gtkafka -> barrier, ``Trigger.AvailableNow``) at
   once and waits for all; records whose value starts with ``poison`` get a null ``gt``
   (a row every consumer refuses: a dead letter under ``errors.tolerance=all``);
4. provokes each failure of ``failures`` in turn: a query (``kind: query``) that must fail
   (a bad option next to a secret, a wrong password, an unreachable server), or the
   coordinator's ``recover()`` (``kind: coordinator``);

and writes ``--report``: per query whether it finished (and its error's texts if not),
the coordinator's status, and for each failure every text a user would see of its error
(``str``, ``repr``, the traceback with its causes, Spark's JVM stack trace). It also
prints each error as an application would (to stderr), so that the driver's output holds
them too. Exits 0 when it got that far, whatever failed.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import traceback
from pathlib import Path
from typing import Any

QUERY_TIMEOUT = 240.0


def error_texts(err: BaseException) -> list[str]:
    """What a user may see of ``err``: its text, repr, traceback (causes and context
    included) and, for an error from Spark's JVM, its Java message and stack trace."""
    texts = [str(err), repr(err), "".join(traceback.format_exception(err))]
    for name in ("getMessage", "getErrorClass", "getSqlState"):
        method = getattr(err, name, None)
        if callable(method):
            try:
                texts.append(str(method()))
            except Exception as inner:
                texts.append(f"{name}: {inner!r}")
    for name in ("desc", "stackTrace", "_stackTrace"):
        value = getattr(err, name, None)
        if value is not None:
            texts.append(str(value))
    return texts


def build_query(spark: Any, spec: dict[str, Any], extra_sink: dict[str, str]) -> Any:
    from pyspark.sql import functions as sf

    df = spark.readStream.format("gtkafka").options(**spec["source"]).load()
    df.explain(extended=True)  # the plans with the source's options, as a user may print them
    gt = sf.when(sf.expr("CAST(value AS STRING) LIKE 'poison%'"), sf.lit(None)).otherwise(
        sf.col("gt")
    )
    return (
        df.select("key", "value", gt.alias("gt"))
        .writeStream.format("barrier")
        .options(**spec["sink"], **extra_sink)
        .option("checkpointLocation", spec["checkpoint"])
        .queryName(spec["name"])
        .trigger(availableNow=True)
        .start()
    )


def await_query(query: Any) -> list[str] | None:
    """None if ``query`` finished, else the texts of its error."""
    try:
        finished = query.awaitTermination(QUERY_TIMEOUT)
    except Exception as err:
        print(f"QUERY {query.name} FAILED: {err}", file=sys.stderr, flush=True)
        return error_texts(err)
    if not finished:
        query.stop()
        return [f"query {query.name} did not finish within {QUERY_TIMEOUT}s"]
    return None


def run_queries(spark: Any, config: dict[str, Any], report: dict[str, Any]) -> None:
    from gtbarrier import SnapshotCoordinator

    coordinated: dict[str, Any] | None = config.get("coordinator")
    coordinator = None
    watched = None
    extra: dict[str, dict[str, str]] = {}
    if coordinated is not None:
        coordinator = SnapshotCoordinator(spark, **coordinated["args"])
        coordinator.recover()
        watched = coordinated["args"]["pipeline_id"]
        extra[watched] = {"fencing.token": str(coordinator.fencing_token)}
    queries = {}
    for spec in config["queries"]:
        pipeline = spec["sink"]["pipeline.id"]
        queries[spec["name"]] = build_query(spark, spec, extra.get(pipeline, {}))
        if coordinator is not None and pipeline == watched:
            coordinator.watch(queries[spec["name"]])
    report["queries"] = {name: await_query(q) for name, q in queries.items()}
    if coordinator is not None:
        try:
            report["snapshot"] = coordinator.request_snapshot(wait="60s")
            report["coordinator_status"] = coordinator.status()
            print(f"COORDINATOR STATUS {report['coordinator_status']}", flush=True)
        finally:
            coordinator.close()


def provoke(spark: Any, failure: dict[str, Any]) -> list[str]:
    """The texts of the error ``failure`` must raise (a note if it raised none)."""
    from gtbarrier import SnapshotCoordinator

    try:
        if failure["kind"] == "coordinator":
            with SnapshotCoordinator(spark, **failure["args"]) as coordinator:
                coordinator.recover()
        else:
            error = await_query(build_query(spark, failure, {}))
            if error is not None:
                return error
    except Exception as err:
        print(f"FAILURE {failure['name']}: {err}", file=sys.stderr, flush=True)
        traceback.print_exc()
        return error_texts(err)
    return [f"NO ERROR: {failure['name']} did not fail"]


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--config", required=True, type=Path)
    parser.add_argument("--report", required=True, type=Path)
    args = parser.parse_args()
    config = json.loads(args.config.read_text())

    # every record of this process at DEBUG, to a file (the test's sitecustomize also
    # sends them to stderr)
    handler = logging.FileHandler(config["python_log"])
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.getLogger().addHandler(handler)
    logging.getLogger().setLevel(logging.DEBUG)
    from pyspark.sql import SparkSession

    import gtbarrier

    builder = SparkSession.builder
    for key, value in config["spark_conf"].items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    gtbarrier.register_all(spark)
    report: dict[str, Any] = {"app_id": spark.sparkContext.applicationId}
    try:
        run_queries(spark, config, report)
        report["failures"] = {f["name"]: provoke(spark, f) for f in config["failures"]}
    finally:
        args.report.write_text(json.dumps(report, default=str, indent=1))
        spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
