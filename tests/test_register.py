"""Registration and the public face: gtbarrier.register_all registers both data sources
(each package can register its own alone), and users import what they use from gtbarrier."""

from __future__ import annotations

from typing import Any

import datasource
import gtbarrier
import sink
from datasource import GlobalTimeKafkaSource
from harness.process import run_python
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
    proc = run_python("-c", code)
    assert proc.returncode == 0, proc.stderr


def test_users_import_what_they_use_from_gtbarrier() -> None:
    from gtbarrier import SnapshotCoordinator, errors, register_all, resolve_lost_inflight
    from state.coordinator.snapshot_coordinator import SnapshotCoordinator as Defined
    from state.errors import PipelineFenced

    assert SnapshotCoordinator is Defined
    assert errors.PipelineFenced is PipelineFenced is gtbarrier.PipelineFenced
    assert callable(register_all) and callable(resolve_lost_inflight)
    assert set(gtbarrier.__all__) >= {
        "register_all",
        "SnapshotCoordinator",
        "resolve_lost_inflight",
        "errors",
    }
    assert not hasattr(datasource, "register_all")  # one spelling: gtbarrier.register_all


def test_every_error_of_the_hierarchy_is_public() -> None:
    import state.errors

    defined = {
        name
        for name, value in vars(state.errors).items()
        if isinstance(value, type) and issubclass(value, Exception)
    }
    assert defined == set(gtbarrier.errors.__all__)
