"""``consumer=postgres`` against a PostgreSQL server that takes only TLS and SCRAM passwords
(the ``postgres_tls`` fixture: :class:`~harness.postgres.PostgresServer` in the secured
mode, a certificate of a CA made for the session, no ``host`` line in ``pg_hba.conf``).

* bundles are delivered over ``sslmode=verify-full`` with the password given as a secret
  reference (``${env:...}``, ``${file:...}``, ``${file:...:key}``) in the DSN, which the
  options, their pickled form and every message keep as a reference; the connection is
  TLS (``pg_stat_ssl``);
* another CA fails the start check at once with a ``ConfigError`` that names the option,
  the server and the certificate problem, and a delivery tries once (fatal, not retried);
* a wrong password fails the same way with PostgreSQL's authentication error;
* the password is in no log record, no error message and no ``repr``;
* a streaming query gtkafka -> barrier -> postgres over TLS, with the password in a file
  reference, delivers exactly once.
"""

from __future__ import annotations

import logging
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
import pytest

from harness.kafka_gateway import make_tls_files
from harness.postgres import APP_ROLE, PostgresSchema, PostgresServer
from integration_tests.test_sink_pipeline import (
    check_exactly_once_in_gt_order,
    produce_numbered,
    run_available_now,
    source,
    stateless,
)
from sink.consumers import open_consumer
from sink.consumers.postgres.postgres_connections import CONNECTIONS
from sink.faults import FaultInjector
from sink.options import SinkOptions
from state.errors import ConfigError
from state.stores import open_store
from tests.sink_helpers import Pipeline, gt_batch

pytestmark = pytest.mark.timeout(240)
PASSWORD_ENV = "GTB_TEST_PG_PASSWORD"


@pytest.fixture(autouse=True)
def no_pooled_connections() -> Iterator[None]:
    """Each test connects anew: a connection pooled by an earlier test would hide a
    refusal."""
    CONNECTIONS.clear()
    yield
    CONNECTIONS.clear()


