"""The simulator's model of Spark and of the snapshot coordinator: a driver process.

A :class:`DriverProc` is one driver program: a snapshot coordinator (its fencing token, the
resume point generation it works in) and the query it supervises. Its actors:

* ``pN`` runs the coordinator's start (read the resume point and refuse a generation begun
  after the process started, the product's ``check_driver_generation``; take a fencing
  token, claim the barrier for the driver), then the supervised query: recover the
  checkpoint (the product's ``Recoverer``), run query runs one after the other,
  restarting a failed run up to :data:`MAX_RESETS` times;
* ``pNs`` is the snapshot worker: it snapshots each completed batch while later batches
  run, with the product's ``SnapshotPipeline.run`` (it waits until the barrier has
  nothing in flight at or below the batch's epoch, and accepts the snapshot into the
  resume point) over the simulated files (:class:`SimManifestWriter`);
* ``pNu`` replaces ``pN`` when the operator upgrades the query (a new version on a fresh
  checkpoint: the product's ``Recoverer.recover(mode="replay")``).

``recover()`` is the product's ``Recoverer`` and ``recover_checkpoint`` over the
simulated checkpoint (:class:`SimCheckpointFiles`).

A driver runs its sink at one ``errors.tolerance``, the one deployed when it started
(``World.tolerance``): at ``none`` a write task with a poison row fails
(``RowsRefused``) and so does its query run, every time; at ``all`` the tasks stage the
refused rows as dead-letter parts and the barrier writes them to the dead-letter store
(:mod:`simulation.dead_letters`). The healthy driver of the liveness check takes the
documented way past a poison bundle: after a run that failed so, the operator restarts it
on the same checkpoint with ``errors.tolerance=all``.

One query run loops over micro-batches as Spark's ``MicroBatchExecution`` does: plan the
next epoch with the product's stream reader (its ``latestOffset`` over the simulated
broker, :mod:`simulation.source`: the recorded end if any, else a new end under the
driver's ``maxOffsetsPerTrigger``, first writer wins), write the offset-log entry (the
simulated checkpoint), run the read task that writes the batch record, compute the batch's
rows (the deterministic query, its state kept in the checkpoint), stage them with write
tasks, commit through the barrier (abort if anything failed), write the commit-log entry. A
restart with the checkpoint replays the last planned but uncommitted batch with the same
batch id and offsets; without it the query gets a new query id and batch ids from 0, and
starts from the source's persisted start or a snapshot's frontier.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, TypeVar

from datasource import stream_reader
from datasource.options import KafkaSourceOptions
from datasource.stream_reader import GlobalTimeKafkaStreamReader
from simulation import source
from simulation.consumer import SimConsumer
from simulation.dead_letters import DEAD_LETTER_PATH, row_checks
from simulation.query import (
    EMPTY_STATE,
    InputLog,
    QueryState,
    Record,
    Row,
    SimConfig,
    rows_to_batch,
    run_epoch,
)
from simulation.scheduler import Actor
from simulation.staging import SimStaging
from simulation.store import SimStore
from sink import barrier as sink_barrier
from sink import lost_bundle, write_task
from sink.bundle import BarrierCommitMessage
from sink.dead_letters.dead_letter_files import StoreDeadLetters
from sink.dead_letters.dead_letter_settings import Tolerance
from sink.faults import FaultInjector
from sink.options import SinkOptions
from state.coordinator import checkpoint_recovery
from state.coordinator.batches import CompletedBatch
from state.coordinator.checkpoint_recovery import LocalCheckpoint
from state.coordinator.config import CoordinatorConfig
from state.coordinator.driver_ownership import DriverOwnership
from state.coordinator.recovery_future import Recoverer
from state.coordinator.snapshot.attempt import Lineage, SnapshotPipeline
from state.coordinator.snapshot.restore import Materialised
from state.coordinator.supervisor import Supervisor
from state.errors import (
    EpochsPruned,
    GtBarrierError,
    KeyExists,
    PipelineFenced,
    RetriableError,
    RowsRefused,
    SnapshotCorrupted,
    StateError,
)
from state.layout import PipelineLayout
from state.protocol import barrier_state, batch_records, fencing
from state.protocol.barrier_state import read_barrier_state
from state.records.checkpoint_marker import CheckpointMarker
from state.records.manifest import Manifest
from state.records.source_offset import SourceOffset
from state.retry import Retry
from state.spark_offset_log import OffsetLogEntry
from state.spark_task import StreamingTask
from state.stores import StateStore

if TYPE_CHECKING:
    from pyspark.sql.streaming.query import StreamingQuery

T = TypeVar("T")

#: Write tasks per batch (each stages one part: the rows of its keys).
TASKS = 2
#: Attempts of a failed task (Spark's task retry).
TASK_ATTEMPTS = 2
#: Restarts of a failed query run before the driver gives up.
MAX_RESETS = 3
#: What the commit's error says when the target refuses rows an earlier attempt's
#: dead-letter file lacks (``DeadLetterSettlement`` in ``sink/dead_letters``).
REFUSES_MORE = "the target refuses rows it accepted then"
#: Where the checkpoint would be (never opened: :class:`SimCheckpointFiles`).
SIM_CHECKPOINT = Path("/simulated/checkpoint")
#: The pipeline's id (its keys in the store are under ``sim/``).
PIPELINE = "sim"
#: Snapshots the resume point retains.
RETAIN = 2
#: The coordinator's ``drain_timeout``, in the simulation's seconds (a millisecond a
#: step, every actor's): longer than a whole run, as 180 s is longer than the batches and
#: recoveries it overlaps, so that no interleaving abandons a snapshot by its deadline.
DRAIN_TIMEOUT = 2.0


class World(Protocol):
    """What a driver process needs of the simulation (:class:`simulation.world.World`)."""

    config: SimConfig
    input: InputLog
    #: The broker: the topic as it is now (it may be deleted and created again).
    broker: source.SimBroker
    layout: PipelineLayout
    staging: SimStaging
    consumer_api: SimConsumer
    #: The query version deployed now; the resume point generation each version began.
    version: int
    generations: dict[int, int]
    #: The sink's errors.tolerance deployed now; write tasks that refused rows (at none).
    tolerance: Tolerance
    refusals: int
    #: The checkpoint content each snapshot copied, by its manifest's key (the blobs).
    snapshot_files: dict[str, dict[str, Any]]

    def view(self, name: str) -> SimStore:
        """A store view of its own (per-process memory is keyed by it)."""

    def newest_snapshot(self) -> int | None:
        """The id of the newest snapshot the resume point retains now (read by the fault
        model, not by a driver: no scheduling point)."""

    def dead_view(self, name: str) -> SimStore:
        """A view of the dead-letter store of its own."""

    def spawn(self, name: str, body: Callable[[], None], proc: DriverProc | None) -> Actor:
        """A new actor."""

    def wait_until(self, ready: Callable[[], bool]) -> None:
        """Block the running actor until ``ready()``."""

    def sleep(self, seconds: float) -> None:
        """A back-off (a scheduling point)."""

    def clock(self) -> float:
        """The simulation's clock."""

    def retry(self) -> Retry:
        """The retry loop of lost races, on the simulation's sleep and clock."""

    def new_query_id(self) -> str:
        """A query id nobody used."""

    def checkpoint_point(self, what: str, batch_id: int) -> None:
        """Writing a checkpoint log entry (a scheduling point)."""

    def planned(
        self, start: SourceOffset, end: SourceOffset, max_rows: int, ids: Mapping[str, str]
    ) -> None:
        """The running driver's stream reader asks the epoch log to record the epoch from
        ``start`` to ``end``, planned under ``maxOffsetsPerTrigger=max_rows`` and the topic
        ids ``ids``."""

    def read_dropped(self, epoch: int) -> None:
        """A read task of epoch ``epoch`` dropped ranges with records: the product's check
        found their topic recreated since the epoch was planned (``failOnDataLoss=false``)."""

    def met_pruned(self, query_id: str, epoch: int) -> None:
        """Query ``query_id`` of the running driver asked for epoch ``epoch``, which is
        below the epoch log's floor (the product raises ``EpochsPruned``)."""


