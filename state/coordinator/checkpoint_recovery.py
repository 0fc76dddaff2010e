"""``recover()``: put a checkpoint in place from which the query may start.

Decision (:func:`decide`), given the resume point and the local checkpoint directory:

* ``mode="replay"``: a new query version that cannot reuse the old checkpoint. A new
  *generation* of the resume point begins (no snapshot yet) and the directory is emptied;
  the query replays from the source's persisted start, rebuilds its state, and the
  barrier drops every epoch the consumer already has.
* the directory holds a checkpoint of another generation or pipeline (its generation
  marker, :mod:`state.records.checkpoint_marker`, says so; a checkpoint without a marker
  is generation 0): it is never used. Without a snapshot the directory is emptied
  (``"fresh"``: the query replays from the persisted start), with one the snapshot is
  materialised.
* no snapshot in the resume point: keep the directory as it is (possibly empty: the
  query then replays from the persisted start, and the barrier drops what was delivered).
* the directory is missing or empty (a new host), belongs to another query (its
  ``metadata`` names another query id), or its last committed batch is older than the
  snapshot's: materialise the snapshot into it. A snapshot whose manifest or files do
  not match their checksums is skipped (logged) for the previous retained one.
* otherwise the local checkpoint is at or past the snapshot: keep it (a plain restart).

Whatever it does, :func:`recover_checkpoint` leaves the directory in place with a
generation marker naming the resume point's generation, so that a later recovery can
tell this generation's checkpoint from an older version's.

The directory's files are reached through :class:`CheckpointFiles` (by default
:class:`LocalDirectory`): a deterministic simulation runs :func:`recover_checkpoint` over
a checkpoint of its own.

After a restore Spark restarts at the batch after the snapshot's; the gtkafka source
replays from the recorded epoch boundaries and the barrier drops what was delivered.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, Literal, Protocol, TypeVar

from state.coordinator.snapshot.restore import Materialised, load_manifest, materialise
from state.errors import MalformedRecord, SnapshotCorrupted
from state.layout import PipelineLayout
from state.records.checkpoint_marker import MARKER_FILE, CheckpointMarker
from state.records.codec import decode, dumps
from state.records.manifest import Manifest
from state.records.resume_point import ResumePoint, SnapshotRef
from state.stores import StateStore

log = logging.getLogger(__name__)

Action = Literal["keep", "materialise", "fresh"]
MODES = ("restore", "replay")


@dataclass(frozen=True)
class LocalCheckpoint:
    """What a checkpoint directory on this host holds.

    ``marker`` is its generation marker (None: none, i.e. generation 0);
    ``marker_error`` says why a marker that exists could not be read.
    """

    path: Path
    exists: bool
    empty: bool
    query_id: str | None
    last_committed: int | None
    marker: CheckpointMarker | None = None
    marker_error: str | None = None

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
        marker, marker_error = None, None
        try:
            marker = read_marker(path)
        except MalformedRecord as err:
            marker_error = str(err)
        return cls(path, True, empty, query_id, max(commits, default=None), marker, marker_error)

    def foreign(self, pipeline_id: str, generation: int) -> str | None:  # noqa: PLR0911 - one return per reason, in the order they are checked
        """Why this checkpoint was not made for ``generation`` of ``pipeline_id``'s resume
        point (None if it was, or if it is empty: there is nothing in it to reuse)."""
        if self.empty:
            return None
        if self.marker_error is not None:
            return f"its generation marker is unreadable ({self.marker_error})"
        marker = self.marker
        if marker is None:
            if generation == 0:
                return None
            return (
                "the checkpoint has no generation marker, so it predates generation 1, "
                f"and the resume point is at generation {generation}"
            )
        if marker.pipeline_id != pipeline_id:
            return f"the checkpoint belongs to pipeline '{marker.pipeline_id}'"
        if marker.generation != generation:
            return (
                f"the checkpoint belongs to generation {marker.generation}, "
                f"the resume point is at generation {generation}"
            )
        return None

    def at_or_past(self, ref: SnapshotRef, query_id: str | None) -> bool:
        """Same query and committed at least as far as the snapshot."""
        return (
            not self.empty
            and query_id is not None
            and self.query_id == query_id
            and self.last_committed is not None
            and self.last_committed >= ref.batch_id
        )


def read_marker(checkpoint: Path) -> CheckpointMarker | None:
    """The checkpoint's generation marker, or None if it has none.

    Raises :class:`MalformedRecord` if the file exists but is not a marker."""
    path = checkpoint / MARKER_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return decode(data, CheckpointMarker.from_json, str(path))


def write_marker(checkpoint: Path, marker: CheckpointMarker) -> None:
    """Create ``checkpoint`` if needed and (re)write its generation marker, atomically."""
    checkpoint.mkdir(parents=True, exist_ok=True)
    path = checkpoint / MARKER_FILE
    tmp = checkpoint / f"{MARKER_FILE}.tmp"
    with open(tmp, "wb") as fh:
        fh.write(dumps(marker.to_json()))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fd = os.open(checkpoint, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@dataclass(frozen=True)
class Decision:
    action: Action
    reason: str


def decide(  # noqa: PLR0911 - a decision table: one return per row
    point: ResumePoint | None, local: LocalCheckpoint, mode: str, *, pipeline_id: str
) -> Decision:
    """What :func:`recover` does (pure)."""
    if mode == "replay":
        return Decision(
            "fresh", "mode='replay': a fresh checkpoint replays from the persisted start"
        )
    generation = point.generation if point is not None else 0
    foreign = local.foreign(pipeline_id, generation)
    snap = point.snapshot if point else None
    if point is None or snap is None:
        if foreign is not None:
            return Decision(
                "fresh",
                f"{foreign}: it is not used; without a snapshot of generation {generation} "
                "the query replays from the persisted start",
            )
        return Decision(
            "keep", "no snapshot yet: the query starts from its checkpoint or the persisted start"
        )
    if local.empty:
        return Decision("materialise", "the checkpoint directory is missing or empty")
    if foreign is not None:
        return Decision("materialise", foreign)
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


class Generational(Protocol):
    """A snapshot's manifest, as far as the choice of a retained snapshot reads it."""

    @property
    def generation(self) -> int:
        """The resume point generation the snapshot was taken in."""


