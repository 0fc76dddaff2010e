"""``gtbarrier retire``: remove the state of a pipeline that will never run again.

Lists every object under the pipeline's prefix in the state store (``<pipeline>/``: the
barrier state and run claims, the source's start and floor, the epoch log and its
segments, batch records, staged parts, the driver record, the resume point and the
snapshots kept in the store) and, with ``--zookeeper``, its znodes (``/gtbarrier/<pipeline>``
and below: the driver lock and the resume point). Without ``--yes`` it only prints what it
would delete and changes nothing; with ``--yes`` it deletes them and prints what it deleted.

It deletes only when no driver runs. With ``--zookeeper`` the pipeline's driver lock must
be free: retire takes it, as a driver does, and holds it until the store's objects and the
other znodes are gone, so no driver can start meanwhile (a driver holding it makes retire
refuse, nothing deleted). Without ``--zookeeper``, ``--force`` says you checked that no
driver runs. Neither check sees a driver that runs without the coordinator, so retire also
takes the pipeline first, as ``gtbarrier sweep --delete`` does: it takes the next fencing
token and claims the barrier with it, so such a driver is fenced at its next commit; a
driver that took a newer token makes retire refuse. The barrier state and the driver
record, which fence that driver, are deleted last. Znodes made with credentials are
deleted only with them (``--zookeeper-auth``), and their root is kept, empty: the shared
``/gtbarrier`` lets no identity delete a pipeline's root (ZooKeeper's superuser can).

The consumer's output and the dead letters are not touched: they belong to the consumer's
target, not to the pipeline's state (delete them there if you must).
"""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING, Any

from gtbarrier.cli.common import PipelineArgs, UsageError, add_pipeline_arguments
from gtbarrier.cli.output import Result, Table
from gtbarrier.cli.sweep import take_pipeline
from gtbarrier.cli.zookeeper import add_zookeeper_auth_argument, open_session
from gtbarrier.help_text import plain_help
from state.errors import CoordinationError, StateError
from state.layout import PipelineLayout
from state.stores import StateStore

if TYPE_CHECKING:
    from state.coordinator.zookeeper_session import ZooKeeperSession

COMMAND = "retire"
#: The identity retire takes the fencing token and the driver lock under.
RETIRE_IDENTITY = "gtbarrier-retire"
ZOOKEEPER_TIMEOUT = 5.0


def add_parser(subparsers: Any) -> None:
    parser: argparse.ArgumentParser = subparsers.add_parser(
        COMMAND,
        help="delete a retired pipeline's state: its store objects and znodes (not its output)",
        description=plain_help(__doc__),
    )
    add_pipeline_arguments(parser)
    parser.add_argument(
        "--zookeeper",
        default=os.environ.get("GTBARRIER_ZOOKEEPER"),
        metavar="HOSTS",
        help="list (and with --yes delete) the pipeline's znodes; with --yes: take its "
        "driver lock, refused while a driver holds it",
    )
    add_zookeeper_auth_argument(parser)
    parser.add_argument(
        "--force",
        action="store_true",
        help="with --yes and without --zookeeper: you checked that no driver runs",
    )
    parser.add_argument(
        "--yes", action="store_true", help="delete (without it: list only, nothing changed)"
    )
    parser.set_defaults(run=run)


def key_groups(layout: PipelineLayout) -> tuple[tuple[str, str], ...]:
    """What each key under the pipeline's prefix is: ``(what, key or prefix)``, the first
    that matches (a prefix ends with ``/``)."""
    root = f"{layout.root}/"
    return (
        ("barrier state", layout.barrier_state),
        ("barrier run claims", layout.barrier_claims_prefix),
        ("barrier run markers", f"{root}barrier/runs/"),
        ("epoch segments", layout.epoch_segments_prefix),
        ("epoch log", layout.epochs_prefix),
        ("source start and floor", f"{root}source/"),
        ("batch records", layout.batches_prefix()),
        ("staged parts", layout.staging_prefix),
        ("snapshots", layout.snapshots_prefix),
        ("snapshot blobs", layout.snapshot_blobs_prefix),
        ("resume point", layout.resume_point),
        ("driver record", layout.driver),
        ("other", root),
    )


def group_keys(layout: PipelineLayout, keys: list[str]) -> list[dict[str, Any]]:
    """``keys`` counted by :func:`key_groups` (the groups that have any)."""
    groups = key_groups(layout)
    counts = dict.fromkeys((what for what, _ in groups), 0)
    for key in keys:
        for what, where in groups:
            if key == where or (where.endswith("/") and key.startswith(where)):
                counts[what] += 1
                break
    return [
        {"what": what, "location": where, "count": counts[what]}
        for what, where in groups
        if counts[what]
    ]


