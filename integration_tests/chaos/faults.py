"""The faults a chaos round injects, one class per kind, registered in :data:`FAULTS`.

A fault kind draws its parameters (:meth:`FaultKind.params`, seeded) when the round is
planned and is injected by :meth:`FaultKind.inject` on the running round
(a :class:`FaultTarget`: what a fault needs of the round), which returns what happened or
raises :class:`NotFired` when the fault could not take effect (it is then not counted).
A kind whose ``armed_at_start`` is true is not injected from outside: its
``GTBARRIER_FAULT`` value goes into the environment of the next driver the round
starts (:meth:`FaultKind.environment`), and injecting it means waiting for it to fire.

Kinds: the driver SIGKILLed at a random time or at a protocol step; a Python worker or
a standalone worker killed; S3 resets, 503s, lost answers and latency (through the fault
proxy in front of SeaweedFS); a ZooKeeper session expired, ZooKeeper stopped and restarted;
the checkpoint deleted before a restart; a zombie second driver; the HTTP receiver
killed or dropping its answer after it stored a bundle.

:func:`draw_plan` draws a round's plan, its faults among them: round ``i`` of a run with
seed ``s`` draws everything from ``random.Random(f"{s}:{i}")`` (its query/consumer pair
from a list shuffled once by ``s``), so ``--seed s --first-round i --rounds 1`` plans the
same round again.
"""

from __future__ import annotations

import os
import random
import shutil
import signal
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from harness.fault_proxy import Fault
from harness.zookeeper import end_session
from integration_tests.chaos.consumers import CONSUMERS
from integration_tests.chaos.plan import FaultSpec, RoundPlan, Sizing
from integration_tests.chaos.poison import draw_poison
from integration_tests.chaos.queries import QUERIES
from integration_tests.chaos.variants import (
    SETTING_FAULT,
    draw_read_mode,
    draw_setting,
    draw_sparse,
    setting_fault_position,
)
from state.layout import PipelineLayout

if TYPE_CHECKING:
    from integration_tests.chaos.drivers import DriverLife
    from integration_tests.chaos.job import DriverJob
    from integration_tests.chaos.queries import Query
    from integration_tests.chaos.servers import ChaosServers
    from state.records.barrier import BarrierState

T = TypeVar("T")


class FaultTarget(Protocol):
    """What a fault needs of the round it is injected into
    (:class:`integration_tests.chaos.rounds.RoundRunner` is the one implementation)."""

    plan: RoundPlan
    servers: ChaosServers
    query: Query
    pipeline: str

    @property
    def job(self) -> DriverJob: ...

    def note(self, text: str, kind: str = "note") -> None: ...

    def sleep(self, seconds: float) -> None: ...

    def wait(
        self, check: Callable[[], T], timeout: float, what: str, *, quiet: bool = False
    ) -> T | None: ...

    def feed_until(
        self, check: Callable[[], T], timeout: float, what: str, *, every: float = 5.0
    ) -> T | None: ...

    def wait_moment(self, moment: dict[str, Any]) -> None: ...

    def barrier(self) -> BarrierState: ...

    def gt_last(self) -> int: ...

    def poison_passed(self) -> bool: ...

    def lock_contenders(self, path: str) -> int: ...

    def cluster_worker_pids(self) -> list[int]: ...

    def produce_records(self, n: int) -> None: ...

    def live_driver(self) -> DriverLife: ...

    def start_successor(self) -> DriverLife: ...

    def change_setting(self) -> str: ...


Params = dict[str, Any]


class NotFired(Exception):
    """The fault could not be injected (no worker to kill, the epoch was never reached...)."""


