"""``zookeeper_auth`` against a real ZooKeeper 3.8 started with digest authentication.

A coordinator with ``zookeeper_auth="digest:gtb:${env:...}"`` takes the driver lock and
writes the resume point (``recover(mode="replay")`` starts a generation, which writes it);
its znodes carry an ACL for that identity alone. An anonymous client, and one with other
credentials, get ``NoAuthError`` reading and changing them; the CLI reads them with
``--zookeeper-auth`` and fails with one clear line without it; the password shows in no
log, message, status or output. Without the parameter the znodes are open, as before.
No Spark: the coordinator runs recovery-only (``spark=None``) on a ``file://`` store.
"""

from __future__ import annotations

import json
import logging
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from kazoo.client import KazooClient
from kazoo.exceptions import NoAuthError
from kazoo.security import ACL, OPEN_ACL_UNSAFE, Id, Permissions, make_digest_acl_credential

from gtbarrier import SnapshotCoordinator
from gtbarrier.cli import main as gtbarrier
from harness.zookeeper import ZkHelper
from state.errors import CoordinationError, DriverLockHeld
from state.layout import PipelineLayout

PASSWORD = "zk-" + secrets.token_hex(8)
ENV = "GTB_TEST_ZK_PASSWORD"
AUTH = f"digest:gtb:${{env:{ENV}}}"
PIPELINE = "acl-p1"
LAYOUT = PipelineLayout(PIPELINE)
NODES = (LAYOUT.zookeeper_root, LAYOUT.zookeeper_driver_lock, LAYOUT.zookeeper_resume)
OTHER_PASSWORD = "other-" + secrets.token_hex(8)
OTHER_DIGEST = make_digest_acl_credential("other", OTHER_PASSWORD)
SHARED_PARENT_ACL = [ACL(Permissions.CREATE, Id("world", "anyone"))]
# The test's own kazoo clients log here: their Auth packets (some carry the password, to
# show that another user with it is refused) are not the product's.
TEST_CLIENTS_LOG = logging.getLogger("tests.kazoo")


