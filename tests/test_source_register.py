"""register_all: the source, the barrier sink when present, and no no-data batches."""

from __future__ import annotations

from typing import Any

import pytest

from datasource import GlobalTimeKafkaSource, register_all


def test_register_all(recording_spark: Any) -> None:
    spark = recording_spark
    register_all(spark)
    assert spark.registered[0] is GlobalTimeKafkaSource
    assert GlobalTimeKafkaSource.name() == "gtkafka"
    from sink import BarrierSink

    assert spark.registered == [GlobalTimeKafkaSource, BarrierSink]
    assert spark.settings == {"spark.sql.streaming.noDataMicroBatches.enabled": "false"}


def test_source_checks_options_in_its_constructor() -> None:
    from state.errors import ConfigError

    with pytest.raises(ConfigError):
        GlobalTimeKafkaSource({"kafka.bootstrap.servers": "h:1"})
    source = GlobalTimeKafkaSource(
        {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "includeHeaders": "true"}
    )
    assert source.schema().fieldNames()[-2:] == ["headers", "gt"]
