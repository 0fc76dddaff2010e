"""The consumer registry: the one table from a ``consumer`` name to its kind, and what every
kind provides (options, settings, a staging, a start check, a consumer)."""

from __future__ import annotations

import dataclasses
import pickle
import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

from sink.consumers import open_consumer, open_staging
from sink.consumers.base import Consumer
from sink.consumers.consumer_kind import ConsumerKind, ConsumerSettings
from sink.consumers.file import FileSettings
from sink.consumers.http import HttpSettings
from sink.consumers.registry import CONSUMER, CONSUMER_KINDS, CONSUMER_NAMES, kind_of
from sink.faults import FaultInjector
from sink.options import SINK_OPTIONS, SinkOptions
from sink.staging import Staging
from state.errors import ConfigError
from state.stores import open_store

ROOT = Path(__file__).resolve().parents[1]
PRODUCT = ("gtbarrier", "datasource", "sink", "state")
REGISTRY = ROOT / "sink" / "consumers" / "registry.py"

GT = StructType(
    [
        StructField("epoch", LongType(), False),
        StructField("topic", StringType(), False),
        StructField("partition", IntegerType(), False),
        StructField("offset", LongType(), False),
    ]
)
SCHEMA = StructType([StructField("value", BinaryType()), StructField("gt", GT, False)])


def example(name: str, tmp_path: Path) -> dict[str, str]:
    """Options that select consumer ``name`` with valid settings (no server contacted)."""
    own = {
        "file": {"consumer.path": str(tmp_path / "out")},
        "s3": {"consumer.path": "s3://bucket/out", "s3.endpoint": "http://127.0.0.1:9"},
        "kafka": {"consumer.kafka.bootstrap.servers": "127.0.0.1:9", "consumer.topic": "out"},
        "http": {"consumer.url": "http://127.0.0.1:9/bundles"},
        "postgres": {
            "consumer.postgres.dsn": "host=127.0.0.1 port=9 dbname=x",
            "consumer.postgres.table": "out.events",
        },
        "iceberg": {
            "consumer.iceberg.table": "ns.events",
            "consumer.iceberg.catalog.uri": f"sqlite:///{tmp_path}/catalog.db",
            "consumer.iceberg.catalog.warehouse": f"file://{tmp_path}/warehouse",
        },
        "delta": {"consumer.delta.uri": f"file://{tmp_path}/delta"},
    }
    assert set(own) == set(CONSUMER_NAMES), "every registered consumer needs an example here"
    return {
        "pipeline.id": "p1",
        "state.uri": f"memory://{uuid.uuid4().hex}",
        "consumer": name,
        **own[name],
    }


def test_the_registry_lists_the_seven_consumers_in_order() -> None:
    assert CONSUMER_NAMES == ("file", "s3", "kafka", "http", "postgres", "iceberg", "delta")
    assert CONSUMER.choices == CONSUMER_NAMES and CONSUMER.default == "file"
    assert CONSUMER.doc == "`file`, `s3`, `kafka`, `http`, `postgres`, `iceberg` or `delta`."
    kinds = list(CONSUMER_KINDS.values())
    assert all(isinstance(k, ConsumerKind) for k in kinds)
    assert len({id(k) for k in kinds}) == len(kinds), "one kind per name"
    assert len({k.settings_type for k in kinds}) == len(kinds), "each kind its own settings"


@pytest.mark.parametrize("name", CONSUMER_NAMES)
def test_each_kind_parses_its_own_frozen_picklable_settings(name: str, tmp_path: Path) -> None:
    options = SinkOptions.parse(example(name, tmp_path))
    kind = CONSUMER_KINDS[name]
    assert (options.consumer, options.kind) == (name, kind) and kind is kind_of(name)
    settings = options.settings
    assert type(settings) is kind.settings_type and isinstance(settings, ConsumerSettings)
    assert dataclasses.is_dataclass(settings)
    with pytest.raises(dataclasses.FrozenInstanceError):
        settings.__setattr__("anything", 1)
    hash(settings)  # hashable: a per-process cache key where a kind needs one
    assert pickle.loads(pickle.dumps(options)) == options  # pickled to every task