class FaultKind(ABC):
    """One kind of fault (see the module docstring)."""

    name: ClassVar[str]
    weight: ClassVar[float] = 1.0  # how often it is drawn, relative to the others
    armed_at_start: ClassVar[bool] = False
    kills_driver: ClassVar[bool] = False  # the round restarts the driver afterwards
    #: Drawn at random among the others (False: :func:`draw_plan` adds it to the rounds
    #: that need it, from a draw of its own).
    drawn_at_random: ClassVar[bool] = True

    def applies(self, plan: RoundPlan) -> bool:
        """Whether this kind can be drawn for ``plan`` (its consumer, its master)."""
        return True

    def params(self, rng: random.Random, plan: RoundPlan) -> Params:
        return {}

    def environment(self, r: FaultTarget, params: Params) -> str | None:
        """``GTBARRIER_FAULT`` for the next driver (kinds that are armed at start)."""
        return None

    @abstractmethod
    def inject(self, r: FaultTarget, params: Params) -> str:
        """Inject the fault; what happened, for the report."""


FAULTS: dict[str, FaultKind] = {}


def register(kind: type[FaultKind]) -> type[FaultKind]:
    FAULTS[kind.name] = kind()
    return kind


def _uniform(rng: random.Random, low: float, high: float) -> float:
    return round(rng.uniform(low, high), 1)


def _moment(rng: random.Random, *, from_start: bool = False) -> dict[str, Any]:
    """When to inject (:meth:`FaultTarget.wait_moment`): mostly once the driver delivers,
    else soon after its query started; ``from_start`` adds its start-up and recovery."""
    after = rng.choices(
        ("start", "query", "bundle"), weights=(0.3 if from_start else 0.0, 0.3, 0.6)
    )[0]
    high = 40.0 if after == "start" else 10.0
    return {"after": after, "delay": _uniform(rng, 0.0, high)}


# --- the driver ---------------------------------------------------------------------------


@register
class KillAtRandom(FaultKind):
    """SIGKILL the driver program and its JVM at a random moment: during its start-up and
    recovery, soon after its query started, or once it delivers."""

    name = "kill_random"
    weight = 1.5
    kills_driver = True

    def params(self, rng: random.Random, plan: RoundPlan) -> Params:
        return {"moment": _moment(rng, from_start=True)}

    def inject(self, r: FaultTarget, params: Params) -> str:
        r.wait_moment(params["moment"])
        driver = r.live_driver()
        if not driver.running:
            raise NotFired(f"the driver had exited (code {driver.returncode})")
        gt = r.gt_last()
        driver.kill()
        return (
            f"SIGKILL {time.monotonic() - driver.started_at:.0f}s after the driver "
            f"started (GT_last {gt})"
        )


@register
class KillAtStep(FaultKind):
    """``GTBARRIER_FAULT=<step>:<n>``: the driver SIGKILLs itself at a protocol step of
    bundle ``n`` (``ahead`` bundles after the next one it delivers)."""

    name = "kill_step"
    weight = 3.0
    armed_at_start = True
    kills_driver = True

    def params(self, rng: random.Random, plan: RoundPlan) -> Params:
        # after_dead_letters fires only at a bundle with refused rows: a poison round's.
        steps = [
            s
            for s in CONSUMERS[plan.consumer].kill_steps
            if s != "after_dead_letters" or plan.poison is not None
        ]
        return {"step": rng.choice(steps), "ahead": rng.choice((0, 0, 1, 2))}

    def environment(self, r: FaultTarget, params: Params) -> str:
        if params["step"] == "after_dead_letters":
            # Without a bundle: the first bundle with refused rows, the poison's, whichever
            # epoch reads it.
            return "after_dead_letters"
        if r.plan.sparse is not None:
            # Most bundles of a sparse round are empty and pass no step: without a bundle,
            # the step of the first bundle with rows that this driver delivers.
            return str(params["step"])
        # A bundle left in flight is resolved at the restart without these steps (the
        # consumer has it: acknowledged as it is): aim past it.
        state = r.barrier()
        nxt = state.gt_last + 1 if state.inflight is None else state.inflight.bundle_id + 1
        epoch = max(nxt, r.query.first_output_epoch) + params["ahead"]
        params["epoch"] = epoch
        return f"{params['step']}:{epoch}"

    def inject(self, r: FaultTarget, params: Params) -> str:
        epoch = params.get("epoch")
        where = params["step"] if epoch is None else f"{params['step']}:{epoch}"

        def settled() -> bool:
            # The live driver: a poison round's switch to errors.tolerance=all replaces a
            # driver armed with after_dead_letters by one armed the same way.
            if not r.live_driver().running:
                return True
            if r.plan.sparse is not None:  # a step of the next bundle with rows
                return False
            if epoch is None:  # after_dead_letters: no bundle with dead letters is left
                return r.poison_passed()
            return bool(r.gt_last() > epoch)

        r.feed_until(settled, 240.0, f"the driver to die at {where}")
        driver = r.live_driver()
        if not driver.running and driver.sigkilled and driver.fault_env:
            bundle = (
                f"bundle {epoch}"
                if epoch is not None
                else "the first bundle with rows"
                if r.plan.sparse is not None
                else "the first bundle with dead letters"
            )
            return f"SIGKILL at {params['step']} of {bundle}"
        raise NotFired(
            f"{where} did not fire (driver exit {driver.returncode}, GT_last {r.gt_last()})"
        )