M = TypeVar("M", bound=Generational)
R = TypeVar("R")


@dataclass(frozen=True)
class Restored(Generic[R]):
    """The retained snapshot a materialisation starts from: ``installed`` is what
    installing it returned, or None if the local checkpoint is kept (at or past it);
    ``skipped`` says why each newer one was not used."""

    ref: SnapshotRef
    installed: R | None
    skipped: tuple[str, ...]


def restore_retained(
    point: ResumePoint,
    local: LocalCheckpoint,
    pipeline_id: str,
    load: Callable[[SnapshotRef], M],
    install: Callable[[SnapshotRef, M], R],
) -> Restored[R]:
    """Choose among ``point``'s retained snapshots, newest first, once :func:`decide` said
    ``"materialise"``: keep the local checkpoint if it is of this generation and at or past
    the snapshot; else ``load`` its manifest and ``install`` it. A snapshot whose ``load`` or
    ``install`` raises :class:`SnapshotCorrupted`, or that was taken in another generation
    (never used: its state may be another query version's), is skipped for the previous
    one. Raises :class:`SnapshotCorrupted` if none is usable. The files are the callers':
    ``recover_checkpoint`` and the simulator's checkpoint both choose here."""
    reusable = local.foreign(pipeline_id, point.generation) is None
    skipped: list[str] = []
    for ref in point.retained:
        if reusable and local.at_or_past(ref, point.query_id):
            return Restored(ref, None, tuple(skipped))
        try:
            manifest = load(ref)
            if manifest.generation != point.generation:
                raise SnapshotCorrupted(
                    f"snapshot {ref.snapshot_id} was taken in generation {manifest.generation}, "
                    f"the resume point is at generation {point.generation}"
                )
            return Restored(ref, install(ref, manifest), tuple(skipped))
        except SnapshotCorrupted as err:
            log.warning(
                "snapshot %d (epoch %d) is unusable: %s; trying the previous retained snapshot",
                ref.snapshot_id,
                ref.epoch,
                err,
            )
            skipped.append(f"snapshot {ref.snapshot_id}: {err}")
    raise SnapshotCorrupted(
        "no retained snapshot of pipeline "
        f"'{pipeline_id}' is usable ({'; '.join(skipped)}); "
        "recover(mode='replay') rebuilds the state from the source's persisted start"
    )