@pytest.fixture(autouse=True)
def password(monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    """The password in the environment, every log record captured (kazoo's below DEBUG
    too), and at the end: the password is in none of the product's."""
    monkeypatch.setenv(ENV, PASSWORD)
    caplog.set_level(1)
    caplog.set_level(1, logger="kazoo")  # the CLI quiets kazoo's logger for good
    yield
    records = caplog.get_records("setup") + caplog.get_records("call")
    assert any(r.name.startswith("kazoo.client") for r in records)  # kazoo's were captured
    leaked = [r.getMessage() for r in records if r.name != TEST_CLIENTS_LOG.name]
    assert not [m for m in leaked if PASSWORD in m]


def client(zk: ZkHelper, *auth: tuple[str, str]) -> KazooClient:
    """A test client on the chroot, anonymous or authenticated with ``auth``."""
    return zk.client(auth_data=list(auth), logger=TEST_CLIENTS_LOG)


@pytest.fixture
def coordinators(zk_auth: ZkHelper, tmp_path: Path) -> Iterator[Callable[..., SnapshotCoordinator]]:
    made: list[SnapshotCoordinator] = []

    def make(**kwargs: Any) -> SnapshotCoordinator:
        kwargs.setdefault("pipeline_id", PIPELINE)
        coord = SnapshotCoordinator(
            None,
            state_uri=f"file://{tmp_path}/state",
            checkpoint_location=tmp_path / f"cp{len(made)}",
            zookeeper_hosts=zk_auth.hosts,
            reset_timeout="30s",
            **kwargs,
        )
        made.append(coord)
        return coord

    yield make
    for coord in made:
        coord.close()


def gtb_acl() -> list[ACL]:
    """What the server records for ZooKeeper's ``auth`` id of a client authenticated as
    ``gtb`` with the password: that digest, every permission."""
    return [ACL(Permissions.ALL, Id("digest", make_digest_acl_credential("gtb", PASSWORD)))]


def assert_refused(client: KazooClient) -> None:
    """``client`` can neither read nor change the pipeline's znodes."""
    for node in NODES:
        with pytest.raises(NoAuthError):
            client.get(node)
        with pytest.raises(NoAuthError):
            client.set(node, b"{}")
        with pytest.raises(NoAuthError):  # not even the ACL (with the password's digest)
            client.get_acls(node)
    with pytest.raises(NoAuthError):
        client.get_children(LAYOUT.zookeeper_driver_lock)  # who holds the lock
    with pytest.raises(NoAuthError):  # queue up for the lock, or take an absent one
        client.create(f"{LAYOUT.zookeeper_driver_lock}/x__lock__", ephemeral=True, sequence=True)
    with pytest.raises(NoAuthError):
        client.delete(LAYOUT.zookeeper_resume)
    with pytest.raises(NoAuthError):
        client.create(f"{LAYOUT.zookeeper_root}/other", b"x")


def test_the_pipelines_znodes_belong_to_the_identity_alone(
    zk_auth: ZkHelper, coordinators: Callable[..., SnapshotCoordinator]
) -> None:
    coord = coordinators(zookeeper_auth=AUTH)
    coord.recover(mode="replay")  # the lock, then a new generation: the resume point written
    point = coord.ownership.read_resume_point()  # (resume_point() is None without a snapshot)
    assert point is not None and point.generation == 1
    assert coord.ownership.held and coord.status()["zookeeper"] == "CONNECTED"

    admin = zk_auth.admin()
    for node in NODES:
        acl, _ = admin.get_acls(node)
        assert acl == gtb_acl(), node
    holders = admin.get_children(LAYOUT.zookeeper_driver_lock)
    assert len(holders) == 1
    assert admin.get_acls(f"{LAYOUT.zookeeper_driver_lock}/{holders[0]}")[0] == gtb_acl()
    data, _ = admin.get(LAYOUT.zookeeper_resume)
    assert json.loads(data)["generation"] == 1
    # the shared parent: anybody may create a pipeline's root under it, nobody may list,
    # delete or re-ACL what is there (not even this identity: the parent is no one's)
    assert admin.get_acls("/gtbarrier")[0] == SHARED_PARENT_ACL
    anonymous = client(zk_auth)
    with pytest.raises(NoAuthError):
        anonymous.get_children("/gtbarrier")
    with pytest.raises(NoAuthError):
        anonymous.set_acls("/gtbarrier", OPEN_ACL_UNSAFE)

    assert_refused(client(zk_auth))
    assert_refused(client(zk_auth, ("digest", "gtb:not-the-password")))
    assert_refused(client(zk_auth, ("digest", f"other:{PASSWORD}")))

    for shown in (repr(coord.config), repr(coord.status()), str(coord.config.zookeeper_auth)):
        assert PASSWORD not in shown
    # the same identity elsewhere sees the lock's holder
    with pytest.raises(DriverLockHeld):
        coordinators(zookeeper_auth=AUTH).recover()


def test_a_driver_without_or_with_other_credentials_fails_clearly(
    coordinators: Callable[..., SnapshotCoordinator],
) -> None:
    coordinators(zookeeper_auth=AUTH).recover(mode="replay")
    for auth in (None, "digest:gtb:wrong", f"digest:intruder:{PASSWORD}"):
        with pytest.raises(CoordinationError) as info:
            coordinators(zookeeper_auth=auth).recover()
        message = str(info.value)
        assert "NoAuth" in message and LAYOUT.zookeeper_root in message
        assert "zookeeper_auth" in message
        assert PASSWORD not in message and not info.value.retriable
    # a scheme the server has no authProvider for: refused at once, not "unreachable"
    with pytest.raises(CoordinationError) as refused:
        coordinators(zookeeper_auth=f"kerberos:{PASSWORD}").recover()
    assert "refused the authentication" in str(refused.value)
    assert "'kerberos'" in str(refused.value) and PASSWORD not in str(refused.value)


def test_cli_status_and_sweep_read_them_with_the_auth_and_fail_clearly_without(
    zk_auth: ZkHelper,
    coordinators: Callable[..., SnapshotCoordinator],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    coord = coordinators(zookeeper_auth=AUTH)
    coord.recover(mode="replay")
    coord.close()  # the lock is released; the resume point stays
    ids = ["--pipeline", PIPELINE, "--state-uri", f"file://{tmp_path}/state"]
    zk = ["--zookeeper", zk_auth.hosts]

    assert gtbarrier(["status", *ids, *zk, "--zookeeper-auth", AUTH, "--json"]) == 0
    out = capsys.readouterr()
    status = json.loads(out.out)
    assert status["resume_point"]["generation"] == 1
    assert status["resume_point"]["from"] == f"ZooKeeper {zk_auth.hosts} node {NODES[2]}"
    assert PASSWORD not in out.out + out.err

    assert gtbarrier(["status", *ids, *zk, "--zookeeper-auth", AUTH]) == 0  # the tables
    assert PASSWORD not in capsys.readouterr().out

    for auth in ([], ["--zookeeper-auth", "digest:gtb:wrong"]):
        assert gtbarrier(["status", *ids, *zk, *auth]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert "NoAuth" in err and NODES[2] in err and "--zookeeper-auth" in err
        assert PASSWORD not in err

    # sweep --delete reads the lock's holders before it deletes anything
    sweep = ["sweep", *ids, "--option", "consumer=file", "--option", f"consumer.path={tmp_path}"]
    assert gtbarrier([*sweep, "--delete", *zk, "--zookeeper-auth", AUTH, "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["deleted"] == []
    assert gtbarrier([*sweep, "--delete", *zk]) == 2
    err = capsys.readouterr().err
    assert "NoAuth" in err and LAYOUT.zookeeper_driver_lock in err and "Traceback" not in err


def test_without_the_parameter_the_znodes_are_open_as_before(
    zk_auth: ZkHelper, coordinators: Callable[..., SnapshotCoordinator]
) -> None:
    coord = coordinators()
    coord.recover(mode="replay")
    anonymous = client(zk_auth)
    for node in NODES:
        acl, _ = anonymous.get_acls(node)
        assert [a.id for a in acl] == [Id("world", "anyone")], node
    data, _ = anonymous.get(LAYOUT.zookeeper_resume)
    assert json.loads(data)["generation"] == 1


def test_turning_auth_on_restricts_the_nodes_of_an_open_pipeline(
    zk_auth: ZkHelper,
    coordinators: Callable[..., SnapshotCoordinator],
    caplog: pytest.LogCaptureFixture,
) -> None:
    first = coordinators()
    first.recover(mode="replay")
    first.close()  # an open pipeline, its lock released
    coord = coordinators(zookeeper_auth=AUTH)
    with caplog.at_level(logging.WARNING, logger="state.coordinator.zookeeper_session"):
        coord.recover()
    admin = zk_auth.admin()
    for node in NODES:
        assert admin.get_acls(node)[0] == gtb_acl(), node
    assert_refused(client(zk_auth))
    assert any("open ACL" in r.getMessage() for r in caplog.records)


def foreign_acls() -> dict[str, list[ACL]]:
    """ACLs another tenant may give a node it creates first: every one lets this driver in,
    none is this identity's alone."""
    ours = gtb_acl()
    return {
        "ip-everyone": [ACL(Permissions.ALL, Id("ip", "0.0.0.0/0"))],
        "ours-and-another-identity": [*ours, ACL(Permissions.ALL, Id("digest", OTHER_DIGEST))],
        "ours-and-world-read": [*ours, ACL(Permissions.READ, Id("world", "anyone"))],
        "ours-without-admin": [ACL(Permissions.ALL & ~Permissions.ADMIN, ours[0].id)],
    }


@pytest.mark.parametrize("foreign", sorted(foreign_acls()))
@pytest.mark.parametrize("node", NODES, ids=["root", "driver", "resume"])
def test_a_node_with_any_acl_but_this_identitys_is_refused_naming_it(
    zk_auth: ZkHelper, coordinators: Callable[..., SnapshotCoordinator], node: str, foreign: str
) -> None:
    """Another tenant created the node first (or changed its ACL): the driver refuses it,
    naming the node and its ACL (a digest's hash never shown), and changes nothing."""
    acl = foreign_acls()[foreign]
    admin = zk_auth.admin()
    other = client(zk_auth, ("digest", f"other:{OTHER_PASSWORD}"))
    if node == LAYOUT.zookeeper_root:
        other.ensure_path("/gtbarrier")  # the shared parent as ZooKeeper makes it: open
        other.create(node, b"", acl=acl)
    else:
        admin.create(LAYOUT.zookeeper_root, b"", acl=gtb_acl(), makepath=True)
        admin.create(node, b"", acl=acl)
    before = {n: admin.get_acls(n)[0] for n in NODES if admin.exists(n)}

    with pytest.raises(CoordinationError) as info:
        coordinators(zookeeper_auth=AUTH).recover(mode="replay")
    message = str(info.value)
    assert node in message and not info.value.retriable, message
    assert "ACL" in message, message
    if foreign == "ip-everyone":
        assert "ip:0.0.0.0/0" in message, message
    if foreign == "ours-and-another-identity":
        assert "digest:other:" in message, message
    hashes = (OTHER_DIGEST.partition(":")[2], gtb_acl()[0].id.id.partition(":")[2])
    assert not [h for h in hashes if h in message], message
    assert PASSWORD not in message and OTHER_PASSWORD not in message
    # nothing was tightened, taken or written
    assert {n: admin.get_acls(n)[0] for n in NODES if admin.exists(n)} == before
    assert not admin.get_children(node) or node == LAYOUT.zookeeper_root
    if node != LAYOUT.zookeeper_resume:
        assert admin.exists(LAYOUT.zookeeper_resume) is None


def test_a_shared_parent_that_lets_anybody_delete_or_re_acl_is_refused_naming_it(
    zk_auth: ZkHelper, coordinators: Callable[..., SnapshotCoordinator]
) -> None:
    """Whoever may delete under ``/gtbarrier`` may delete a pipeline's empty root and make
    it again with an ACL of their own; a parent that lets anybody do so (other than the
    open ACL a pipeline without credentials leaves, which is restricted) is refused."""
    anybody = [ACL(Permissions.ALL, Id("ip", "0.0.0.0/0"))]
    client(zk_auth, ("digest", f"other:{OTHER_PASSWORD}")).create("/gtbarrier", b"", acl=anybody)
    with pytest.raises(CoordinationError) as info:
        coordinators(zookeeper_auth=AUTH).recover(mode="replay")
    message = str(info.value)
    assert "/gtbarrier" in message and "ip:0.0.0.0/0:cdrwa" in message, message
    assert not info.value.retriable
    admin = zk_auth.admin()
    assert admin.get_acls("/gtbarrier")[0] == anybody
    assert admin.exists(LAYOUT.zookeeper_root) is None


def test_an_open_shared_parent_is_restricted_and_anonymous_pipelines_still_work(
    zk_auth: ZkHelper, coordinators: Callable[..., SnapshotCoordinator]
) -> None:
    """A deployment without credentials gets ZooKeeper's open ACL everywhere, as before; a
    pipeline with credentials makes the shared parent create-only for everybody, and the
    pipelines without credentials keep working under it."""
    anonymous = coordinators(pipeline_id="open-p0")
    anonymous.recover(mode="replay")
    anonymous.close()
    admin = zk_auth.admin()
    assert admin.get_acls("/gtbarrier")[0] == OPEN_ACL_UNSAFE
    coordinators(zookeeper_auth=AUTH).recover(mode="replay")
    assert admin.get_acls("/gtbarrier")[0] == SHARED_PARENT_ACL
    for pipeline in ("open-p0", "open-p1"):
        again = coordinators(pipeline_id=pipeline)
        again.recover(mode="replay")
        root = PipelineLayout(pipeline).zookeeper_root
        assert admin.get_acls(root)[0] == OPEN_ACL_UNSAFE
        again.close()
