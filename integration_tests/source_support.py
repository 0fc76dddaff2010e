"""Shared helpers of the gtkafka integration tests (integration_tests/test_source_*.py)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

QUERY_TIMEOUT = 240.0


def gtkafka_options(bootstrap: str, topic: str, state_uri: str, **extra: str) -> dict[str, str]:
    """Options of a streaming gtkafka read of ``topic`` from earliest."""
    return {
        "kafka.bootstrap.servers": bootstrap,
        "subscribe": topic,
        "pipeline.id": "p-" + topic.replace("_", "-")[-60:],
        "state.uri": state_uri,
        "startingOffsets": "earliest",
        "kafkaConsumer.pollTimeoutMs": "30000",
        **extra,
    }


def run_to_end(
    spark: Any,
    options: dict[str, str],
    checkpoint: Path,
    on_batch: Callable[[Any, int], None],
    *,
    trigger: dict[str, Any] | None = None,
    timeout: float = QUERY_TIMEOUT,
) -> Any:
    """Run a gtkafka query with ``foreachBatch(on_batch)`` until it ends (AvailableNow by
    default); re-raise the query's failure; return the finished query."""
    df = spark.readStream.format("gtkafka").options(**options).load()
    query = (
        df.writeStream.foreachBatch(on_batch)
        .option("checkpointLocation", str(checkpoint))
        .trigger(**(trigger or {"availableNow": True}))
        .start()
    )
    try:
        finished = query.awaitTermination(timeout)
    finally:
        if query.isActive:
            query.stop()
    if query.exception() is not None:
        raise query.exception()
    assert finished, f"query did not finish within {timeout}s"
    return query


def query_error(spark: Any, options: dict[str, str], checkpoint: Path, timeout: float = 120) -> str:
    """Run a query expected to fail; the text of its failure."""
    df = spark.readStream.format("gtkafka").options(**options).load()
    query = (
        df.writeStream.format("noop")
        .option("checkpointLocation", str(checkpoint))
        .trigger(availableNow=True)
        .start()
    )
    try:
        query.awaitTermination(timeout)
    except Exception as err:  # StreamingQueryException carries the Python traceback
        return str(err)
    finally:
        if query.isActive:
            query.stop()
    raise AssertionError(f"the query did not fail within {timeout}s")