@pytest.mark.parametrize("name", CONSUMER_NAMES)
def test_each_kind_declares_options_that_apply_only_with_it(name: str) -> None:
    kind = CONSUMER_KINDS[name]
    assert kind.specs, f"{name} declares no options"
    table = {spec.name: spec for spec in SINK_OPTIONS.specs()}
    for spec in kind.specs:
        assert spec.name.startswith("consumer."), spec.name
        listed = table[spec.name].only_with
        assert listed is not None and listed.option == "consumer" and name in listed.values
        users = tuple(n for n, k in CONSUMER_KINDS.items() if spec in k.specs)
        assert listed.values == users


def test_consumer_path_is_declared_once_for_file_and_s3() -> None:
    (path,) = [s for s in SINK_OPTIONS.specs() if s.name == "consumer.path"]
    assert path.only_with is not None and path.only_with.values == ("file", "s3")
    assert path.default_cell() == "required for file/s3"


@pytest.mark.parametrize("name", CONSUMER_NAMES)
def test_each_kind_has_a_start_check_a_staging_and_a_consumer(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if name == "postgres":  # its start check needs a server: the kind's delegation is checked
        from sink.consumers.postgres import postgres_consumer

        checked: list[Any] = []

        def check(*a: Any, **kw: Any) -> Any:
            checked.append((a, kw))
            return a[0]  # the settings, completed with nothing

        monkeypatch.setattr(postgres_consumer, "check_at_start", check)
    options = SinkOptions.parse(example(name, tmp_path))
    started = options.check_at_start(SCHEMA)
    assert type(started.settings) is type(options.settings)
    assert dataclasses.replace(started, settings=options.settings) == options
    if name == "postgres":
        assert checked == [((options.settings, SCHEMA), {"exactly_once": True})]
    store = open_store(started.store)
    staging = open_staging(started, store)
    assert isinstance(staging, Staging)
    consumer = open_consumer(started, store, FaultInjector())
    assert isinstance(consumer, Consumer) and type(consumer.staging) is type(staging)
    assert consumer.describe()
    consumer.close()


def test_start_checks_refuse_what_could_never_be_delivered(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    file_options = SinkOptions.parse({**example("file", tmp_path), "consumer.path": str(blocker)})
    with pytest.raises(Exception, match=re.escape(f"consumer.path {str(blocker)!r}")):
        file_options.check_at_start(SCHEMA)
    kafka_options = SinkOptions.parse(example("kafka", tmp_path))
    with pytest.raises(ConfigError, match="consumer=kafka"):
        kafka_options.check_at_start(StructType([StructField("payload", LongType())]))


def test_an_unknown_consumer_lists_the_registered_ones(tmp_path: Path) -> None:
    listed = "one of 'file', 's3', 'kafka', 'http', 'postgres', 'iceberg', 'delta'"
    with pytest.raises(ConfigError) as info:
        SinkOptions.parse({**example("file", tmp_path), "consumer": "ftp"})
    assert info.value.option == "consumer" and listed in str(info.value)
    with pytest.raises(ConfigError) as info:
        kind_of("ftp")
    assert info.value.option == "consumer" and listed in str(info.value)
    assert "'ftp'" in str(info.value)


def test_options_carry_the_settings_of_their_own_kind_only(tmp_path: Path) -> None:
    options = SinkOptions.parse(example("file", tmp_path))
    with pytest.raises(TypeError, match="FileSettings"):
        dataclasses.replace(options, settings=HttpSettings(url="http://x"))
    with pytest.raises(TypeError, match="HttpSettings"):
        dataclasses.replace(options, consumer="http")
    assert dataclasses.replace(options, settings=FileSettings("/elsewhere")).kind is kind_of("file")


def _product_sources() -> list[Path]:
    return [p for package in PRODUCT for p in sorted((ROOT / package).rglob("*.py"))]


def test_only_the_registry_compares_a_consumer_name() -> None:
    """Every consumer-specific step goes through the kind the registry names."""
    compares = re.compile(r"consumer\s*(==|!=|in\s*\()")
    names = "|".join(CONSUMER_NAMES)
    maps = re.compile(rf"OnlyWith\(\s*\"consumer\"|[\"']({names})[\"']\s*:\s*[A-Z_]+\b")
    found = [
        f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
        for path in _product_sources()
        if path != REGISTRY
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if compares.search(line) or maps.search(line)
    ]
    assert not found, "consumer names compared or mapped outside the registry:\n" + "\n".join(found)
