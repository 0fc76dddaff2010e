"""The metrics endpoints' access control, on real sockets, TLS and servers:

* the coordinator's endpoint and ``gtbarrier exporter`` listen on ``127.0.0.1`` unless told
  otherwise (a server with the default address is not reachable at the host's other
  address; one bound to ``0.0.0.0`` is);
* HTTPS with a certificate of a CA made for the test, and client certificates required
  when a client CA is given (refused without one and with one of another CA);
* basic authentication (the password a secret reference): 401 without it, with a wrong
  user or password; the password in no log record and no repr;
* ``gtbarrier exporter`` keeps one ZooKeeper session and one Kafka reader across scrapes
  (real ZooKeeper and Kafka), and serves HTTPS with basic authentication as a process.
"""

from __future__ import annotations

import base64
import http.client
import logging
import socket
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from gtbarrier.cli import build_parser
from harness.kafka_gateway import TlsFiles, make_client_tls_files, make_tls_files
from harness.ports import LOOPBACK
from harness.process import repo_env
from integration_tests.metrics_support import exporter
from state.coordinator.config import CoordinatorConfig
from state.errors import ConfigError
from state.metrics.access import EXPORTER_NAMES, MetricsAccess
from state.metrics.server import MetricsServer

pytestmark = pytest.mark.timeout(180)
PASSWORD_ENV = "GTB_TEST_METRICS_PASSWORD"
PASSWORD = "metrics-pw-7c1e0a9b"


class One(Collector):
    """One gauge, so that a scrape that got through shows it."""

    def collect(self) -> Iterator[GaugeMetricFamily]:
        yield GaugeMetricFamily("gtbarrier_test_up", "a test gauge", value=1.0)

    def describe(self) -> Sequence[Any]:
        return []


@pytest.fixture
def server_tls(tmp_path: Path) -> TlsFiles:
    return make_tls_files(tmp_path / "server-tls")


def get(
    url: str,
    *,
    ca: Path | None = None,
    client: TlsFiles | None = None,
    auth: tuple[str, str] | None = None,
) -> tuple[int, str, dict[str, str]]:
    """GET ``url``: the status, the body and the headers (4xx/5xx answered, not raised)."""
    context = None
    if url.startswith("https://"):
        context = ssl.create_default_context(cafile=None if ca is None else str(ca))
        if client is not None:
            context.load_cert_chain(str(client.cert), str(client.key))
    headers = {}
    if auth is not None:
        headers["Authorization"] = "Basic " + base64.b64encode(":".join(auth).encode()).decode()
    request = urllib.request.Request(url, headers=headers)
    try:
        with urllib.request.urlopen(request, timeout=20, context=context) as answer:
            return answer.status, answer.read().decode(), dict(answer.headers)
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode(), dict(err.headers)


