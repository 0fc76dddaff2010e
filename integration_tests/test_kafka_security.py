"""Every Kafka client gtbarrier creates, against real TLS, SASL PLAIN and SCRAM-SHA-512
endpoints (the gateways of :mod:`harness.kafka_gateway` in front of Tansu).

The OAUTHBEARER endpoint takes unsecured JWS tokens (Kafka's own test mode), made by
the token providers of :mod:`harness.oauth_tokens`, which every client names by reference
(``kafka.sasl.oauth.token.provider=harness.oauth_tokens:valid_token``) and makes where it
is made, the executors' included.

The endpoints refuse a client without the settings (plaintext on a TLS port, any request
but the SASL exchange before authentication), so a client that gtbarrier creates without
them cannot do its work and its test fails. Each client has a test of its own:

* the source's driver-side reader (metadata, ListOffsets, the end probe);
* the executors' pooled consumers (partitions read with the pool);
* ``commitOffsetsToGroup`` (the offsets then read from the broker itself);
* ``gtbarrier status --bootstrap`` (its lag reader, the password given as ``${env:...}``);
* the kafka consumer's producer and its tail scan (``consumer.kafka.*``);
* the kafka consumer and its dead-letter topic's producer and tail scan, each through
  another endpoint with its password given as ``${env:...}`` (``consumer.kafka.*``,
  ``errors.deadLetter.kafka.*``), exactly once across crashes, the passwords in no log
  record and no exception; and both through the OAUTHBEARER endpoint;
* an expired token, and a token of a principal the endpoint does not know, refused by the
  endpoint for that reason, failing the source's reader and the CLI within their time-outs;

and a streaming query gtkafka -> barrier (file consumer) runs against each endpoint with
every source client at once, exactly once, its group offsets and its lag checked; the
gateway's log shows which requests each client made after authenticating.
"""

from __future__ import annotations

import json
import logging
import pickle
import subprocess
import sys
import traceback
import uuid
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from kafka import TopicPartition

from datasource.consumer_pool import ConsumerPool
from datasource.group_commit import commit_to_group
from datasource.offset_reader import OffsetReader
from datasource.options import KafkaSourceOptions
from datasource.partition_reader import KafkaInputPartition, read_partition
from datasource.schema import arrow_schema, source_schema
from harness.kafka import KafkaHelper
from harness.kafka_gateway import (
    FETCH,
    LIST_OFFSETS,
    METADATA,
    OFFSET_COMMIT,
    PRODUCE,
    KafkaGateway,
)
from harness.oauth_tokens import EXPIRED_TOKEN, STRANGER_TOKEN, VALID_TOKEN, issued_tokens
from harness.process import REPO_ROOT, repo_env, wait_until
from integration_tests.sink_helpers import read_bundles
from integration_tests.source_support import Driver
from sink.consumers import open_consumer
from sink.consumers.base import Consumer
from sink.consumers.kafka.kafka_consumer import KafkaTopicConsumer
from sink.consumers.kafka.kafka_rows import H_BUNDLE, H_COUNT, H_GT, H_INDEX
from sink.dead_letters.dead_letter_topic import H_PIPELINE
from sink.faults import FaultInjector, InjectedFault
from sink.options import SinkOptions
from state.errors import ConfigError
from state.stores import open_store
from tests.sink_helpers import Pipeline, gt_batch
from tests.test_sink_dead_letters import crash_at, note_batch

ENDPOINTS = ("kafka_tls", "kafka_sasl_plain", "kafka_sasl_scram", "kafka_sasl_oauth")
QUERY_TIMEOUT = 300.0
CLI_TIMEOUT = 120.0
PASSWORD_ENV = "GTB_TEST_KAFKA_PASSWORD"


@pytest.fixture(params=ENDPOINTS)
def gateway(request: pytest.FixtureRequest) -> KafkaGateway:
    found: KafkaGateway = request.getfixturevalue(request.param)
    return found


def source_options(gateway: KafkaGateway, topic: str, **extra: str) -> KafkaSourceOptions:
    return KafkaSourceOptions.parse(
        {
            "kafka.bootstrap.servers": gateway.bootstrap,
            **gateway.options("kafka."),
            "subscribe": topic,
            "startingOffsets": "earliest",
            "kafkaConsumer.pollTimeoutMs": "20000",
            "fetchOffset.numRetries": "1",
            **extra,
        }
    )


def numbered(kafka: KafkaHelper, topic: str, n: int, partitions: int) -> None:
    kafka.produce(topic, ((b"k%d" % i, b"%d" % i, None, i % partitions) for i in range(n)))


