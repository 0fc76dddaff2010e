"""``consumer=http`` against the reference receiver serving HTTPS and requiring a bearer
token (the ``receiver_tls`` fixture: a certificate of a CA made for the test, a random
token given to the receiver in a file).

* the barrier delivers with ``consumer.http.token`` (a literal, ``${env:...}`` or
  ``${file:...}``) and ``consumer.http.caFile``, or ``SSL_CERT_FILE`` instead of the latter;
* without the token, or with another, the receiver answers 401 and the commit fails with a
  ``ConfigError`` naming ``consumer.http.token``: one request, never retried, the bundle
  left in flight; another CA fails naming ``consumer.http.caFile``;
* a streaming query gtkafka -> barrier -> receiver over HTTPS with the token in a file
  reference delivers exactly once; the same query without the token fails at its first
  commit with the configuration error after one refused request;
* the token is in no log (the test's, the receiver's, Spark's driver log), message or
  checkpoint.
"""

from __future__ import annotations

import logging
import pickle
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from harness.kafka_gateway import make_tls_files
from harness.logs import registered_logs
from harness.receiver import Receiver
from integration_tests.test_sink_pipeline import (
    check_exactly_once_in_gt_order,
    produce_numbered,
    query_failure,
    run_available_now,
    source,
    stateless,
)
from sink.consumers import open_consumer
from sink.faults import FaultInjector
from sink.options import SinkOptions
from state.errors import ConfigError
from state.stores import open_store
from tests.sink_helpers import Pipeline, gt_batch

pytestmark = pytest.mark.timeout(180)
TOKEN_ENV = "GTB_TEST_RECEIVER_TOKEN"
REFUSED = "refused"  # the receiver's log line for each request it refuses


