"""Every Python process Spark starts for a query imports ``pyspark_barrier`` and
``pyspark_gtkafka``: the data source lookup at the first registration, the source's and the
writer's planners, each worker. None of them imports a client library (S3, HTTP, Kafka,
PostgreSQL, Iceberg, ZooKeeper) or the code of a store or consumer that uses one: that is
imported where the store or the consumer is used."""

from __future__ import annotations

import json
import subprocess
import sys

from harness.process import REPO_ROOT, repo_env

CLIENTS = (
    "boto3",
    "botocore",
    "urllib3",
    "kafka",
    "psycopg",
    "pyiceberg",
    "kazoo",
    "state.stores.s3_store",
    "sink.consumers.kafka.kafka_consumer",
    "sink.consumers.postgres.postgres_consumer",
    "sink.consumers.iceberg.iceberg_consumer",
)

CODE = f"""
import json, sys
import pyspark_barrier, pyspark_gtkafka
print(json.dumps(sorted(set(sys.modules) & set({CLIENTS!r}))))
"""


def test_the_data_source_modules_import_no_client() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", CODE],
        cwd=REPO_ROOT,
        env=repo_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == []
