"""``zookeeper_auth``: parsing, secret references, and that the credentials never show.

The ACLs themselves are checked against a real ZooKeeper started with authentication in
``integration_tests/test_zookeeper_acls.py``.
"""

from __future__ import annotations

import logging
import pickle
from pathlib import Path

import pytest
from kazoo.protocol.serialization import Auth
from kazoo.security import CREATOR_ALL_ACL

from gtbarrier.cli import build_parser
from state.coordinator import CoordinatorConfig, SnapshotCoordinator
from state.coordinator.config import PARAMETERS, ZooKeeperAuth
from state.coordinator.zookeeper_session import ZooKeeperSession
from state.errors import ConfigError

SECRET = "s3cr3t-Zk-pw"
ENV = "GTB_TEST_ZK_SECRET"


def test_the_parameter_is_declared_once_with_a_default_of_none() -> None:
    [param] = [p for p in PARAMETERS if p.name == "zookeeper_auth"]
    assert param.default is None and "scheme:credentials" in param.doc
    assert "${env:" in param.doc and "${file:" in param.doc


def test_env_and_file_references_are_resolved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, SECRET)
    auth = ZooKeeperAuth.parse(f"digest:gtb:${{env:{ENV}}}")
    assert auth.scheme == "digest" and auth.credentials() == f"gtb:{SECRET}"
    secret_file = tmp_path / "zk-password"
    secret_file.write_text(SECRET + "\n")  # the newline an editor or `echo` leaves is dropped
    from_file = ZooKeeperAuth.parse(f"digest:gtb:${{file:{secret_file}}}")
    assert from_file.credentials() == f"gtb:{SECRET}"
    assert ZooKeeperAuth.parse(f"digest:gtb:{SECRET}").credentials() == f"gtb:{SECRET}"


def test_the_credentials_never_show_in_repr_str_or_pickles_of_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, SECRET)
    for given in (f"digest:gtb:{SECRET}", f"digest:gtb:${{env:{ENV}}}"):
        auth = ZooKeeperAuth.parse(given)
        config = CoordinatorConfig.from_arguments(
            "p1",
            "memory://auth",
            tmp_path / "cp",
            zookeeper_hosts="127.0.0.1:2181",
            zookeeper_auth=given,
        )
        assert config.zookeeper_auth == auth
        for shown in (repr(auth), str(auth), repr(config), str(config)):
            assert SECRET not in shown and "digest" in shown
    # a reference is kept unresolved in the config: a pickle holds no secret
    config = CoordinatorConfig.from_arguments(
        "p1", "memory://auth", tmp_path / "cp", zookeeper_auth=f"digest:gtb:${{env:{ENV}}}"
    )
    assert SECRET.encode() not in pickle.dumps(config)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("digest", "scheme:credentials"),
        ("digest:", "scheme:credentials"),
        (":gtb:" + SECRET, "scheme:credentials"),
        ("digest:" + SECRET, "user:password"),  # digest credentials without the user
        ("digest:gtb:", "user:password"),
        ("di gest:gtb:" + SECRET, "scheme:credentials"),
        (42, "scheme:credentials"),
    ],
)
def test_malformed_values_name_the_option_and_never_the_credentials(
    value: object, expected: str, tmp_path: Path
) -> None:
    with pytest.raises(ConfigError) as info:
        CoordinatorConfig.from_arguments(
            "p1",
            "memory://auth",
            tmp_path / "cp",
            zookeeper_auth=value,  # type: ignore[arg-type]
        )
    assert info.value.option == "zookeeper_auth"
    assert expected in str(info.value) and "SnapshotCoordinator" in str(info.value)
    assert SECRET not in str(info.value)


def test_a_reference_that_cannot_be_resolved_names_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(ENV, raising=False)
    with pytest.raises(ConfigError) as unset:
        ZooKeeperAuth.parse(f"digest:gtb:${{env:{ENV}}}")
    assert unset.value.option == "zookeeper_auth" and ENV in str(unset.value)
    assert "not set" in str(unset.value)
    missing = tmp_path / "no-such-file"
    with pytest.raises(ConfigError) as unreadable:
        ZooKeeperAuth.parse(f"digest:gtb:${{file:{missing}}}")
    assert str(missing) in str(unreadable.value)
    with pytest.raises(ConfigError) as unknown:
        ZooKeeperAuth.parse("digest:gtb:${vault:zk}")
    assert "${env:NAME}" in str(unknown.value) and "${file:/path}" in str(unknown.value)


def test_the_coordinator_takes_it_and_keeps_it_out_of_status(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ENV, SECRET)
    coord = SnapshotCoordinator(
        None, "p1", "memory://auth-status", tmp_path / "cp", zookeeper_auth=f"digest:gtb:{SECRET}"
    )
    try:
        assert coord.config.zookeeper_auth is not None
        assert coord.config.zookeeper_auth.scheme == "digest"
        assert SECRET not in repr(coord.status())
    finally:
        coord.close()


def test_a_session_with_auth_authenticates_and_creates_nodes_for_its_identity_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(ENV, SECRET)
    auth = ZooKeeperAuth.parse(f"digest:gtb:${{env:{ENV}}}")
    args = ZooKeeperSession("127.0.0.1:2181", auth=auth).client_arguments()
    assert args["auth_data"] == [("digest", f"gtb:{SECRET}")]
    assert args["default_acl"] == CREATOR_ALL_ACL  # ZooKeeper's "auth" id: the creator alone
    plain = ZooKeeperSession("127.0.0.1:2181").client_arguments()
    assert "auth_data" not in plain and "default_acl" not in plain  # as before


def test_kazoo_debug_logs_of_the_auth_packet_hide_the_credentials() -> None:
    """kazoo logs every request it sends at DEBUG, the Auth packet with its credentials."""
    logger = ZooKeeperSession("127.0.0.1:2181").client_arguments()["logger"]
    assert isinstance(logger, logging.Logger) and logger.name.startswith("kazoo.")
    record = logger.makeRecord(
        logger.name,
        logging.DEBUG,
        __file__,
        1,
        "Sending request(xid=%s): %s",
        (-4, Auth(0, "digest", f"gtb:{SECRET}")),
        None,
    )
    assert all(isinstance(f, logging.Filter) and f.filter(record) for f in logger.filters)
    message = record.getMessage()
    assert SECRET not in message and "digest" in message


@pytest.mark.parametrize("command", ["status", "sweep"])
def test_the_cli_takes_zookeeper_auth_from_the_option_or_the_environment(
    command: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    ids = ["--pipeline", "p", "--state-uri", "memory://x", "--zookeeper", "127.0.0.1:2181"]
    args = build_parser().parse_args([command, *ids, "--zookeeper-auth", "digest:a:b"])
    assert args.zookeeper_auth == "digest:a:b"
    monkeypatch.setenv("GTBARRIER_ZOOKEEPER_AUTH", f"digest:gtb:${{env:{ENV}}}")
    args = build_parser().parse_args([command, *ids])
    assert args.zookeeper_auth == f"digest:gtb:${{env:{ENV}}}"
