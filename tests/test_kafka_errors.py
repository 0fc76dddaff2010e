"""state.kafka_errors: kafka-python's errors as gtbarrier's, with this kafka-python."""

from __future__ import annotations

import kafka.errors as kerr
import pytest

from state.errors import SourceUnavailable
from state.kafka_errors import is_retriable_kafka_error, kafka_call, translate_kafka_error


def test_an_error_kafka_does_not_mark_retriable_passes_with_a_note() -> None:
    err = kerr.CorruptRecordError("Found invalid record structure")
    assert not is_retriable_kafka_error(err)
    assert translate_kafka_error(err, servers="h:9092", what="reading t-0 [0, 5)") is err
    assert err.__notes__ == ["gtbarrier: reading t-0 [0, 5) on Kafka at h:9092"]


@pytest.mark.parametrize(
    "err",
    [
        kerr.KafkaConnectionError("111 ECONNREFUSED"),
        kerr.KafkaTimeoutError("Unable to bootstrap"),
        kerr.NotLeaderForPartitionError(),
        ConnectionResetError(104, "reset"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_connection_problems_and_retriable_errors_name_the_servers(err: BaseException) -> None:
    def fail() -> None:
        raise err

    with pytest.raises(SourceUnavailable, match=r"Kafka at h:9092 is unavailable: ListOffsets"):
        kafka_call("h:9092", "ListOffsets", fail)
