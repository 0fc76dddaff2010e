"""``recover()``: put a checkpoint in place from which the query may start.

Decision (:func:`decide`), given the resume point and the local checkpoint directory:

* ``mode="replay"``: a new query version that cannot reuse the old checkpoint. The
  directory is emptied and a new *generation* of the resume point begins (no snapshot
  yet); the query replays from the source's persisted start, rebuilds its state, and
  the barrier drops every epoch the consumer already has.
* no snapshot in the resume point: keep the directory as it is (possibly empty: the
  query then replays from the persisted start, and the barrier drops what was delivered).
* the directory is missing or empty (a new host), belongs to another query (its
  ``metadata`` names another query id), or its last committed batch is older than the
  snapshot's: materialise the snapshot into it. A snapshot whose manifest or files do
  not match their checksums is skipped (logged) for the previous retained one.
* otherwise the local checkpoint is at or past the snapshot: keep it (a plain restart).

After a restore Spark restarts at the batch after the snapshot's; the gtkafka source
replays from the recorded epoch boundaries and the barrier drops what was delivered.
"""

from __future__ import annotations

import json
import logging
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from state.errors import SnapshotCorrupted
from state.layout import PipelineLayout
from state.records.manifest import Manifest
from state.records.resume_point import ResumePoint, SnapshotRef
from state.snapshot import load_manifest, materialise
from state.store import StateStore

log = logging.getLogger(__name__)

Action = Literal["keep", "materialise", "fresh"]
MODES = ("restore", "replay")


@dataclass(frozen=True)
class LocalCheckpoint:
    """What a checkpoint directory on this host holds."""

    path: Path
    exists: bool
    empty: bool
    query_id: str | None
    last_committed: int | None

    @classmethod
    def inspect(cls, path: Path) -> LocalCheckpoint:
        if not path.is_dir():
            return cls(path, False, True, None, None)
        empty = not any(p for p in path.iterdir() if not p.name.startswith("."))
        query_id = None
        meta = path / "metadata"
        if meta.is_file():
            try:
                query_id = json.loads(meta.read_text()).get("id")
            except ValueError:
                query_id = None
        commits = [int(p.name) for p in (path / "commits").glob("*") if p.name.isdigit()]
        return cls(path, True, empty, query_id, max(commits, default=None))

    def at_or_past(self, ref: SnapshotRef, query_id: str | None) -> bool:
        """Same query and committed at least as far as the snapshot."""
        return (
            not self.empty
            and query_id is not None
            and self.query_id == query_id
            and self.last_committed is not None
            and self.last_committed >= ref.batch_id
        )


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str


def decide(point: ResumePoint | None, local: LocalCheckpoint, mode: str) -> Decision:
    """What :func:`recover` does (pure)."""
    if mode == "replay":
        return Decision(
            "fresh", "mode='replay': a fresh checkpoint replays from the persisted start"
        )
    snap = point.snapshot if point else None
    if point is None or snap is None:
        return Decision(
            "keep", "no snapshot yet: the query starts from its checkpoint or the persisted start"
        )
    if local.empty:
        return Decision("materialise", "the checkpoint directory is missing or empty")
    if local.query_id != point.query_id:
        return Decision(
            "materialise",
            f"the checkpoint directory belongs to query {local.query_id}, "
            f"the snapshot to {point.query_id}",
        )
    if local.last_committed is None or local.last_committed < snap.batch_id:
        return Decision(
            "materialise",
            f"the checkpoint's last committed batch {local.last_committed} is older than the "
            f"snapshot's batch {snap.batch_id}",
        )
    return Decision(
        "keep",
        f"the checkpoint (batch {local.last_committed}) is at or past "
        f"the snapshot (batch {snap.batch_id})",
    )


@dataclass(frozen=True)
class RecoveryResult:
    """What :func:`recover` did; ``snapshot`` is the snapshot materialised, if any."""

    action: Action
    reason: str
    snapshot: SnapshotRef | None = None
    epoch: int | None = None
    batch_id: int | None = None
    files: int = 0
    bytes: int = 0
    seconds: float = 0.0
    skipped: tuple[str, ...] = field(default_factory=tuple)


def recover_checkpoint(
    store: StateStore,
    layout: PipelineLayout,
    point: ResumePoint | None,
    checkpoint: Path,
    mode: str,
    *,
    cancelled: Callable[[], bool] = lambda: False,
) -> RecoveryResult:
    """Carry out :func:`decide` on ``checkpoint``. See the module docstring."""
    started = time.monotonic()
    local = LocalCheckpoint.inspect(checkpoint)
    decision = decide(point, local, mode)
    log.info("recover %s: %s (%s)", checkpoint, decision.action, decision.reason)
    if decision.action == "fresh":
        if local.exists:
            log.warning("mode='replay': removing the old checkpoint %s", checkpoint)
            shutil.rmtree(checkpoint)
        return RecoveryResult("fresh", decision.reason, seconds=time.monotonic() - started)
    if decision.action == "keep":
        return RecoveryResult("keep", decision.reason, seconds=time.monotonic() - started)
    assert point is not None
    skipped: list[str] = []
    for ref in point.retained:
        if local.at_or_past(ref, point.query_id):
            reason = (
                f"newer snapshots unusable; the checkpoint (batch {local.last_committed}) is at or "
                f"past snapshot {ref.snapshot_id} (batch {ref.batch_id})"
            )
            return RecoveryResult(
                "keep", reason, skipped=tuple(skipped), seconds=time.monotonic() - started
            )
        try:
            manifest: Manifest = load_manifest(store, ref.manifest, ref.manifest_sha256)
            done = materialise(store, layout, manifest, checkpoint, cancelled=cancelled)
        except SnapshotCorrupted as err:
            log.warning(
                "snapshot %d (epoch %d) is unusable: %s; trying the previous retained snapshot",
                ref.snapshot_id,
                ref.epoch,
                err,
            )
            skipped.append(f"snapshot {ref.snapshot_id}: {err}")
            continue
        log.info(
            "materialised snapshot %d (batch %d, epoch %d): %d files, %d bytes in %.2fs into %s",
            ref.snapshot_id,
            ref.batch_id,
            ref.epoch,
            done.files,
            done.bytes,
            done.seconds,
            checkpoint,
        )
        return RecoveryResult(
            "materialise",
            decision.reason,
            snapshot=ref,
            epoch=ref.epoch,
            batch_id=ref.batch_id,
            files=done.files,
            bytes=done.bytes,
            seconds=time.monotonic() - started,
            skipped=tuple(skipped),
        )
    raise SnapshotCorrupted(
        "no retained snapshot of pipeline "
        f"'{layout.pipeline_id}' is usable ({'; '.join(skipped)}); "
        "recover(mode='replay') rebuilds the state from the source's persisted start"
    )