class SparkQueryError(RetriableError):
    """Spark failed the query run (a task failed every attempt, two drivers wrote the same
    checkpoint log entry); the supervisor restarts it."""


class SimOffsetLog:
    """The simulated checkpoint's offset log as the barrier reads it
    (:class:`~state.spark_offset_log.OffsetLog`): one gtkafka source, its end offset."""

    def __init__(self, checkpoint: Checkpoint) -> None:
        self.checkpoint = checkpoint

    def entry(self, batch_id: int) -> OffsetLogEntry | None:
        logged = self.checkpoint.offsets.get(batch_id)
        return None if logged is None else OffsetLogEntry(batch_id, (logged[1].to_json(),))

    def where(self, batch_id: int) -> str:
        return f"the simulated checkpoint's offsets/{batch_id}"

    def missing(self, batch_id: int) -> GtBarrierError:
        return StateError(f"{self.where(batch_id)} is missing")


@dataclass
class Checkpoint:
    """A query's checkpoint directory: its query id (``metadata``), offset and commit logs,
    the operator state after each batch, and the coordinator's generation marker."""

    query_id: str | None = None
    offsets: dict[int, tuple[SourceOffset, SourceOffset]] = field(default_factory=dict)
    commits: set[int] = field(default_factory=set)
    states: dict[int, QueryState] = field(default_factory=dict)
    marker: int | None = None

    @property
    def empty(self) -> bool:
        return self.query_id is None and not self.offsets

    def local(self) -> LocalCheckpoint:
        """What :func:`~state.coordinator.checkpoint_recovery.decide` sees of it."""
        return LocalCheckpoint(
            path=SIM_CHECKPOINT,
            exists=True,
            empty=self.empty,
            query_id=self.query_id,
            last_committed=max(self.commits, default=None),
            marker=None if self.marker is None else CheckpointMarker("sim", self.marker),
        )

    def next_epoch(self) -> int | None:
        """The epoch of the batch a run on this checkpoint runs first: the last planned
        batch's if it is uncommitted (a replay), else the one after it (None: no batch
        planned, the run starts where recovery puts it)."""
        if not self.offsets:
            return None
        last = max(self.offsets)
        start, end = self.offsets[last]
        return end.epoch if last in self.commits else start.epoch

    def snapshot_json(self, batch_id: int) -> dict[str, Any]:
        """The files a restart after ``batch_id`` needs, as the manifest's content."""
        return {
            "query_id": self.query_id,
            "offsets": {
                str(b): [s.to_json(), e.to_json()]
                for b, (s, e) in self.offsets.items()
                if b <= batch_id
            },
            "commits": sorted(b for b in self.commits if b <= batch_id),
            "state": [list(entry) for entry in self.states[batch_id]],
            "batch_id": batch_id,
        }

    @classmethod
    def from_snapshot(cls, raw: dict[str, Any], marker: int) -> Checkpoint:
        states: QueryState = tuple(
            (str(key), int(total), (int(g[0]), str(g[1]), int(g[2]), int(g[3])))
            for key, total, g in raw["state"]
        )
        return cls(
            query_id=raw["query_id"],
            offsets={
                int(b): (SourceOffset.from_json(s), SourceOffset.from_json(e))
                for b, (s, e) in raw["offsets"].items()
            },
            commits=set(raw["commits"]),
            states={int(raw["batch_id"]): states},
            marker=marker,
        )


