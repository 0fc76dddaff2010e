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