def run(args: argparse.Namespace) -> Result:
    pipeline = PipelineArgs.parse(args)
    if args.yes and not args.zookeeper and not args.force:
        raise UsageError(
            "--yes needs --zookeeper HOSTS (to check that no driver holds the pipeline's "
            "lock, and hold it while deleting) or --force (you checked that no driver "
            "runs): nothing deleted"
        )
    store = pipeline.open_store()
    try:
        if args.zookeeper:
            return _retire_with_zookeeper(args, pipeline, store)
        keys = _existing(store, pipeline.layout, [], None)
        token = None
        if args.yes:
            token = take_pipeline(store, pipeline.layout, RETIRE_IDENTITY)
            keys = _delete_keys(store, pipeline.layout)
        return _result(pipeline, store, keys, [], args, token=token, holders=[])
    finally:
        store.close()


def _existing(
    store: StateStore, layout: PipelineLayout, nodes: list[str], zookeeper: str | None
) -> list[str]:
    """The pipeline's keys; :class:`UsageError` if it has neither keys nor znodes."""
    keys = store.list(f"{layout.root}/")
    if not keys and not nodes:
        on_zookeeper = (
            f" and no znode {layout.zookeeper_root} on ZooKeeper {zookeeper}" if zookeeper else ""
        )
        raise UsageError(
            f"pipeline {layout.pipeline_id!r} not found in {store.uri}: no key under "
            f"{layout.root}/{on_zookeeper} (check --pipeline and --state-uri)"
        )
    return keys


def _retire_with_zookeeper(
    args: argparse.Namespace, pipeline: PipelineArgs, store: StateStore
) -> Result:
    from state.coordinator.driver_lock import DriverLock
    from state.errors import DriverLockHeld

    layout = pipeline.layout
    session = open_session(args.zookeeper, args.zookeeper_auth, ZOOKEEPER_TIMEOUT)
    try:
        nodes = _znodes(session, layout.zookeeper_root)
        keys = _existing(store, layout, nodes, args.zookeeper)
        if not args.yes:
            holders = _lock_holders(session, layout)
            return _result(pipeline, store, keys, nodes, args, token=None, holders=holders)
        # as a driver does: with credentials the pipeline's znodes must be this identity's
        session.prepare_pipeline(
            layout.zookeeper_root, (layout.zookeeper_driver_lock, layout.zookeeper_resume)
        )
        lock = DriverLock(session, layout.zookeeper_driver_lock, layout.pipeline_id)
        lock.identifier = f"{RETIRE_IDENTITY}:{lock.identifier}"
        try:
            lock.acquire(None)
        except DriverLockHeld as err:
            holders = _lock_holders(session, layout)
            raise UsageError(
                f"pipeline {layout.pipeline_id!r} has a running driver "
                f"({holders[0] if holders else 'unknown'} holds {layout.zookeeper_driver_lock} "
                f"on ZooKeeper {args.zookeeper}): nothing deleted"
            ) from err
        try:
            token = take_pipeline(store, layout, RETIRE_IDENTITY) if keys else None
            keys = _delete_keys(store, layout) if keys else []
            if not lock.held:
                raise CoordinationError(
                    f"the ZooKeeper session to {args.zookeeper} expired while retiring "
                    f"pipeline {layout.pipeline_id!r}: its store objects are deleted, its "
                    "znodes are not; run retire again"
                )
            nodes = _znodes(session, layout.zookeeper_root)
            _delete_znodes(session, layout, nodes)
        finally:
            lock.release()
        kept = _delete_lock_and_root(session, layout, args.zookeeper)
        return _result(pipeline, store, keys, nodes, args, token=token, holders=[], kept=kept)
    finally:
        session.stop()


def _znodes(session: ZooKeeperSession, root: str) -> list[str]:
    """``root`` and every znode below it, sorted (a node before its children)."""
    found: list[str] = []
    stack = [root]
    while stack:
        path = stack.pop()
        if not session.exists(path):
            continue
        found.append(path)
        stack.extend(f"{path}/{child}" for child in session.children(path))
    return sorted(found)