def _never_closing() -> str | None:
    """A snapshot's ``closing``: the simulated coordinator never closes."""
    return None


def _no_query() -> StreamingQuery:
    """``build_query``: never called (:meth:`SupervisedDriver.call_build_query` runs the
    simulated query instead)."""
    raise AssertionError("the simulated driver builds no Spark query")


class FinishedQuery:
    """A query run that has ended, as the supervisor waits for it: ``awaitTermination``
    raises Spark's ``StreamingQueryException`` for a failed run, its text ending in the
    Python error as Spark's does (the supervisor looks for ``PipelineFenced`` in it)."""

    def __init__(self, query_id: str, error: GtBarrierError | None) -> None:
        self.id = query_id
        self.error = error

    def awaitTermination(self) -> None:
        from pyspark.errors import StreamingQueryException

        err = self.error
        if err is not None:
            kind = type(err)
            raise StreamingQueryException(
                message=f"Query terminated with exception\n{kind.__module__}.{kind.__qualname__}: "
                f"{err}"
            )


class SupervisedDriver:
    """What the product's ``Supervisor`` needs of a coordinator, over a driver process:
    ``recover()`` takes the pipeline if needed and recovers the checkpoint;
    ``call_build_query`` runs one query run to its end (the greenlet's scheduling points
    interleave it with the other actors)."""

    def __init__(self, proc: DriverProc) -> None:
        self.proc = proc

    @property
    def pipeline_id(self) -> str:
        return PIPELINE

    @property
    def accepted(self) -> int:
        return self.proc.accepted

    def recover(self, mode: str = "restore") -> object:
        """The product's ``Recoverer.recover`` (take the pipeline, then ``mode="replay"``'s
        new generation or the restore), over the simulated checkpoint; without the
        coordinator, Spark's restart on the checkpoint as it is."""
        proc = self.proc
        try:
            if proc.world.config.coordinator:
                return proc.recoverer.recover(mode)
            return checkpoint_recovery.recover_checkpoint(
                proc.store, proc.layout, None, SIM_CHECKPOINT, mode, files=proc.files
            )
        except GtBarrierError as err:
            proc.errors.append(f"{type(err).__name__}: {err}")
            raise

    @property
    def stop_requested(self) -> bool:
        return False  # the simulation sends no stop signals

    def call_build_query(self, build_query: Callable[..., Any]) -> Any:
        proc = self.proc
        try:
            proc.run_query()
        except GtBarrierError as err:
            proc.errors.append(f"{type(err).__name__}: {err}")
            return FinishedQuery(proc.checkpoint.query_id or "?", err)
        return FinishedQuery(proc.checkpoint.query_id or "?", None)

    def watch(self, query: Any) -> None:
        pass

    def unwatch(self) -> None:
        pass

    def take_stop_error(self) -> GtBarrierError | None:
        return None


@dataclass(frozen=True)
class QueuedBatch:
    """A batch whose commit-log entry is written, as the coordinator's listener hands it
    over (the product's :class:`CompletedBatch`), with the checkpoint's content after it
    (the files its snapshot copies)."""

    batch: CompletedBatch
    files: dict[str, Any]


