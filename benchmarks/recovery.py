"""Recovery against a cold start: the demo's driver program, started, SIGKILLed, restarted.

    python -m benchmarks.recovery                      # 8,000 events, 500 per batch
    python -m benchmarks.recovery --zookeeper none     # the resume point in the store

The demo's driver (``python -m demo.pipeline JOB.json``: gtkafka -> the demo's query with
its windowed aggregation and ``applyInPandasWithState`` -> barrier, file consumer, S3
state on SeaweedFS, a :class:`~gtbarrier.SnapshotCoordinator` with ZooKeeper unless
``--zookeeper none``) runs as a subprocess with ``GTBARRIER_PROFILE`` set:

1. **cold start**: a new pipeline on a filled topic, from the launch to its first bundle;
2. after two more bundles and a snapshot behind ``GT_last``, while the next batch runs
   (Spark finished the batch of ``GT_last``), the driver's process group is SIGKILLed and
   the same program started again on the same checkpoint (or an empty one:
   ``--lose-checkpoint``, the checkpoint is then materialised from S3);
3. **recovery**: from the SIGKILL to the first *new* bundle (an epoch above the
   ``GT_last`` at the kill).

Target: recovery / cold start <= 1.3x. Both are broken down from the driver's progress
events (:mod:`demo.progress`) and the spans: Python start and imports, JVM and Spark
start, the coordinator and ``recover()``, query start, first batch, first new bundle.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import (
    REPO_ROOT,
    Ratio,
    load_average,
    print_table,
    target_ratio,
    write_results,
)
from benchmarks.spans import Span, load_spans

TARGET = "<= 1.3x"


@dataclass
class Timeline:
    """One driver program's way to its first (new) bundle, seconds from ``origin``."""

    label: str
    origin: float  # the launch (cold) or the SIGKILL (recovery), epoch seconds
    steps: list[tuple[str, float]] = field(default_factory=list)  # (step, seconds taken)
    first_batch_ms: dict[str, float] = field(default_factory=dict)  # its durationMs
    first_batch_spans: dict[str, float] = field(default_factory=dict)  # span -> seconds
    total_s: float = 0.0
    recover_action: str | None = None
    recover_s: float | None = None


def _seen(events: list[dict[str, Any]]) -> float | None:
    return 1.0 if _event(events, "batch") is not None else None


def _event(events: list[dict[str, Any]], name: str, **match: Any) -> dict[str, Any] | None:
    for e in events:
        if e["event"] == name and all(e.get(k) == v for k, v in match.items()):
            return e
    return None


def timeline(
    label: str,
    *,
    origin: float,
    launched: float,
    events: list[dict[str, Any]],
    spans: list[Span],
    bundle_at: float,
) -> Timeline:
    """The steps from ``origin`` to ``bundle_at`` from one driver's events and spans."""
    out = Timeline(label, origin)
    marks: list[tuple[str, float | None]] = []
    if launched - origin > 0.0005:
        marks.append(("SIGKILL -> new driver launched", launched))
    started = _event(events, "driver_started")
    ready = _event(events, "spark_ready")
    recovered = _event(events, "recovered")
    query = _event(events, "query_started")
    marks.append(("Python start + imports", started["t"] if started else None))
    marks.append(("JVM and Spark start", ready["t"] if ready else None))
    if recovered is not None:
        out.recover_action = str(recovered.get("action"))
        out.recover_s = float(recovered.get("seconds", 0.0))
        begun = recovered["t"] - out.recover_s
        marks.append(("coordinator setup (ZooKeeper lock, store)", begun))
        marks.append(("recover()", recovered["t"]))
    marks.append(("query start", query["t"] if query else None))
    after = query["t"] if query else launched
    commits = [s for s in spans if s.name == "commit.call" and s.start >= after]
    first_commit = min(commits, key=lambda s: s.start) if commits else None
    first_batch = _event(events, "batch")
    if first_commit is not None:
        marks.append(("first micro-batch (to its commit's end)", first_commit.end))
        window = [s for s in spans if after <= s.start <= first_commit.end]
        for s in window:
            out.first_batch_spans[s.name] = out.first_batch_spans.get(s.name, 0.0) + s.seconds
    if first_batch is not None:
        out.first_batch_ms = {k: float(v) for k, v in (first_batch.get("durations") or {}).items()}
    marks.append(("to the first new bundle", bundle_at))
    at = origin
    for step, t in marks:
        if t is None:
            continue
        out.steps.append((step, max(0.0, t - at)))
        at = max(at, t)
    out.total_s = bundle_at - origin
    return out