def _lock_holders(session: ZooKeeperSession, layout: PipelineLayout) -> list[str]:
    from kazoo.exceptions import NoAuthError
    from kazoo.recipe.lock import Lock

    path = layout.zookeeper_driver_lock
    if not session.exists(path):
        return []  # kazoo's contenders() would create the lock's node: a dry run changes nothing
    try:
        return [str(h) for h in Lock(session.client, path).contenders()]
    except NoAuthError as err:
        raise session.refused("listing the holders of", path) from err


def _delete_keys(store: StateStore, layout: PipelineLayout) -> list[str]:
    """Delete every key under the pipeline's prefix; the keys deleted. The driver record
    and the barrier state go last: until then they fence a driver still running."""
    prefix = f"{layout.root}/"
    keys = store.list(prefix)
    last = [k for k in (layout.driver, layout.barrier_state) if k in keys]
    store.delete_many([k for k in keys if k not in last])
    for key in last:
        store.delete(key)
    left = store.list(prefix)
    if left:
        raise StateError(
            f"{len(left)} key(s) were written under {store.uri}/{prefix} while pipeline "
            f"{layout.pipeline_id!r} was retired (first: {left[0]}): a driver still runs "
            "it; stop it and run retire again"
        )
    return keys


def _delete_znodes(session: ZooKeeperSession, layout: PipelineLayout, nodes: list[str]) -> None:
    """Delete ``nodes`` (children first) but the lock, its nodes and the root."""
    lock = layout.zookeeper_driver_lock
    for path in reversed(nodes):
        if path in (layout.zookeeper_root, lock) or path.startswith(f"{lock}/"):
            continue
        session.delete(path)


def _delete_lock_and_root(
    session: ZooKeeperSession, layout: PipelineLayout, hosts: str
) -> list[str]:
    """Once the lock is released: the lock's node and the root, each only if empty, so a
    driver that queued for the lock meanwhile keeps its node; the nodes kept: the root,
    when its parent lets nobody delete it (the shared parent pipelines with credentials
    make, so that no identity can delete another's root)."""
    from kazoo.exceptions import NoAuthError, NotEmptyError

    for path in (layout.zookeeper_driver_lock, layout.zookeeper_root):
        try:
            session.delete(path)
        except CoordinationError as err:
            if path == layout.zookeeper_root and isinstance(err.__cause__, NoAuthError):
                return [path]
            raise
        except NotEmptyError as err:
            raise CoordinationError(
                f"ZooKeeper at {hosts}: {path} was not deleted: a driver started on pipeline "
                f"{layout.pipeline_id!r} while it was retired ({', '.join(session.children(path))})"
            ) from err
    return []


def _result(  # noqa: PLR0913 - what the answer shows
    pipeline: PipelineArgs,
    store: StateStore,
    keys: list[str],
    nodes: list[str],
    args: argparse.Namespace,
    *,
    token: int | None,
    holders: list[str],
    kept: list[str] | None = None,
) -> Result:
    layout = pipeline.layout
    groups = group_keys(layout, keys)
    data = {
        "pipeline": pipeline.pipeline_id,
        "state_uri": store.uri,
        "zookeeper": args.zookeeper or None,
        "keys": keys,
        "key_groups": groups,
        "znodes": nodes,
        "driver_lock_holders": holders,
        "deleted": bool(args.yes),
        "fencing_token": token,
        "znodes_kept": kept or [],
    }
    if args.yes:
        title = f"retire {pipeline.pipeline_id}: {len(keys)} key(s) deleted from {store.uri}"
        node_title = f"znodes on ZooKeeper {args.zookeeper}: {len(nodes) - len(kept or [])} deleted"
        for path in kept or []:
            parent = path.rsplit("/", 1)[0]
            node_title += (
                f"; {path} kept: deleting it needs DELETE on {parent}, which nobody but "
                "ZooKeeper's superuser has (empty, it holds nothing)"
            )
    else:
        title = (
            f"retire {pipeline.pipeline_id}: {len(keys)} key(s) would be deleted (nothing "
            f"deleted; --yes deletes) from {store.uri}"
        )
        node_title = f"znodes on ZooKeeper {args.zookeeper}: {len(nodes)} would be deleted"
        if holders:
            node_title += f" (a driver holds the lock: {holders[0]}; --yes would refuse)"
    rows = tuple((g["what"], g["location"], g["count"]) for g in groups)
    tables = [Table(title, ("what", "location", "keys"), rows)]
    if args.zookeeper:
        tables.append(Table(node_title, ("znode",), tuple((n,) for n in nodes)))
    return Result(data, tuple(tables))
