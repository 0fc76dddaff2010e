"""One chaos round, end to end: :class:`RoundRunner`.

1. A fresh input topic, pipeline id and consumer; the first chunk of input produced.
2. The driver program started (with ``GTBARRIER_FAULT`` when the first fault is armed at
   start); before each further fault another chunk of input.
3. Each fault injected (:mod:`.faults`); a driver that died is restarted at once, as an
   operator would: a new driver program, which ``recover()``\\ s and starts the query.
4. The end: the rest of the input, then two ticks (records far in event time, see
   :mod:`.queries`) in two successive epochs; the round waits until ``GT_last`` reaches
   the last epoch (restarting a driver that died by itself, which is noted), then stops
   the driver.
5. The verdict (:mod:`.checks`) against the reference (:mod:`.reference`), the consumer's
   content and the dead letters together.

A round with a setting change (:mod:`.variants`) creates the PostgreSQL table with its
narrow ``label`` column before the first driver starts, and widens it when its
``setting_change`` fault has killed the driver, before the restart
(:meth:`RoundRunner.change_setting`). A sparse round keeps every epoch record it has seen
(a thread reads the log twice a second: the pruning deletes them), for the reference, and
at the end waits for the pruning after the last epoch before it counts the epochs stored.

A poison round (:mod:`.poison`) that starts at ``errors.tolerance=none`` is switched by the
round, as an operator would: once the driver's query failed at the poison bundle
(``RowsRefused``), the round checks that nothing of that bundle was delivered, stops the
driver and restarts it on the same checkpoint with ``errors.tolerance=all``
(:meth:`RoundRunner.operator_switch`, looked at whenever the round waits).

Every wait is bounded by the round's deadline; a round that runs out of it is reported
as ``timeout`` with its logs (``<out>/<round>/``).
"""

from __future__ import annotations

import functools
import logging
import random
import shutil
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from kazoo.client import KazooClient
from kazoo.exceptions import NoNodeError

from harness.driver import DriverRunner
from integration_tests.chaos.checks import Verdict, judge
from integration_tests.chaos.consumers import (
    CONSUMERS,
    ChaosConsumer,
    ConsumerSetup,
    PostgresConsumer,
)
from integration_tests.chaos.drivers import DriverLife
from integration_tests.chaos.faults import FAULTS, NotFired
from integration_tests.chaos.job import DriverJob
from integration_tests.chaos.plan import FaultSpec, RoundPlan
from integration_tests.chaos.poison import (
    REFUSED,
    Tolerance,
    poison_sink_options,
    read_dead_letters,
)
from integration_tests.chaos.queries import QUERIES, TICK_BASE, TICK_KEY, record_key
from integration_tests.chaos.reference import (
    assign_epochs,
    read_epochs,
    read_input,
    stored_epochs,
)
from integration_tests.chaos.servers import ChaosServers
from state.layout import PipelineLayout
from state.protocol.barrier_state import read_barrier_state
from state.records.barrier import BarrierState
from state.records.epoch import EpochRecord
from state.stores import StateStore

log = logging.getLogger(__name__)
T = TypeVar("T")
POLL = 0.3
STOP_TIMEOUT = 60.0
#: How often a sparse round reads the epoch log (its pruning keeps at least 8 epochs,
#: each at least one 500 ms trigger).
EPOCH_WATCH = 0.5
#: How long a sparse round waits, once the last epoch is committed, for the pruning after
#: it (the coordinator's, after its next snapshot).
PRUNE_WAIT = 90.0


def _started_or_ended(driver: DriverLife) -> bool:
    return driver.queries_started() > 0 or not driver.running


def _committed_or_ended(driver: DriverLife) -> bool:
    return driver.commits() > 0 or not driver.running


class RoundTimeout(Exception):
    """The round ran out of its deadline."""


@dataclass(frozen=True)
class InjectedFault:
    kind: str
    at: float  # seconds since the round started, when it took effect (or was given up)
    fired: bool
    detail: str
    params: dict[str, Any]


