"""The S3 store over HTTPS: SeaweedFS with a certificate signed by a CA made for the test.

With ``s3.caBundle`` naming that CA (or ``AWS_CA_BUNDLE``) the store works; with another
CA, or none (the system's trust store), it fails at once, fatally, naming the endpoint,
that its certificate was not trusted and how to give the CA; a ``s3.caBundle`` that is not
a file is refused naming the option. The coordinator and the CLI take the option too.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gtbarrier.cli import main as gtbarrier
from harness.kafka_gateway import TlsFiles, make_tls_files
from harness.s3 import S3Server
from harness.server import serving
from state.coordinator import CoordinatorConfig
from state.errors import KeyNotFound, StoreConfigError
from state.stores import StateStore, StoreConfig, new_store

BUCKET = "gtb-tls"
URI = f"s3://{BUCKET}/state"

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> tuple[TlsFiles, TlsFiles]:
    """The server's CA and certificate, and another CA that signed nothing of it."""
    root = tmp_path_factory.mktemp("pki")
    return make_tls_files(root / "server"), make_tls_files(root / "other")


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, pki: tuple[TlsFiles, TlsFiles]
) -> Iterator[S3Server]:
    s3 = S3Server(tmp_path_factory.mktemp("seaweedfs-tls"), tls=pki[0])
    with serving(s3, "s3 (seaweedfs, tls)", fixture="server"):
        s3.client().create_bucket(Bucket=BUCKET)
        yield s3


@pytest.fixture(autouse=True)
def no_aws_ca_bundle(monkeypatch: pytest.MonkeyPatch) -> None:
    """Only what a test sets decides what is trusted."""
    monkeypatch.delenv("AWS_CA_BUNDLE", raising=False)


def open_with(server: S3Server, **overrides: str) -> StateStore:
    options = {"state.uri": URI, **server.options(), "s3.retryDeadline": "20s", **overrides}
    options = {k: v for k, v in options.items() if v}
    return new_store(StoreConfig.from_options(options))


def round_trip(store: StateStore) -> None:
    try:
        version = store.create("p1/a.json", b"1")
        assert store.get("p1/a.json").version == version
        store.compare_and_swap("p1/a.json", b"2", version)
        assert store.list("p1/") == ["p1/a.json"]
        store.delete_many(["p1/a.json"])
        with pytest.raises(KeyNotFound):
            store.get("p1/a.json")
    finally:
        store.close()


def test_the_endpoint_is_https_and_the_store_works_with_the_ca(server: S3Server) -> None:
    assert server.endpoint.startswith("https://127.0.0.1:")
    assert server.ca_bundle is not None
    round_trip(open_with(server))  # s3.caBundle is among the server's options


def test_aws_ca_bundle_works_as_well(server: S3Server, monkeypatch: pytest.MonkeyPatch) -> None:
    assert server.ca_bundle is not None
    monkeypatch.setenv("AWS_CA_BUNDLE", server.ca_bundle)
    round_trip(open_with(server, **{"s3.caBundle": ""}))


@pytest.mark.parametrize("trusted", ["another CA", "the system's trust store"])
def test_an_untrusted_certificate_fails_at_once_naming_the_endpoint(
    server: S3Server, pki: tuple[TlsFiles, TlsFiles], trusted: str
) -> None:
    ca = str(pki[1].ca) if trusted == "another CA" else ""
    store = open_with(server, **{"s3.caBundle": ca})
    began = time.monotonic()
    with pytest.raises(StoreConfigError) as info:
        store.get("p1/a.json")
    assert time.monotonic() - began < 10  # not retried until s3.retryDeadline (20 s)
    message = str(info.value)
    assert server.endpoint in message and "was not trusted" in message
    assert info.value.option == "s3.caBundle" and "AWS_CA_BUNDLE" in message
    assert not info.value.retriable
    store.close()


def test_a_ca_bundle_that_is_not_a_file_is_refused_naming_it(
    server: S3Server, tmp_path: Path
) -> None:
    missing = tmp_path / "missing-ca.pem"
    store = open_with(server, **{"s3.caBundle": str(missing)})
    with pytest.raises(StoreConfigError) as info:
        store.list("p1/")
    assert info.value.option == "s3.caBundle" and str(missing) in str(info.value)


def test_the_coordinator_and_the_cli_take_the_option(
    server: S3Server, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    config = CoordinatorConfig.from_arguments(
        "p1", URI, tmp_path / "cp", state_options=server.options()
    )
    assert config.store.s3.ca_bundle == server.ca_bundle
    opts = [f"--option={k}={v}" for k, v in server.options().items()]
    # no pipeline there: the store was reached over HTTPS and answered
    assert gtbarrier(["status", "--pipeline", "p1", "--state-uri", URI, *opts]) == 2
    assert "pipeline 'p1' not found" in capsys.readouterr().err
