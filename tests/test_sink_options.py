"""Option parsing of the barrier sink (the shared options, and the file, s3, kafka and
http consumers' own) and the gt type check: errors name option and value."""

from __future__ import annotations

import pickle
import re

import pytest
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from sink import BarrierSink
from sink.consumers.file import FileSettings
from sink.consumers.http import HttpSettings
from sink.consumers.kafka.kafka_kind import KAFKA_TOPIC
from sink.consumers.kafka.kafka_options import KafkaTopicSettings
from sink.consumers.s3 import S3PrefixSettings
from sink.faults import ENV, Fault, FaultInjector, InjectedFault, parse_faults
from sink.gt_column import check_spark_schema
from sink.options import SinkOptions
from state.errors import ConfigError, UnknownOptionError

BASE = {"pipeline.id": "orders", "state.uri": "memory://opts", "consumer.path": "/data/out"}


def parse(**extra: str) -> SinkOptions:
    return SinkOptions.parse({**BASE, **extra})


def test_defaults() -> None:
    o = parse()
    assert (o.consumer, o.delivery, o.ack_timeout, o.max_retries, o.retry_backoff) == (
        "file",
        "exactly-once",
        30.0,
        3,
        0.5,
    )
    assert o.settings == FileSettings(path="/data/out") and o.exactly_once
    assert pickle.loads(pickle.dumps(o)) == o


def test_all_options_case_insensitive() -> None:
    o = SinkOptions.parse(
        {
            "PIPELINE.ID": "p",
            "state.uri": "memory://x",
            "consumer": "KAFKA",
            "consumer.kafka.bootstrap.servers": "h:9092",
            "consumer.topic": "out",
            "consumer.kafka.linger.ms": "5",
            "delivery": "At-Least-Once",
            "ack.timeoutMs": "1500",
            "delivery.maxRetries": "0",
            "delivery.retryBackoffMs": "20",
            "fencing.token": "7",
            "checkpointLocation": "/cp",
        }
    )
    assert o.kind is KAFKA_TOPIC and o.delivery == "at-least-once" and not o.exactly_once
    assert (o.ack_timeout, o.max_retries, o.retry_backoff, o.fencing_token) == (1.5, 0, 0.02, 7)
    assert o.settings == KafkaTopicSettings(
        bootstrap="h:9092", topic="out", config=(("linger.ms", "5"),)
    )
    assert pickle.loads(pickle.dumps(o)) == o


@pytest.mark.parametrize(
    ("extra", "option", "text"),
    [
        ({"consumer": "ftp"}, "consumer", "one of 'file', 's3', 'kafka', 'http'"),
        ({"delivery": "maybe"}, "delivery", "'exactly-once', 'at-least-once'"),
        ({"ack.timeoutMs": "0"}, "ack.timeoutMs", "an integer >= 1"),
        ({"delivery.maxRetries": "x"}, "delivery.maxRetries", "an integer"),
        ({"fencing.token": "-1"}, "fencing.token", "an integer >= 0"),
        ({"consumer.path": "relative/dir"}, "consumer.path", "an absolute directory path"),
        ({"consumer": "s3", "consumer.path": "/local"}, "consumer.path", "s3://bucket/prefix"),
        ({"consumer.url": "http://x"}, "consumer.url", "not to be set with consumer=file"),
        ({"consumer.topic": "t"}, "consumer.topic", "not to be set with consumer=file"),
        ({"consumer.format": "jsonl"}, "consumer.format", "not to be set with consumer=file"),
        ({"consumer.s3.layout": "parts"}, "consumer.s3.layout", "not to be set with consumer=file"),
        ({"consumer.kafka.linger.ms": "5"}, "consumer.kafka.linger.ms", "not to be set"),
        ({"state.uri": "ftp://x"}, "state.uri", "memory://"),
        ({"pipeline.id": "bad id!"}, "pipeline.id", "letters, digits"),
    ],
)
def test_bad_options_name_option_and_value(extra: dict[str, str], option: str, text: str) -> None:
    with pytest.raises(ConfigError) as info:
        parse(**extra)
    assert info.value.option == option
    assert text in str(info.value)
    assert str(info.value).startswith("barrier: ")


def test_missing_required_options() -> None:
    with pytest.raises(ConfigError, match=re.escape("'pipeline.id' = <missing>")):
        SinkOptions.parse({"state.uri": "memory://x", "consumer.path": "/d"})
    with pytest.raises(ConfigError, match=re.escape("'state.uri' = <missing>")):
        SinkOptions.parse({"pipeline.id": "p", "consumer.path": "/d"})
    with pytest.raises(ConfigError, match=re.escape("'consumer.path' = <missing>")):
        SinkOptions.parse({"pipeline.id": "p", "state.uri": "memory://x"})
    with pytest.raises(ConfigError, match=re.escape("'consumer.url' = <missing>")):
        SinkOptions.parse({"pipeline.id": "p", "state.uri": "memory://x", "consumer": "http"})
    kafka = {"pipeline.id": "p", "state.uri": "memory://x", "consumer": "kafka"}
    missing_bootstrap = re.escape("consumer.kafka.bootstrap.servers' = <missing>")
    with pytest.raises(ConfigError, match=missing_bootstrap):
        SinkOptions.parse(kafka)
    with pytest.raises(ConfigError, match=re.escape("'consumer.topic' = <missing>")):
        SinkOptions.parse({**kafka, "consumer.kafka.bootstrap.servers": "h:1"})


