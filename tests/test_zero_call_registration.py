"""Zero-call registration: the ``pyspark_*`` modules PySpark discovers, and the session
check that replaces ``register_all``'s setting when nobody calls it."""

from __future__ import annotations

import pkgutil

import pytest

import pyspark_barrier
import pyspark_gtkafka
from datasource import GlobalTimeKafkaSource
from sink import NO_DATA_MICRO_BATCHES, BarrierSink
from sink.session import check_session
from state.errors import ConfigError


def test_modules_export_the_data_sources_under_their_names() -> None:
    assert pyspark_gtkafka.DefaultSource is GlobalTimeKafkaSource
    assert pyspark_barrier.DefaultSource is BarrierSink
    assert pyspark_gtkafka.DefaultSource.name() == "gtkafka"
    assert pyspark_barrier.DefaultSource.name() == "barrier"


def test_pysparks_lookup_finds_both_modules() -> None:
    """What ``pyspark.sql.worker.lookup_data_sources`` does: iterate the top-level modules
    on the path whose names start with ``pyspark_``."""
    found = {m.name for m in pkgutil.iter_modules() if m.name.startswith("pyspark_")}
    assert {"pyspark_gtkafka", "pyspark_barrier"} <= found


def test_session_with_no_data_batches_off_passes() -> None:
    check_session({NO_DATA_MICRO_BATCHES: "false"}.get)
    check_session({NO_DATA_MICRO_BATCHES: " FALSE "}.get)


@pytest.mark.parametrize(
    ("settings", "shown"),
    [({}, "unset \\(Spark's default: true\\)"), ({NO_DATA_MICRO_BATCHES: "true"}, "'true'")],
)
def test_session_without_the_setting_fails_naming_it(settings: dict[str, str], shown: str) -> None:
    with pytest.raises(ConfigError, match=shown) as err:
        check_session(settings.get)
    message = str(err.value)
    assert message.startswith("barrier: option 'spark.sql.streaming.noDataMicroBatches.enabled'")
    assert "spark.conf.set('spark.sql.streaming.noDataMicroBatches.enabled', 'false')" in message