class SimManifestWriter:
    """The snapshot's files, for the product's ``SnapshotPipeline`` (its ``writer=``
    seam): the checkpoint's content after the batch is kept by the world (the blobs), and
    the product's manifest record is created under the next free snapshot id."""

    def __init__(self, world: World, store: SimStore, layout: PipelineLayout) -> None:
        self.world = world
        self.store = store
        self.layout = layout
        self.manifests: dict[int, Manifest] = {}
        #: The content of the checkpoint the next ``write`` copies.
        self.pending: dict[str, Any] = {}

    def files_ready(self, checkpoint: Path, batch_id: int) -> object:
        return None  # the batch is queued once its commit-log entry is written

    def write(
        self,
        checkpoint: Path,
        *,
        batch_id: int,
        epoch: int,
        frontier: Any,
        generation: int,
        token: int,
        query_id: str | None,
        clock: Callable[[], float],
    ) -> Manifest:
        prefix = self.layout.snapshots_prefix
        heads = (k[len(prefix) :].split("/", 1)[0] for k in self.store.list(prefix))
        sid = 1 + max((int(h) for h in heads if h.isdigit()), default=0)
        while True:
            manifest = Manifest(
                pipeline_id=self.layout.pipeline_id,
                snapshot_id=sid,
                generation=generation,
                token=token,
                batch_id=batch_id,
                epoch=epoch,
                frontier=frontier,
                query_id=query_id,
                created_at=clock(),
                files=(),
            )
            key = self.manifest_key(sid)
            try:
                self.store.create(key, manifest.to_bytes())
            except KeyExists:
                sid += 1
                continue
            self.world.snapshot_files[key] = self.pending
            self.manifests[sid] = manifest
            return manifest

    def manifest_key(self, snapshot_id: int) -> str:
        return f"{self.layout.snapshot(snapshot_id)}manifest.json"

    def forget_blobs(self, names: Iterable[str]) -> None:
        pass  # no blobs: the content is the world's


def sink_options(
    store: SimStore, token: int | None, tolerance: Tolerance = "none", retention: float = 0.0
) -> SinkOptions:
    """The sink's options as a driver passes them (parsed by the product; the consumer
    and the dead-letter path they name are never opened: the simulated ones are handed to
    the barrier). ``retention``: ``errors.deadLetter.retention`` in seconds (0: unset)."""
    return replace(_parsed_options(token, tolerance, retention), store=store.config)


def _coordinator_config(store: SimStore, epochs_retained: int) -> CoordinatorConfig:
    """The coordinator's configuration of a driver (no ZooKeeper: the fencing token alone
    protects the pipeline; the checkpoint path is never opened), retaining
    :data:`RETAIN` snapshots and waiting :data:`DRAIN_TIMEOUT` for the barrier to drain;
    its ``epochs_retained`` is the source's ``state.epochsRetained`` where the pipeline
    sets one (``SimConfig.epochs_retained``), so that its pruning after a snapshot is due
    within a small run, else the product's default."""
    return CoordinatorConfig(
        pipeline_id=PIPELINE,
        store=store.config,
        checkpoint=SIM_CHECKPOINT,
        retain=RETAIN,
        drain_timeout=DRAIN_TIMEOUT,
        epochs_retained=epochs_retained or CoordinatorConfig.epochs_retained,
    )


@functools.lru_cache(maxsize=64)
def _parsed_options(token: int | None, tolerance: Tolerance, retention: float) -> SinkOptions:
    """The product's parse of the options (remembered: a commit parses them every time,
    and they differ only in these three values). With a dead-letter ``retention``, the
    owner sweeps after every commit (``staging.sweepEvery=1``), so that expiry runs within
    a short run."""
    raw = {
        "pipeline.id": PIPELINE,
        "state.uri": "memory://simulation",
        "consumer": "file",
        "consumer.path": "/simulated/consumer",
        "delivery.maxRetries": "1",
        "delivery.retryBackoffMs": "0",
    }
    if token is not None:
        raw["fencing.token"] = str(token)
    if tolerance == "all":
        raw["errors.tolerance"] = "all"
        raw["errors.deadLetter.path"] = DEAD_LETTER_PATH
        if retention:
            raw["errors.deadLetter.retention"] = f"{round(retention * 1000)}ms"
            raw["staging.sweepEvery"] = "1"
    return SinkOptions.parse(raw)


def skip_lost_bundle(
    world: World, store: SimStore, errors: list[str], dead_store: SimStore | None = None
) -> None:
    """The operator's documented way past a lost in-flight bundle: skip it, acknowledging
    the loss (:func:`sink.lost_bundle.resolve`; it refuses unless the bundle is lost), with
    the dead-letter destination seen through ``dead_store`` (none: not looked at)."""
    try:
        inflight = read_barrier_state(store, world.layout).inflight
        if inflight is None:
            return
        lost_bundle.resolve(
            sink_options(store, None),
            store,
            world.consumer_api,
            inflight.bundle_id,
            acknowledge_loss=True,
            dead_letters=None if dead_store is None else StoreDeadLetters(dead_store),
        )
    except GtBarrierError as err:  # not lost, or the store or consumer failed: later
        errors.append(f"operator: {type(err).__name__}: {err}")


def sweep_take(world: World, store: SimStore, name: str, errors: list[str]) -> None:
    """The operator's ``gtbarrier sweep --delete`` takes the pipeline as the product's
    sweep does (``_take_pipeline``: a fencing token that is not a coordinator's, then the
    barrier's driver claim, which fences every earlier run); its deletion of leftovers is
    not modelled."""
    identity = f"{fencing.SWEEP_IDENTITY}:sim:{name}"
    try:
        token = fencing.take_token(
            store, world.layout, identifier=identity, races=world.retry(), coordinator=False
        )
        states = barrier_state.BarrierStateStore(
            store, world.layout, clock=world.clock, races=world.retry()
        )
        states.claim_driver(token, driver=identity)
    except GtBarrierError as err:  # a driver with a newer token: the sweep refuses
        errors.append(f"{name}: {type(err).__name__}: {err}")


