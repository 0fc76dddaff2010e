"""What ``python -m benchmarks.soak`` samples and how it judges the samples.

* :func:`process_tree` / :func:`sample_processes`: the driver program's process tree read
  from ``/proc`` (parent pids), each process put in a group (:data:`GROUPS`): the driver's
  JVM (``java``), the driver's Python process (the tree's root) and Spark's Python workers
  (every other Python process of the tree); per group the summed RSS, open file
  descriptors and threads, and how many processes it has.
* :func:`jvm_heap`: the driver JVM's heap and metaspace as the JVM reports them
  (``jcmd <pid> GC.heap_info``: no server, no agent, no collection forced).
* :class:`Sample`: one line of the soak's progress and one row of its table.
* :func:`targets`: the soak's targets as :class:`~benchmarks.common.Ratio` lines (pure
  decisions over the samples and the exactly-once counts).
* :func:`plot`: one panel per measure over minutes, the kills marked.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import Ratio, target_ratio
from benchmarks.sink_bench import percentile

GROUPS = ("jvm", "python", "workers")
GROUP_LABELS = {"jvm": "driver JVM", "python": "driver Python", "workers": "Python workers"}
GROWTH_TARGET = "<= 1.1x"  # RSS and fds at the end / at a sixth of the run
LATENCY_TARGET = "<= 1.2x"  # p99 of the last sixth / of minutes 5-15 of an hour
BOUNDED_TARGET = "<= 1.0x"  # objects of the last sample / (first half's max + slack)
SLACK_OBJECTS = 5  # the slack above the first half's max: at least this many objects
SLACK_SHARE = 0.1  # ... or this share of that max, whichever is larger


# --- /proc --------------------------------------------------------------------------------


def _parent_of(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # "pid (comm) state ppid ...": comm may hold spaces and parentheses
    return int(stat[stat.rindex(")") + 2 :].split()[1])


def process_tree(root: int) -> list[int]:
    """``root`` and every process descended from it (now), root first."""
    children: dict[int, list[int]] = {}
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            parent = _parent_of(int(entry.name))
            if parent is not None:
                children.setdefault(parent, []).append(int(entry.name))
    tree, todo = [], [root]
    while todo:
        pid = todo.pop()
        tree.append(pid)
        todo.extend(children.get(pid, []))
    return tree


def group_of(pid: int, root: int) -> str | None:
    """The :data:`GROUPS` entry of a process of ``root``'s tree (None: neither Java nor
    Python, e.g. the shell that starts the JVM, or gone)."""
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return None
    program = os.path.basename(argv[0].decode(errors="replace")) if argv else ""
    if program == "java":
        return "jvm"
    if program.startswith("python"):
        return "python" if pid == root else "workers"
    return None


def _status(pid: int) -> tuple[int, int]:
    """(RSS in kB, threads) from ``/proc/<pid>/status``."""
    rss = threads = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1])
        elif line.startswith("Threads:"):
            threads = int(line.split()[1])
    return rss, threads


@dataclass
class ProcessGroups:
    """Per group: summed RSS (MB), open fds, threads, and the number of processes."""

    rss_mb: dict[str, float] = field(default_factory=lambda: dict.fromkeys(GROUPS, 0.0))
    fds: dict[str, int] = field(default_factory=lambda: dict.fromkeys(GROUPS, 0))
    threads: dict[str, int] = field(default_factory=lambda: dict.fromkeys(GROUPS, 0))
    processes: dict[str, int] = field(default_factory=lambda: dict.fromkeys(GROUPS, 0))


def sample_processes(root: int | None) -> ProcessGroups:
    """The groups of ``root``'s process tree now (all zero when there is no driver)."""
    groups = ProcessGroups()
    if root is None:
        return groups
    for pid in process_tree(root):
        group = group_of(pid, root)
        if group is None:
            continue
        try:
            rss_kb, threads = _status(pid)
            fds = len(os.listdir(f"/proc/{pid}/fd"))
        except OSError:  # it exited between the listing and the reads
            continue
        groups.rss_mb[group] += rss_kb / 1024
        groups.fds[group] += fds
        groups.threads[group] += threads
        groups.processes[group] += 1
    return groups


# --- the JVM's heap ----------------------------------------------------------------------

