"""``consumer=kafka`` and the rows it is given, against the real broker (Tansu) and the real
kafka-python producer: the size limit that ``validate`` applies is the producer's, and
what the sink sends is what the rows hold.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pytest
from kafka import KafkaProducer
from kafka.errors import MessageSizeTooLargeError

from sink.consumers.kafka import (
    H_BUNDLE,
    H_COUNT,
    H_GT,
    H_INDEX,
    KAFKA_TOPIC,
    KafkaTopicSettings,
    producer_config,
)
from sink.options import SinkOptions

pytestmark = pytest.mark.timeout(180)

LARGEST = b"9" * 19  # the sink's headers hold decimal int64s: at most 19 digits


def kafka_settings(bootstrap: str, topic: str, **extra: str) -> KafkaTopicSettings:
    options = SinkOptions.parse(
        {
            "pipeline.id": "rows",
            "state.uri": "memory://rows",
            "consumer": "kafka",
            "consumer.kafka.bootstrap.servers": bootstrap,
            "consumer.topic": topic,
            **extra,
        }
    )
    assert isinstance(options.settings, KafkaTopicSettings)
    return options.settings


def largest_accepted(settings: KafkaTopicSettings, key: bytes, headers: list[Any]) -> bytes:
    """The longest value ``validate`` accepts with ``key`` and ``headers`` (by bisection)."""

    def accepted(n: int) -> bool:
        row = pa.table(
            {
                "key": pa.array([key], pa.binary()),
                "value": pa.array([b"v" * n], pa.binary()),
                "headers": pa.array(
                    [[{"key": k, "value": v} for k, v in headers]],
                    pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
                ),
            }
        )
        return not KAFKA_TOPIC.validate(settings, row)

    low, high = 0, 64 << 20
    assert accepted(low) and not accepted(high)
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (mid, high) if accepted(mid) else (low, mid)
    return b"v" * low


@pytest.mark.parametrize(
    "extra",
    [
        {},
        {"consumer.kafka.max.request.size": "10000"},
        {"consumer.kafka.max.request.size": "10000", "consumer.kafka.compression.type": "gzip"},
    ],
    ids=["default", "10000", "10000-gzip"],
)
def test_the_real_producer_refuses_what_validate_rejects_at_the_limit(
    kafka: Any, extra: dict[str, str]
) -> None:
    """The longest value validate accepts, sent by a producer with the sink's settings and
    the sink's headers at their largest, reaches the broker; one byte more is what the
    producer refuses (MessageSizeTooLargeError), as validate said."""
    topic = kafka.create_topic(partitions=1)
    settings = kafka_settings(kafka.bootstrap, topic, **extra)
    key = b"order-17"
    item_headers = [("trace", b"t" * 40), ("gtb.bundle", b"999")]
    at = largest_accepted(settings, key, item_headers)
    sink_headers = [(name, LARGEST) for name in (H_BUNDLE, H_GT, H_INDEX, H_COUNT)]
    headers = [*item_headers, *sink_headers]
    producer = KafkaProducer(bootstrap_servers=kafka.bootstrap, **producer_config(settings, 10.0))
    try:
        with pytest.raises(MessageSizeTooLargeError):
            producer.send(topic, key=key, value=at + b"v", headers=headers, partition=0)
        sent = producer.send(topic, key=key, value=at, headers=headers, partition=0)
        producer.flush(timeout=30)
        assert sent.get(timeout=30).offset == 0
    finally:
        producer.close(timeout=5)
    (record,) = kafka.consume_all(topic)
    assert (record.key, len(record.value), record.headers) == (key, len(at), headers)