def assert_no_password(gateway: KafkaGateway, *texts: str) -> None:
    for text in texts:
        assert gateway.password not in text, "the SASL password appears in a log or message"


# --- one client at a time -------------------------------------------------------------


def test_the_driver_side_reader_reads_metadata_and_ends(
    gateway: KafkaGateway, kafka: KafkaHelper
) -> None:
    topic = kafka.create_topic(partitions=2)
    numbered(kafka, topic, 30, 2)
    reader = OffsetReader(source_options(gateway, topic, **{"pipeline.id": "sec-driver"}))
    try:
        view = reader.view(fresh=True, verify=True)
    finally:
        reader.close()
    assert view.partitions == {topic: {0, 1}}
    assert dict(view.latest) == {(topic, p): e for p, e in kafka.end_offsets(topic).items()}
    assert {METADATA, LIST_OFFSETS, FETCH} <= gateway.requests_by("gtkafka-sec-driver")


def test_the_executors_pooled_consumers_read_the_partitions(
    gateway: KafkaGateway, kafka: KafkaHelper, read_client: str
) -> None:
    topic = kafka.create_topic(partitions=2)
    numbered(kafka, topic, 40, 2)
    # planned on the broker itself: only the read goes through the secured endpoint
    if gateway.mechanism == "OAUTHBEARER" and read_client == "confluent":
        # librdkafka takes a token callback, not kafka-python's provider: refused up front
        with pytest.raises(ConfigError) as refused:
            source_options(gateway, topic, **{"kafkaConsumer.client": read_client})
        assert refused.value.option == "kafka.sasl.oauth.token.provider"
        assert "kafkaConsumer.client=kafka-python" in str(refused.value)
        return
    planner = Driver(kafka.bootstrap, topic)
    pool = ConsumerPool()
    try:
        end = planner.reader.latestOffset(planner.offset, planner.reader.getDefaultReadLimit())
        parts = planner.reader.partitions(planner.offset, end)
        options = source_options(
            gateway,
            topic,
            **{"pipeline.id": "sec-executor", "kafkaConsumer.client": read_client},
        )
        schema = arrow_schema(source_schema(False))
        values: list[bytes] = []
        for part in parts:
            assert isinstance(part, KafkaInputPartition)
            for batch in read_partition(options, part, schema, task=None, source=pool):
                values += batch.column("value").to_pylist()
        assert sorted(int(v) for v in values) == list(range(40))
        assert pool.stats().created >= 1
    finally:
        pool.close()
        planner.close()
    assert FETCH in gateway.requests_by("gtkafka-sec-executor")


def test_commit_offsets_to_group_is_visible_on_the_broker(
    gateway: KafkaGateway, kafka: KafkaHelper
) -> None:
    topic = kafka.create_topic(partitions=2)
    group = f"sec-group-{uuid.uuid4().hex[:8]}"
    options = source_options(gateway, topic, **{"pipeline.id": "sec-commit"})
    commit_to_group(options, group, {(topic, 0): 7, (topic, 1): 3})
    assert committed(kafka, group, topic) == {0: 7, 1: 3}
    assert OFFSET_COMMIT in gateway.requests_by("gtkafka-sec-commit")


def test_a_source_client_without_the_settings_is_refused_naming_the_servers(
    gateway: KafkaGateway, kafka: KafkaHelper
) -> None:
    topic = kafka.create_topic(partitions=1)
    options = KafkaSourceOptions.parse(
        {
            "kafka.bootstrap.servers": gateway.bootstrap,
            "subscribe": topic,
            "kafkaConsumer.pollTimeoutMs": "4000",
            "fetchOffset.numRetries": "0",
        }
    )
    reader = OffsetReader(options)
    with pytest.raises(Exception) as caught:
        try:
            reader.topic_partitions()
        finally:
            reader.close()
    assert gateway.bootstrap in str(caught.value)


def test_the_kafka_consumers_producer_delivers_a_bundle_through_the_endpoint(
    gateway: KafkaGateway, kafka: KafkaHelper
) -> None:
    """A commit of the barrier protocol, in-process: its producer (transactional: the
    transaction coordinator is found through the endpoint too) delivers the bundle."""
    topic = kafka.create_topic(partitions=1)
    p = sink_pipeline(gateway, topic)
    p.record_batch(0, 1)
    outcome = p.barrier().commit([p.write(0, [gt_batch(1, 0, range(20))], partition=0)], 0)
    assert outcome.action == "delivered", outcome
    items = [r for r in kafka.consume_all(topic) if dict(r.headers).get(H_BUNDLE) == b"1"]
    assert len(items) == 20
    assert PRODUCE in {int(e["api_key"]) for e in gateway.events("request")}