@pytest.fixture
def every_log_record(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    """Every record of every logger at DEBUG and above, psycopg's included."""
    caplog.set_level(logging.DEBUG)
    return caplog


def pipeline(dsn: str, postgres: PostgresSchema, **options: str) -> Pipeline:
    given = {
        "pipeline.id": "tls",
        "consumer": "postgres",
        "consumer.postgres.dsn": dsn,
        "consumer.postgres.table": postgres.table("events"),
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


def spark_schema() -> Any:
    from pyspark.sql import types as st

    from state.records.gt import spark_type

    return st.StructType(
        [st.StructField("value", st.BinaryType()), st.StructField("gt", spark_type())]
    )


def values(postgres: PostgresSchema) -> list[bytes]:
    rows = postgres.rows(
        'SELECT value FROM "{schema}".events ORDER BY gt_epoch, gt_topic, gt_partition, gt_offset'
    )
    return [bytes(r[0]) for r in rows]


def assert_hidden(secret: str, *texts: str) -> None:
    for text in texts:
        assert secret not in text, f"the password appears in: {text[:2000]}"


def error_texts(err: BaseException) -> list[str]:
    """The message of ``err`` and of every error it was raised from, with notes: what a
    traceback shows."""
    out: list[str] = []
    seen: BaseException | None = err
    while seen is not None:
        out += [str(seen), repr(seen), *getattr(seen, "__notes__", [])]
        seen = seen.__cause__ or seen.__context__
    return out


class Connects:
    """Counts the connections psycopg is asked to make."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        real = psycopg.connect

        def counting(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(psycopg, "connect", counting)


def reference_forms(server: PostgresServer, tmp_path: Path) -> dict[str, str]:
    """The role's password as each kind of secret reference (the environment variable is
    set by the test)."""
    assert server.password is not None
    whole = tmp_path / "pg-password"
    whole.write_text(server.password + "\n")  # the trailing line break is not part of it
    props = tmp_path / "pg.properties"
    props.write_text(f"# database credentials\nuser={APP_ROLE}\npassword={server.password}\n")
    return {
        "env": f"${{env:{PASSWORD_ENV}}}",
        "file": f"${{file:{whole}}}",
        "file-key": f"${{file:{props}:password}}",
    }


# --- delivery over TLS ---------------------------------------------------------------


@pytest.mark.parametrize("form", ["env", "file", "file-key"])
def test_delivery_over_verify_full_with_the_password_as_a_reference(
    form: str,
    postgres_tls: PostgresSchema,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    every_log_record: pytest.LogCaptureFixture,
) -> None:
    password = postgres_tls.server.password
    assert password is not None
    monkeypatch.setenv(PASSWORD_ENV, password)
    reference = reference_forms(postgres_tls.server, tmp_path)[form]
    dsn = postgres_tls.server.tls_dsn(password=reference)
    assert "sslmode=verify-full" in dsn and password not in dsn
    p = pipeline(dsn, postgres_tls)
    # the options keep the reference: nothing Spark plans, pickles or logs holds the password
    assert_hidden(password, repr(p.options), pickle.dumps(p.options).decode("latin-1"))
    assert reference in pickle.dumps(p.options).decode("latin-1")

    p.options = p.options.check_at_start(spark_schema())  # connects over TLS: creates the table
    assert_hidden(password, repr(p.options), pickle.dumps(p.options).decode("latin-1"))
    first = commit_epoch(p, 0, 1, [[gt_batch(1, 0, [0, 1, 2])], [gt_batch(1, 1, [0])]])
    assert first.action == "delivered"
    commit_epoch(p, 1, 2, [[gt_batch(2, 0, [3])]])
    assert values(postgres_tls) == [b"0:0", b"0:1", b"0:2", b"1:0", b"0:3"]
    assert postgres_tls.rows(
        'SELECT bundle_id, rows FROM "{schema}".gtbarrier_bundles ORDER BY bundle_id'
    ) == [(1, 4), (2, 1)]
    # the consumer's pooled connection is the role's, over TLS
    tls = postgres_tls.rows(
        "SELECT s.ssl, a.usename FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) "
        "WHERE a.application_name = 'gtbarrier'"
    )
    assert tls and all(row == (True, APP_ROLE) for row in tls), tls
    assert_hidden(password, every_log_record.text, p.consumer.describe())


def test_plain_tcp_and_no_password_are_refused_by_the_server(
    postgres_tls_server: PostgresServer,
) -> None:
    """The harness's secured server: without TLS, or without a password, no login."""
    with pytest.raises(psycopg.OperationalError, match="no encryption"):
        psycopg.connect(postgres_tls_server.tls_dsn(sslmode="disable"), connect_timeout=5)
    with pytest.raises(psycopg.OperationalError, match="password"):
        psycopg.connect(postgres_tls_server.tls_dsn(password=""), connect_timeout=5)


# --- refusals: fatal, named, not retried --------------------------------------------


def test_a_wrong_ca_fails_at_start_naming_the_server_and_the_certificate(
    postgres_tls: PostgresSchema,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    every_log_record: pytest.LogCaptureFixture,
) -> None:
    password = postgres_tls.server.password
    assert password is not None
    other_ca = make_tls_files(tmp_path / "other").ca
    dsn = postgres_tls.server.tls_dsn(ca=other_ca)  # the password itself in the DSN
    p = pipeline(dsn, postgres_tls, **{"delivery.maxRetries": "5"})
    connects = Connects(monkeypatch)
    with pytest.raises(ConfigError) as info:
        p.options.check_at_start(spark_schema())
    err = info.value
    assert err.option == "consumer.postgres.dsn" and not err.retriable
    text = str(err)
    assert f"127.0.0.1:{postgres_tls.server.port}" in text, text
    assert "certificate verify failed" in text and "sslrootcert" in text, text
    assert connects.count == 1

    # a delivery (the start check passed earlier, the CA changed since): one attempt, fatal
    with pytest.raises(ConfigError) as delivered:
        commit_epoch(p, 0, 1, [[gt_batch(1, 0, [0])]])
    assert delivered.value.option == "consumer.postgres.dsn"
    assert "certificate verify failed" in str(delivered.value)
    assert connects.count == 2, "a certificate that does not verify was retried"
    assert p.inflight().bundle_id == 1  # nothing lost: the restart delivers it
    assert_hidden(password, every_log_record.text, *error_texts(err))
    assert_hidden(password, *error_texts(delivered.value))


@pytest.mark.parametrize("form", ["literal", "env"])
def test_a_wrong_password_fails_with_the_authentication_error_not_retried(
    form: str,
    postgres_tls: PostgresSchema,
    monkeypatch: pytest.MonkeyPatch,
    every_log_record: pytest.LogCaptureFixture,
) -> None:
    password = postgres_tls.server.password
    assert password is not None
    wrong = "not the 'password' of gtb_app"
    monkeypatch.setenv(PASSWORD_ENV, wrong)
    given = wrong if form == "literal" else f"${{env:{PASSWORD_ENV}}}"
    p = pipeline(
        postgres_tls.server.tls_dsn(password=given), postgres_tls, **{"delivery.maxRetries": "5"}
    )
    connects = Connects(monkeypatch)
    with pytest.raises(ConfigError) as info:
        p.options.check_at_start(spark_schema())
    err = info.value
    assert err.option == "consumer.postgres.dsn" and not err.retriable
    text = str(err)
    assert f'password authentication failed for user "{APP_ROLE}"' in text, text
    assert f"127.0.0.1:{postgres_tls.server.port}" in text, text
    with pytest.raises(ConfigError) as delivered:
        commit_epoch(p, 0, 1, [[gt_batch(1, 0, [0])]])
    assert "password authentication failed" in str(delivered.value)
    assert connects.count == 2, "an authentication failure was retried"
    for secret in (password, wrong):
        assert_hidden(secret, every_log_record.text, *error_texts(err))
        assert_hidden(secret, *error_texts(delivered.value))


def test_an_unset_reference_names_the_option_and_the_reference(
    postgres_tls: PostgresSchema,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(PASSWORD_ENV, raising=False)
    reference = f"${{env:{PASSWORD_ENV}}}"
    p = pipeline(postgres_tls.server.tls_dsn(password=reference), postgres_tls)
    with pytest.raises(ConfigError) as info:
        p.options.check_at_start(spark_schema())
    assert info.value.option == "consumer.postgres.dsn"
    assert reference in str(info.value) and "not set" in str(info.value)
    with pytest.raises(ConfigError, match="not set"):
        commit_epoch(p, 0, 1, [[gt_batch(1, 0, [0])]])


# --- a streaming query ---------------------------------------------------------------


@pytest.mark.timeout(600)
def test_streaming_query_over_tls_with_a_file_reference_is_exactly_once(
    spark: Any,
    kafka: Any,
    postgres_tls: PostgresSchema,
    tmp_path: Path,
    every_log_record: pytest.LogCaptureFixture,
) -> None:
    """The commits run in Spark's Python workers, which resolve the file reference where
    they connect; the query plan and the checkpoint keep the reference."""
    password = postgres_tls.server.password
    assert password is not None
    n, partitions = 6_000, 2
    topic = kafka.create_topic(partitions=partitions)
    produce_numbered(kafka, topic, n, partitions)
    state = f"file://{tmp_path}/state"
    reference = reference_forms(postgres_tls.server, tmp_path)["file"]
    opts = {
        "pipeline.id": "pg-tls",
        "state.uri": state,
        "consumer": "postgres",
        "consumer.postgres.dsn": postgres_tls.server.tls_dsn(password=reference),
        "consumer.postgres.table": postgres_tls.table("events"),
    }
    df = stateless(source(spark, kafka, topic, "pg-tls", state, maxOffsetsPerTrigger="2000"))
    run_available_now(df, opts, tmp_path / "cp")

    rows = postgres_tls.rows(
        'SELECT key, value, gt_epoch, gt_topic, gt_partition, gt_offset FROM "{schema}".events '
        "ORDER BY gt_epoch, gt_topic, gt_partition, gt_offset"
    )
    from state.records.gt import arrow_array

    table = pa.table(
        {
            "value": pa.array([bytes(r[1]) for r in rows], pa.binary()),
            "gt": arrow_array(
                pa.array([r[2] for r in rows], pa.int64()),
                pa.array([r[3] for r in rows], pa.string()),
                pa.array([r[4] for r in rows], pa.int32()),
                pa.array([r[5] for r in rows], pa.int64()),
            ),
        }
    )
    check_exactly_once_in_gt_order(table, n, partitions)
    checkpoint = "".join(
        f.read_text(errors="replace") for f in (tmp_path / "cp").rglob("*") if f.is_file()
    )
    assert_hidden(password, every_log_record.text, checkpoint, driver_log())


def driver_log() -> str:
    from harness.logs import registered_logs

    return "".join(
        log.path.read_text(errors="replace")
        for log in registered_logs()
        if log.name.startswith("spark driver") and log.path.exists()
    )
