"""Pure parts of the ZooKeeper client: host strings, paths."""

from __future__ import annotations

import pytest

from state.coordinator.zookeeper_session import split_hosts
from state.layout import PipelineLayout


@pytest.mark.parametrize(
    ("hosts", "servers", "chroot"),
    [
        ("127.0.0.1:2181", "127.0.0.1:2181", ""),
        ("a:1,b:2/apps/gtb", "a:1,b:2", "/apps/gtb"),
        ("a:1/", "a:1", ""),
        ("a:1/t-1234/", "a:1", "/t-1234"),
    ],
)
def test_split_hosts(hosts: str, servers: str, chroot: str) -> None:
    assert split_hosts(hosts) == (servers, chroot)


def test_paths_per_pipeline() -> None:
    layout = PipelineLayout("orders-to-billing")
    assert layout.zookeeper_resume == "/gtbarrier/orders-to-billing/resume"
    assert layout.zookeeper_driver_lock == "/gtbarrier/orders-to-billing/driver"
    assert layout.driver == "orders-to-billing/coordinator/driver.json"
    assert layout.resume_point == "orders-to-billing/resume.json"