class CheckpointFiles(Protocol):
    """The checkpoint directory as :func:`recover_checkpoint` changes it."""

    def inspect(self) -> LocalCheckpoint:
        """What the directory holds now."""

    def remove(self) -> None:
        """Delete the directory and everything in it."""

    def mark(self, marker: CheckpointMarker) -> None:
        """Create the directory if needed and (re)write its generation marker."""

    def install(
        self,
        store: StateStore,
        layout: PipelineLayout,
        manifest: Manifest,
        *,
        cancelled: Callable[[], bool],
    ) -> Materialised:
        """Replace the directory's content with the snapshot's files, verified
        (:class:`SnapshotCorrupted` if they do not match the manifest)."""


@dataclass(frozen=True)
class LocalDirectory:
    """A checkpoint directory on this host: :class:`CheckpointFiles` over the file system."""

    path: Path

    def inspect(self) -> LocalCheckpoint:
        return LocalCheckpoint.inspect(self.path)

    def remove(self) -> None:
        shutil.rmtree(self.path)

    def mark(self, marker: CheckpointMarker) -> None:
        write_marker(self.path, marker)

    def install(
        self,
        store: StateStore,
        layout: PipelineLayout,
        manifest: Manifest,
        *,
        cancelled: Callable[[], bool],
    ) -> Materialised:
        return materialise(store, layout, manifest, self.path, cancelled=cancelled)


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


def recover_checkpoint(  # noqa: PLR0913 - the decision's inputs plus a keyword-only cancel hook
    store: StateStore,
    layout: PipelineLayout,
    point: ResumePoint | None,
    checkpoint: Path,
    mode: str,
    *,
    cancelled: Callable[[], bool] = lambda: False,
    files: CheckpointFiles | None = None,
) -> RecoveryResult:
    """Carry out :func:`decide` on ``checkpoint`` and mark it with the resume point's
    generation. See the module docstring.

    In ``mode="replay"`` ``point`` is the new generation's (already written), so that
    the emptied directory is marked with it. ``files`` reaches the directory (default:
    :class:`LocalDirectory` of ``checkpoint``, which then only names it in log lines).
    """
    started = time.monotonic()
    directory = files if files is not None else LocalDirectory(checkpoint)
    local = directory.inspect()
    decision = decide(point, local, mode, pipeline_id=layout.pipeline_id)
    log.info("recover %s: %s (%s)", checkpoint, decision.action, decision.reason)
    marker = CheckpointMarker(layout.pipeline_id, point.generation if point is not None else 0)
    if decision.action == "fresh":
        if local.exists:
            log.warning("removing the old checkpoint %s: %s", checkpoint, decision.reason)
            directory.remove()
        directory.mark(marker)
        return RecoveryResult("fresh", decision.reason, seconds=time.monotonic() - started)
    if decision.action == "keep":
        directory.mark(marker)
        return RecoveryResult("keep", decision.reason, seconds=time.monotonic() - started)
    assert point is not None

    def load(ref: SnapshotRef) -> Manifest:
        return load_manifest(store, ref.manifest, ref.manifest_sha256)

    def install(ref: SnapshotRef, manifest: Manifest) -> Materialised:
        return directory.install(store, layout, manifest, cancelled=cancelled)

    restored = restore_retained(point, local, layout.pipeline_id, load, install)
    ref, skipped = restored.ref, restored.skipped
    directory.mark(marker)
    done = restored.installed
    if done is None:
        reason = (
            f"newer snapshots unusable; the checkpoint (batch {local.last_committed}) is at or "
            f"past snapshot {ref.snapshot_id} (batch {ref.batch_id})"
        )
        return RecoveryResult("keep", reason, skipped=skipped, seconds=time.monotonic() - started)
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
        skipped=skipped,
    )