def sink_pipeline(gateway: KafkaGateway, topic: str) -> Pipeline:
    """The barrier protocol in-process (tests/sink_helpers.py) with consumer=kafka
    through ``gateway``."""
    raw = {
        "pipeline.id": f"sec-sink-{uuid.uuid4().hex[:8]}",
        "consumer": "kafka",
        "consumer.kafka.bootstrap.servers": gateway.bootstrap,
        **gateway.options("consumer.kafka."),
        "consumer.topic": topic,
        "ack.timeoutMs": "20000",
    }
    p = Pipeline(SinkOptions.parse({**raw, "state.uri": "memory://sec-sink"}))
    p.options = SinkOptions.parse({**raw, "state.uri": f"memory://{p.query_id}"})
    assert p.options.store is not None
    p.store = open_store(p.options.store)
    p.consumer = open_consumer(p.options, p.store, FaultInjector())  # type: ignore[assignment]
    p.staging = p.consumer.staging
    return p


def test_the_kafka_consumers_tail_scan_reads_the_last_bundle(
    gateway: KafkaGateway, kafka: KafkaHelper
) -> None:
    topic = kafka.create_topic(partitions=1)
    headers = [(H_BUNDLE, b"4"), (H_GT, b"4"), (H_INDEX, b"0"), (H_COUNT, b"1")]
    kafka.produce(topic, [(None, b"item", headers, 0)])
    c = sink_consumer(gateway, topic)
    try:
        last = c.last_bundle()
    finally:
        c.close()
    assert last is not None and last.bundle_id == 4


def sink_consumer(gateway: KafkaGateway, topic: str) -> Consumer:
    options = SinkOptions.parse(
        {
            "pipeline.id": "sec-sink",
            "state.uri": f"memory://sec-sink-{uuid.uuid4().hex}",
            "consumer": "kafka",
            "consumer.kafka.bootstrap.servers": gateway.bootstrap,
            **gateway.options("consumer.kafka."),
            "consumer.topic": topic,
            "ack.timeoutMs": "20000",
        }
    )
    assert options.store is not None
    return open_consumer(options, open_store(options.store), FaultInjector())


def committed(kafka: KafkaHelper, group: str, topic: str) -> dict[int, int]:
    """The group's committed offsets for ``topic``, read from the broker directly."""
    admin = kafka.admin()
    try:
        answer = admin.list_group_offsets(group)
    finally:
        admin.close()
    return {
        tp.partition: om.offset
        for tp, om in answer.get(group, {}).items()
        if isinstance(tp, TopicPartition) and tp.topic == topic
    }


