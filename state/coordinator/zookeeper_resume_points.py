"""The resume point's home in ZooKeeper: one znode, ``/gtbarrier/<pipeline>/resume``.

:class:`ZooKeeperResumePoints` is the
:class:`~state.protocol.resume_point.ResumePointBackend` a pipeline with ZooKeeper uses
(without ZooKeeper it is :class:`~state.protocol.resume_point.StoreResumePoints`): the
record as JSON, compare-and-swapped on the znode version, whose rules stay in
:mod:`state.protocol.resume_point`.
"""

from __future__ import annotations

import json
from typing import Any

from kazoo.exceptions import BadVersionError, NodeExistsError, NoNodeError

from state.coordinator.zookeeper_session import ZooKeeperSession
from state.errors import ConcurrentModification
from state.records.codec import dumps


class ZooKeeperResumePoints:
    """The resume point as JSON in one znode; versions are znode versions."""

    def __init__(self, session: ZooKeeperSession, path: str) -> None:
        self.session = session
        self.path = path

    @property
    def description(self) -> str:
        return f"ZooKeeper {self.session.hosts} node {self.path}"

    def read(self) -> tuple[dict[str, Any] | None, str | None]:
        hit = self.session.get(self.path)
        if hit is None:
            return None, None
        data, version = hit
        return json.loads(data), str(version)

    def write(self, record: dict[str, Any], expected_version: str | None) -> str:
        data = dumps(record)
        try:
            if expected_version is None:
                return str(self.session.create(self.path, data))
            return str(self.session.set(self.path, data, int(expected_version)))
        except (NodeExistsError, BadVersionError, NoNodeError) as err:
            raise ConcurrentModification(
                f"zookeeper://{self.session.hosts}", self.path, expected_version
            ) from err
