"""What the commands that read ZooKeeper share: ``--zookeeper-auth`` and the session.

``--zookeeper-auth SCHEME:CREDENTIALS`` (default ``$GTBARRIER_ZOOKEEPER_AUTH``) is the
coordinator's ``zookeeper_auth``: the identity whose ACL the pipeline's znodes carry.
Give it as a secret reference (``digest:gtb:${env:ZK_PASSWORD}``,
``digest:gtb:${file:/run/secrets/zk}``) rather than the password itself: a command line
is visible to every user of the host (``ps``). Without it the command reads as an
anonymous client, which a protected pipeline refuses with one line naming the node.
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

from state.coordinator.config import ZooKeeperAuth

if TYPE_CHECKING:
    from state.coordinator.zookeeper_session import ZooKeeperSession

ZOOKEEPER_AUTH_ENV = "GTBARRIER_ZOOKEEPER_AUTH"


def add_zookeeper_auth_argument(parser: argparse.ArgumentParser) -> None:
    """``--zookeeper-auth``, beside the command's ``--zookeeper``."""
    parser.add_argument(
        "--zookeeper-auth",
        default=os.environ.get(ZOOKEEPER_AUTH_ENV),
        metavar="SCHEME:CREDENTIALS",
        help="the coordinator's zookeeper_auth, e.g. 'digest:gtb:${env:ZK_PASSWORD}' "
        f"(default: ${ZOOKEEPER_AUTH_ENV})",
    )


def open_session(hosts: str, auth: str | None, timeout: float) -> ZooKeeperSession:
    """A started session on ``hosts`` (the caller stops it), authenticated with ``auth``
    if given; :class:`~state.errors.ConfigError` naming ``--zookeeper-auth`` if it is
    malformed (without showing it)."""
    from state.coordinator.zookeeper_session import ZooKeeperSession

    parsed = (
        None if auth is None else ZooKeeperAuth.parse(auth, option="--zookeeper-auth", where="")
    )
    session = ZooKeeperSession(hosts, call_timeout=timeout, auth=parsed)
    session.start(timeout)
    return session