@pytest.fixture
def every_log_record(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


def pipeline(receiver: Receiver, stream: str, **options: str) -> Pipeline:
    given = {
        "pipeline.id": "https",
        "consumer": "http",
        "consumer.url": f"{receiver.url}/{stream}",
        "delivery.retryBackoffMs": "10",
        **options,
    }
    p = Pipeline(SinkOptions.parse({**given, "state.uri": "memory://unused"}))
    p.options = SinkOptions.parse({**given, "state.uri": f"memory://{p.query_id}"})
    p.store = open_store(p.options.store)
    p.consumer = open_consumer(p.options, p.store, FaultInjector())  # type: ignore[assignment]
    p.staging = p.consumer.staging
    return p


def commit_epoch(p: Pipeline, batch_id: int, epoch: int, parts: list[list[pa.RecordBatch]]) -> Any:
    p.record_batch(batch_id, epoch)
    msgs = [p.write(batch_id, batches, partition=i) for i, batches in enumerate(parts)]
    return p.barrier().commit(msgs, batch_id)


def token_file(receiver: Receiver, tmp_path: Path) -> Path:
    assert receiver.token is not None
    path = tmp_path / "sink-token"
    path.write_text(receiver.token + "\n")
    return path


def refused_requests(receiver: Receiver) -> list[str]:
    return [line for line in receiver.log_text().splitlines() if REFUSED in line]


def assert_hidden(receiver: Receiver, *texts: str) -> None:
    assert receiver.token is not None
    for text in texts:
        assert receiver.token not in text, f"the token appears in: {text[:2000]}"


def error_texts(err: BaseException) -> list[str]:
    out: list[str] = []
    seen: BaseException | None = err
    while seen is not None:
        out += [str(seen), repr(seen), *getattr(seen, "__notes__", [])]
        seen = seen.__cause__ or seen.__context__
    return out


# --- the barrier in-process ----------------------------------------------------------------


@pytest.mark.parametrize("form", ["literal", "env", "file"])
def test_delivery_over_https_with_the_token(
    form: str,
    receiver_tls: Receiver,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    every_log_record: pytest.LogCaptureFixture,
) -> None:
    receiver = receiver_tls.start()
    assert receiver.url.startswith("https://") and receiver.tls is not None
    assert receiver.token is not None
    monkeypatch.setenv(TOKEN_ENV, receiver.token)
    given = {
        "literal": receiver.token,
        "env": f"${{env:{TOKEN_ENV}}}",
        "file": f"${{file:{token_file(receiver, tmp_path)}}}",
    }[form]
    p = pipeline(
        receiver,
        "orders",
        **{"consumer.http.token": given, "consumer.http.caFile": str(receiver.tls.ca)},
    )
    if form != "literal":
        assert receiver.token.encode() not in pickle.dumps(p.options)
    assert p.consumer.last_bundle() is None
    commit_epoch(p, 0, 1, [[gt_batch(1, 0, [0, 1])], [gt_batch(1, 1, [0])]])
    commit_epoch(p, 1, 2, [[gt_batch(2, 0, [2])]])
    assert [b["bundle_id"] for b in receiver.bundles("orders")] == [1, 2]
    table = receiver.table("orders")
    assert [v.as_py() for v in table.column("value")] == [b"0:0", b"0:1", b"1:0", b"0:2"]
    last = p.consumer.last_bundle()
    assert last is not None and last.bundle_id == 2
    assert refused_requests(receiver) == []
    assert_hidden(receiver, every_log_record.text, receiver.log_text(), repr(p.options))


def test_ssl_cert_file_stands_in_for_the_ca_option(
    receiver_tls: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without consumer.http.caFile the client trusts OpenSSL's defaults, which
    SSL_CERT_FILE names."""
    receiver = receiver_tls.start()
    assert receiver.tls is not None and receiver.token is not None
    monkeypatch.setenv("SSL_CERT_FILE", str(receiver.tls.ca))
    p = pipeline(receiver, "s", **{"consumer.http.token": receiver.token})
    commit_epoch(p, 0, 1, [[gt_batch(1, 0, [0])]])
    assert [b["bundle_id"] for b in receiver.bundles("s")] == [1]


@pytest.mark.parametrize("token", [None, "not-the-token"])
def test_without_the_token_401_is_a_configuration_error_never_retried(
    token: str | None,
    receiver_tls: Receiver,
    every_log_record: pytest.LogCaptureFixture,
) -> None:
    receiver = receiver_tls.start()
    assert receiver.tls is not None
    extra = {"consumer.http.caFile": str(receiver.tls.ca), "delivery.maxRetries": "5"}
    if token is not None:
        extra["consumer.http.token"] = token
    p = pipeline(receiver, "s", **extra)
    with pytest.raises(ConfigError) as info:
        commit_epoch(p, 0, 1, [[gt_batch(1, 0, [0, 1])]])
    err = info.value
    assert err.option == "consumer.http.token" and not err.retriable
    assert "HTTP 401" in str(err) and f"{receiver.url}/s" in str(err)
    assert len(refused_requests(receiver)) == 1, receiver.log_text()  # one POST, not retried
    assert p.inflight().bundle_id == 1  # nothing lost: a restart with the token delivers it
    assert receiver.bundles("s") == []
    assert_hidden(receiver, every_log_record.text, receiver.log_text(), *error_texts(err))


def test_another_ca_is_a_configuration_error_naming_the_ca_option(
    receiver_tls: Receiver, tmp_path: Path
) -> None:
    receiver = receiver_tls.start()
    assert receiver.token is not None
    other = make_tls_files(tmp_path / "other").ca
    p = pipeline(
        receiver,
        "s",
        **{
            "consumer.http.token": receiver.token,
            "consumer.http.caFile": str(other),
            "delivery.maxRetries": "5",
        },
    )
    with pytest.raises(ConfigError) as info:
        commit_epoch(p, 0, 1, [[gt_batch(1, 0, [0])]])
    err = info.value
    assert err.option == "consumer.http.caFile" and not err.retriable
    assert "certificate verify failed" in str(err).lower() and receiver.url in str(err)
    assert_hidden(receiver, *error_texts(err))


# --- a streaming query -------------------------------------------------------------------


def driver_log() -> str:
    return "".join(
        log.path.read_text(errors="replace")
        for log in registered_logs()
        if log.name.startswith("spark driver") and log.path.exists()
    )


@pytest.mark.timeout(600)
def test_streaming_query_to_the_https_receiver_with_the_token_is_exactly_once(
    spark: Any,
    kafka: Any,
    receiver_tls: Receiver,
    tmp_path: Path,
    every_log_record: pytest.LogCaptureFixture,
) -> None:
    """1. Without the token the query fails at its first commit with the configuration
    error, after one refused request. 2. With it (a file reference, resolved in Spark's
    commit worker), on the same checkpoint, every record arrives exactly once."""
    receiver = receiver_tls.start()
    assert receiver.tls is not None
    n, partitions = 20_000, 2
    topic = kafka.create_topic(partitions=partitions)
    produce_numbered(kafka, topic, n, partitions)
    state = f"file://{tmp_path}/state"
    opts = {
        "pipeline.id": "to-https",
        "state.uri": state,
        "consumer": "http",
        "consumer.url": f"{receiver.url}/orders",
        "consumer.http.caFile": str(receiver.tls.ca),
        "delivery.maxRetries": "3",
        "delivery.retryBackoffMs": "50",
    }

    def df() -> Any:
        return stateless(
            source(spark, kafka, topic, "to-https", state, maxOffsetsPerTrigger="5000")
        )

    text = query_failure(df(), opts, tmp_path / "cp")
    assert "consumer.http.token" in text and "HTTP 401" in text, text
    assert len(refused_requests(receiver)) == 1, receiver.log_text()
    assert receiver.bundles("orders") == []

    reference = f"${{file:{token_file(receiver, tmp_path)}}}"
    run_available_now(df(), {**opts, "consumer.http.token": reference}, tmp_path / "cp")
    assert [b["bundle_id"] for b in receiver.bundles("orders")] == [0, 1, 2, 3]
    check_exactly_once_in_gt_order(receiver.table("orders"), n, partitions)
    assert len(refused_requests(receiver)) == 1
    checkpoint = "".join(
        f.read_text(errors="replace") for f in (tmp_path / "cp").rglob("*") if f.is_file()
    )
    assert_hidden(
        receiver, text, every_log_record.text, receiver.log_text(), checkpoint, driver_log()
    )
