"""``gtbarrier exporter``'s arguments: a port it cannot listen on ends it with exit code 2
and one line naming ``--port``; the command is listed."""

from __future__ import annotations

import socket

import pytest

from gtbarrier.cli import build_parser, main


def _exporter(*argv: str) -> int:
    return main(["exporter", "--pipeline", "p1", "--state-uri", "memory://exporter", *argv])


def test_a_port_out_of_range_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert _exporter("--port", "70000") == 2
    err = capsys.readouterr().err
    assert err.startswith("gtbarrier exporter: error:") and "'--port' = 70000" in err


def test_a_port_in_use_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        assert _exporter("--port", str(port), "--address", "127.0.0.1") == 2
    err = capsys.readouterr().err
    assert f"'--port' = {port}" in err and "listen" in err


def test_the_exporter_is_a_command() -> None:
    assert "exporter" in build_parser().format_help()


@pytest.mark.parametrize(
    ("argv", "named"),
    [
        (["--tls-cert", "/c.pem"], "'--tls-key' = <missing>"),
        (["--tls-client-ca", "/ca.pem"], "'--tls-cert' = <missing>"),
        (["--basic-auth", "only-a-secret"], "'--basic-auth' = '<not shown>'"),
        (["--basic-auth", "prometheus:"], "'--basic-auth' = 'prometheus:<not shown>'"),
        (["--tls-cert", "/missing.pem", "--tls-key", "/missing-key.pem"], "'--tls-cert'"),
    ],
)
def test_bad_access_arguments_are_usage_errors(
    argv: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert _exporter("--port", "0", *argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("gtbarrier exporter: error: option") and named in err, err
    assert "only-a-secret" not in err
