"""A secret given to a client is in no log record of the process and no error message.

Found by ``integration_tests/test_secrets_never_leak.py``: botocore logs every request it
sends at DEBUG with its ``Authorization`` header, whose ``Credential=`` names the access key
id; an Iceberg catalog that cannot be loaded showed its properties, a password in the
catalog's ``uri`` included; and the write tasks got the catalog's ``uri`` with the FileIO
properties they need, so they resolved (and held) a secret they never use, and failed
where its reference could not be resolved (an environment variable set on the driver
only).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest

from sink.consumers.http import HttpSettings, resolve_token
from sink.consumers.iceberg.iceberg_table import (
    open_catalog,
    resolved_properties,
    shown_properties,
    task_io_properties,
)
from sink.consumers.postgres.postgres_connections import resolved_conninfo
from sink.options import SinkOptions
from state.coordinator.config import ZooKeeperAuth
from state.errors import ConfigError, StateError
from state.options import Options
from state.secrets import hide_in_logs, redact
from state.stores import StoreConfig
from state.stores.s3_store import S3Store
from tests.test_sink_iceberg import iceberg_settings, raw_options


def texts(err: BaseException) -> str:
    """Everything a traceback of ``err`` shows: its text and its causes' and contexts'."""
    out: list[str] = []
    seen: BaseException | None = err
    while seen is not None:
        out += [str(seen), repr(seen), *getattr(seen, "__notes__", [])]
        seen = seen.__cause__ or seen.__context__
    return "\n".join(out)


@pytest.fixture
def every_record(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.DEBUG)
    return caplog


def test_a_hidden_secret_is_in_no_record_of_any_logger(
    every_record: pytest.LogCaptureFixture,
) -> None:
    """As text, in a repr of bytes, URL-encoded, in a message's arguments and in the text
    of a logged exception, whichever logger logs it."""
    secret = "s3cr3t/hidden+marker-41"
    assert hide_in_logs(secret) == secret
    log = logging.getLogger("some.library.nobody.configured")
    log.debug("sending %s", {"Authorization": f"Bearer {secret}".encode()})
    log.info("url postgresql://u:%s@db/x", secret.replace("/", "%2F").replace("+", "%2B"))
    try:
        raise RuntimeError(f"refused {secret}")
    except RuntimeError:
        log.exception("it failed")
    assert "sending" in every_record.text and "it failed" in every_record.text
    assert secret not in every_record.text
    assert "s3cr3t%2Fhidden%2Bmarker-41" not in every_record.text
    for record in every_record.records:
        assert secret not in record.getMessage()
    assert secret not in redact(f"x {secret} y") and redact("nothing here") == "nothing here"


def test_the_s3_stores_credentials_are_in_no_botocore_record(
    every_record: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    """botocore logs each request with its Authorization header, whose Credential= names
    the access key id; the store hides both keys where it makes the client."""
    from harness.ports import LOOPBACK, free_port

    access, secret = "AKIALEAKMARKER0000001", "secret-leak-marker-0000000000000001"
    config = StoreConfig.from_options(
        Options(
            {
                "state.uri": "s3://bucket/prefix",
                "s3.endpoint": f"http://{LOOPBACK}:{free_port()}",
                "s3.region": "us-east-1",
                "s3.accessKeyId": access,
                "s3.secretAccessKey": secret,
                "s3.retryDeadline": "300ms",
                "s3.connectTimeout": "200ms",
            },
            where="test",
        )
    )
    store = S3Store(config)
    try:
        with pytest.raises(StateError) as info:
            store.get_or_none("k")
    finally:
        store.close()
    assert "Authorization" in every_record.text, "botocore logged no request"
    for text in (every_record.text, texts(info.value)):
        assert access not in text and secret not in text


def test_a_catalog_that_cannot_be_loaded_hides_the_password_in_its_uri(tmp_path: Path) -> None:
    password = "iceberg-leak-marker-01"
    for catalog_type in ("sql", "nosuchtype"):
        settings = iceberg_settings(
            SinkOptions.parse(
                raw_options(
                    tmp_path,
                    **{
                        "consumer.iceberg.catalog.type": catalog_type,
                        "consumer.iceberg.catalog.uri": (
                            f"postgresql+psycopg://ice:{password}@127.0.0.1:1/x?connect_timeout=1"
                        ),
                    },
                )
            )
        )
        assert password not in str(shown_properties(settings))
        with pytest.raises(ConfigError) as info:
            open_catalog(settings)
        assert "ice:***@127.0.0.1:1" in str(info.value)
        assert password not in texts(info.value)


def test_the_write_tasks_get_the_fileio_properties_only(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The catalog's uri (and its password) stays on the driver: the tasks never resolve it."""
    monkeypatch.setenv("GTB_TEST_ICEBERG_PASSWORD", "pw-leak-marker-02")
    settings = iceberg_settings(
        SinkOptions.parse(
            raw_options(
                tmp_path,
                **{
                    "consumer.iceberg.catalog.uri": "postgresql://ice:${env:GTB_TEST_ICEBERG_PASSWORD}@db/x",
                    "consumer.iceberg.catalog.s3.secret-access-key": "${env:GTB_TEST_S3_KEY}",
                },
            )
        )
    )
    monkeypatch.setenv("GTB_TEST_S3_KEY", "s3-leak-marker-03")
    io = resolved_properties(settings.properties)  # what pyiceberg's FileIO is given
    recorded = task_io_properties(io, settings)
    assert "uri" not in recorded and "type" not in recorded
    assert recorded["s3.secret-access-key"] == "${env:GTB_TEST_S3_KEY}"  # still a reference