@dataclass
class RecoveryResult:
    cold: Timeline
    recovery: Timeline
    gt_at_kill: int
    zookeeper: bool
    lost_checkpoint: bool
    load_average: str

    @property
    def ratio(self) -> float:
        return self.recovery.total_s / self.cold.total_s


class DriverRuns:
    """Starts the demo's driver for one pipeline, kills and restarts it."""

    def __init__(
        self,
        services: Any,
        workdir: Path,
        *,
        events: int,
        per_batch: int,
        zookeeper: bool,
        lose_checkpoint: bool = False,
        timeout: float = 600.0,
    ) -> None:
        self.services = services
        self.workdir = workdir
        self.events = events
        self.per_batch = per_batch
        self.zookeeper = zookeeper
        self.lose_checkpoint = lose_checkpoint
        self.timeout = timeout
        self.run_id = uuid.uuid4().hex[:8]
        self.progress = workdir / "progress.jsonl"
        workdir.mkdir(parents=True, exist_ok=True)

    def _produce(self, topic: str, first: int, stop: int) -> None:
        from demo.generator import GeneratorConfig, iter_events

        config = GeneratorConfig(events=self.events * 2, partitions=8)
        kafka = self.services.kafka(f"recovery-{self.run_id}")
        try:
            chosen = (e.record() for i, e in enumerate(iter_events(config)) if first <= i < stop)
            kafka.produce(topic, chosen, batch_size=5000)
        finally:
            kafka.close()

    def _job(self, topic: str, bucket: str) -> Any:
        from demo.pipeline import DemoJob

        return DemoJob(
            pipeline_id=f"recovery-{self.run_id}",
            topic=topic,
            bootstrap=self.services.bootstrap,
            state_uri=f"s3://{bucket}/gtbarrier",
            s3_options=self.services.s3_options(),
            zookeeper_hosts=self.services.zookeeper_hosts if self.zookeeper else None,
            checkpoint=str(self.workdir / "checkpoint"),
            consumer="file",
            consumer_path=str(self.workdir / "consumer"),
            progress_path=str(self.progress),
            max_offsets_per_trigger=self.per_batch,
            snapshot_period="2s",
        )

    def _start(self, job: Any, n: int) -> tuple[Any, float]:
        from harness.process import ManagedProcess, repo_env

        job.driver = n
        job.stop_path = str(self.workdir / f"stop-{n}")
        path = self.workdir / f"job-{n}.json"
        job.save(path)
        proc = ManagedProcess(
            f"demo driver {n}",
            [sys.executable, "-m", "demo.pipeline", str(path)],
            log_path=self.workdir / f"driver-{n}.log",
            cwd=REPO_ROOT,
            env=repo_env({"GTBARRIER_PROFILE": str(self.workdir / f"profile-{n}")}),
        )
        launched = time.time()
        proc.start()
        return proc, launched

    def _events(self, n: int) -> list[dict[str, Any]]:
        from demo.progress import read_events

        return [e for e in read_events(self.progress) if e.get("driver") == n]

    def _wait(self, proc: Any, n: int, what: str, done: Callable[[], float | None]) -> float:
        from harness.logs import tail

        deadline = time.monotonic() + self.timeout
        while True:
            found = done()
            if found is not None:
                return found
            failed = [e for e in self._events(n) if e["event"] == "failed"]
            if failed or not proc.running:
                raise RuntimeError(
                    f"{proc.name} stopped while waiting for {what}: "
                    f"{failed[0]['error'] if failed else proc.returncode}; last lines of "
                    f"{proc.log_path}:\n{tail(proc.log_path, 40)}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"{proc.name}: no {what} within {self.timeout:.0f}s")
            time.sleep(0.1)

    def _bundle(self, n: int, above: int) -> Callable[[], float | None]:
        """The end of driver ``n``'s first delivered bundle with an epoch above ``above``
        (from its spans; from its progress events if spans are missing)."""

        def check() -> float | None:
            spans = load_spans(self.workdir / f"profile-{n}")
            ends = [
                s.end
                for s in spans
                if s.name == "commit.total"
                and s.attrs.get("action") == "delivered"
                and int(s.attrs.get("epoch") or -1) > above
            ]
            if ends:
                return min(ends)
            for e in self._events(n):
                if e["event"] == "commit" and e["action"] == "delivered" and e["epoch"] > above:
                    return float(e["t"])
            return None

        return check

    def run(self) -> RecoveryResult:
        from harness.coordinator_program import gt_last
        from state.stores import StoreConfig, open_store

        bucket = f"recovery-{self.run_id}"
        self.services.create_bucket(bucket)
        kafka = self.services.kafka(f"recovery-{self.run_id}")
        try:
            topic = kafka.create_topic(partitions=8, name=f"recovery-{self.run_id}")
        finally:
            kafka.close()
        self._produce(topic, 0, self.events)
        job = self._job(topic, bucket)
        store = open_store(StoreConfig.from_options({"state.uri": job.state_uri, **job.s3_options}))
        procs = []
        try:
            d1, launched1 = self._start(job, 1)
            procs.append(d1)
            first = self._wait(d1, 1, "a first bundle", self._bundle(1, -1))
            print(
                f"  cold start: first bundle {first - launched1:.1f}s after the launch", flush=True
            )

            def kill_point() -> float | None:
                # Killed mid-batch, as a crash usually is: after Spark finished the batch
                # of GT_last (its commit log written), while the next one runs. Killed
                # between the barrier's commit and Spark's commit log instead, the restart
                # would first replay a delivered batch (one batch more).
                gt = gt_last(store, job.pipeline_id)
                events = self._events(1)
                snaps = [e for e in events if e["event"] == "snapshot"]
                done = any(e["event"] == "batch" and e.get("epoch") == gt for e in events)
                ok = gt >= 2 and done and snaps and int(snaps[-1]["epoch"]) < gt
                return 1.0 if ok else None

            self._wait(d1, 1, "two bundles, a snapshot behind GT_last, mid-batch", kill_point)
            d1.kill()  # SIGKILL to the driver's process group: Python, its JVM, its workers
            killed = time.time()
            at_kill = gt_last(store, job.pipeline_id)
            if self.lose_checkpoint:
                shutil.rmtree(job.checkpoint, ignore_errors=True)
            d2, launched2 = self._start(job, 2)
            procs.append(d2)
            self._produce(topic, self.events, self.events + 4 * self.per_batch)
            new = self._wait(d2, 2, "a new bundle after the restart", self._bundle(2, at_kill))
            print(
                f"  recovery: first new bundle {new - killed:.1f}s after the SIGKILL "
                f"(GT_last {at_kill} at the kill)",
                flush=True,
            )
            # The first batch's progress event comes after its commit: wait for it.
            self._wait(d2, 2, "the first batch's progress", lambda: _seen(self._events(2)))
            Path(job.stop_path).touch()
            d2.stop(grace=60)
        finally:
            for proc in procs:
                if proc.running:
                    proc.kill()
            store.close()
        cold = timeline(
            "cold start",
            origin=launched1,
            launched=launched1,
            events=self._events(1),
            spans=load_spans(self.workdir / "profile-1"),
            bundle_at=first,
        )
        recovery = timeline(
            "SIGKILL -> restart",
            origin=killed,
            launched=launched2,
            events=self._events(2),
            spans=load_spans(self.workdir / "profile-2"),
            bundle_at=new,
        )
        return RecoveryResult(
            cold, recovery, at_kill, self.zookeeper, self.lose_checkpoint, load_average()
        )


def report(result: RecoveryResult) -> None:
    """Both timelines side by side, then the first batch of each."""
    print()
    print(
        f"recovery vs cold start of the demo's driver (ZooKeeper: "
        f"{'yes' if result.zookeeper else 'no'}; checkpoint "
        f"{'lost, materialised from S3' if result.lost_checkpoint else 'kept'}; "
        f"recover(): {result.recovery.recover_action} in {result.recovery.recover_s or 0:.2f}s; "
        f"load average {result.load_average})"
    )
    steps = list(
        dict.fromkeys([s for s, _ in result.recovery.steps] + [s for s, _ in result.cold.steps])
    )
    cold, rec = dict(result.cold.steps), dict(result.recovery.steps)
    rows = [[s, _s(cold.get(s)), _s(rec.get(s))] for s in steps]
    rows.append(
        ["total (to the first (new) bundle)", _s(result.cold.total_s), _s(result.recovery.total_s)]
    )
    print_table(["step", "cold start s", "recovery s"], rows)
    print()
    names = sorted(set(result.cold.first_batch_ms) | set(result.recovery.first_batch_ms))
    if names:
        print_table(
            ["first micro-batch durationMs", "cold start ms", "recovery ms"],
            [
                [
                    n,
                    _ms(result.cold.first_batch_ms.get(n)),
                    _ms(result.recovery.first_batch_ms.get(n)),
                ]
                for n in names
            ],
        )
        print()
    spans = sorted(set(result.cold.first_batch_spans) | set(result.recovery.first_batch_spans))
    if spans:
        print_table(
            ["first micro-batch spans (summed)", "cold start ms", "recovery ms"],
            [
                [
                    n,
                    _ms(1000 * result.cold.first_batch_spans[n])
                    if n in result.cold.first_batch_spans
                    else "-",
                    _ms(1000 * result.recovery.first_batch_spans[n])
                    if n in result.recovery.first_batch_spans
                    else "-",
                ]
                for n in spans
            ],
        )
        print()


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:,.0f}"


