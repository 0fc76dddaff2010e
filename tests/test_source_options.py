"""Option parsing of gtkafka: every bad option fails with its name, value and accepted forms."""

from __future__ import annotations

import pytest

from datasource.options import KafkaSourceOptions
from datasource.subscription import EARLIEST, LATEST
from state.errors import ConfigError, UnknownOptionError

BASE = {"kafka.bootstrap.servers": "127.0.0.1:9092", "subscribe": "orders"}
STREAMING = {**BASE, "pipeline.id": "p1", "state.uri": "memory://opts"}


def parse(**extra: str) -> KafkaSourceOptions:
    return KafkaSourceOptions.parse({**BASE, **extra})


def error_of(raw: dict[str, str]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        KafkaSourceOptions.parse(raw)
    return info.value


def test_defaults_follow_spark() -> None:
    o = parse()
    assert o.subscription.kind == "subscribe" and o.subscription.topics == ("orders",)
    assert o.fail_on_data_loss is True
    assert o.include_headers is False
    assert o.poll_timeout_ms == 120_000
    assert o.fetch_offset_num_retries == 3 and o.fetch_offset_retry_interval_ms == 1000
    assert o.streaming_starting.kind == "latest"
    assert o.batch_starting.kind == "earliest" and o.batch_ending.kind == "latest"
    assert o.max_trigger_delay_s == 15 * 60


def test_names_are_case_insensitive() -> None:
    o = KafkaSourceOptions.parse(
        {"KAFKA.BOOTSTRAP.SERVERS": "h:1", "Subscribe": "a,b", "MAXOFFSETSPERTRIGGER": "7"}
    )
    assert o.subscription.topics == ("a", "b")
    assert o.max_offsets_per_trigger == 7


def test_unknown_option_is_named() -> None:
    err = error_of({**BASE, "maxOffsetPerTrigger": "10"})
    assert isinstance(err, UnknownOptionError)
    assert "maxOffsetPerTrigger" in str(err) and "maxOffsetsPerTrigger" in str(err)


@pytest.mark.parametrize(
    "extra",
    [
        {"subscribePattern": "o.*"},
        {"assign": '{"orders": [0]}'},
    ],
)
def test_conflicting_subscriptions(extra: dict[str, str]) -> None:
    err = error_of({**BASE, **extra})
    assert "exactly one of" in str(err)
    assert "subscribe" in str(err) and next(iter(extra)) in str(err)


def test_missing_subscription_and_bootstrap() -> None:
    assert "exactly one of" in str(error_of({"kafka.bootstrap.servers": "h:1"}))
    err = error_of({"subscribe": "t"})
    assert err.option == "kafka.bootstrap.servers" and "required" in str(err)


def test_bad_bootstrap() -> None:
    err = error_of({**BASE, "kafka.bootstrap.servers": "localhost"})
    assert err.option == "kafka.bootstrap.servers" and "host:port" in str(err)


def test_subscribe_list_is_validated() -> None:
    assert error_of({**BASE, "subscribe": "a,,b"}).option == "subscribe"
    assert error_of({**BASE, "subscribe": "a,a"}).option == "subscribe"


def test_pattern_and_assign() -> None:
    o = KafkaSourceOptions.parse({"kafka.bootstrap.servers": "h:1", "subscribePattern": "ord.*"})
    assert o.subscription.matches("orders") and not o.subscription.matches("xorders")
    err = error_of({"kafka.bootstrap.servers": "h:1", "subscribePattern": "ord(["})
    assert err.option == "subscribePattern" and "regular expression" in str(err)
    o = KafkaSourceOptions.parse({"kafka.bootstrap.servers": "h:1", "assign": '{"b": [1, 0]}'})
    assert o.subscription.assignment == (("b", (0, 1)),)
    for bad in ['{"b": 0}', '{"b": []}', "[0]", '{"b": [0, 0]}', '{"b": [-1]}', "{b:[0]}"]:
        err = error_of({"kafka.bootstrap.servers": "h:1", "assign": bad})
        assert err.option == "assign" and '{"topic": [0, 1]}' in str(err), bad


def test_starting_offsets_forms() -> None:
    assert parse(startingOffsets="EARLIEST").streaming_starting.kind == "earliest"
    spec = parse(startingOffsets='{"orders": {"0": 5, "1": -2, "2": -1}}').starting
    assert spec is not None and spec.kind == "offsets"
    assert spec.offsets == {("orders", 0): 5, ("orders", 1): EARLIEST, ("orders", 2): LATEST}


@pytest.mark.parametrize(
    "value",
    [
        "first",
        '{"orders": {"0": 5}',  # malformed JSON
        '{"orders": {"x": 5}}',
        '{"orders": {"0": -3}}',
        '{"orders": {"0": "5"}}',
        '{"orders": [0]}',
        "{}",
    ],
)
def test_malformed_starting_offsets(value: str) -> None:
    err = error_of({**BASE, "startingOffsets": value})
    assert err.option == "startingOffsets"
    assert repr(value) in str(err)
    assert "-2 for earliest" in str(err) or "'earliest', 'latest'" in str(err)


def test_offsets_json_must_name_subscribed_topics() -> None:
    err = error_of({**BASE, "startingOffsets": '{"other": {"0": 1}}'})
    assert err.option == "startingOffsets" and "'other' is not subscribed" in str(err)
    err = error_of(
        {
            "kafka.bootstrap.servers": "h:1",
            "assign": '{"a": [0]}',
            "endingOffsets": '{"a": {"1": 3}}',
        }
    )
    assert "a-1 is not assigned" in str(err)


def test_timestamp_precedence_as_in_spark() -> None:
    o = parse(
        startingOffsets="earliest",
        startingTimestamp="1000",
        startingOffsetsByTimestamp='{"orders": {"0": 2000}}',
    )
    assert o.starting is not None and o.starting.kind == "timestamps"
    o = parse(startingOffsets="earliest", startingTimestamp="1000")
    assert (
        o.starting is not None and o.starting.kind == "timestamp" and o.starting.timestamp == 1000
    )
    assert error_of({**BASE, "startingTimestamp": "yesterday"}).option == "startingTimestamp"
    err = error_of({**BASE, "startingOffsetsByTimestampStrategy": "earliest"})
    assert "'error', 'latest'" in str(err)


def test_rate_limit_options() -> None:
    o = parse(maxOffsetsPerTrigger="100", minOffsetsPerTrigger="10", maxTriggerDelay="30s")
    assert (o.max_offsets_per_trigger, o.min_offsets_per_trigger, o.max_trigger_delay_s) == (
        100,
        10,
        30.0,
    )
    assert error_of({**BASE, "maxOffsetsPerTrigger": "0"}).option == "maxOffsetsPerTrigger"
    err = error_of({**BASE, "maxOffsetsPerTrigger": "5", "minOffsetsPerTrigger": "10"})
    assert err.option == "minOffsetsPerTrigger" and "<= maxOffsetsPerTrigger" in str(err)
    assert error_of({**BASE, "maxTriggerDelay": "1m"}).option == "maxTriggerDelay"
    err = error_of({**BASE, "minOffsetsPerTrigger": "5", "maxTriggerDelay": "soon"})
    assert err.option == "maxTriggerDelay"
    assert error_of({**BASE, "minPartitions": "0"}).option == "minPartitions"
    assert error_of({**BASE, "failOnDataLoss": "maybe"}).option == "failOnDataLoss"


def test_task_and_pool_options() -> None:
    o = parse()
    assert o.min_records_per_task == 10_000
    assert (o.pool_enabled, o.pool_capacity, o.pool_idle_timeout_s) == (True, 64, 300.0)
    o = parse(
        minRecordsPerTask="0",
        **{
            "kafkaConsumer.pool.enabled": "false",
            "kafkaConsumer.pool.capacity": "8",
            "kafkaConsumer.pool.idleTimeout": "30s",
        },
    )
    assert (o.min_records_per_task, o.pool_enabled, o.pool_capacity) == (0, False, 8)
    assert o.pool_idle_timeout_s == 30.0
    for name, bad in (
        ("minRecordsPerTask", "-1"),
        ("kafkaConsumer.pool.enabled", "maybe"),
        ("kafkaConsumer.pool.capacity", "0"),
        ("kafkaConsumer.pool.idleTimeout", "0s"),
        ("kafkaConsumer.pool.idleTimeout", "soon"),
    ):
        err = error_of({**BASE, name: bad})
        assert err.option == name and bad in str(err)


def test_streaming_requirements() -> None:
    KafkaSourceOptions.parse(STREAMING).require_streaming()
    with pytest.raises(ConfigError) as info:
        parse(**{"state.uri": "memory://x"}).require_streaming()
    assert info.value.option == "pipeline.id"
    with pytest.raises(ConfigError) as info:
        parse(**{"pipeline.id": "p"}).require_streaming()
    assert info.value.option == "state.uri"
    for name, value in [
        ("endingOffsets", "latest"),
        ("endingTimestamp", "5"),
        ("endingOffsetsByTimestamp", '{"orders": {"0": 5}}'),
    ]:
        o = KafkaSourceOptions.parse({**STREAMING, name: value})
        with pytest.raises(ConfigError) as info:
            o.require_streaming()
        assert info.value.option == name and "batch reads only" in str(info.value)


def test_batch_requirements() -> None:
    parse().require_batch()
    for raw, option in [
        ({"startingOffsets": "latest"}, "startingOffsets"),
        ({"startingOffsets": '{"orders": {"0": -1}}'}, "startingOffsets"),
        ({"endingOffsets": "earliest"}, "endingOffsets"),
        ({"endingOffsets": '{"orders": {"0": -2}}'}, "endingOffsets"),
        ({"commitOffsetsToGroup": "g"}, "commitOffsetsToGroup"),
    ]:
        with pytest.raises(ConfigError) as info:
            parse(**raw).require_batch()
        assert info.value.option == option


def test_state_options() -> None:
    assert error_of({**BASE, "pipeline.id": "has space"}).option == "pipeline.id"
    assert error_of({**BASE, "state.uri": "ftp://x"}).option == "state.uri"
    err = error_of({**BASE, "s3.endpoint": "http://127.0.0.1:1"})
    assert err.option == "state.uri" and "s3.endpoint" in str(err)
    o = KafkaSourceOptions.parse({**STREAMING, "state.uri": "s3://b/p", "s3.pathStyle": "true"})
    assert o.store is not None and o.store.uri == "s3://b/p" and o.store.s3.path_style is True


def test_kafka_options_are_translated() -> None:
    o = parse(
        **{
            "kafka.security.protocol": "SSL",
            "kafka.max.poll.records": "123",
            "kafka.check.crcs": "false",
            "kafka.api.version": "2.8.0",
            "kafka.ssl.ca.location": "/ca.pem",
        }
    )
    assert o.kafka == {
        "security_protocol": "SSL",
        "max_poll_records": 123,
        "check_crcs": False,
        "api_version": (2, 8, 0),
        "ssl_cafile": "/ca.pem",
    }
    cfg = o.consumer_config()
    assert cfg["max_poll_records"] == 123
    assert cfg["bootstrap_servers"] == ["127.0.0.1:9092"]
    assert cfg["enable_auto_commit"] is False and cfg["group_id"] is None
    assert cfg["auto_offset_reset"] == "none" and cfg["allow_auto_create_topics"] is False
    from kafka import KafkaConsumer

    assert set(cfg) <= set(KafkaConsumer.DEFAULT_CONFIG)


@pytest.mark.parametrize(
    "name",
    [
        "kafka.auto.offset.reset",
        "kafka.enable.auto.commit",
        "kafka.key.deserializer",
        "kafka.value.deserializer",
        "kafka.group.id",
        "kafka.allow.auto.create.topics",
    ],
)
def test_unsafe_kafka_options_are_refused(name: str) -> None:
    err = error_of({**BASE, name: "x"})
    assert err.option == name and "not to be set" in str(err)


def test_unknown_kafka_options_are_named() -> None:
    err = error_of({**BASE, "kafka.ssl.trustfile": "/ts.pem", "kafka.foo": "1"})
    assert isinstance(err, UnknownOptionError)
    assert "'kafka.foo'" in str(err) and "'kafka.ssl.trustfile'" in str(err)
    assert "kafka.security.protocol" in str(err)  # lists what is accepted


def test_kafka_option_values_are_typed() -> None:
    err = error_of({**BASE, "kafka.max.poll.records": "many"})
    assert err.option == "kafka.max.poll.records" and "an integer" in str(err)
    err = error_of({**BASE, "kafka.selector": "x"})
    assert "Python object" in str(err)


def test_options_pickle() -> None:
    import pickle

    o = KafkaSourceOptions.parse({**STREAMING, "startingOffsets": '{"orders": {"0": 1}}'})
    assert pickle.loads(pickle.dumps(o)) == o
