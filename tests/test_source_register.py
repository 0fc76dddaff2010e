"""The gtkafka source checks its options when Spark constructs it."""

from __future__ import annotations

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

    from state.errors import ConfigError

    source = GlobalTimeKafkaSource({"kafka.bootstrap.servers": "h:1", "subscribe": "t"})
    full = source.schema()
    narrow = StructType([full["offset"], full["value"], full["gt"]])
    for make in (source.streamReader, source.reader):
        assert make(narrow).schema == narrow
        assert make(full).schema == full

    def refused(schema: StructType) -> str:
        with pytest.raises(ConfigError) as info:
            source.reader(schema)
        assert info.value.option == "schema"
        return str(info.value)

    text = refused(StructType.fromDDL("offset long, vlaue binary"))
    assert "'vlaue'" in text and "value binary" in text and "gt struct<" in text
    assert "offset int" in refused(StructType.fromDDL("offset int"))
    assert "twice" in refused(StructType.fromDDL("offset long, offset long"))
    assert "at least one" in refused(StructType([]))
    assert "includeHeaders" in refused(StructType.fromDDL("headers array<int>"))