# --- a streaming query and the CLI ----------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_secured_query_delivers_exactly_once_commits_its_group_and_status_shows_lag(
    gateway: KafkaGateway, kafka: KafkaHelper, spark: Any, tmp_path: Path
) -> None:
    n, partitions = 3000, 2
    topic = kafka.create_topic(partitions=partitions)
    numbered(kafka, topic, n, partitions)
    pipeline = f"sec-{gateway.security_protocol.lower().replace('_', '-')}-{uuid.uuid4().hex[:6]}"
    group = f"{pipeline}-group"
    state = f"file://{tmp_path / 'state'}"
    ids = {"pipeline.id": pipeline, "state.uri": state}
    df = (
        spark.readStream.format("gtkafka")
        .options(**ids)
        .option("kafka.bootstrap.servers", gateway.bootstrap)
        .options(**gateway.options("kafka."))
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "1000")
        .option("commitOffsetsToGroup", group)
        .option("kafkaConsumer.pollTimeoutMs", "30000")
        .load()
    )
    out = tmp_path / "out"
    query = (
        df.select("key", "value", "gt")
        .writeStream.format("barrier")
        .options(**ids)
        .option("consumer.path", str(out))
        .option("checkpointLocation", str(tmp_path / "cp"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        finished = query.awaitTermination(QUERY_TIMEOUT)
    finally:
        if query.isActive:
            query.stop()
    if query.exception() is not None:
        raise AssertionError(f"the secured query failed: {query.exception()}")
    assert finished, f"the secured query did not finish within {QUERY_TIMEOUT}s"

    table = read_bundles(out)
    check_exactly_once(table, n, partitions)
    ends = kafka.end_offsets(topic)
    # commit(end) comes one batch late: the last epoch's end is committed by the query's
    # next run, so every epoch but the last one is there
    wait_until(
        lambda: (
            committed(kafka, group, topic)
            and all(0 < off <= ends[p] for p, off in committed(kafka, group, topic).items())
        ),
        timeout=60,
        what=f"group {group} to show committed offsets on the broker",
    )
    used = gateway.requests_by(f"gtkafka-{pipeline}")
    assert {METADATA, LIST_OFFSETS, FETCH, OFFSET_COMMIT} <= used, used

    kafka.produce_values(topic, [b"9"] * 25, partition=0)
    status = gtbarrier_status(gateway, pipeline, state)
    lag = status["lag"]
    assert lag["behind_total"] == 25, lag
    assert {p["partition"]: p["kafka_end"] for p in lag["partitions"]} == kafka.end_offsets(topic)
    assert LIST_OFFSETS in gateway.requests_by("gtkafka")  # the CLI's reader has no pipeline.id

    logs = [gateway.events_path.read_text()]
    if gateway.log_path is not None:
        logs.append(gateway.log_path.read_text())
    assert_no_password(gateway, *logs, str(status))


def check_exactly_once(table: pa.Table, n: int, partitions: int) -> None:
    gt = table.column("gt").combine_chunks()
    keys = list(
        zip(
            gt.field("epoch").to_pylist(),
            gt.field("partition").to_pylist(),
            gt.field("offset").to_pylist(),
            strict=True,
        )
    )
    assert keys == sorted(keys), "items are not in gt order"
    pairs = [(p, o) for _, p, o in keys]
    assert len(pairs) == len(set(pairs)), f"{len(pairs) - len(set(pairs))} duplicate item(s)"
    assert sorted(int(v) for v in table.column("value").to_pylist()) == list(range(n))


def gtbarrier_status(gateway: KafkaGateway, pipeline: str, state: str) -> dict[str, Any]:
    """``gtbarrier status --bootstrap`` through the endpoint, the password (if any) given as
    a reference to an environment variable so that it is not on the command line."""
    settings = gateway.options("kafka.")
    env = repo_env()
    if "kafka.sasl.plain.password" in settings:
        env[PASSWORD_ENV] = settings["kafka.sasl.plain.password"]
        settings["kafka.sasl.plain.password"] = "${env:" + PASSWORD_ENV + "}"
    argv = [
        sys.executable,
        "-m",
        "gtbarrier",
        "status",
        *("--pipeline", pipeline, "--state-uri", state, "--bootstrap", gateway.bootstrap),
        *(f"--option={k}={v}" for k, v in settings.items()),
        "--json",
    ]
    assert all(gateway.password not in a for a in argv)
    proc = subprocess.run(
        argv,
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )
    assert_no_password(gateway, proc.stdout, proc.stderr)
    assert proc.returncode == 0, proc.stderr
    data: dict[str, Any] = json.loads(proc.stdout)
    return data


def test_status_without_the_settings_fails_naming_the_servers(
    gateway: KafkaGateway, tmp_path: Path
) -> None:
    """The CLI's lag reader gets no settings unless given: the endpoint refuses it."""
    from state.layout import PipelineLayout
    from state.protocol.epoch_log import EpochLog
    from state.records.source_offset import SourceOffset

    state = f"file://{tmp_path / 'state'}"
    store = open_store(_file_config(state))
    EpochLog(store, PipelineLayout("sec-nocreds")).create_start(SourceOffset(0, {("t", 0): 0}))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gtbarrier",
            "status",
            *("--pipeline", "sec-nocreds", "--state-uri", state, "--bootstrap", gateway.bootstrap),
        ],
        cwd=REPO_ROOT,
        env=repo_env(),
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )
    assert proc.returncode != 0
    assert gateway.bootstrap in proc.stderr


def _file_config(uri: str) -> Any:
    from state.options import Options
    from state.stores import StoreConfig

    return StoreConfig.from_options(Options({"state.uri": uri}, where="test"))


# --- the kafka consumer in a query: its producer, and its tail scan after a crash -----

PROGRAM = Path(__file__).with_name("kafka_security_driver_program.py")
DRIVER_TIMEOUT = 300.0


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_secured_query_into_the_kafka_consumer_recovers_a_half_sent_bundle_by_its_tail_scan(
    kafka_sasl_plain: KafkaGateway, kafka: KafkaHelper, driver: Any, tmp_path: Path
) -> None:
    """Source and sink both secured. The driver is killed with half of bundle 1 sent; the
    restarted query asks the topic's tail which items of the in-flight bundle are there
    (the tail scan) and sends only the others: every record once in the output topic.

    One endpoint, ``SASL_SSL`` (TLS and SASL together): each client's handshake with each
    endpoint (TLS, SASL PLAIN, SCRAM-SHA-512, OAUTHBEARER) is tested above, client by client, the
    producer and the tail scan included; this is the whole query's path through them."""
    gateway = kafka_sasl_plain
    n, partitions = 2000, 2
    topic = kafka.create_topic(partitions=partitions)
    out_topic = kafka.create_topic(partitions=partitions)
    numbered(kafka, topic, n, partitions)
    pipeline = f"sec-out-{gateway.security_protocol.lower().replace('_', '-')}"
    args = [
        *("--bootstrap", gateway.bootstrap, "--topic", topic, "--pipeline", pipeline),
        *("--state", f"file://{tmp_path / 'state'}", "--checkpoint", str(tmp_path / "cp")),
    ]
    sink = {
        "consumer": "kafka",
        "consumer.kafka.bootstrap.servers": gateway.bootstrap,
        "consumer.topic": out_topic,
        **gateway.options("consumer.kafka."),
    }
    given = {"source": gateway.options("kafka."), "sink": sink}
    env = {"GTB_SECURITY_OPTIONS": json.dumps(given)}
    crashed = driver.run(PROGRAM, *args, env={**env, "GTBARRIER_FAULT": "after_deliver:1"})
    code = crashed.wait(DRIVER_TIMEOUT)
    assert code == -9, (
        f"driver exited {code}, not killed at after_deliver:\n{crashed.output()[-3000:]}"
    )
    half = [r for r in kafka.consume_all(out_topic) if dict(r.headers)[H_BUNDLE] == b"1"]
    assert 0 < len(half) < 500, f"{len(half)} item(s) of bundle 1 in the topic"
    fetches_before = tail_scan_fetches(gateway)

    restarted = driver.run(PROGRAM, *args, env=env)
    assert restarted.wait(DRIVER_TIMEOUT) == 0, restarted.output()[-5000:]
    values = sorted(int(r.value) for r in kafka.consume_all(out_topic))
    assert values == list(range(n)), "the output topic does not hold every record exactly once"
    assert tail_scan_fetches(gateway) > fetches_before, "no tail scan went through the endpoint"
    assert PRODUCE in {int(e["api_key"]) for e in gateway.events("request")}
    assert_no_password(gateway, restarted.output(), crashed.output())


def tail_scan_fetches(gateway: KafkaGateway) -> int:
    """Authenticated connections of the sink's readers (not gtkafka's) that fetched."""
    return sum(
        1
        for e in gateway.events("request")
        if e["api_key"] == FETCH and not str(e.get("client_id") or "").startswith("gtkafka")
    )


# --- the sink's Kafka clients with their passwords given by reference ---------------------

OUT_PASSWORD_ENV = "GTB_TEST_KAFKA_OUT_PASSWORD"
DLQ_PASSWORD_ENV = "GTB_TEST_KAFKA_DLQ_PASSWORD"
REFUSED = (3, 17, 29)  # offsets of the rows without a gt: refused by every consumer


def by_reference(gateway: KafkaGateway, prefix: str, env: str) -> dict[str, str]:
    """The settings of a client of ``gateway`` under ``prefix``, its password as ``${env:env}``
    (an OAUTHBEARER endpoint's token provider is a reference already)."""
    settings = gateway.options(prefix)
    if gateway.mechanism == "OAUTHBEARER":
        assert settings[prefix + "sasl.oauth.token.provider"] == VALID_TOKEN
        return settings
    assert prefix + "sasl.plain.password" in settings
    settings[prefix + "sasl.plain.password"] = "${env:" + env + "}"
    return settings


class SecuredSink:
    """consumer=kafka through ``out`` and its dead-letter topic through ``dlq``, both
    passwords given as ``${env:...}`` references, committed in-process; ``texts``: every
    repr and exception text met, for the password check."""

    def __init__(
        self, out: KafkaGateway, dlq: KafkaGateway, kafka: KafkaHelper, tmp_path: Path
    ) -> None:
        self.out_topic = kafka.create_topic(partitions=2)
        self.dlq_topic = kafka.create_topic(partitions=1)
        self.pipeline = f"sec-dl-{uuid.uuid4().hex[:8]}"
        self.options = SinkOptions.parse(
            {
                "pipeline.id": self.pipeline,
                "state.uri": f"memory://{self.pipeline}",
                "consumer": "kafka",
                "consumer.kafka.bootstrap.servers": out.bootstrap,
                **by_reference(out, "consumer.kafka.", OUT_PASSWORD_ENV),
                "consumer.topic": self.out_topic,
                "ack.timeoutMs": "20000",
                "errors.tolerance": "all",
                "errors.deadLetter.path": f"file://{tmp_path / 'dead'}",
                "errors.deadLetter.topic": self.dlq_topic,
                "errors.deadLetter.kafka.bootstrap.servers": dlq.bootstrap,
                **by_reference(dlq, "errors.deadLetter.kafka.", DLQ_PASSWORD_ENV),
            }
        )
        self.pipe = Pipeline(self.options)
        self.pipe.record_batch(0, epoch=1)
        self.pipe.record_batch(1, epoch=2)
        self.texts = [repr(self.options)]

    def commit(self, run_id: str, crash: str | None = None, batch_id: int = 0) -> Any:
        """Batch ``batch_id`` (epoch ``batch_id + 1``: offsets ``40 * batch_id`` on, 40 rows,
        those at :data:`REFUSED` in batch 0 without a gt) committed by a new run with a new
        consumer, as a restarted driver commits it; None if it crashed."""
        p = self.pipe
        p.run_id = run_id
        consumer = open_consumer(self.options, p.store, FaultInjector())
        assert isinstance(consumer, KafkaTopicConsumer)
        p.consumer, p.staging = consumer, consumer.staging  # type: ignore[assignment]
        refused = REFUSED if batch_id == 0 else ()
        offsets = range(40 * batch_id, 40 * batch_id + 40)
        rows = [note_batch(batch_id + 1, 0, offsets, null_gt=refused)]
        barrier = p.barrier(faults=crash_at(crash) if crash else FaultInjector())
        try:
            return barrier.commit([p.write(batch_id, rows)], batch_id)
        except InjectedFault as err:
            self.texts.append("".join(traceback.format_exception(err)))
            return None
        finally:
            self.texts.append(repr(consumer.config))
            consumer.close()


def test_the_kafka_consumer_and_its_dead_letter_topic_take_their_passwords_by_reference(  # noqa: PLR0917
    kafka_sasl_scram: KafkaGateway,
    kafka_sasl_plain: KafkaGateway,
    kafka: KafkaHelper,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """consumer=kafka through the SCRAM-SHA-512 endpoint, its dead-letter topic through the
    SASL PLAIN one over TLS, each password given as ``${env:...}``: the options and their
    pickle keep the references, and the clients resolve them where they are made. A bundle
    with refused rows is committed across a crash after its dead letters (the topic's
    producer through its endpoint); the restart resolves the bundle in flight with a tail
    scan of the dead-letter topic through its endpoint, and a bundle acknowledged by the
    consumer with a tail scan of the output topic through the consumer's: the
    output topic holds the accepted rows once and the dead-letter topic the refused ones
    once. Neither password is in any log record (at DEBUG, kafka-python's own included) nor
    in the text of any exception."""
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="kafka")  # the CLI quiets it in-process
    out, dlq = kafka_sasl_scram, kafka_sasl_plain
    monkeypatch.setenv(OUT_PASSWORD_ENV, out.password)
    monkeypatch.setenv(DLQ_PASSWORD_ENV, dlq.password)
    sink = SecuredSink(out, dlq, kafka, tmp_path)
    pickled = pickle.dumps(sink.options)
    for env in (OUT_PASSWORD_ENV, DLQ_PASSWORD_ENV):
        assert ("${env:" + env + "}").encode() in pickled
    sink.texts.append(pickled.decode("latin-1"))

    assert sink.commit("run-a", "after_dead_letters") is None
    dead = kafka.consume_all(sink.dlq_topic)
    assert len(dead) == len(REFUSED) and kafka.consume_all(sink.out_topic) == []
    assert all(dict(m.headers)[H_PIPELINE] == sink.pipeline.encode() for m in dead)

    # The crash left bundle 1 in flight with its dead letters written: the restart resolves
    # it, scanning the dead-letter topic's tail through its endpoint, and delivers it; its
    # own batch is then a replay.
    dlq_scans = tail_scan_fetches(dlq)
    outcome = sink.commit("run-b")
    assert outcome is not None and outcome.recovered == 1, outcome
    assert outcome.action == "dropped", outcome
    assert tail_scan_fetches(dlq) > dlq_scans, "no dead-letter tail scan went through"
    assert sink.pipe.state().gt_last == 1

    # Bundle 2 acknowledged by the consumer, GT_last not moved: the restart finds it
    # delivered by a tail scan of the output topic through the consumer's endpoint.
    assert sink.commit("run-c", "after_ack", batch_id=1) is None
    assert sink.pipe.inflight().bundle_id == 2
    out_scans = tail_scan_fetches(out)
    outcome = sink.commit("run-d", batch_id=1)
    assert outcome is not None and outcome.recovered == 2, outcome
    assert tail_scan_fetches(out) > out_scans, "no tail scan went through the endpoint"
    state = sink.pipe.state()
    assert state.gt_last == 2 and state.inflight is None

    delivered = kafka.consume_all(sink.out_topic)
    assert sorted({dict(r.headers)[H_BUNDLE] for r in delivered}) == [b"1", b"2"]
    expected = [f"0:{o}".encode() for o in range(80) if o not in REFUSED]
    assert sorted(r.value for r in delivered) == sorted(expected), "not exactly once"
    refused = sorted(m.value for m in kafka.consume_all(sink.dlq_topic))
    assert refused == sorted(f"0:{o}".encode() for o in REFUSED), "not exactly once"

    assert caplog.records, "nothing was logged at DEBUG"
    texts = [*sink.texts, caplog.text, *(r.getMessage() for r in caplog.records)]
    for text in texts:
        for password in (out.password, dlq.password):
            assert password not in text, "a SASL password appears in a log, repr or message"


# --- the documented SASL_SSL + SCRAM-SHA-512 example, end to end --------------------------

READER_PASSWORD_ENV = "KAFKA_READER_PASSWORD"


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_the_documented_sasl_ssl_scram_example_runs_end_to_end(
    kafka_sasl_ssl_scram: KafkaGateway, kafka: KafkaHelper, driver: Any, tmp_path: Path
) -> None:
    """docs/security.md's example "a SASL_SSL cluster with SCRAM-SHA-512", as written: TLS
    and SCRAM-SHA-512 together on one endpoint, the source's password as
    ``${env:KAFKA_READER_PASSWORD}`` (in the driver and its executors), its progress
    committed to a group, the sink's ``consumer=kafka`` password as ``${file:...}``; then
    ``gtbarrier status`` with the reader's settings. Every record once in the output topic,
    every client authenticated with SCRAM-SHA-512 over TLS, the password nowhere."""
    gateway = kafka_sasl_ssl_scram
    assert gateway.security_protocol == "SASL_SSL" and gateway.mechanism == "SCRAM-SHA-512"
    n, partitions = 1500, 2
    topic = kafka.create_topic(partitions=partitions)
    out_topic = kafka.create_topic(partitions=partitions)
    numbered(kafka, topic, n, partitions)
    pipeline = f"sec-scram-tls-{uuid.uuid4().hex[:6]}"
    group = f"{pipeline}-group"
    state = f"file://{tmp_path / 'state'}"
    writer_secret = tmp_path / "kafka-writer"
    writer_secret.write_text(gateway.password + "\n")
    writer_secret.chmod(0o600)

    source = {
        **gateway.options("kafka."),
        "kafka.sasl.plain.password": "${env:" + READER_PASSWORD_ENV + "}",
        "commitOffsetsToGroup": group,
    }
    sink = {
        "consumer": "kafka",
        "consumer.topic": out_topic,
        "consumer.kafka.bootstrap.servers": gateway.bootstrap,
        **gateway.options("consumer.kafka."),
        "consumer.kafka.sasl.plain.password": "${file:" + str(writer_secret) + "}",
    }
    given = json.dumps({"source": source, "sink": sink})
    assert gateway.password not in given
    run = driver.run(
        PROGRAM,
        *("--bootstrap", gateway.bootstrap, "--topic", topic, "--pipeline", pipeline),
        *("--state", state, "--checkpoint", str(tmp_path / "cp")),
        env={"GTB_SECURITY_OPTIONS": given, READER_PASSWORD_ENV: gateway.password},
    )
    assert run.wait(DRIVER_TIMEOUT) == 0, run.output()[-5000:]

    values = sorted(int(r.value) for r in kafka.consume_all(out_topic))
    assert values == list(range(n)), "the output topic does not hold every record exactly once"
    authenticated = gateway.events("authenticated")
    assert authenticated, "no client authenticated through the endpoint"
    assert {(e["mechanism"], e["tls"]) for e in authenticated} == {("SCRAM-SHA-512", True)}
    assert {METADATA, LIST_OFFSETS, FETCH} <= gateway.requests_by(f"gtkafka-{pipeline}")
    assert PRODUCE in {int(e["api_key"]) for e in gateway.events("request")}
    wait_until(
        lambda: bool(committed(kafka, group, topic)),
        timeout=60,
        what=f"group {group} to show committed offsets on the broker",
    )

    kafka.produce_values(topic, [b"9"] * 10, partition=0)
    status = gtbarrier_status(gateway, pipeline, state)
    assert status["lag"]["behind_total"] == 10, status["lag"]
    logs = [gateway.events_path.read_text(), run.output()]
    if gateway.log_path is not None:
        logs.append(gateway.log_path.read_text())
    assert_no_password(gateway, *logs, str(status))


# --- OAUTHBEARER: the dead-letter topic, and tokens the endpoint refuses ------------------


def test_the_kafka_consumer_and_its_dead_letter_topic_authenticate_with_oauthbearer(
    kafka_sasl_oauth: KafkaGateway,
    kafka: KafkaHelper,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """consumer=kafka and its dead-letter topic both through the OAUTHBEARER endpoint,
    each producer's token provider made from its reference where the producer is made: a
    bundle with refused rows puts the accepted rows once in the output topic and the
    refused ones once in the dead-letter topic; no token is in any log record at DEBUG."""
    caplog.set_level(logging.DEBUG)
    caplog.set_level(logging.DEBUG, logger="kafka")
    gateway = kafka_sasl_oauth
    sink = SecuredSink(gateway, gateway, kafka, tmp_path)
    pickled = pickle.dumps(sink.options)
    assert VALID_TOKEN.encode() in pickled and b"AbstractTokenProvider" not in pickled
    outcome = sink.commit("run-a")
    assert outcome is not None and outcome.action == "delivered", outcome

    delivered = sorted(r.value for r in kafka.consume_all(sink.out_topic))
    assert delivered == sorted(f"0:{o}".encode() for o in range(40) if o not in REFUSED)
    dead = kafka.consume_all(sink.dlq_topic)
    assert sorted(m.value for m in dead) == sorted(f"0:{o}".encode() for o in REFUSED)
    authenticated = gateway.events("authenticated")
    assert authenticated
    assert {(e["mechanism"], e["principal"]) for e in authenticated} == {
        ("OAUTHBEARER", gateway.user)
    }
    assert PRODUCE in {int(e["api_key"]) for e in gateway.events("request")}
    tokens = issued_tokens()
    assert tokens, "no token was made in this process"
    texts = [*sink.texts, caplog.text, *(r.getMessage() for r in caplog.records)]
    for text in texts:
        for token in tokens:
            assert token not in text, "an OAUTHBEARER token appears in a log, repr or message"


REFUSED_TOKENS = {"expired": EXPIRED_TOKEN, "stranger": STRANGER_TOKEN}


@pytest.mark.parametrize("token", sorted(REFUSED_TOKENS))
def test_a_refused_token_fails_the_source_with_an_authentication_error(
    kafka_sasl_oauth: KafkaGateway, kafka: KafkaHelper, token: str
) -> None:
    """The endpoint refuses an expired token, and the token of a principal it does not
    know: the source's reader fails within its time-out (no hang), naming the servers, and
    the endpoint saw the token and refused it for that reason. (kafka-python's bootstrap
    retries a refused authentication until its time-out, so the error may be the SASL
    failure or the time-out that follows it.)"""
    gateway = kafka_sasl_oauth
    topic = kafka.create_topic(partitions=1)
    options = source_options(
        gateway,
        topic,
        **{"kafka.sasl.oauth.token.provider": REFUSED_TOKENS[token], "pipeline.id": "sec-bad"},
    )
    reader = OffsetReader(options)
    with pytest.raises(Exception) as caught:
        try:
            reader.topic_partitions()
        finally:
            reader.close()
    text = "".join(traceback.format_exception(caught.value))
    assert gateway.bootstrap in text
    why = "expired" if token == "expired" else "unknown principal"
    refused = [e for e in gateway.events("refused") if e.get("client_id") == "gtkafka-sec-bad"]
    assert any(why in e["reason"] for e in refused), refused


def test_a_refused_token_fails_gtbarrier_status_with_an_authentication_error(
    kafka_sasl_oauth: KafkaGateway, tmp_path: Path
) -> None:
    """``gtbarrier status --bootstrap`` with an expired token: a non-zero exit within the
    command's time-out, naming the servers; the endpoint refused the token as expired."""
    from state.layout import PipelineLayout
    from state.protocol.epoch_log import EpochLog
    from state.records.source_offset import SourceOffset

    gateway = kafka_sasl_oauth
    state = f"file://{tmp_path / 'state'}"
    store = open_store(_file_config(state))
    EpochLog(store, PipelineLayout("sec-expired")).create_start(SourceOffset(0, {("t", 0): 0}))
    settings = {**gateway.options("kafka."), "kafka.sasl.oauth.token.provider": EXPIRED_TOKEN}
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "gtbarrier",
            "status",
            *("--pipeline", "sec-expired", "--state-uri", state, "--bootstrap", gateway.bootstrap),
            *(f"--option={k}={v}" for k, v in settings.items()),
        ],
        cwd=REPO_ROOT,
        env=repo_env(),
        capture_output=True,
        text=True,
        timeout=CLI_TIMEOUT,
        check=False,
    )
    assert proc.returncode != 0
    assert gateway.bootstrap in proc.stderr, proc.stderr[-3000:]
    refused = [e for e in gateway.events("refused") if e.get("client_id") == "gtkafka"]
    assert any("expired" in e["reason"] for e in refused), refused