def test_other_clients_hide_the_secrets_they_are_given(
    every_record: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostgreSQL's password (inline in the DSN, or resolved), the HTTP token, ZooKeeper's
    digest password: in no record once the client has them."""
    monkeypatch.setenv("GTB_TEST_PG_PASSWORD", "pg-leak-marker-04")
    resolved_conninfo("host=db user=app password=pg-leak-marker-05")
    resolved_conninfo("host=db user=app password=${env:GTB_TEST_PG_PASSWORD}")
    resolve_token(HttpSettings(url="https://x", token="http-leak-marker-06"))
    ZooKeeperAuth.parse("digest:gtb:zk-leak-marker-07").credentials()
    log = logging.getLogger("psycopg")
    for marker in ("pg-leak-marker-04", "pg-leak-marker-05", "http-leak-marker-06"):
        log.debug("a client said %s", marker)
    logging.getLogger("kazoo.client").debug("Auth digest gtb:zk-leak-marker-07")
    for marker in ("04", "05", "06", "07"):
        assert f"leak-marker-{marker}" not in every_record.text


def test_no_settings_repr_shows_a_secret_given_inline(tmp_path: Path) -> None:
    """The parsed options travel to every task and are what one prints to look at them:
    their reprs show no secret given inline (the S3 keys, a DSN's password, an Iceberg
    catalog's uri and secret properties, the HTTP token, the Kafka passwords)."""
    from datasource.options import KafkaSourceOptions

    markers = [f"leak-repr-marker-{i}" for i in range(8)]
    s3 = {"s3.accessKeyId": markers[0], "s3.secretAccessKey": markers[1]}
    base = {"pipeline.id": "p", "state.uri": "s3://bucket/x", **s3}
    sinks = [
        {
            "consumer": "postgres",
            "consumer.postgres.table": "t",
            "consumer.postgres.dsn": f"postgresql://app:{markers[2]}@db/x",
        },
        {
            **raw_options(tmp_path),
            "state.uri": "s3://bucket/x",
            "consumer.iceberg.catalog.uri": f"postgresql://ice:{markers[3]}@db/x",
            "consumer.iceberg.catalog.s3.secret-access-key": markers[4],
        },
        {"consumer": "http", "consumer.url": "https://r", "consumer.http.token": markers[5]},
        {
            "consumer": "kafka",
            "consumer.topic": "t",
            "consumer.kafka.bootstrap.servers": "k:9",
            "consumer.kafka.security.protocol": "SASL_SSL",
            "consumer.kafka.sasl.mechanism": "PLAIN",
            "consumer.kafka.sasl.plain.username": "u",
            "consumer.kafka.sasl.plain.password": markers[6],
        },
    ]
    shown = [repr(SinkOptions.parse({**base, **sink})) for sink in sinks]
    shown.append(
        repr(
            KafkaSourceOptions.parse(
                {
                    **base,
                    "subscribe": "t",
                    "kafka.bootstrap.servers": "k:9",
                    "kafka.security.protocol": "SASL_SSL",
                    "kafka.sasl.mechanism": "PLAIN",
                    "kafka.sasl.plain.username": "u",
                    "kafka.sasl.plain.password": markers[7],
                }
            )
        )
    )
    shown.append(repr(StoreConfig.from_options(Options(base, where="test"))))
    for text in shown:
        assert not [m for m in markers if m in text], text


@pytest.mark.parametrize(
    "given",
    [
        {"consumer.http.token": "leak-misplaced-1"},
        {"consumer.postgres.dsn": "postgresql://u:leak-misplaced-2@h/d"},
        {"consumer.kafka.sasl.plain.password": "leak-misplaced-3"},
        {"consumer.iceberg.catalog.uri": "postgresql://u:leak-misplaced-4@h/d"},
        {"errors.deadLetter.kafka.sasl.plain.password": "leak-misplaced-5"},
        {
            "errors.tolerance": "all",
            "errors.deadLetter.path": "file:///tmp/dead",
            "errors.deadLetter.kafka.sasl.plain.password": "leak-misplaced-6",
        },
    ],
)
def test_an_option_that_does_not_apply_is_named_without_its_value(given: dict[str, str]) -> None:
    """A secret option given where it does not apply (another consumer's, the dead-letter
    topic's without the topic): the error names the option and why, not the value."""
    with pytest.raises(ConfigError) as info:
        SinkOptions.parse(
            {
                "pipeline.id": "p",
                "state.uri": "memory://x",
                "consumer": "file",
                "consumer.path": "/tmp/out",
                **given,
            }
        )
    assert "leak-misplaced" not in texts(info.value)
    assert info.value.option in str(info.value)


def test_no_secret_in_use_is_forgotten_after_many_others(
    every_record: pytest.LogCaptureFixture,
) -> None:
    """A long-lived worker sees rotations and many pipelines: the first secret it was given
    is still masked after more than a hundred others."""
    first = "first-secret-still-in-use-7c1d"
    hide_in_logs(first)
    others = [f"rotated-secret-{n:03d}-e4b2" for n in range(150)]
    for other in others:
        hide_in_logs(other)
    log = logging.getLogger("some.library.nobody.configured")
    log.info("authenticating with %s", first)
    log.info("and with %s", others[0])
    assert "authenticating with ***" in every_record.text
    assert first not in every_record.text and others[0] not in every_record.text
    assert redact(f"{first} {others[-1]}") == "*** ***"