# --- Spark's processes --------------------------------------------------------------------


@register
class KillPythonWorker(FaultKind):
    """SIGKILL one of Spark's Python workers (a task's worker, the sink's commit process
    or the source's planner), by pid: a child of a ``pyspark.daemon`` of the driver's JVM
    or, on the cluster, of an executor's."""

    name = "python_worker"

    def params(self, rng: random.Random, plan: RoundPlan) -> Params:
        return {"moment": _moment(rng), "pick": rng.random()}

    def inject(self, r: FaultTarget, params: Params) -> str:
        r.wait_moment(params["moment"])
        roots = r.cluster_worker_pids()
        found = r.feed_until(
            lambda: r.live_driver().python_workers(roots), 30.0, "a Python worker", every=2.0
        )
        if not found:
            raise NotFired("no Python worker found")
        victim = found[int(params["pick"] * len(found))]
        os.kill(victim.pid, signal.SIGKILL)
        return f"SIGKILL Python worker pid {victim.pid} ({len(found)} found): {victim.cmdline[:80]}"


@register
class KillClusterWorker(FaultKind):
    """SIGKILL a standalone Spark worker with its executors (its process group), start it
    again ``down`` seconds later."""

    name = "cluster_worker"

    def applies(self, plan: RoundPlan) -> bool:
        return plan.cluster

    def params(self, rng: random.Random, plan: RoundPlan) -> Params:
        return {"moment": _moment(rng), "worker": rng.randrange(2), "down": _uniform(rng, 1, 6)}

    def inject(self, r: FaultTarget, params: Params) -> str:
        cluster = r.servers.cluster
        assert cluster is not None
        r.wait_moment(params["moment"])
        worker = cluster.workers[params["worker"] % len(cluster.workers)]
        worker.process.kill()
        r.sleep(params["down"])
        worker.process.start()
        r.wait(
            lambda: (cluster.alive_workers() or 0) >= len(cluster.workers),
            120.0,
            "the killed worker to register again",
        )
        return f"SIGKILL {worker.name} and its executors, restarted after {params['down']}s"


# --- S3 -----------------------------------------------------------------------------------


class _S3Connections(FaultKind):
    """Fault the next ``count`` connections to S3 (every driver's, executor's and commit
    process's client goes through the proxy)."""

    fault: ClassVar[Fault]
    most: ClassVar[int] = 6
    weight = 0.75

    def params(self, rng: random.Random, plan: RoundPlan) -> Params:
        return {"moment": _moment(rng), "count": rng.randint(1, self.most)}

    def inject(self, r: FaultTarget, params: Params) -> str:
        proxy = r.servers.s3_proxy
        assert proxy is not None
        r.wait_moment(params["moment"])
        proxy.inject(self.fault, params["count"])
        r.feed_until(lambda: proxy.pending() == 0, 30.0, "the S3 faults to be used")
        left = proxy.pending()
        proxy.clear()
        used = params["count"] - left
        if used == 0:
            raise NotFired("no S3 connection was opened")
        return f"{used} S3 connection(s): {self.fault.value}"


@register
class S3Reset(_S3Connections):
    name = "s3_reset"
    fault = Fault.RESET


@register
class S3SlowDown(_S3Connections):
    name = "s3_503"
    fault = Fault.HTTP_503


