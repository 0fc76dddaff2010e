"""Smoke tests: the ZooKeeper fixture really serves, persists and expires sessions."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
from kazoo.protocol.states import KazooState

from harness.ports import LOOPBACK
from harness.process import wait_until
from harness.zookeeper import ZkHelper, ZooKeeperServer

pytestmark = pytest.mark.timeout(120)


def test_znodes_live_under_the_test_chroot(zk: ZkHelper, zk_server: ZooKeeperServer) -> None:
    client = zk.client()
    client.create("/pipelines/p1/resume", b'{"epoch": 3}', makepath=True)
    data, stat = client.get("/pipelines/p1/resume")
    assert data == b'{"epoch": 3}'
    assert stat.version == 0
    root = zk_server.client()
    try:
        assert root.get(f"{zk.chroot}/pipelines/p1/resume")[0] == b'{"epoch": 3}'
        assert not root.exists("/pipelines")
    finally:
        root.stop()
        root.close()


def test_data_survives_a_server_restart(zk: ZkHelper, zk_server: ZooKeeperServer) -> None:
    client = zk.client()
    client.create("/durable", b"before restart")
    old_pid = zk_server.pid
    zk_server.stop()
    assert not zk_server.running
    zk_server.start()
    assert zk_server.pid != old_pid
    fresh = zk.client()
    assert fresh.get("/durable")[0] == b"before restart"
    # The first client reconnects to the same session on its own.
    wait_until(lambda: client.connected, timeout=30, what="the first client to reconnect")
    client.set("/durable", b"after restart")
    assert fresh.get("/durable")[0] == b"after restart"


def test_expire_session(zk: ZkHelper) -> None:
    client = zk.client()
    client.create("/ephemeral", b"mine", ephemeral=True)
    old_session = client.client_id[0]
    states: list[str] = []
    reconnected = threading.Event()

    def listener(state: str) -> None:
        states.append(state)
        if state == KazooState.CONNECTED and KazooState.LOST in states:
            reconnected.set()

    client.add_listener(listener)
    zk.expire_session(client)
    assert KazooState.LOST in states
    assert reconnected.wait(30), f"no reconnect after expiry; states {states}"
    assert client.client_id[0] != old_session
    # The expired session's ephemeral node is gone.
    assert client.exists("/ephemeral") is None


def test_first_start_moves_off_a_taken_port(tmp_path: Path) -> None:
    with socket.socket() as squatter:
        squatter.bind((LOOPBACK, 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        server = ZooKeeperServer(tmp_path)
        server._use_port(taken)
        try:
            server.start_on_free_port()
            assert server.port != taken
            assert server.serving()
        finally:
            server.stop()
