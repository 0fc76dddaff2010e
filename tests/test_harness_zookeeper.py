"""The harness's ZooKeeper with authentication: the superuser's digest, zoo.cfg, the JVM flags."""

from __future__ import annotations

import base64
import hashlib
import shutil
from pathlib import Path

import pytest

import harness.zookeeper as hz
from harness.zookeeper import DIGEST_PROVIDER, SuperUser, ZooKeeperServer


def test_the_superusers_digest_is_zookeepers_sha1_form() -> None:
    user = SuperUser("super", "pw")
    expected = base64.b64encode(hashlib.sha1(b"super:pw").digest()).decode()
    assert user.digest == f"super:{expected}"
    assert user.auth_data == [("digest", "super:pw")]
    assert "pw" not in repr(user)


def test_a_server_with_a_superuser_authenticates_and_one_without_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(hz, "zookeeper_classpath", lambda: ["/zk.jar"])
    monkeypatch.setattr(shutil, "which", lambda name: "/usr/bin/java")
    user = SuperUser("super", "pw")
    server = ZooKeeperServer(tmp_path / "auth", superuser=user)
    argv = server._owned().argv
    assert f"-Dzookeeper.DigestAuthenticationProvider.superDigest={user.digest}" in argv
    assert f"authProvider.1={DIGEST_PROVIDER}" in server.config_path.read_text().splitlines()
    plain = ZooKeeperServer(tmp_path / "plain")
    assert not any("superDigest" in a for a in plain._owned().argv)
    assert "authProvider" not in plain.config_path.read_text()
    with pytest.raises(RuntimeError, match="without a superuser"):
        plain.admin_client()