@register
class S3LostAnswer(_S3Connections):
    """The request reaches S3 and takes effect, the answer is lost (a reset instead)."""

    name = "s3_lost_answer"
    fault = Fault.DROP_RESPONSE
    most = 3


@register
class S3Latency(FaultKind):
    """Every new S3 connection answers ``delay`` s late, for ``seconds`` seconds."""

    name = "s3_latency"
    weight = 0.75

    def params(self, rng: random.Random, plan: RoundPlan) -> Params:
        return {
            "moment": _moment(rng),
            "latency": round(rng.uniform(0.2, 1.5), 2),
            "seconds": _uniform(rng, 3.0, 15.0),
        }

    def inject(self, r: FaultTarget, params: Params) -> str:
        proxy = r.servers.s3_proxy
        assert proxy is not None
        r.wait_moment(params["moment"])
        proxy.always(Fault.DELAY, delay=params["latency"])
        try:
            r.sleep(params["seconds"])
        finally:
            proxy.clear()
        return f"S3 answers {params['latency']}s late for {params['seconds']}s"


# --- ZooKeeper ----------------------------------------------------------------------------


@register
class ZooKeeperExpiry(FaultKind):
    """Expire the driver's ZooKeeper session (a second connection with its id and
    password, closed): the coordinator loses its lock, stops the query, takes the lock
    again and restarts it."""

    name = "zk_expire"

    def params(self, rng: random.Random, plan: RoundPlan) -> Params:
        return {"moment": _moment(rng)}

    def inject(self, r: FaultTarget, params: Params) -> str:
        assert r.servers.zk is not None
        r.wait_moment(params["moment"])
        driver = r.live_driver()
        session = r.wait(driver.session, 20.0, "the driver's ZooKeeper session")
        if session is None:
            raise NotFired("the driver never wrote its ZooKeeper session")
        end_session(r.servers.zk.hosts, *session)
        return f"session 0x{session[0]:x} expired"


@register
class ZooKeeperRestart(FaultKind):
    """Stop the ZooKeeper server (SIGTERM), start it again ``down`` seconds later."""

    name = "zk_restart"
    weight = 0.75

    def params(self, rng: random.Random, plan: RoundPlan) -> Params:
        return {"moment": _moment(rng), "down": _uniform(rng, 1.0, 10.0)}

    def inject(self, r: FaultTarget, params: Params) -> str:
        zk = r.servers.zk
        assert zk is not None
        r.wait_moment(params["moment"])
        zk.stop()
        try:
            r.sleep(params["down"])
        finally:
            zk.start()
        return f"ZooKeeper down for {params['down']}s"


# --- the checkpoint and a second driver ---------------------------------------------------


@register
class CheckpointDeleted(FaultKind):
    """SIGKILL the driver, delete its checkpoint directory, restart it: ``recover()``
    materialises the checkpoint from the newest snapshot in S3 (or replays from the
    start when there is none yet)."""

    name = "checkpoint_deleted"
    kills_driver = True

    def params(self, rng: random.Random, plan: RoundPlan) -> Params:
        return {"moment": _moment(rng)}

    def inject(self, r: FaultTarget, params: Params) -> str:
        r.wait_moment(params["moment"])
        driver = r.live_driver()
        gt = r.gt_last()
        driver.kill()
        shutil.rmtree(r.job.checkpoint, ignore_errors=True)
        return f"SIGKILL at GT_last {gt}, checkpoint {r.job.checkpoint} deleted"