def test_unknown_option() -> None:
    with pytest.raises(UnknownOptionError, match=r"unknown option.*'consumer\.pth'"):
        parse(**{"consumer.pth": "/x"})


def test_fault_injection_is_not_an_option() -> None:
    with pytest.raises(UnknownOptionError, match=r"unknown option.*'fault\.inject'") as info:
        parse(**{"fault.inject": "after_inflight:1"})
    assert "fault.inject" not in str(info.value).split("known options are:")[1]


def test_kafka_settings_managed_by_the_sink_are_refused() -> None:
    base = {
        "pipeline.id": "p",
        "state.uri": "memory://x",
        "consumer": "kafka",
        "consumer.kafka.bootstrap.servers": "h:1",
        "consumer.topic": "t",
    }
    with pytest.raises(ConfigError, match="acks=all"):
        SinkOptions.parse({**base, "consumer.kafka.acks": "1"})
    with pytest.raises(ConfigError, match="kafka-python producer setting"):
        SinkOptions.parse({**base, "consumer.kafka.no.such.setting": "1"})


def test_http_url_and_format() -> None:
    o = SinkOptions.parse(
        {
            "pipeline.id": "p",
            "state.uri": "memory://x",
            "consumer": "http",
            "consumer.url": "http://127.0.0.1:8080/bundles/",
            "consumer.format": "jsonl",
        }
    )
    assert o.settings == HttpSettings(url="http://127.0.0.1:8080/bundles", format="jsonl")
    with pytest.raises(ConfigError, match="an http:// or https:// URL"):
        SinkOptions.parse(
            {
                "pipeline.id": "p",
                "state.uri": "memory://x",
                "consumer": "http",
                "consumer.url": "ftp://x",
            }
        )


def test_file_uri_consumer_path() -> None:
    assert parse(**{"consumer.path": "file:///data/x/"}).settings == FileSettings("/data/x")
    with pytest.raises(ConfigError, match="three slashes"):
        parse(**{"consumer.path": "file://host/data/x"})


def test_s3_prefix_and_layout() -> None:
    o = parse(consumer="s3", **{"consumer.path": "s3://bucket/out/", "consumer.s3.layout": "PARTS"})
    assert o.settings == S3PrefixSettings(path="s3://bucket/out", layout="parts")
    assert parse(consumer="s3", **{"consumer.path": "s3://b"}).settings == S3PrefixSettings(
        "s3://b"
    )


def test_data_source_parses_once_and_refuses_batch_writes() -> None:
    src = BarrierSink(dict(BASE))
    assert src.sink_options.pipeline_id == "orders"
    with pytest.raises(ConfigError, match="writeStream"):
        src.writer(StructType([]), False)
    with pytest.raises(ConfigError, match=r"consumer\.url"):
        BarrierSink({**BASE, "consumer.url": "http://x"})


def _gt(*fields: StructField) -> StructType:
    gt = StructField("gt", StructType(list(fields)))
    return StructType([StructField("value", BinaryType()), gt])


def test_gt_column_type_is_checked() -> None:
    good = _gt(
        StructField("epoch", LongType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
    )
    assert check_spark_schema(good)
    assert not check_spark_schema(StructType([StructField("value", BinaryType())]))
    wrong = _gt(StructField("epoch", LongType()), StructField("offset", LongType()))
    expected = r"'gt' = 'struct<epoch:bigint,offset:bigint>'.*'gt' column to be struct<epoch: big"
    with pytest.raises(ConfigError, match=expected):
        check_spark_schema(wrong)
    flat = StructType([StructField("gt", LongType())])
    with pytest.raises(ConfigError, match="option 'gt' = 'bigint'"):
        check_spark_schema(flat)


def test_fault_injector_is_armed_by_the_environment_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ENV, raising=False)
    for injector in (FaultInjector(), FaultInjector.from_environment()):
        assert not injector and not injector.armed("deliver_error", 1)
        injector.at("deliver_error", 1)  # inert: returns
    monkeypatch.setenv(ENV, "  ")
    assert not FaultInjector.from_environment()
    monkeypatch.setenv(ENV, "deliver_error:1")
    armed = FaultInjector.from_environment()
    assert armed.faults == (Fault("deliver_error", 1),) and not FaultInjector()
    assert armed.armed("deliver_error", 1) and not armed.armed("deliver_error", 2)
    with pytest.raises(InjectedFault, match="injected fault deliver_error:1"):
        armed.at("deliver_error", 1)
    monkeypatch.setenv(ENV, "explode")
    with pytest.raises(ConfigError, match=re.escape(f"'{ENV}' = 'explode'")):
        FaultInjector.from_environment()


def test_fault_specs() -> None:
    assert parse_faults("after_inflight:3, write_fail") == (
        Fault("after_inflight", 3),
        Fault("write_fail", None),
    )
    with pytest.raises(ConfigError):
        parse_faults("after_inflight:x")
