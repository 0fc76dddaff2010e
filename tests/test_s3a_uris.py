"""``s3a://`` (Hadoop's name for S3, which Spark users write everywhere) is accepted
wherever ``s3://`` is, and means the same bucket and prefix: every component spells it
``s3://`` once parsed, so a source on ``s3a://`` and a sink on ``s3://`` share one state."""

from __future__ import annotations

from pathlib import Path

import pytest

from datasource.options import KafkaSourceOptions
from gtbarrier.cli.common import UsageError, open_dead_letter_files
from sink.consumers.s3 import S3PrefixSettings
from sink.options import SinkOptions
from state.coordinator import CoordinatorConfig
from state.errors import ConfigError, StoreConfigError
from state.stores import StoreConfig
from state.stores.factory import new_store
from state.stores.s3_store import S3Store
from state.stores.state_store import validate_uri

SOURCE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "orders"}
SINK = {"pipeline.id": "orders", "state.uri": "memory://s3a", "consumer.path": "/data/out"}


@pytest.mark.parametrize("scheme", ["s3a", "S3A"])
def test_state_uri_s3a_is_the_s3_store_of_the_same_bucket_and_prefix(scheme: str) -> None:
    config = StoreConfig.from_options({"state.uri": f"{scheme}://bucket-a/pre/fix/"})
    assert config.uri == "s3://bucket-a/pre/fix"
    assert config == StoreConfig.from_options({"state.uri": "s3://bucket-a/pre/fix"})
    store = new_store(f"{scheme}://bucket-a/pre/fix")
    assert isinstance(store, S3Store)
    assert (store.bucket, store.prefix, store.uri) == (
        "bucket-a",
        "pre/fix",
        "s3://bucket-a/pre/fix",
    )


def test_s3a_without_a_bucket_is_refused_as_s3_is() -> None:
    with pytest.raises(StoreConfigError, match=r"'s3a:///x'.*bucket name"):
        validate_uri("s3a:///x")


def test_source_state_uri_s3a() -> None:
    parsed = KafkaSourceOptions.parse({**SOURCE, "pipeline.id": "p", "state.uri": "s3a://b-1/gt"})
    assert parsed.store is not None and parsed.store.uri == "s3://b-1/gt"


def test_sink_state_uri_dead_letter_path_and_consumer_path_s3a() -> None:
    sink = SinkOptions.parse(
        {
            **SINK,
            "state.uri": "s3a://b-1/gt",
            "errors.tolerance": "all",
            "errors.deadLetter.path": "s3a://b-1/dead/",
        }
    )
    assert sink.store.uri == "s3://b-1/gt"
    assert sink.errors.path == "s3://b-1/dead"
    s3 = SinkOptions.parse({**SINK, "consumer": "s3", "consumer.path": "s3a://b-1/out/"})
    assert s3.settings == S3PrefixSettings(path="s3://b-1/out")


def test_dead_letters_inside_an_s3a_consumer_path_are_refused_as_with_s3() -> None:
    with pytest.raises(ConfigError, match=r"outside consumer\.path"):
        SinkOptions.parse(
            {
                **SINK,
                "consumer": "s3",
                "consumer.path": "s3a://b-1/out",
                "errors.tolerance": "all",
                "errors.deadLetter.path": "s3://b-1/out/dead",
            }
        )


def test_coordinator_state_uri_s3a(tmp_path: Path) -> None:
    config = CoordinatorConfig.from_arguments("p1", "s3a://b-1/gt", tmp_path / "cp")
    assert config.store.uri == "s3://b-1/gt"


def test_cli_dead_letters_s3a_opens_the_s3_destination() -> None:
    letters = open_dead_letter_files("s3a://b-1/dead", StoreConfig("memory://cli"))
    assert type(letters).__name__ == "StoreDeadLetters"
    with pytest.raises(UsageError, match="s3a://bucket/prefix"):
        open_dead_letter_files("s3a:///dead", StoreConfig("memory://cli"))