@register
class Zombie(FaultKind):
    """A second driver for the same pipeline on another "host" (its own checkpoint
    directory): it waits for the ZooKeeper lock; the first driver is then cut off from
    ZooKeeper (its own proxy swallows everything), so its session expires on the server
    while it still runs and delivers: a zombie. The second driver takes the lock and the
    pipeline; the zombie must be fenced at its next commit."""

    name = "zombie"

    def params(self, rng: random.Random, plan: RoundPlan) -> Params:
        return {"moment": _moment(rng), "cut_after": _uniform(rng, 0.0, 6.0)}

    def inject(self, r: FaultTarget, params: Params) -> str:
        r.wait_moment(params["moment"])
        zombie = r.live_driver()
        successor = r.start_successor()
        lock = PipelineLayout(r.pipeline).zookeeper_driver_lock
        r.wait(
            lambda: r.lock_contenders(lock) >= 2 or not successor.running,
            120.0,
            "the second driver to queue for the lock",
        )
        r.sleep(params["cut_after"])
        zombie.zk_proxy.always(Fault.BLACKHOLE)
        r.note(f"driver {zombie.label} cut off from ZooKeeper")
        r.wait(
            lambda: successor.queries_started() > 0 or not successor.running,
            180.0,
            "the second driver to start its query",
        )
        # The zombie is fenced at its next commit after the second driver's first one:
        # give both something to commit until the zombie stops.
        for _ in range(6):
            r.produce_records(r.plan.max_offsets // 4)
            if r.wait(lambda: not zombie.running, 20.0, "the zombie to be fenced"):
                break
        fenced = not zombie.running
        zombie.zk_proxy.clear()
        if zombie.running:
            zombie.kill()
        outcome = zombie.failure() or f"exit {zombie.returncode}"
        if not fenced:
            outcome = f"not fenced in time, killed ({outcome})"
        return f"second driver {successor.label} took over; zombie {zombie.label}: {outcome[:200]}"


# --- the consumer -------------------------------------------------------------------------


@register
class SettingChanged(FaultKind):
    """A round's setting change (:mod:`integration_tests.chaos.variants`): SIGKILL the
    driver at a drawn moment, change the consumer's setting (widen the ``varchar``
    column), and let the round restart the driver, which reads the new setting."""

    name = SETTING_FAULT
    kills_driver = True
    drawn_at_random = False

    def applies(self, plan: RoundPlan) -> bool:
        return plan.setting is not None

    def params(self, rng: random.Random, plan: RoundPlan) -> Params:
        return {"moment": _moment(rng)}

    def inject(self, r: FaultTarget, params: Params) -> str:
        r.wait_moment(params["moment"])
        driver = r.live_driver()
        if not driver.running:
            raise NotFired(f"the driver had exited (code {driver.returncode})")
        gt = r.gt_last()
        driver.kill()
        changed = r.change_setting()
        return f"SIGKILL at GT_last {gt}, then {changed}"


@register
class ReceiverKilled(FaultKind):
    """SIGKILL the HTTP receiver (by pid), start it again ``down`` seconds later: the
    consumer crashes before or after it acknowledges, whichever the moment hits."""

    name = "receiver_kill"

    def applies(self, plan: RoundPlan) -> bool:
        return plan.consumer == "http"

    def params(self, rng: random.Random, plan: RoundPlan) -> Params:
        return {"moment": _moment(rng), "down": _uniform(rng, 0.5, 5.0)}

    def inject(self, r: FaultTarget, params: Params) -> str:
        receiver = r.servers.receiver
        assert receiver is not None
        r.wait_moment(params["moment"])
        gt = r.gt_last()
        receiver.proc.kill()
        r.sleep(params["down"])
        receiver.proc.argv = list(receiver.base_argv)
        receiver.start()
        return f"receiver SIGKILLed at GT_last {gt}, back after {params['down']}s"


@register
class ReceiverDropsAnswer(FaultKind):
    """Restart the HTTP receiver with ``--drop-after-store N`` for the next bundle: it
    stores bundle ``N`` and drops the connection instead of acknowledging (once)."""

    name = "receiver_drop"

    def applies(self, plan: RoundPlan) -> bool:
        # Its bundle is GT_last + ahead: in a sparse round mostly an empty one, never sent.
        return plan.consumer == "http" and plan.sparse is None

    def params(self, rng: random.Random, plan: RoundPlan) -> Params:
        return {"moment": _moment(rng), "ahead": rng.choice((1, 1, 2))}

    def inject(self, r: FaultTarget, params: Params) -> str:
        receiver = r.servers.receiver
        assert receiver is not None
        r.wait_moment(params["moment"])
        bundle = max(r.gt_last() + params["ahead"], r.query.first_output_epoch)
        receiver.stop()
        receiver.start("--drop-after-store", str(bundle))
        r.feed_until(lambda: r.gt_last() >= bundle, 120.0, f"bundle {bundle} acknowledged")
        if r.gt_last() < bundle:
            raise NotFired(f"bundle {bundle} was not delivered in time")
        return f"receiver dropped its answer after storing bundle {bundle}"


def draw_plan(
    seed: int,
    index: int,
    *,
    queries: list[str],
    consumers: list[str],
    sizing: Sizing,
    cluster_share: float,
    fault_kinds: list[str] | None = None,
    poison_share: float = 0.0,
    setting_share: float = 0.0,
    sparse_share: float = 0.0,
    driver_read_share: float = 0.0,
) -> RoundPlan:
    """Round ``index`` of the run with ``seed`` (see the module docstring); a share
    ``poison_share`` of its stateless rounds has poison rows
    (:func:`~integration_tests.chaos.poison.draw_poison`, a draw of its own), a share
    ``setting_share`` of its ``stateless -> postgres`` rounds a setting change and a share
    ``sparse_share`` of the other stateless rounds without poison sparse output, and a
    share ``driver_read_share`` of all rounds read on the driver
    (:mod:`integration_tests.chaos.variants`, draws of their own: the main generator's
    draws are the same with or without them)."""
    pairs = [(q, c) for q in queries for c in consumers]
    random.Random(f"{seed}:pairs").shuffle(pairs)
    query, consumer = pairs[index % len(pairs)]
    rng = random.Random(f"{seed}:{index}")
    partitions = 1 if QUERIES[query].single_partition else rng.choice((2, 3))
    plan = RoundPlan(
        index=index,
        seed=seed,
        query=query,
        consumer=consumer,
        partitions=partitions,
        records=rng.randint(sizing.min_batches, sizing.max_batches) * sizing.max_offsets
        + rng.randrange(sizing.max_offsets),
        chunks=sizing.chunks,
        max_offsets=sizing.max_offsets,
        cluster=cluster_share > 0 and rng.random() < cluster_share,
    )

    def applicable(plan: RoundPlan) -> list[FaultKind]:
        return [
            k
            for k in FAULTS.values()
            if k.drawn_at_random
            and k.applies(plan)
            and (fault_kinds is None or k.name in fault_kinds)
        ]

    plan = replace(
        plan,
        poison=draw_poison(seed, index, plan.query, plan.records, poison_share),
        read_mode=draw_read_mode(seed, index, driver_read_share),
    )
    setting = draw_setting(seed, index, plan.query, plan.consumer, setting_share)
    if setting is not None:
        # The labels are refused from the first bundle on: the round runs at
        # errors.tolerance=all throughout (a poison at none would stop at a label's row).
        poison = None if plan.poison is None else replace(plan.poison, tolerance="all")
        plan = replace(plan, setting=setting, poison=poison)
    elif plan.poison is None and (sparse := draw_sparse(seed, index, plan.query, sparse_share)):
        plan = replace(plan, sparse=sparse, max_offsets=sparse.max_offsets)
    kinds = applicable(plan)
    if not kinds and cluster_share > 0:  # only kinds that need the cluster were chosen
        plan = replace(plan, cluster=True)
        kinds = applicable(plan)
    if not kinds:
        raise ValueError(f"no fault kind of {fault_kinds} applies to round {plan.describe()}")
    count = rng.choices(sizing.fault_counts, weights=sizing.fault_count_weights)[0]
    drawn = rng.choices(kinds, weights=[k.weight for k in kinds], k=count)
    # A kind armed at start goes into the environment of the next driver: the first one,
    # or the restart after the previous armed fault killed its driver.
    drawn.sort(key=lambda k: not k.armed_at_start)
    faults = [FaultSpec(k.name, k.params(rng, plan)) for k in drawn]
    if plan.setting is not None:
        change = FAULTS[SETTING_FAULT]
        armed = sum(1 for k in drawn if k.armed_at_start)
        at = setting_fault_position(seed, index, armed, len(drawn) - armed)
        own = random.Random(f"{seed}:{index}:setting:params")
        faults.insert(at, FaultSpec(change.name, change.params(own, plan)))
    return replace(plan, faults=tuple(faults))