@dataclass
class RoundResult:
    plan: RoundPlan
    status: str  # pass, fail, timeout, error
    seconds: float
    consumer: str
    faults: list[InjectedFault] = field(default_factory=list)
    verdict: Verdict | None = None
    notes: list[str] = field(default_factory=list)
    timeline: list[tuple[float, str, str]] = field(default_factory=list)
    driver_starts: int = 0
    logs: str = ""
    #: A poison round started at errors.tolerance=none was switched to all.
    switched: bool = False

    @property
    def fired(self) -> list[InjectedFault]:
        return [f for f in self.faults if f.fired]


class RoundRunner:
    """Runs one :class:`RoundPlan` on the shared servers (see the module docstring)."""

    def __init__(
        self,
        plan: RoundPlan,
        servers: ChaosServers,
        workdir: Path,
        *,
        timeout: float,
        say: Callable[[str], None] = print,
    ) -> None:
        self.plan = plan
        self.servers = servers
        self.query = QUERIES[plan.query]
        self.dir = workdir / plan.round_id
        self.dir.mkdir(parents=True, exist_ok=True)
        self.say = say
        self.t0 = time.monotonic()
        self.deadline = self.t0 + timeout
        self.kafka = servers.kafka()
        self.pipeline = f"chaos-{servers.run_tag}-{plan.round_id}"
        self.store: StateStore = servers.store(f"{plan.round_id}/state")
        self.runner = DriverRunner(self.dir)
        self.drivers: list[DriverLife] = []
        self.driver: DriverLife | None = None
        self.armed: dict[int, str] = {}  # id(FaultSpec) -> label of the driver it is armed on
        self.produced = 0
        self.chunk = 0
        self.topic = ""
        self.consumer: ChaosConsumer | None = None
        self._job: DriverJob | None = None
        self._zk: KazooClient | None = None
        self.result = RoundResult(plan, "error", 0.0, plan.consumer, logs=str(self.dir))
        #: The sink's errors.tolerance now (a poison round at none is switched to all).
        self.tolerance: Tolerance = "none" if plan.poison is None else plan.poison.tolerance
        #: Where the dead letters go: beside the output (in S3 for the s3 consumer).
        self.dead_letters = (
            f"s3://{servers.bucket}/{plan.round_id}/dead"
            if plan.consumer == "s3"
            else f"file://{self.dir / 'dead'}"
        )
        #: What the round saw go wrong outside the verdict's counts (poison delivered).
        self.problems: list[str] = []
        if plan.setting is not None:
            self.tolerance = "all"  # the labels are refused from the first bundle on
        #: Every epoch record read so far (a sparse round's pruning deletes them).
        self.known_epochs: dict[int, EpochRecord] = {}
        self._epochs_lock = threading.Lock()
        self._watching = threading.Event()
        self._watcher: threading.Thread | None = None
        #: Epochs the log stores at the end (sparse rounds).
        self.stored: int | None = None

    # --- time ---------------------------------------------------------------------------

    def now(self) -> float:
        return time.monotonic() - self.t0

    def note(self, text: str, kind: str = "note") -> None:
        self.result.timeline.append((round(self.now(), 1), kind, text))
        with (self.dir / "round.log").open("a") as f:
            f.write(f"{self.now():7.1f}s {kind}: {text}\n")
        log.info("%s %s: %s", self.plan.round_id, kind, text)

    def check_deadline(self) -> None:
        if time.monotonic() >= self.deadline:
            raise RoundTimeout(f"round {self.plan.round_id} ran out of time")

    def sleep(self, seconds: float) -> None:
        self.sleep_until(time.monotonic() + seconds)

    def sleep_until(self, when: float) -> None:
        while (left := min(when, self.deadline) - time.monotonic()) > 0:
            time.sleep(min(left, POLL))
        self.check_deadline()

    def wait(
        self, check: Callable[[], T], timeout: float, what: str, *, quiet: bool = False
    ) -> T | None:
        """Poll ``check`` until it returns something truthy (returned), for ``timeout``
        seconds (then None, noted unless ``quiet``; the round's deadline raises
        :class:`RoundTimeout`)."""
        end = time.monotonic() + timeout
        while True:
            self.operator_switch()
            value = check()
            if value:
                return value
            self.check_deadline()
            if time.monotonic() >= end:
                if not quiet:
                    self.note(f"gave up waiting for {what} after {timeout:.0f}s")
                return None
            time.sleep(POLL)

    # --- the pipeline's state -----------------------------------------------------------

    def barrier(self) -> BarrierState:
        return read_barrier_state(self.store, PipelineLayout(self.pipeline))

    def gt_last(self) -> int:
        return self.barrier().gt_last

    def poison_epochs(self) -> list[int | None]:
        """The epochs that read the poison records (None: not read yet). Record ``n`` is
        at offset ``n // partitions`` of partition ``n % partitions``."""
        if self.plan.poison is None:
            return []
        p = self.plan.partitions
        return [self.epoch_covering(n % p, n // p) for n in self.plan.poison.numbers]

    def poison_passed(self) -> bool:
        """Whether ``GT_last`` is past every poison epoch (no bundle with dead letters is
        left to deliver)."""
        epochs = self.poison_epochs()
        known = [e for e in epochs if e is not None]
        return len(known) == len(epochs) and self.gt_last() >= max(known, default=-1)

    def epochs(self, store: StateStore | None = None) -> list[EpochRecord]:
        """Every epoch record of the pipeline, those pruned since they were read too."""
        with self._epochs_lock:
            return read_epochs(store or self.store, self.pipeline, self.known_epochs)

    def _watch_epochs(self, store: StateStore) -> None:
        try:
            while not self._watching.wait(EPOCH_WATCH):
                try:
                    self.epochs(store)
                except Exception as err:  # the next read tries again; the verdict sees gaps
                    log.warning("%s: reading the epoch log: %s", self.plan.round_id, err)
        finally:
            store.close()

    def caught_up(self) -> bool:
        """Whether the recorded epochs cover every record produced so far."""
        epochs = self.epochs()
        return bool(epochs) and sum(epochs[-1].end.offsets.values()) >= self.produced

    def epoch_covering(self, partition: int, offset: int) -> int | None:
        """The recorded epoch that reads ``offset`` of ``partition``, if any yet."""
        for e in self.epochs():
            start = e.start.offsets.get((self.topic, partition), 0)
            end = e.end.offsets.get((self.topic, partition), 0)
            if start <= offset < end:
                return e.epoch
        return None

    def lock_contenders(self, path: str) -> int:
        if self._zk is None:
            assert self.servers.zk is not None
            self._zk = self.servers.zk.client(self.servers.zk_chroot)
        try:
            return len(self._zk.get_children(path))
        except NoNodeError:
            return 0

    def cluster_worker_pids(self) -> list[int]:
        cluster = self.servers.cluster
        if not self.plan.cluster or cluster is None:
            return []
        return [w.process.pid for w in cluster.workers if w.process.running]

    # --- input --------------------------------------------------------------------------

    def produce_chunk(self) -> bool:
        """Produce the next chunk of input; False when all of it was produced."""
        if self.chunk >= self.plan.chunks:
            return False
        self.chunk += 1
        self.produce_records(self.plan.records * self.chunk // self.plan.chunks - self.produced)
        return True

    def produce_records(self, n: int) -> None:
        """Produce the next ``n`` records (past the planned ones if they are all out)."""
        if n <= 0:
            return
        end, p = self.produced + n, self.plan.partitions
        self.kafka.produce(
            self.topic,
            ((record_key(i), b"%d" % i, None, i % p) for i in range(self.produced, end)),
            batch_size=500,
        )
        self.note(f"records {self.produced}..{end - 1} produced", "input")
        self.produced = end

    def feed_until(
        self, check: Callable[[], T], timeout: float, what: str, *, every: float = 5.0
    ) -> T | None:
        """Like :meth:`wait`, but keep the pipeline busy while ``check`` is false: every
        ``every`` seconds, if it has read all of its input, produce the next planned chunk
        or, once all of that is out, a quarter batch of extra records (the reference reads
        the topic, so extra input is judged like the rest).

        A fault that needs traffic (an S3 request, a running task, a given bundle) must
        not depend on the pipeline still being behind its planned input: a fast pipeline
        has read all of it long before a late fault's moment."""
        end = time.monotonic() + timeout
        while True:
            if self.caught_up() and not self.produce_chunk():
                self.produce_records(self.plan.max_offsets // 4)
            left = end - time.monotonic()
            value = self.wait(check, min(every, max(left, 0.0)), what, quiet=True)
            if value:
                return value
            if time.monotonic() >= end:
                self.note(f"gave up waiting for {what} after {timeout:.0f}s")
                return None

    def produce_tick(self, n: int) -> int:
        """Tick ``n`` (record ``TICK_BASE + n``) to partition 0; its offset."""
        meta = self.kafka.produce(self.topic, [(TICK_KEY, b"%d" % (TICK_BASE + n), None, 0)])
        self.note(f"tick {n} at offset {meta[0].offset}", "input")
        return int(meta[0].offset)

    # --- drivers ------------------------------------------------------------------------

    @property
    def job(self) -> DriverJob:
        assert self._job is not None
        return self._job

    def live_driver(self) -> DriverLife:
        assert self.driver is not None
        return self.driver

    def start_driver(self, pending: list[FaultSpec]) -> DriverLife:
        """Start a driver on the round's job; arm the next fault if it is armed at start."""
        env = None
        if pending and FAULTS[pending[0].kind].armed_at_start:
            env = FAULTS[pending[0].kind].environment(self, pending[0].params)
        label = f"d{len(self.drivers) + 1}"
        driver = DriverLife(self.runner, self.servers, self.job, label, fault_env=env)
        if env is not None:
            self.armed[id(pending[0])] = label
        self.drivers.append(driver)
        self.driver = driver
        self.note(
            f"driver {label} started (pid {driver.pid})"
            + (f", GTBARRIER_FAULT={env}" if env else ""),
            "driver",
        )
        return driver

    def start_successor(self) -> DriverLife:
        """A second driver on another "host" (its own checkpoint directory); it becomes
        the round's driver."""
        label = f"d{len(self.drivers) + 1}"
        self._job = replace(self.job, checkpoint=str(self.dir / f"cp-{label}"))
        driver = DriverLife(self.runner, self.servers, self.job, label)
        self.drivers.append(driver)
        self.driver = driver
        self.note(
            f"second driver {label} started (pid {driver.pid}) for the same pipeline", "driver"
        )
        return driver

    def keep_alive(self, pending: list[FaultSpec]) -> None:
        """Restart the driver if it is not running (noting why it ended, unless a fault
        of this round killed it)."""
        self.operator_switch()
        driver = self.live_driver()
        if driver.running:
            return
        if not driver.sigkilled:
            self.result.notes.append(
                f"driver {driver.label} exited {driver.returncode} by itself: "
                f"{driver.failure() or 'no error event'}"
            )
        elif not driver.killed_by_us and driver.fault_env:
            self.note(f"driver {driver.label}: GTBARRIER_FAULT={driver.fault_env} fired")
        self.note(f"driver {driver.label} ended ({driver.returncode}); restarting", "driver")
        driver.close()
        self.start_driver(pending)

    def operator_switch(self) -> None:
        """The way past a poison bundle (docs/sink.md, "Bad rows and dead letters"): once
        the driver's query failed at it under ``errors.tolerance=none``, check that nothing
        of that bundle (or a later one) was delivered, stop the driver, and restart it on
        the same checkpoint with ``errors.tolerance=all``. A kill at ``after_dead_letters``
        armed on the stopped driver (it cannot fire at none) is armed on the new one."""
        driver = self.driver
        if self.tolerance != "none" or self.plan.poison is None or driver is None:
            return
        if REFUSED not in driver.proc.output():
            return
        self.note(f"driver {driver.label}: the query failed at a poison bundle ({REFUSED})")
        self.check_poison_held()
        env = driver.fault_env if driver.fault_env == "after_dead_letters" else None
        if driver.running:
            driver.stop(STOP_TIMEOUT)
        driver.close()
        self.tolerance = "all"
        self.result.switched = True
        options = {**self.job.sink_options, **poison_sink_options("all", self.dead_letters)}
        self._job = replace(self.job, sink_options=options)
        label = f"d{len(self.drivers) + 1}"
        restarted = DriverLife(self.runner, self.servers, self.job, label, fault_env=env)
        self.drivers.append(restarted)
        self.driver = restarted
        self.note(
            f"driver {label} started (pid {restarted.pid}) on the same checkpoint with "
            f"errors.tolerance=all, errors.deadLetter.path={self.dead_letters}"
            + (f", GTBARRIER_FAULT={env}" if env else ""),
            "driver",
        )

    def change_setting(self) -> str:
        """The round's setting change (the driver is down): widen the ``label`` column."""
        setting = self.plan.setting
        assert setting is not None and isinstance(self.consumer, PostgresConsumer)
        self.consumer.widen_label(setting.after)
        what = f"label varchar({setting.before}) widened to varchar({setting.after})"
        self.note(what, "setting")
        return what

    def check_poison_held(self) -> None:
        """Under ``errors.tolerance=none`` nothing at or after the first poison bundle may
        have been delivered (the consumer, ``GT_last`` and the in-flight record)."""
        assert self.consumer is not None
        known = [e for e in self.poison_epochs() if e is not None]
        if not known:
            self.problems.append("the query failed with RowsRefused before any poison epoch")
            return
        first = min(known)
        held = [b.bundle_id for b in self.consumer.read() if b.bundle_id >= first]
        state = self.barrier()
        inflight = state.inflight.bundle_id if state.inflight is not None else None
        if held or state.gt_last >= first or (inflight is not None and inflight >= first):
            self.problems.append(
                f"under errors.tolerance=none, the poison bundle {first} or a later one was "
                f"delivered: the consumer holds {held}, GT_last {state.gt_last}, in flight "
                f"{inflight}"
            )
        else:
            self.note(f"nothing of poison bundle {first} delivered (GT_last {state.gt_last})")

    def wait_moment(self, moment: dict[str, Any]) -> None:
        """Until the moment a fault was drawn for: ``delay`` seconds after the driver
        started (``after="start"``), after its query started (``"query"``) or after its
        sink committed a first batch (``"bundle"``; more input is produced if all of it is
        out, so that there is a batch to commit)."""
        if moment["after"] == "start":
            self.sleep_until(self.live_driver().started_at + moment["delay"])
            return
        self.wait_query_started()
        if moment["after"] == "bundle":
            driver = self.live_driver()
            if driver.commits() == 0 and self.chunk >= self.plan.chunks:
                self.produce_records(self.plan.max_offsets // 4)
            self.wait(
                functools.partial(_committed_or_ended, driver),
                180.0,
                f"driver {driver.label} to commit a batch",
            )
        self.sleep(moment["delay"])

    def wait_query_started(self) -> None:
        """Until the current driver has started its query (restarting it if it died)."""
        while True:
            driver = self.live_driver()
            if self.wait(
                functools.partial(_started_or_ended, driver),
                240.0,
                f"driver {driver.label} to start its query",
            ):
                if driver.running:
                    return
                self.keep_alive([])
            else:
                raise NotFired(f"driver {driver.label} did not start its query in time")

    # --- the round ----------------------------------------------------------------------

    def run(self) -> RoundResult:
        self.say(
            f"[{self.plan.round_id}] {self.plan.describe()}; faults: "
            + ", ".join(self._describe(f) for f in self.plan.faults)
        )
        try:
            self._setup()
            self._inject_all()
            final = self._finish()
            verdict = self._judge(final)
            self.result.status = "pass" if verdict.exactly_once else "fail"
        except RoundTimeout as err:
            self.result.status = "timeout"
            self.result.notes.append(str(err))
            self._judge_quietly()
        except Exception as err:
            self.result.status = "error"
            self.result.notes.append(f"{type(err).__name__}: {err}")
            (self.dir / "error.txt").write_text(traceback.format_exc())
            log.exception("round %s failed", self.plan.round_id)
            self._judge_quietly()
        finally:
            self._cleanup()
        self.result.seconds = round(self.now(), 1)
        self.result.driver_starts = len(self.drivers)
        return self.result

    @staticmethod
    def _describe(spec: FaultSpec) -> str:
        extra = spec.params.get("step")
        return f"{spec.kind}({extra})" if extra else spec.kind

    def _setup(self) -> None:
        self.topic = self.kafka.create_topic(self.plan.partitions, name=self.pipeline)
        if self.plan.sparse is not None:
            self._watcher = threading.Thread(
                target=self._watch_epochs,
                args=(self.servers.store(f"{self.plan.round_id}/state"),),
                name=f"chaos-epochs-{self.plan.round_id}",
                daemon=True,
            )
            self._watcher.start()
        consumer = CONSUMERS[self.plan.consumer](
            ConsumerSetup(
                self.plan.round_id,
                self.dir,
                self.topic,
                self.servers,
                random.Random(f"{self.plan.seed}:{self.plan.index}:consumer"),
            )
        )
        self.consumer = consumer
        self.result.consumer = consumer.describe()
        setting, sparse = self.plan.setting, self.plan.sparse
        if setting is not None:
            assert isinstance(consumer, PostgresConsumer), consumer
            consumer.create_labelled(setting.before)
            self.note(f"table created with label varchar({setting.before})", "setting")
        assert self.servers.broker is not None
        cluster = self.servers.cluster if self.plan.cluster else None
        self._job = DriverJob(
            pipeline=self.pipeline,
            topic=self.topic,
            bootstrap=self.servers.broker.bootstrap,
            state_uri=self.servers.state_uri(f"{self.plan.round_id}/state"),
            s3_options=self.servers.s3_options(),
            zookeeper_hosts="",
            checkpoint=str(self.dir / "cp"),
            query=self.plan.query,
            shape=consumer.shape,
            sink_options={
                **consumer.sink_options(),
                **poison_sink_options(self.tolerance, self.dead_letters),
            },
            workdir=str(self.dir),
            stop_path="",
            session_path="",
            max_offsets=self.plan.max_offsets,
            poison=list(self.plan.poison.numbers) if self.plan.poison is not None else [],
            label_modulus=setting.modulus if setting is not None else 0,
            keep_divisor=sparse.divisor if sparse is not None else 0,
            epochs_retained=sparse.retained if sparse is not None else 1000,
            read_mode=self.plan.read_mode,
        )
        if cluster is not None:
            self._job = replace(
                self._job, master=cluster.master_url, spark_conf=cluster.driver_conf()
            )
        self.produce_chunk()

    def _inject_all(self) -> None:
        pending = list(self.plan.faults)
        self.start_driver(pending)
        while pending:
            spec = pending.pop(0)
            kind = FAULTS[spec.kind]
            try:
                if kind.armed_at_start and self.armed.get(id(spec)) != self.live_driver().label:
                    raise NotFired("not armed: the driver was not restarted before it")
                if not kind.armed_at_start:
                    self.produce_chunk()
                detail = kind.inject(self, spec.params)
                fired = True
            except NotFired as err:
                detail, fired = f"not injected: {err}", False
            self.result.faults.append(
                InjectedFault(spec.kind, round(self.now(), 1), fired, detail, dict(spec.params))
            )
            self.note(f"{spec.kind}: {detail}", "fault" if fired else "fault-skipped")
            self.say(f"[{self.plan.round_id}]   {self.now():6.1f}s {spec.kind}: {detail}")
            if not self.live_driver().running:
                self.keep_alive(pending)

    def _finish(self) -> int:
        """Let the pipeline read everything and deliver the last epoch; that epoch."""
        while self.produce_chunk():
            pass
        offsets = []
        final: int | None = None
        for n in (0, 1):
            offsets.append(self.produce_tick(n))
            while (final := self.epoch_covering(0, offsets[-1])) is None:
                self.keep_alive([])
                self.sleep(1.0)
        assert final is not None
        self.note(f"last epoch {final}; waiting for GT_last to reach it")
        while self.gt_last() < final:
            self.keep_alive([])
            self.check_deadline()
            time.sleep(POLL)
        self.note(f"GT_last {final}: finished", "end")
        sparse = self.plan.sparse
        if sparse is not None:
            self.wait(
                lambda: stored_epochs(self.store, self.pipeline) <= sparse.bound(),
                PRUNE_WAIT,
                f"at most {sparse.bound()} epochs stored",
            )
            self.stored = stored_epochs(self.store, self.pipeline)
            self.note(f"{self.stored} epochs stored (at most {sparse.bound()})", "end")
        self.live_driver().stop(STOP_TIMEOUT)
        return final

    def _judge(self, final: int | None) -> Verdict:
        assert self.consumer is not None and self.servers.s3 is not None
        epoched = assign_epochs(self.topic, read_input(self.kafka, self.topic), self.epochs())
        poison, setting, sparse = self.plan.poison, self.plan.setting, self.plan.sparse
        verdict = judge(
            self.query,
            self.consumer.shape,
            self.consumer.ordered,
            epoched,
            self.consumer.read(),
            read_barrier_state(self.store, PipelineLayout(self.pipeline)),
            final,
            dead_letters=(
                read_dead_letters(self.dead_letters, self.servers.s3.settings())
                if poison is not None or setting is not None
                else []
            ),
            poison=poison.numbers if poison is not None else (),
            refused=setting.refused if setting is not None else None,
            keep_divisor=sparse.divisor if sparse is not None else 0,
            stored_epochs=self.stored,
            epoch_bound=sparse.bound() if sparse is not None else None,
        )
        if self.problems:
            verdict = replace(verdict, problems=[*verdict.problems, *self.problems])
        self.result.verdict = verdict
        return verdict

    def _judge_quietly(self) -> None:
        """What the consumer holds after a timeout or an error, for the report."""
        try:
            for d in self.drivers:
                if d.running:
                    d.kill()
            if self.consumer is not None and self.topic:
                self._judge(None)
        except Exception as err:
            self.result.notes.append(f"no verdict: {type(err).__name__}: {err}")

    def _cleanup(self) -> None:
        self._watching.set()
        if self._watcher is not None:
            self._watcher.join(10.0)
        for d in self.drivers:
            try:
                if d.running:
                    d.stop(20.0)
                d.close()
            except Exception:
                log.exception("stopping driver %s", d.label)
        self.runner.close()
        if self._zk is not None:
            self._zk.stop()
            self._zk.close()
        self.store.close()
        receiver = self.servers.receiver
        if receiver is not None and len(receiver.proc.argv) > len(receiver.base_argv):
            receiver.stop()
            receiver.proc.argv = list(receiver.base_argv)
        self.servers.ensure_healthy()
        for cp in self.dir.glob("d*/spark-local"):
            shutil.rmtree(cp, ignore_errors=True)