def ratios(result: RecoveryResult) -> list[Ratio]:
    return [
        target_ratio(
            "recovery",
            "recovery: SIGKILL -> first new bundle / cold start -> first bundle",
            result.ratio,
            TARGET,
            f"{result.recovery.total_s:.1f} s vs {result.cold.total_s:.1f} s; "
            f"load {result.load_average}",
        )
    ]


def to_json(result: RecoveryResult) -> dict[str, Any]:
    return asdict(result) | {"ratio": result.ratio}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.recovery", description=__doc__)
    parser.add_argument("--events", type=int, default=8000, help="events in the topic at start")
    parser.add_argument("--per-batch", type=int, default=500, help="maxOffsetsPerTrigger")
    parser.add_argument(
        "--zookeeper",
        choices=("start", "none"),
        default="start",
        help="the coordinator's ZooKeeper (GTB_ZK_HOSTS, else started here) or none",
    )
    parser.add_argument("--lose-checkpoint", action="store_true")
    parser.add_argument("--bootstrap", default=os.environ.get("GTB_KAFKA_BOOTSTRAP"))
    parser.add_argument("--s3-endpoint", default=os.environ.get("GTB_S3_ENDPOINT"))
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    from demo.services import Services

    parts: tuple[str, ...] = ("kafka", "s3") + (("zookeeper",) if args.zookeeper == "start" else ())
    with tempfile.TemporaryDirectory(prefix="gtb-recovery-") as tmp:
        services = Services(
            Path(tmp) / "services", kafka=args.bootstrap, s3=args.s3_endpoint, parts=parts
        ).start()
        try:
            result = DriverRuns(
                services,
                Path(tmp),
                events=args.events,
                per_batch=args.per_batch,
                zookeeper=args.zookeeper == "start",
                lose_checkpoint=args.lose_checkpoint,
            ).run()
        finally:
            services.stop()
    report(result)
    write_results(args.json, ratios(result), to_json(result))


if __name__ == "__main__":
    main()