def task_rows(rows: list[Row], task: int) -> list[Row]:
    """The rows write task ``task`` gets (by key, as after a shuffle)."""
    return [r for r in rows if sum(map(ord, r[1])) % TASKS == task]


@dataclass(frozen=True)
class WriteTask:
    """One write task of a batch (run once per attempt)."""

    proc: DriverProc
    query_id: str
    batch_id: int
    run_id: str
    partition: int
    rows: list[Row]
    epoch: int

    def run(self, attempt: int) -> BarrierCommitMessage:
        return self.proc.stage(
            query_id=self.query_id,
            batch_id=self.batch_id,
            run_id=self.run_id,
            partition=self.partition,
            attempt=attempt,
            rows=self.rows,
            epoch=self.epoch,
        )


class SimCheckpointFiles:
    """The driver's checkpoint as the product's ``recover_checkpoint`` changes it (its
    ``files=`` seam): the simulated :class:`Checkpoint`, a snapshot's content from the
    world's blobs."""

    def __init__(self, proc: DriverProc) -> None:
        self.proc = proc

    def inspect(self) -> LocalCheckpoint:
        return self.proc.checkpoint.local()

    def remove(self) -> None:
        self.proc.checkpoint = Checkpoint()

    def mark(self, marker: CheckpointMarker) -> None:
        self.proc.checkpoint.marker = marker.generation

    def install(
        self,
        store: StateStore,
        layout: PipelineLayout,
        manifest: Manifest,
        *,
        cancelled: Callable[[], bool],
    ) -> Materialised:
        """The snapshot's checkpoint in place of the driver's; :class:`SnapshotCorrupted`
        for the newest retained snapshot at a driver started with it unusable (the
        ``older`` crash), or for one whose content is gone."""
        proc = self.proc
        if proc.newest_unusable and manifest.snapshot_id == proc.world.newest_snapshot():
            raise SnapshotCorrupted(f"snapshot {manifest.snapshot_id}: its files are corrupted")
        files = proc.world.snapshot_files.get(proc.writer.manifest_key(manifest.snapshot_id))
        if files is None:
            raise SnapshotCorrupted(f"snapshot {manifest.snapshot_id}: its files are gone")
        proc.checkpoint = Checkpoint.from_snapshot(files, manifest.generation)
        proc.newest_unusable = False
        return Materialised(files=len(files), bytes=0, seconds=0.0)


