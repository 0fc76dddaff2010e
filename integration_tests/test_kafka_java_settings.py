"""``kafka.ssl.endpoint.identification.algorithm``, as Spark jobs set it, against a real TLS
endpoint (a :mod:`harness.kafka_gateway` in front of Tansu) whose certificate names
another host than the one the client dials: empty turns the host name check off and the
source reads; ``https`` keeps it on and the client is refused before any request (kafka-python
then reports a bootstrap that timed out, not the certificate: ``SourceUnavailable``)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from datasource.consumer_pool import ConsumerPool
from datasource.offset_reader import OffsetReader
from datasource.options import KafkaSourceOptions
from datasource.partition_reader import KafkaInputPartition, read_partition
from datasource.schema import arrow_schema, source_schema
from harness.kafka import KafkaBroker, KafkaHelper
from harness.kafka_gateway import (
    FETCH,
    FIND_COORDINATOR,
    LIST_OFFSETS,
    METADATA,
    OFFSET_COMMIT,
    KafkaGateway,
    make_tls_files,
)
from harness.server import serving
from integration_tests.source_support import Driver
from state.errors import SourceUnavailable

pytestmark = pytest.mark.timeout(180)

# The group requests (OffsetCommit, OffsetFetch, FindCoordinator, JoinGroup, Heartbeat,
# LeaveGroup, SyncGroup): the only ones a group's ACL is checked for.
GROUP_REQUESTS = {OFFSET_COMMIT, 9, FIND_COORDINATOR, 11, 12, 13, 14}


@pytest.fixture(scope="module")
def other_host_tls(
    kafka_broker: KafkaBroker, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[KafkaGateway]:
    """``security.protocol=SSL`` with a certificate for ``broker.example`` only, dialled
    at 127.0.0.1: its chain verifies, its host name does not."""
    files = make_tls_files(tmp_path_factory.mktemp("other-host-tls"), hosts=("broker.example",))
    gateway = KafkaGateway(
        tmp_path_factory.mktemp("other-host-gw"), kafka_broker.bootstrap, tls=files
    )
    with serving(gateway, "other_host_tls (gateway)", fixture="other_host_tls"):
        yield gateway


def options(gateway: KafkaGateway, topic: str, pipeline: str, algorithm: str) -> KafkaSourceOptions:
    return KafkaSourceOptions.parse(
        {
            "kafka.bootstrap.servers": gateway.bootstrap,
            "kafka.security.protocol": "SSL",
            "kafka.ssl.cafile": str(gateway.tls.ca) if gateway.tls else "",
            "kafka.ssl.endpoint.identification.algorithm": algorithm,
            "subscribe": topic,
            "pipeline.id": pipeline,
            "kafkaConsumer.pollTimeoutMs": "5000",
            "fetchOffset.numRetries": "0",
        }
    )


def reader(gateway: KafkaGateway, topic: str, pipeline: str, algorithm: str) -> OffsetReader:
    return OffsetReader(options(gateway, topic, pipeline, algorithm))


def test_empty_algorithm_turns_the_host_name_check_off_and_the_source_reads(
    other_host_tls: KafkaGateway, kafka: KafkaHelper
) -> None:
    topic = kafka.create_topic(partitions=2)
    kafka.produce(topic, ((b"k", b"%d" % i, None, i % 2) for i in range(10)))
    off = reader(other_host_tls, topic, "eia-off", "")
    try:
        view = off.view(fresh=True, verify=True)
    finally:
        off.close()
    assert view.partitions == {topic: {0, 1}}
    assert dict(view.latest) == {(topic, p): e for p, e in kafka.end_offsets(topic).items()}
    assert {METADATA, LIST_OFFSETS} <= other_host_tls.requests_by("gtkafka-eia-off")
    assert not GROUP_REQUESTS & other_host_tls.requests_by("gtkafka-eia-off")


def test_the_executors_read_with_the_check_off_and_never_touch_a_group(
    other_host_tls: KafkaGateway, kafka: KafkaHelper
) -> None:
    """The executors' consumers take the mapped setting too, and, as the driver's reader,
    send no group request: no group ACL can apply to gtkafka's reads (docs/migrating.md)."""
    topic = kafka.create_topic(partitions=2)
    kafka.produce(topic, ((b"k", b"%d" % i, None, i % 2) for i in range(20)))
    planner = Driver(kafka.bootstrap, topic)  # planned on the broker itself
    pool = ConsumerPool()
    try:
        end = planner.reader.latestOffset(planner.offset, planner.reader.getDefaultReadLimit())
        parts = planner.reader.partitions(planner.offset, end)
        read = options(other_host_tls, topic, "eia-exec", "")
        schema = arrow_schema(source_schema(False))
        values: list[bytes] = []
        for part in parts:
            assert isinstance(part, KafkaInputPartition)
            for batch in read_partition(read, part, schema, task=None, source=pool):
                values += batch.column("value").to_pylist()
    finally:
        pool.close()
        planner.close()
    assert sorted(int(v) for v in values) == list(range(20))
    requests = other_host_tls.requests_by("gtkafka-eia-exec")
    assert FETCH in requests and not GROUP_REQUESTS & requests


def test_https_keeps_the_check_and_the_client_is_refused_before_any_request(
    other_host_tls: KafkaGateway, kafka: KafkaHelper
) -> None:
    topic = kafka.create_topic(partitions=1)
    on = reader(other_host_tls, topic, "eia-on", "https")
    try:
        with pytest.raises(SourceUnavailable) as info:
            on.view(fresh=True, verify=True)
    finally:
        on.close()
    assert other_host_tls.bootstrap in str(info.value)
    assert other_host_tls.requests_by("gtkafka-eia-on") == set()