def other_address() -> str:
    """This host's address on its first non-loopback interface (the route to a TEST-NET
    address; no packet is sent)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.connect(("192.0.2.123", 9))
        address = str(s.getsockname()[0])
    assert not address.startswith("127."), "this test needs a non-loopback interface"
    return address


def reachable(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=3):
            return True
    except OSError:
        return False


def record_source_start(state: str, pipeline: str, partitions: dict[tuple[str, int], int]) -> None:
    """The source's start of ``pipeline`` in the store at ``state``, and a barrier state
    claimed by a driver: what a scrape reads."""
    from state.layout import PipelineLayout
    from state.options import Options
    from state.protocol.barrier_state import BarrierStateStore
    from state.protocol.epoch_log import EpochLog
    from state.records.source_offset import SourceOffset
    from state.stores import StoreConfig, open_store

    store = open_store(StoreConfig.from_options(Options({"state.uri": state}, where="test")))
    try:
        EpochLog(store, PipelineLayout(pipeline)).create_start(SourceOffset(0, partitions))
        BarrierStateStore(store, PipelineLayout(pipeline)).claim_driver(1, driver="h:1:x")
    finally:
        store.close()


# --- the address --------------------------------------------------------------------------


def test_the_endpoint_listens_on_loopback_by_default() -> None:
    other = other_address()
    default = MetricsServer(One(), 0)
    everywhere = MetricsServer(One(), 0, "0.0.0.0")
    try:
        assert default.address == "127.0.0.1"
        status, text, _ = get(f"http://{LOOPBACK}:{default.port}/metrics")
        assert status == 200 and "gtbarrier_test_up" in text
        assert not reachable(other, default.port), f"the default endpoint answers on {other}"
        assert reachable(other, everywhere.port), f"{other} is not reachable at all"
    finally:
        default.stop()
        everywhere.stop()


def test_the_coordinator_and_the_exporter_default_to_loopback(tmp_path: Path) -> None:
    config = CoordinatorConfig.from_arguments("p", "memory://m", tmp_path / "cp", metrics_port=0)
    assert config.metrics_address == "127.0.0.1"
    args = build_parser().parse_args(["exporter", "--pipeline", "p", "--state-uri", "memory://m"])
    assert args.address == "127.0.0.1"


# --- TLS and client certificates ------------------------------------------------------------


def test_https_with_a_test_ca(server_tls: TlsFiles) -> None:
    access = MetricsAccess(tls_cert=str(server_tls.cert), tls_key=str(server_tls.key))
    server = MetricsServer(One(), 0, access=access)
    try:
        assert server.url.startswith("https://")
        status, text, _ = get(server.url, ca=server_tls.ca)
        assert status == 200 and "gtbarrier_test_up" in text
        with pytest.raises(urllib.error.URLError, match="CERTIFICATE_VERIFY_FAILED"):
            get(server.url)  # the system's CAs do not know the test CA
        conn = http.client.HTTPConnection(LOOPBACK, server.port, timeout=10)
        try:
            with pytest.raises((http.client.HTTPException, OSError)):
                conn.request("GET", "/metrics")
                conn.getresponse().read()
        finally:
            conn.close()
    finally:
        server.stop()


def test_client_certificates_are_required_when_a_client_ca_is_given(
    server_tls: TlsFiles, tmp_path: Path
) -> None:
    client = make_client_tls_files(tmp_path / "client", name="prometheus")
    stranger = make_client_tls_files(tmp_path / "stranger", name="someone else")
    access = MetricsAccess(
        tls_cert=str(server_tls.cert), tls_key=str(server_tls.key), tls_client_ca=str(client.ca)
    )
    server = MetricsServer(One(), 0, access=access)
    try:
        for without in (None, stranger):
            with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
                get(server.url, ca=server_tls.ca, client=without)
        status, text, _ = get(server.url, ca=server_tls.ca, client=client)
        assert status == 200 and "gtbarrier_test_up" in text
    finally:
        server.stop()


# --- basic authentication -----------------------------------------------------------------


def test_basic_authentication(
    server_tls: TlsFiles, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    access = MetricsAccess(
        tls_cert=str(server_tls.cert),
        tls_key=str(server_tls.key),
        basic_auth=f"prometheus:${{env:{PASSWORD_ENV}}}",
    )
    assert PASSWORD not in repr(access)
    server = MetricsServer(One(), 0, access=access)
    try:
        for auth in (None, ("prometheus", "wrong"), ("other", PASSWORD), ("prometheus", "")):
            status, text, headers = get(server.url, ca=server_tls.ca, auth=auth)
            assert status == 401, (auth, status)
            assert "gtbarrier_test_up" not in text
            assert headers.get("WWW-Authenticate", "").startswith("Basic ")
        status, text, _ = get(server.url, ca=server_tls.ca, auth=("prometheus", PASSWORD))
        assert status == 200 and "gtbarrier_test_up" in text
        # the probes read nothing with the process's credentials, and a kubelet's probe
        # sends none: they answer without, over the same TLS, and show no metric
        base = server.url.removesuffix("/metrics")
        status, text, _ = get(f"{base}/healthz", ca=server_tls.ca, auth=None)
        assert (status, text) == (200, "ok\n")
        for path in ("/ready", "/healthz/", "/metrics/../healthz"):
            status, text, _ = get(f"{base}{path}", ca=server_tls.ca, auth=None)
            assert status in (401, 404) and "gtbarrier_test_up" not in text, (path, status)
    finally:
        server.stop()
    assert all(PASSWORD not in m for m in caplog.messages)


def test_bad_access_settings_name_the_option(tmp_path: Path, server_tls: TlsFiles) -> None:
    parse = MetricsAccess.parse
    with pytest.raises(ConfigError, match="metrics_tls_key"):
        parse(tls_cert=str(server_tls.cert))
    with pytest.raises(ConfigError, match="metrics_tls_cert"):
        parse(tls_client_ca=str(server_tls.ca))
    with pytest.raises(ConfigError, match="--basic-auth") as caught:
        parse(basic_auth="no-colon-secret", names=EXPORTER_NAMES)
    assert "no-colon-secret" not in str(caught.value)
    with pytest.raises(ConfigError, match="metrics_tls_cert"):
        MetricsServer(
            One(),
            0,
            access=parse(tls_cert=str(tmp_path / "missing.pem"), tls_key=str(server_tls.key)),
        )
    with pytest.raises(ConfigError, match="metrics_tls_client_ca"):
        MetricsServer(
            One(),
            0,
            access=parse(
                tls_cert=str(server_tls.cert),
                tls_key=str(server_tls.key),
                tls_client_ca=str(tmp_path / "missing-ca.pem"),
            ),
        )


# --- the exporter ---------------------------------------------------------------------------


def test_the_exporter_serves_https_with_basic_authentication(
    server_tls: TlsFiles, tmp_path: Path
) -> None:
    env = {**repo_env(), PASSWORD_ENV: PASSWORD}
    state = f"file://{tmp_path / 'state'}"
    record_source_start(state, "secured", {("t", 0): 0})
    args = [
        *("--pipeline", "secured", "--state-uri", state),
        *("--tls-cert", str(server_tls.cert), "--tls-key", str(server_tls.key)),
        "--basic-auth",
        f"prometheus:${{env:{PASSWORD_ENV}}}",
    ]
    with exporter(args, env=env, output=tmp_path / "exporter.log") as run:
        assert run.url.startswith("https://"), run.url
        status, _, _ = get(run.url, ca=server_tls.ca)
        assert status == 401
        status, text, _ = get(run.url, ca=server_tls.ca, auth=("prometheus", PASSWORD))
        assert status == 200 and 'gtbarrier_gt_last{pipeline="secured"} -1.0' in text, text[:500]
        assert PASSWORD not in run.text()


def test_the_exporter_keeps_one_zookeeper_session_and_one_kafka_reader(
    zk: Any, kafka: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datasource import offset_reader
    from gtbarrier.cli import exporter as exporter_command
    from state.coordinator import zookeeper_session

    topic = kafka.create_topic(partitions=2)
    state = f"file://{tmp_path / 'state'}"
    record_source_start(state, "reuse", {(topic, 0): 0, (topic, 1): 0})

    sessions: list[object] = []
    readers: list[object] = []
    start_session = zookeeper_session.ZooKeeperSession.start
    make_reader = offset_reader.OffsetReader.__init__

    def counted_start(self: Any, *a: Any, **k: Any) -> Any:
        sessions.append(self)
        return start_session(self, *a, **k)

    def counted_reader(self: Any, *a: Any, **k: Any) -> None:
        readers.append(self)
        make_reader(self, *a, **k)

    monkeypatch.setattr(zookeeper_session.ZooKeeperSession, "start", counted_start)
    monkeypatch.setattr(offset_reader.OffsetReader, "__init__", counted_reader)
    args = build_parser().parse_args(
        [
            "exporter",
            *("--pipeline", "reuse", "--state-uri", state),
            *("--zookeeper", zk.hosts, "--bootstrap", kafka.bootstrap),
        ]
    )
    reading = exporter_command.ExporterReading.from_args(args)
    try:
        kafka.produce_values(topic, [b"1"] * 7, partition=0)
        for _ in range(5):
            reading.read()
        assert reading.read().behind == {(topic, 0): 7, (topic, 1): 0}
    finally:
        reading.close()
    assert len(sessions) == 1, f"{len(sessions)} ZooKeeper sessions for 6 scrapes"
    assert len(readers) == 1, f"{len(readers)} Kafka readers for 6 scrapes"


# --- the coordinator's endpoint ---------------------------------------------------------------


def test_the_coordinators_endpoint_takes_tls_and_basic_authentication(
    server_tls: TlsFiles, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from state.coordinator import SnapshotCoordinator
    from tests.coordinator_fakes import fake_spark

    monkeypatch.setenv(PASSWORD_ENV, PASSWORD)
    with pytest.raises(ConfigError) as caught:
        SnapshotCoordinator(
            None, "p1", "memory://m-bad", tmp_path / "cp", metrics_port=0, metrics_tls_key="/k"
        )
    assert caught.value.option == "metrics_tls_cert"
    coord = SnapshotCoordinator(
        fake_spark(),
        "p1",
        "memory://metrics-secured",
        tmp_path / "cp",
        snapshot_period="1h",
        metrics_port=0,
        metrics_tls_cert=str(server_tls.cert),
        metrics_tls_key=str(server_tls.key),
        metrics_basic_auth=f"prometheus:${{env:{PASSWORD_ENV}}}",
    )
    try:
        assert PASSWORD not in repr(coord.config)
        url = f"https://{LOOPBACK}:{coord.metrics_port}/metrics"
        assert get(url, ca=server_tls.ca)[0] == 401
        status, text, _ = get(url, ca=server_tls.ca, auth=("prometheus", PASSWORD))
        assert status == 200 and "gtbarrier_snapshots_total" in text, text[:500]
    finally:
        coord.close()