class DriverProc:
    """One driver program (module docstring)."""

    def __init__(
        self,
        world: World,
        number: int,
        *,
        checkpoint: Checkpoint,
        version: int,
        started: int = 0,
        tolerance: Tolerance = "none",
        healthy: bool = False,
        newest_unusable: bool = False,
    ) -> None:
        self.world = world
        self.number = number
        self.name = f"p{number}"
        limits = world.config.max_per_partition
        self.max_per_partition = limits[(number - 1) % len(limits)]
        self.store: SimStore = world.view(self.name)
        self.exec_store: SimStore = world.view(f"{self.name}-exec")
        self.dead_store: SimStore = world.dead_view(self.name)
        self.checkpoint = checkpoint
        self.version = version
        #: The sink's errors.tolerance this driver runs at.
        self.tolerance: Tolerance = tolerance
        #: A write task refused rows (at none) since the last reset.
        self.refused = False
        #: The consumer setting the current query run read (``SimConfig.flip``).
        self.setting = 0
        #: A run stopped because the target refuses rows it accepted before.
        self.refusal_changed = False
        self.healthy = healthy
        #: Barrier commits that returned (each one runs the barrier's cleanup).
        self.commits_made = 0
        self.newest_unusable = newest_unusable
        #: The coordinator's ownership of the pipeline (the product's): its fencing token,
        #: and the generation the process observed when it started (before it would wait
        #: for the driver lock) or the newest one it began itself, the only one it works in.
        self.ownership = DriverOwnership(
            _coordinator_config(self.store, world.config.epochs_retained),
            self.store,
            on_acquired=self.acquired,
            races=world.retry(),
            clock=world.clock,
            identifier=self.name,
        )
        self.ownership.started_generation = started
        #: The resume point generation the coordinator snapshots in (the product's).
        self.lineage = Lineage()
        #: The product's snapshot pipeline, over the simulated files and clock.
        self.writer = SimManifestWriter(world, self.store, self.layout)
        self.snapshots = SnapshotPipeline(
            self.ownership.config,
            self.store,
            self.ownership,
            self.lineage,
            writer=self.writer,
            clock=world.clock,
            monotonic=world.clock,
            sleep=world.sleep,
        )
        #: The product's recovery (``recover()``), over the simulated checkpoint and clock.
        self.files = SimCheckpointFiles(self)
        self.recoverer = Recoverer(
            self.ownership.config,
            self.store,
            self.ownership,
            self.lineage,
            stop_snapshots=self.end_generation,
            on_new_generation=self.generation_begun,
            files=self.files,
            clock=world.clock,
            monotonic=world.clock,
            sleep=world.sleep,
        )
        #: Completed batches the snapshot worker has still to snapshot.
        self.queue: list[QueuedBatch] = []
        #: running, finished (the input is consumed), fenced, gave-up, or dead (crashed).
        self.status = "running"
        self.main_done = False
        self.runs = 0
        self.run_id: str | None = None
        #: The generation the query run started at (None until its first commit or abort).
        self.run_start: int | None = None
        self.task_attempts = 0
        #: Every error the driver met (resets, aborts, snapshots, the operator's).
        self.errors: list[str] = []
        #: Snapshots accepted (progress: it resets the supervisor's count of resets).
        self.accepted = 0

    @property
    def layout(self) -> PipelineLayout:
        return self.world.layout

    # --- the driver program -------------------------------------------------------------

    def main(self) -> None:
        """``pN``: start the snapshot worker; then the supervised query, whose first
        recovery is ``recover(mode="replay")`` for a query version whose generation is not
        written yet."""
        if self.world.config.coordinator:
            self.world.spawn(f"{self.name}s", self.snapshot_loop, self)
        self.supervise("restore" if self.version in self.world.generations else "replay")

    def upgrade(self) -> None:
        """``pNu``: the operator stopped the query; the coordinator starts a new version
        of it on a fresh checkpoint (``recover(mode="replay")``: a new resume point
        generation), then supervises it."""
        self.version = self.world.version
        self.supervise("replay")

    def end_generation(self, timeout: float) -> bool:
        """The Recoverer's ``stop_snapshots`` before a new generation: the coordinator
        stops following the old query's batches. The snapshot in progress is not ended
        (the product ends it at its next step): the acceptance's own generation check
        keeps it out of the new generation."""
        self.queue.clear()
        return True

    def generation_begun(self) -> None:
        """The Recoverer's ``on_new_generation``: the query version deployed now runs in
        the generation this driver began (drivers started later recover into it)."""
        self.world.generations.setdefault(self.version, self.lineage.generation)

    def end(self, status: str) -> None:
        self.status = status
        self.main_done = True

    def supervise(self, mode: str) -> None:
        """The product's ``Supervisor``: recover (first in ``mode``) and run the query;
        reset it after a failure, up to MAX_RESETS consecutive times without an accepted
        snapshot in between; a fenced driver, or a recovery error retrying cannot fix,
        stops it."""
        supervisor = Supervisor(
            SupervisedDriver(self),
            _no_query,
            MAX_RESETS,
            mode=mode,
            backoff=1.0,
            max_backoff=1.0,
            sleep=self.reset_pause,
        )
        try:
            supervisor.run()
        except GtBarrierError as err:
            self.errors.append(f"{type(err).__name__}: {err}")
            self.end("fenced" if isinstance(err, PipelineFenced) else "gave-up")
            return
        self.end("finished")

    def reset_pause(self, seconds: float) -> None:
        """The supervisor's back-off before a reset; the healthy driver's operator acts in
        it (the documented ways past a lost or a poison bundle)."""
        if self.healthy:
            self.operator_resolve()
            self.operator_tolerate()
            self.operator_accept()
        self.world.sleep(seconds)

    @property
    def token(self) -> int | None:
        """The fencing token the coordinator holds (None: not taken, or given up)."""
        return self.ownership.token

    def acquire(self) -> None:
        """The product's ``DriverOwnership.acquire``: refuse a generation begun after this
        process started (before any write), take a fencing token, claim the barrier for
        this driver, then :meth:`acquired`."""
        self.ownership.acquire()

    def acquired(self, token: int) -> None:
        """The coordinator's ``on_acquired``: read the resume point again after the token
        (a replay may have slipped in without a lock), check its generation, follow its
        lineage."""
        point = self.ownership.read_resume_point()
        self.ownership.check_generation(point)
        self.lineage.seen(point)

    # --- one query run --------------------------------------------------------------------

    def run_query(self) -> None:
        """Micro-batches until the input has nothing new (module docstring)."""
        self.runs += 1
        if self.world.config.flip and not self.healthy:
            # A consumer setting read again at each start, changed since the last one.
            self.setting = (self.number + self.runs) % 2
        run_id = f"{self.name}-r{self.runs}"
        self.run_id = run_id
        self.run_start = None
        ck = self.checkpoint
        if ck.query_id is None:
            ck.query_id = self.world.new_query_id()
        query_id = ck.query_id
        # The product's stream reader, one per query run as Spark makes it, over the
        # simulated broker (simulation.source); its ``commit`` runs the driver's pruner in
        # the driver's own steps after each batch's commit (the reader's seam).
        epoch_log = source.PlanCheckedEpochLog(
            self.store, self.layout, self.world.planned, self.max_rows
        )
        reader = source.open_reader(
            self.source_options(), self.world.broker, epoch_log, self.world.clock, self.world.sleep
        )
        b, start, replay = self.first_batch(ck, reader, query_id)
        while True:
            if replay is not None:
                start, end = replay
            else:
                planned = self.latest_offset(reader, start, query_id)
                if planned is None:
                    return  # nothing new: the query idles
                end = planned
                self.log_entry(ck.offsets, b, (start, end), "offsets")
            self.run_batch(
                ck,
                reader,
                batch_id=b,
                start=start,
                end=end,
                query_id=query_id,
                run_id=run_id,
                on_driver=self.world.config.read_mode == "driver" and replay is None,
            )
            self.log_entry(ck.commits, b, None, "commits")
            # Spark commits every source after every batch; the product decides whether
            # this driver prunes (not where the coordinator owns pruning).
            reader.commit(end.to_json())
            if self.world.config.coordinator:
                self.queue.append(self.completed(b, start.epoch, end, query_id, run_id, ck))
            b, start, replay = b + 1, end, None

    def completed(  # noqa: PLR0917 - the batch's fields, as the listener reads them
        self,
        batch_id: int,
        epoch: int,
        end: SourceOffset,
        query_id: str,
        run_id: str,
        ck: Checkpoint,
    ) -> QueuedBatch:
        """The listener's event of a batch whose commit-log entry is written."""
        batch = CompletedBatch(
            query_id=query_id,
            run_id=run_id,
            batch_id=batch_id,
            epoch=epoch,
            frontier=end.to_json(),
            num_input_rows=0,
            duration_ms=0,
            gtkafka=True,
        )
        return QueuedBatch(batch, ck.snapshot_json(batch_id))

    @property
    def max_rows(self) -> int:
        """This driver's ``maxOffsetsPerTrigger``, as its source's options hold it."""
        rows = self.source_options().max_offsets_per_trigger
        assert rows is not None
        return rows

    def source_options(self) -> KafkaSourceOptions:
        config = self.world.config
        return source.source_options(
            self.layout.pipeline_id,
            config.partitions,
            self.max_per_partition,
            config.epochs_retained,
            config.fail_on_data_loss,
        )

    def first_batch(
        self, ck: Checkpoint, reader: GlobalTimeKafkaStreamReader, query_id: str
    ) -> tuple[int, SourceOffset, tuple[SourceOffset, SourceOffset] | None]:
        """The run's first batch id, its start, and its (start, end) if it replays the
        checkpoint's last planned but uncommitted batch; on a new checkpoint the start is
        the reader's ``initialOffset`` (the persisted start, created first writer wins;
        once epochs were pruned :class:`EpochsPruned`: ``state.startAtFloor`` is not set,
        a stateful query cannot start at the floor)."""
        if ck.offsets:
            last = max(ck.offsets)
            if last in ck.commits:
                return last + 1, ck.offsets[last][1], None
            return last, ck.offsets[last][0], ck.offsets[last]
        try:
            begun = stream_reader.from_checkpoint(reader.initialOffset())
        except EpochsPruned:
            persisted = reader.epoch_log.start()  # read by initialOffset: no store request
            self.world.met_pruned(query_id, 0 if persisted is None else persisted.epoch)
            raise
        return 0, begun, None

    def latest_offset(
        self, reader: GlobalTimeKafkaStreamReader, start: SourceOffset, query_id: str
    ) -> SourceOffset | None:
        """The reader's ``latestOffset`` from ``start``, as Spark asks it (the reader's
        default read limit): the recorded end of the epoch, else one it plans and records
        (first writer wins); None when there is nothing new."""
        try:
            raw = reader.latestOffset(start.to_json(), reader.getDefaultReadLimit())
        except EpochsPruned:
            self.world.met_pruned(query_id, start.epoch)
            raise
        end = stream_reader.from_checkpoint(raw)
        return None if end.same_as(start) else end

    def log_entry(
        self,
        log: Any,
        batch_id: int,
        value: tuple[SourceOffset, SourceOffset] | None,
        what: str,
    ) -> None:
        """Add batch ``batch_id`` to the checkpoint's offset or commit log (a scheduling
        point). As Spark's ``HDFSMetadataLog.add``, an existing entry fails the run:
        another driver writes the same checkpoint."""
        self.world.checkpoint_point(what, batch_id)
        if batch_id in log:
            raise SparkQueryError(
                f"Concurrent update to the {what} log. Multiple streaming jobs detected for "
                f"{batch_id}"
            )
        if value is None:
            log.add(batch_id)
        else:
            log[batch_id] = value

    def run_batch(
        self,
        ck: Checkpoint,
        reader: GlobalTimeKafkaStreamReader,
        *,
        batch_id: int,
        start: SourceOffset,
        end: SourceOffset,
        query_id: str,
        run_id: str,
        on_driver: bool = False,
    ) -> None:
        """``on_driver``: ``readMode=driver`` read the batch's rows when it planned it (no
        read task, no batch record: the barrier's commit records it from the offset log)."""
        epoch = start.epoch
        exec_store = self.exec_store

        def read_task(attempt: int) -> list[Record]:
            # The product's topic-id check before the first fetch (with failOnDataLoss=true
            # a DataLossError fails the task), then the batch record, then the records.
            records, dropped = source.read_ranges(reader, self.world.broker, start, end)
            if dropped:
                self.world.read_dropped(epoch)
            if not on_driver:
                batch_records.write_batch_record(exec_store, self.layout, query_id, batch_id, epoch)
            return records

        records = self.task(read_task)
        before = ck.states[batch_id - 1] if batch_id > 0 else EMPTY_STATE
        rows, after = run_epoch(self.version, before, records, epoch)
        ck.states[batch_id] = after
        messages: list[BarrierCommitMessage] = []
        try:
            for t in range(TASKS):
                writer = WriteTask(self, query_id, batch_id, run_id, t, task_rows(rows, t), epoch)
                messages.append(self.task(writer.run))
            self.barrier().commit(messages, batch_id)
            self.commits_made += 1
        except GtBarrierError as err:
            if REFUSES_MORE in str(err):
                self.refusal_changed = True
            try:
                self.barrier().abort(messages, batch_id)
            except GtBarrierError as err:
                self.errors.append(f"abort: {type(err).__name__}: {err}")
            raise

    def task(self, body: Callable[[int], T]) -> T:
        """Run a task, retrying a failed attempt (Spark's task retry)."""
        for attempt in range(TASK_ATTEMPTS):
            try:
                return body(attempt)
            except GtBarrierError as err:
                if attempt + 1 == TASK_ATTEMPTS:
                    # Spark's error names the Python error (the supervisor's stop reads it).
                    raise SparkQueryError(
                        f"task failed {TASK_ATTEMPTS} times: {type(err).__name__}: {err}"
                    ) from err
        raise AssertionError("unreachable")

    def stage(
        self,
        *,
        query_id: str,
        batch_id: int,
        run_id: str,
        partition: int,
        attempt: int,
        rows: list[Row],
        epoch: int,
    ) -> BarrierCommitMessage:
        """One write task: the product's ``stage_task`` over the task's rows, with the
        row checks of the simulated consumer kind at this driver's tolerance."""
        self.task_attempts += 1
        task = StreamingTask(
            query_id=query_id,
            batch_id=batch_id,
            run_id=run_id,
            partition=partition,
            task_attempt=self.task_attempts,
            attempt_number=attempt,
        )
        batches = [rows_to_batch(rows)] if rows else []
        try:
            return write_task.stage_task(
                batches,
                task,
                self.world.staging,
                has_gt=True,
                checks=row_checks(self.tolerance, self.setting),
                bundle_of=lambda: epoch,
            )
        except RowsRefused:
            self.refused = True
            self.world.refusals += 1
            raise

    def options(self) -> SinkOptions:
        return sink_options(
            self.store, self.token, self.tolerance, self.world.config.dead_letter_retention
        )

    def barrier(self) -> sink_barrier.Barrier:
        if self.run_start is None:
            # Spark makes and pickles the run's commit-side sink at its first commit (or
            # abort), reading where the run starts; every commit of the run carries it.
            self.run_start = barrier_state.start_generation(self.store, self.layout)
        # Sequential reads: a greenlet cannot switch across the pool thread that would
        # overlap them, and both are reads of records the commit only reads.
        return sink_barrier.Barrier(
            self.options(),
            self.store,
            self.world.consumer_api,
            self.world.staging,
            FaultInjector(),
            clock=self.world.clock,
            sleep=self.world.sleep,
            races=self.world.retry(),
            overlap_reads=False,
            # At none the sink has no destination (errors.deadLetter.path is not set).
            dead_letters=(
                StoreDeadLetters(self.dead_store, clock=self.world.clock)
                if self.tolerance == "all"
                else None
            ),
            start_generation=self.run_start,
            # Executor mode's sink as deployed: no checkpointLocation it could read.
            offset_log=(
                SimOffsetLog(self.checkpoint) if self.world.config.read_mode == "driver" else None
            ),
        )

    def operator_resolve(self) -> None:
        """Before a reset of the healthy driver: the operator's way past a lost bundle."""
        skip_lost_bundle(
            self.world,
            self.store,
            self.errors,
            self.dead_store if self.tolerance == "all" else None,
        )

    def operator_tolerate(self) -> None:
        """Before a reset of the healthy driver whose run stopped at a poison bundle: the
        operator's way past it, the same checkpoint with ``errors.tolerance=all``."""
        if self.refused and self.tolerance == "none":
            self.tolerance = "all"
            self.world.tolerance = "all"
        self.refused = False

    def operator_accept(self) -> None:
        """Before a reset of the healthy driver whose run stopped because the target
        refuses rows an earlier attempt's dead-letter file lacks: the error's way out,
        the setting of that attempt restored, the same checkpoint."""
        if self.refusal_changed:
            self.setting = 1 - self.setting
        self.refusal_changed = False

    # --- the snapshot worker ---------------------------------------------------------------

    def snapshot_loop(self) -> None:
        """``pNs``: snapshot completed batches, one at a time, until the driver is done."""
        while True:
            self.world.wait_until(lambda: bool(self.queue) or self.main_done)
            if not self.queue:
                return
            batch = self.queue.pop(0)
            try:
                self.snapshot(batch)
            except PipelineFenced:
                return
            except GtBarrierError as err:
                self.errors.append(f"snapshot {batch.batch.batch_id}: {type(err).__name__}: {err}")

    def snapshot(self, batch: QueuedBatch) -> None:
        """The product's ``SnapshotPipeline.run`` on the batch: its files (one manifest,
        :class:`SimManifestWriter`), the wait until the barrier has no bundle in flight at
        or below its epoch, the acceptance into the resume point, the pruning of snapshots
        and of the epoch log."""
        self.writer.pending = batch.files
        # Nothing ends it early: the coordinator's ``end_generation`` before a replay is not
        # modelled, so the acceptance's own generation check is what keeps an old
        # version's snapshot out of a new generation.
        self.snapshots.run(batch.batch, closing=_never_closing)
        self.accepted += 1
