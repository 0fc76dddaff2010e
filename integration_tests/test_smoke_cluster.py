"""Smoke test: a driver subprocess runs a job on the standalone cluster's two workers."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from harness.driver import DriverRunner
from harness.spark import SparkCluster

pytestmark = pytest.mark.timeout(300)

DRIVER = textwrap.dedent(
    """
    import json, os, sys, time
    from pyspark.sql import SparkSession

    conf = json.loads(sys.argv[1])
    builder = SparkSession.builder.appName("gtbarrier-cluster-smoke")
    for k, v in conf.items():
        builder = builder.config(k, v)
    spark = builder.getOrCreate()
    sc = spark.sparkContext
    # Wait until both executors registered (the driver counts itself too).
    deadline = time.monotonic() + 90
    while sc._jsc.sc().getExecutorMemoryStatus().size() < 3:
        if time.monotonic() > deadline:
            raise SystemExit("executors did not register within 90 s")
        time.sleep(0.2)

    def where(part):
        time.sleep(0.3)  # long enough that both single-core executors take tasks
        yield (os.getcwd(), sum(1 for _ in part))

    placed = sc.parallelize(range(100_000), 8).mapPartitions(where).collect()
    total = spark.range(0, 1_000_000, numPartitions=4).selectExpr("sum(id)").collect()[0][0]
    print("RESULT " + json.dumps({
        "rows": sum(n for _, n in placed),
        "dirs": sorted({d for d, _ in placed}),
        "sum": total,
        "app": sc.applicationId,
    }))
    spark.stop()
    """
)


@pytest.mark.slow
def test_job_runs_on_both_workers(spark_cluster: SparkCluster, driver: DriverRunner) -> None:
    proc = driver.run_code(DRIVER, json.dumps(spark_cluster.driver_conf()))
    assert proc.wait(180) == 0, proc.output()[-3000:]
    line = next(x for x in proc.output().splitlines() if x.startswith("RESULT "))
    result = json.loads(line.removeprefix("RESULT "))
    assert result["rows"] == 100_000
    assert result["sum"] == sum(range(1_000_000))
    # Executors run in <worker work dir>/<app id>/<executor id>: tasks ran on both workers.
    worker_dirs = {w.work_dir.resolve() for w in spark_cluster.workers}
    used = {Path(d).resolve().parent.parent for d in result["dirs"]}
    assert used == worker_dirs, (used, worker_dirs)
    assert all(Path(d).parent.name == result["app"] for d in result["dirs"])
    apps = spark_cluster.status()["completedapps"] + spark_cluster.status()["activeapps"]
    assert result["app"] in {a["id"] for a in apps}