#: A generation's (or G1's whole heap's) line of ``GC.heap_info``:
#: ``garbage-first heap   total 262144K, used 20479K [...]``,
#: ``def new generation   total 78656K, used 33667K [...]``.
_HEAP_LINE = re.compile(
    r"^\s*(?P<name>[A-Za-z][\w -]*?)\s+total (?P<total>\d+)K, used (?P<used>\d+)K"
)
_METASPACE_LINE = re.compile(r"^\s*Metaspace\s+used (?P<used>\d+)K, committed (?P<committed>\d+)K")


@dataclass(frozen=True)
class Heap:
    """The JVM's heap (every generation summed) and metaspace, in MB. ``used`` includes
    garbage not yet collected: it saws between collections; ``committed`` is what the heap
    holds from the OS (bounded by ``-Xmx``, ``spark.driver.memory``)."""

    used_mb: float
    committed_mb: float
    metaspace_mb: float


def parse_heap_info(text: str) -> Heap | None:
    """``jcmd <pid> GC.heap_info``'s answer -> :class:`Heap` (None if it names no heap)."""
    used = total = metaspace = 0
    found = False
    for line in text.splitlines():
        meta = _METASPACE_LINE.match(line)
        if meta:
            metaspace = int(meta["used"])
            continue
        heap = _HEAP_LINE.match(line)
        if heap:
            found = True
            used += int(heap["used"])
            total += int(heap["total"])
    if not found:
        return None
    return Heap(used / 1024, total / 1024, metaspace / 1024)


