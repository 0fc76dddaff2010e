"""The gtkafka source checks its options when Spark constructs it."""

from __future__ import annotations

from typing import Any

import pytest

from datasource import GlobalTimeKafkaSource


def test_source_checks_options_in_its_constructor() -> None:
    from state.errors import ConfigError

    with pytest.raises(ConfigError):
        GlobalTimeKafkaSource({"kafka.bootstrap.servers": "h:1"})
    source = GlobalTimeKafkaSource(
        {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "includeHeaders": "true"}
    )
    assert source.schema().fieldNames()[-2:] == ["headers", "gt"]


def test_a_user_schema_may_name_any_of_the_columns_in_any_order() -> None:
    from pyspark.sql.types import StructType

    source = GlobalTimeKafkaSource(
        {
            "kafka.bootstrap.servers": "h:1",
            "subscribe": "t",
            "pipeline.id": "p",
            "state.uri": "memory://schema",
        }
    )
    full = source.schema()
    narrow = StructType([full["offset"], full["value"], full["gt"]])
    for make in (source.streamReader, source.reader):
        reader: Any = make(narrow)
        assert reader.schema == narrow
        reader = make(full)
        assert reader.schema == full
