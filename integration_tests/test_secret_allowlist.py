"""The secret reference allowlist on a real query: on a shared server whose operator set
``GTBARRIER_SECRET_FILE_DIRS`` (in the environment of the driver and its executors), a
pipeline's author who names another file as a SASL password (to have its content sent to a
broker) gets an error naming the allowlist, and the broker sees no authentication at all:
the file's content never leaves the process. A file inside the allowlist works."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest

from harness.kafka import KafkaHelper
from harness.kafka_gateway import KafkaGateway
from integration_tests.test_kafka_security import DRIVER_TIMEOUT, PROGRAM, numbered

FILE_DIRS_ENV = "GTBARRIER_SECRET_FILE_DIRS"


def run_with_password_file(
    gateway: KafkaGateway,
    kafka: KafkaHelper,
    driver: Any,
    tmp_path: Path,
    *,
    password_file: Path,
    allowed: Path,
) -> tuple[int, str, str]:
    """The security driver program with the source's password as ``${file:password_file}``
    and the allowlist ``allowed``: its exit code, output and pipeline id."""
    topic = kafka.create_topic(partitions=1)
    numbered(kafka, topic, 50, 1)
    pipeline = f"allow-{uuid.uuid4().hex[:6]}"
    run_dir = tmp_path / pipeline
    source = {
        **gateway.options("kafka."),
        "kafka.sasl.plain.password": "${file:" + str(password_file) + "}",
    }
    given = json.dumps({"source": source, "sink": {"consumer.path": str(run_dir / "out")}})
    run = driver.run(
        PROGRAM,
        *("--bootstrap", gateway.bootstrap, "--topic", topic, "--pipeline", pipeline),
        *("--state", f"file://{run_dir / 'state'}", "--checkpoint", str(run_dir / "cp")),
        env={"GTB_SECURITY_OPTIONS": given, FILE_DIRS_ENV: str(allowed)},
    )
    code = run.wait(DRIVER_TIMEOUT)
    return code, run.output(), pipeline


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_a_file_outside_the_allowlist_is_refused_before_it_reaches_the_broker(
    kafka_sasl_plain: KafkaGateway, kafka: KafkaHelper, driver: Any, tmp_path: Path
) -> None:
    gateway = kafka_sasl_plain
    allowed = tmp_path / "secrets"
    allowed.mkdir()
    (allowed / "kafka-reader").write_text(gateway.password + "\n")
    private = tmp_path / "private"
    private.mkdir()
    content = f"not-for-this-pipeline-{uuid.uuid4().hex}"
    (private / "key").write_text(content + "\n")

    code, output, pipeline = run_with_password_file(
        gateway, kafka, driver, tmp_path, password_file=private / "key", allowed=allowed
    )
    assert code != 0, "the query ran with a password file outside the allowlist"
    assert FILE_DIRS_ENV in output and str(allowed) in output, output[-3000:]
    assert "SecretReferenceError" in output, output[-3000:]
    attempts = [
        e
        for e in gateway.events()
        if str(e.get("client_id") or "").startswith(f"gtkafka-{pipeline}")
    ]
    assert attempts == [], f"the refused client reached the broker: {attempts[:3]}"
    assert content not in gateway.events_path.read_text()
    if gateway.log_path is not None:
        assert content not in gateway.log_path.read_text()

    code, output, pipeline = run_with_password_file(
        gateway, kafka, driver, tmp_path, password_file=allowed / "kafka-reader", allowed=allowed
    )
    assert code == 0, output[-5000:]
    assert any(e.get("client_id") == f"gtkafka-{pipeline}" for e in gateway.events("authenticated"))