def jvm_heap(pid: int | None, timeout: float = 20.0) -> Heap | None:
    """The heap of the JVM ``pid`` by ``jcmd`` (the JDK's; None when there is no JVM, no
    ``jcmd``, or it did not answer in ``timeout`` seconds: a sample without a heap)."""
    jcmd = shutil.which("jcmd")
    if pid is None or jcmd is None:
        return None
    try:
        done = subprocess.run(
            [jcmd, str(pid), "GC.heap_info"],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return parse_heap_info(done.stdout) if done.returncode == 0 else None


def jvm_pid(root: int | None) -> int | None:
    """The driver's JVM: the one ``java`` process of ``root``'s tree (None if none)."""
    if root is None:
        return None
    return next((pid for pid in process_tree(root) if group_of(pid, root) == "jvm"), None)


# --- samples ------------------------------------------------------------------------------


@dataclass
class Sample:
    """One sample: ``t`` seconds since the start of production (``minute`` = t / 60)."""

    t: float
    procs: ProcessGroups
    p50_ms: float
    p99_ms: float
    delivered: int  # records first seen since the previous sample
    per_second: float
    objects: dict[str, int]  # stored objects per prefix of the pipeline's state
    driver: int  # the number of the driver running (1 + kills so far)
    snapshots: int  # snapshots accepted so far (every driver)
    # Where a micro-batch's time goes, and the broker's own answer time, so that a slower
    # end of the run can be told apart from a slower broker: medians over the micro-batches
    # completed since the previous sample (NaN if none) of Spark's addBatch and the
    # source's latestOffset, and of three ListOffsets requests for the soak's topic.
    add_batch_ms: float = float("nan")
    latest_offset_ms: float = float("nan")
    broker_ms: float = float("nan")
    heap: Heap | None = None  # the driver JVM's (None: no JVM, or jcmd did not answer)
    load: float = float("nan")  # the machine's 1-minute load average

    @property
    def minute(self) -> float:
        return self.t / 60

    def line(self) -> str:
        """The progress line printed as the sample is taken."""
        p = self.procs
        rss = "/".join(f"{p.rss_mb[g]:,.0f}" for g in GROUPS)
        fds = "/".join(str(p.fds[g]) for g in GROUPS)
        threads = "/".join(str(p.threads[g]) for g in GROUPS)
        objects = " ".join(f"{k.rstrip('/')} {v}" for k, v in self.objects.items())
        heap = (
            "heap -"
            if self.heap is None
            else f"heap MB {self.heap.used_mb:,.0f} used/{self.heap.committed_mb:,.0f} "
            f"committed, metaspace {self.heap.metaspace_mb:,.0f}"
        )
        return (
            f"[{self.minute:5.1f} min] driver {self.driver}: RSS MB {rss} "
            f"({p.processes['workers']} workers); {heap}; fds {fds}; threads {threads}; "
            f"p50 {self.p50_ms:,.0f} ms p99 {self.p99_ms:,.0f} ms; {self.per_second:,.0f}/s; "
            f"addBatch {self.add_batch_ms:,.0f} ms latestOffset {self.latest_offset_ms:,.0f} ms; "
            f"broker ListOffsets {self.broker_ms:,.1f} ms; "
            f"{self.snapshots} snapshots; objects: {objects}; load {self.load:.2f}"
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "t": self.t,
            "minute": self.minute,
            "rss_mb": self.procs.rss_mb,
            "fds": self.procs.fds,
            "threads": self.procs.threads,
            "processes": self.procs.processes,
            "p50_ms": self.p50_ms,
            "p99_ms": self.p99_ms,
            "delivered": self.delivered,
            "per_second": self.per_second,
            "objects": self.objects,
            "driver": self.driver,
            "snapshots": self.snapshots,
            "add_batch_ms": self.add_batch_ms,
            "latest_offset_ms": self.latest_offset_ms,
            "broker_ms": self.broker_ms,
            "heap": None if self.heap is None else vars(self.heap),
            "load": self.load,
        }


def table_rows(samples: Sequence[Sample]) -> tuple[list[str], list[list[str]]]:
    """The soak's table: one row per sample (groups as jvm/python/workers)."""
    prefixes = list(samples[0].objects) if samples else []
    headers = [
        "minute",
        "driver",
        "RSS MB jvm/py/workers",
        "heap MB used/committed",
        "fds",
        "threads",
        "p50 ms",
        "p99 ms",
        "records/s",
        "addBatch ms",
        "latestOffset ms",
        "broker ms",
        "snapshots",
        *(p.rstrip("/") for p in prefixes),
        "load",
    ]
    rows = [
        [
            f"{s.minute:.1f}",
            str(s.driver),
            "/".join(f"{s.procs.rss_mb[g]:,.0f}" for g in GROUPS),
            "-" if s.heap is None else f"{s.heap.used_mb:,.0f}/{s.heap.committed_mb:,.0f}",
            "/".join(str(s.procs.fds[g]) for g in GROUPS),
            "/".join(str(s.procs.threads[g]) for g in GROUPS),
            f"{s.p50_ms:,.0f}",
            f"{s.p99_ms:,.0f}",
            f"{s.per_second:,.0f}",
            f"{s.add_batch_ms:,.0f}",
            f"{s.latest_offset_ms:,.0f}",
            f"{s.broker_ms:,.1f}",
            str(s.snapshots),
            *(str(s.objects.get(p, 0)) for p in prefixes),
            f"{s.load:.2f}",
        ]
        for s in samples
    ]
    return headers, rows


# --- targets ------------------------------------------------------------------------------


def reference_sample(samples: Sequence[Sample], seconds: float) -> Sample | None:
    """The first sample at or after a sixth of the run (minute 10 of an hour)."""
    return next((s for s in samples if s.t >= seconds / 6 - 1e-6), None)


def bound_of(counts: Sequence[int]) -> int:
    """The most objects a prefix may hold at the end: the first half's max plus the slack."""
    top = max(counts, default=0)
    return top + max(SLACK_OBJECTS, round(SLACK_SHARE * top))


def sixth(seen: Sequence[tuple[float, float]], seconds: float, index: int) -> list[float]:
    """The latencies of the records first seen in sixth ``index`` (0-5) of the run;
    ``seen`` holds (seconds since the start when seen, latency in ms)."""
    low, high = index * seconds / 6, (index + 1) * seconds / 6
    return [ms for at, ms in seen if low <= at < high or (index == 5 and at >= high)]


def steady_reference(seen: Sequence[tuple[float, float]], seconds: float) -> list[float]:
    """The latencies of the records first seen in minutes 5-15 of an hour (the twelfth to
    the quarter of the run): the steady state after the start-up, before the first kill
    (at a quarter of the run by default), so the catch-up after a kill is never in it."""
    low, high = seconds / 12, seconds / 4
    return [ms for at, ms in seen if low <= at < high]


def targets(
    samples: Sequence[Sample],
    seconds: float,
    seen: Sequence[tuple[float, float]],
    lost: int,
    duplicated: int,
) -> list[Ratio]:
    """The soak's targets, each printed as ``<measure> = <ratio> (target ...: met)``."""
    ratios: list[Ratio] = []
    ref = reference_sample(samples, seconds)
    end = samples[-1] if samples else None
    if ref is not None and end is not None:
        at = f"minute {end.minute:.1f} vs {ref.minute:.1f}"
        for g in GROUPS:
            label = GROUP_LABELS[g]
            for name, was, now, unit in (
                ("RSS", ref.procs.rss_mb[g], end.procs.rss_mb[g], " MB"),
                ("open fds", ref.procs.fds[g], end.procs.fds[g], ""),
                ("threads", ref.procs.threads[g], end.procs.threads[g], ""),
            ):
                if was > 0 and now > 0:
                    ratios.append(
                        target_ratio(
                            "soak",
                            f"soak: {name} of the {label}, end / a sixth in",
                            now / was,
                            GROWTH_TARGET,
                            f"{now:,.0f} vs {was:,.0f}{unit} ({at})",
                        )
                    )
        ratios += heap_ratios(samples, seconds, ref, end)
    steady, last = steady_reference(seen, seconds), sixth(seen, seconds, 5)
    if steady and last:
        a, b = percentile(last, 0.5), percentile(steady, 0.5)
        ratios.append(
            target_ratio(
                "soak",
                "soak: p50 latency, last sixth / minutes 5-15 of an hour",
                a / b,
                GROWTH_TARGET,
                f"{a:,.0f} vs {b:,.0f} ms ({len(last):,} and {len(steady):,} records)",
            )
        )
        a, b = percentile(last, 0.99), percentile(steady, 0.99)
        ratios.append(
            target_ratio(
                "soak",
                "soak: p99 latency, last sixth / minutes 5-15 of an hour",
                a / b,
                LATENCY_TARGET,
                f"{a:,.0f} vs {b:,.0f} ms ({len(last):,} and {len(steady):,} records)",
            )
        )
    ratios += explanations(samples, seconds)
    half = [s for s in samples if s.t <= seconds / 2]
    if half and end is not None:
        for prefix in end.objects:
            limit = bound_of([s.objects.get(prefix, 0) for s in half])
            ratios.append(
                target_ratio(
                    "soak",
                    f"soak: objects under {prefix}, last / (first half's max + slack)",
                    end.objects[prefix] / limit,
                    BOUNDED_TARGET,
                    f"{end.objects[prefix]} vs {limit}",
                )
            )
    for what, count in (("lost", lost), ("duplicated", duplicated)):
        met = count == 0
        print(f"soak: records {what} = {count} (target 0: {'met' if met else 'NOT met'})")
        ratios.append(Ratio("soak", f"soak: records {what}", float(count), "<= 0", met, "records"))
    return ratios


def heap_ratios(samples: Sequence[Sample], seconds: float, ref: Sample, end: Sample) -> list[Ratio]:
    """The driver JVM's heap against :data:`GROWTH_TARGET`: committed heap and metaspace at
    the end / a sixth in; the heap in use as the lowest sample of the last sixth / of
    minutes 5-15 of an hour. A single sample of the heap in use falls anywhere between two
    collections; the lowest of ten is near what survives a collection, which is what a leak
    raises."""
    out: list[Ratio] = []
    at = f"minute {end.minute:.1f} vs {ref.minute:.1f}"
    if ref.heap is not None and end.heap is not None:
        for name, was, now in (
            ("heap committed", ref.heap.committed_mb, end.heap.committed_mb),
            ("metaspace", ref.heap.metaspace_mb, end.heap.metaspace_mb),
        ):
            if was > 0:
                out.append(
                    target_ratio(
                        "soak",
                        f"soak: {name} of the driver JVM, end / a sixth in",
                        now / was,
                        GROWTH_TARGET,
                        f"{now:,.0f} vs {was:,.0f} MB ({at})",
                    )
                )
    steady = [s.heap.used_mb for s in samples if s.heap and seconds / 12 <= s.t <= seconds / 4]
    last = [s.heap.used_mb for s in samples if s.heap and s.t > 5 * seconds / 6 - 1e-6]
    if steady and last and min(steady) > 0:
        now, was = min(last), min(steady)
        out.append(
            target_ratio(
                "soak",
                "soak: heap in use of the driver JVM (lowest), last sixth / minutes 5-15",
                now / was,
                GROWTH_TARGET,
                f"{now:,.0f} vs {was:,.0f} MB ({len(last)} and {len(steady)} samples)",
            )
        )
    return out


def explanations(samples: Sequence[Sample], seconds: float) -> list[Ratio]:
    """Figures without a target beside the latency's: the medians, over the per-minute
    samples of the last sixth and of minutes 5-15, of addBatch, latestOffset and the
    broker's ListOffsets. A latency that grew with the broker's answer time measures the
    broker (the harness's Tansu keeps every record batch in a list that its ListOffsets
    and Fetch walk), not the pipeline."""
    steady = [s for s in samples if seconds / 12 <= s.t <= seconds / 4]
    last = [s for s in samples if s.t > 5 * seconds / 6]
    out = []
    for name, attr in (
        ("addBatch", "add_batch_ms"),
        ("latestOffset", "latest_offset_ms"),
        ("the broker's ListOffsets", "broker_ms"),
    ):
        a = [v for v in (getattr(s, attr) for s in last) if math.isfinite(v)]
        b = [v for v in (getattr(s, attr) for s in steady) if math.isfinite(v)]
        if not a or not b:
            continue
        now, was = percentile(a, 0.5), percentile(b, 0.5)
        note = f"{now:,.1f} vs {was:,.1f} ms (medians of the per-minute medians)"
        measure = f"soak: {name}, last sixth / minutes 5-15 of an hour"
        print(f"{measure} = {now / was:.2f} (no target); {note}", flush=True)
        out.append(Ratio("soak", measure, now / was, "(explains)", None, note=note))
    return out


# --- the plot -----------------------------------------------------------------------------


def plot(
    samples: Sequence[Sample],
    kills: Sequence[float],
    path: Path,
    title: str,
) -> None:
    """``path``: one panel per measure over minutes; ``kills`` (seconds) as red lines."""
    from matplotlib.figure import Figure  # no pyplot: no global backend

    fig = Figure(figsize=(14, 13))
    axes = fig.subplots(4, 2).flatten()
    minutes = [s.minute for s in samples]

    def lines(ax: Any, series: Mapping[str, Sequence[float]], ylabel: str) -> None:
        for label, values in series.items():
            ax.plot(minutes, values, marker=".", label=label)
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7, loc="upper left")

    def by_group(attr: str) -> dict[str, list[float]]:
        return {
            GROUP_LABELS[g]: [float(getattr(s.procs, attr)[g]) for s in samples] for g in GROUPS
        }

    lines(axes[0], by_group("rss_mb"), "RSS, MB")
    lines(axes[1], by_group("fds"), "open file descriptors")
    lines(axes[2], by_group("threads"), "threads")
    lines(
        axes[3],
        {"p50": [s.p50_ms for s in samples], "p99": [s.p99_ms for s in samples]},
        "produce -> visible, ms",
    )
    axes[3].set_yscale("log")
    lines(axes[4], {"delivered": [s.per_second for s in samples]}, "records/s delivered")
    prefixes = list(samples[0].objects) if samples else []
    lines(
        axes[5],
        {p.rstrip("/"): [float(s.objects.get(p, 0)) for s in samples] for p in prefixes},
        "stored objects per prefix",
    )
    lines(
        axes[6],
        {
            "addBatch": [s.add_batch_ms for s in samples],
            "latestOffset": [s.latest_offset_ms for s in samples],
            "broker ListOffsets": [s.broker_ms for s in samples],
        },
        "micro-batch and broker, ms (medians)",
    )
    axes[6].set_yscale("log")
    heaps = [s.heap for s in samples]
    lines(
        axes[7],
        {
            "heap in use": [h.used_mb if h else math.nan for h in heaps],
            "heap committed": [h.committed_mb if h else math.nan for h in heaps],
            "metaspace": [h.metaspace_mb if h else math.nan for h in heaps],
        },
        "driver JVM heap, MB (jcmd GC.heap_info)",
    )
    for ax in axes:
        for i, at in enumerate(kills):
            ax.axvline(at / 60, color="red", linestyle="--", linewidth=1, label=None)
            if i == 0 and ax is axes[0]:
                ax.text(at / 60, ax.get_ylim()[1], " SIGKILL", color="red", fontsize=7, va="top")
        ax.set_xlabel("minute")
        ax.grid(alpha=0.3)
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
