"""Registration: gtbarrier.register_all registers both data sources; each package can
register its own alone (the older datasource.register_all: test_source_register.py)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import datasource
import gtbarrier
import sink
from datasource import GlobalTimeKafkaSource
from harness.process import REPO_ROOT, repo_env
from sink import BarrierSink

NO_DATA = {"spark.sql.streaming.noDataMicroBatches.enabled": "false"}


def test_gtbarrier_registers_source_and_sink_and_turns_off_no_data_batches(
    recording_spark: Any,
) -> None:
    gtbarrier.register_all(recording_spark)
    assert recording_spark.registered == [GlobalTimeKafkaSource, BarrierSink]
    assert recording_spark.settings == NO_DATA


def test_each_package_registers_its_own(recording_spark: Any) -> None:
    datasource.register(recording_spark)
    assert recording_spark.registered == [GlobalTimeKafkaSource]
    assert recording_spark.settings == {}
    sink.register(recording_spark)
    assert recording_spark.registered == [GlobalTimeKafkaSource, BarrierSink]
    assert recording_spark.settings == NO_DATA


def test_importing_datasource_imports_neither_sink_nor_gtbarrier() -> None:
    code = (
        "import sys, datasource\n"
        "loaded = sorted({'sink', 'gtbarrier'} & {m.split('.')[0] for m in sys.modules})\n"
        "assert not loaded, loaded\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO_ROOT,
        env=repo_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
