"""``python -m benchmarks`` (``make bench``): the performance targets, measured side by side.

Runs, one after the other, each in its own process (its own SparkSession) against one
Kafka broker and one S3 server (started here, or ``--bootstrap`` / ``--s3-endpoint``, or
``GTB_KAFKA_BOOTSTRAP`` / ``GTB_S3_ENDPOINT``; the recovery and latency benchmarks
also start a ZooKeeper unless ``--zk-hosts`` / ``GTB_ZK_HOSTS``):

==============================  ==========================================================  ========
``benchmarks.fixed_cost``       median triggerExecution of a 100-record batch, gtkafka (8   <= 2.0x
                                partitions, S3 state) -> barrier vs rate-micro-batch -> noop
                                and vs python_floor -> python_floor (<= 1.10x); with
                                readMode=driver vs rate-micro-batch -> noop (<= 1.3x)
``benchmarks.scaling``          records/s, 64 partitions vs 1 (gtkafka -> noop, ~10          >= 0.85
                                batches); also the curve against partitions and cores
``benchmarks.source_bench``     gtkafka -> noop (AvailableNow) vs plain kafka-python, wall   >= 0.9
``benchmarks.demo_bench``       the demo's query over gtkafka -> barrier vs over the json    >= 0.8
                                file source -> noop, records/s
``benchmarks.sink_bench``       barrier exactly-once / at-least-once, file, s3, delta        >= 0.95
``benchmarks.recovery``         SIGKILL -> first new bundle vs cold start -> first bundle    <= 1.3x
``benchmarks.snapshot_bench``   batch p99 with and without snapshots (extra rows)
``benchmarks.postgres_bench``   consumer=postgres: a 50,000-row bundle's commit; exactly-   < 1 s,
                                once / at-least-once rows/s (no Spark, its own server)      >= 0.95
``benchmarks.latency``          produce -> visible to a reader of the consumer, p99:        <= 1.15x
                                exactly-once / at-least-once, snapshots / none (<= 1.10x),
                                / the median batch (<= 2.2x); readMode=driver / executors
                                (<= 0.6x) and its exactly-once / at-least-once (<= 1.15x);
                                highest rate with p99 < 2 s
                                per consumer (trigger 1 s); its own PostgreSQL, ZooKeeper
==============================  ==========================================================  ========

Then one table lists each target's value, target and verdict with the absolute figures
and the load average, then the other measurements; ``results/`` receives
``benchmarks.json``, ``ratios.png``, ``scaling.png`` and ``latency.png``. The default
size takes about 17 minutes on 2 quiet cores (the source reads 2,000,000 records), and
the latency benchmark about 4 more; ``--small`` reduces the sizes to about a quarter;
``--size tiny`` is notebook 03's test run (without the source, recovery and latency
benchmarks). ``--skip`` leaves benchmarks out. The exit code is non-zero if a
benchmark failed or its output could not be read (a target that is not met is reported,
not an error).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common import REPO_ROOT, Ratio, kafka_bootstrap, load_average, read_results

__all__ = ["Outcome", "Ratio", "main"]

SIZES: dict[str, dict[str, list[str]]] = {
    # size -> benchmark -> its arguments
    "default": {
        "fixed_cost": ["--batches", "10", "--repeat", "2", "--crossover", "100,1000,10000"],
        "scaling": [
            "--records",
            "200000",
            "--partitions",
            "1,16,64",
            "--repeat",
            "2",
            "--clients",
            "kafka-python,confluent",
            "--broker-per-run",
        ],
        "source": ["--records", "2000000"],
        "demo": ["--events", "40000", "--per-batch", "10000", "--split", "--repeat", "2"],
        "sink": ["--records", "200000", "--per-batch", "40000"],
        "recovery": ["--events", "8000", "--per-batch", "500"],
        "snapshot": ["--skip-recovery"],
        "postgres": ["--rows", "50000", "--bundles", "8"],
        "latency": [
            "--comparison-seconds",
            "15",
            "--repeat",
            "2",
            "--step-seconds",
            "6",
            "--driver-mode",
        ],
    },
    "small": {
        "fixed_cost": ["--batches", "5", "--crossover", "100,2000"],
        "scaling": [
            "--records",
            "40000",
            "--partitions",
            "1,64",
            "--cores",
            "2",
            "--clients",
            "kafka-python,confluent",
            "--broker-per-run",
        ],
        "source": ["--records", "200000"],
        "demo": ["--events", "10000", "--per-batch", "2500"],
        "sink": ["--records", "60000", "--per-batch", "15000"],
        "recovery": ["--events", "4000", "--per-batch", "500"],
        "snapshot": ["--small", "--skip-recovery"],
        "postgres": ["--rows", "50000", "--bundles", "4"],
        "latency": [
            "--comparison-seconds",
            "10",
            "--repeat",
            "1",
            "--step-seconds",
            "4",
            "--search-rates",
            "1000,10000,20000",
            "--driver-mode",
        ],
    },
    "tiny": {  # the notebooks' test run: shapes, not numbers
        # Each benchmark is a process of its own: its JVM start (about 14 s on 2 cores) and
        # its first query's cold start (10-30 s) dominate here, so the sizes are the least
        # that runs each one's code path (no warm-up queries, no repeats, few batches).
        "fixed_cost": ["--batches", "1", "--no-split"],
        "scaling": [
            "--records",
            "2000",
            "--partitions",
            "1,4",
            "--cores",
            "1,2",
            "--batches",
            "3",
            "--no-warmup",
        ],
        # no source: of its 36 s, 14 are its JVM start and 15 its one query's cold start,
        # which no other benchmark's process can share; its query (gtkafka AvailableNow ->
        # noop) is the one scaling runs
        "demo": ["--events", "1000", "--per-batch", "1000", "--no-warmup"],
        "sink": [
            "--records",
            "4000",
            "--per-batch",
            "2000",
            "--targets",
            "file",
            "--no-warmup",
            "--no-parquet",
        ],
        # no recovery: two driver programs (JVMs) and their first batches take minutes
        "snapshot": [
            "--small",
            "--keys",
            "2000",
            "--batches",
            "4",
            "--fill-batches",
            "2",
            "--period",
            "1s",
            "--skip-recovery",
        ],
        "postgres": ["--rows", "10000", "--bundles", "2", "--repeat", "1"],
        # no latency: a dozen queries, each paying its start and first batch
    },
}
ORDER = (
    "fixed_cost",
    "scaling",
    "source",
    "demo",
    "sink",
    "recovery",
    "snapshot",
    "postgres",
    "latency",
)
MODULES = {
    "fixed_cost": "benchmarks.fixed_cost",
    "scaling": "benchmarks.scaling",
    "source": "benchmarks.source_bench",
    "demo": "benchmarks.demo_bench",
    "sink": "benchmarks.sink_bench",
    "recovery": "benchmarks.recovery",
    "snapshot": "benchmarks.snapshot_bench",
    "postgres": "benchmarks.postgres_bench",
    "latency": "benchmarks.latency",
}
#: The performance targets, in their reported order: (benchmark, measure prefix) of their rows.
TARGETS = (
    ("fixed cost", "fixed cost"),
    ("fixed cost", "gtbarrier over Spark's Python floor"),
    ("partition scaling", "partition scaling"),
    ("source", "gtkafka AvailableNow / plain kafka-python (wall)"),
    ("demo query", "demo query"),
    ("sink", "file: exactly-once / at-least-once throughput"),
    ("sink", "s3: exactly-once / at-least-once throughput"),
    ("sink", "delta: exactly-once / at-least-once throughput"),
    ("recovery", "recovery"),
    ("postgres", "postgres: "),
    ("latency", "latency: "),
)


@dataclass
class Outcome:
    name: str
    command: list[str]
    seconds: float
    returncode: int
    output: str
    ratios: list[Ratio] = field(default_factory=list)
    data: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    load: str = ""  # the load average when it ended


# --- reading each benchmark's output ---------------------------------------------------


def table_rows(text: str, first_header: str) -> list[dict[str, str]]:
    """Rows of the last table printed by ``benchmarks.common.print_table`` whose first
    header cell is ``first_header``, as ``{header: cell}`` (cells are split on runs of two
    or more spaces, so headers and cells may contain single spaces)."""
    lines = text.splitlines()
    starts = [i for i, line in enumerate(lines) if line.startswith(first_header + " ")]
    if not starts:
        raise ValueError(f"no table with header {first_header!r} in the output")
    headers = re.split(r"\s{2,}", lines[starts[-1]].strip())
    rows = []
    for line in lines[starts[-1] + 2 :]:
        if not line.strip():
            break
        cells = re.split(r"\s{2,}", line.strip())
        rows.append(dict(zip(headers, cells, strict=False)))
    if not rows:
        raise ValueError(f"the table {first_header!r} has no rows")
    return rows


def number(text: str) -> float:
    return float(text.replace(",", "").split()[0])


def parse_source(text: str) -> tuple[list[Ratio], dict[str, Any]]:
    rows = {r["mode"]: r for r in table_rows(text, "mode")}
    labels = {
        "gtkafka AvailableNow -> noop": ("gtkafka AvailableNow / plain kafka-python (wall)", True),
        "same query, inside its triggers": ("  same, inside its triggers", True),
        "gtkafka batch read -> noop": ("gtkafka batch read / plain kafka-python", False),
    }
    if "gtkafka AvailableNow -> noop" not in rows:
        raise ValueError("no 'gtkafka AvailableNow -> noop' row in the source table")
    ratios = []
    for mode, (label, targeted) in labels.items():
        if mode not in rows:
            continue
        value = number(rows[mode]["ratio"])
        if targeted:
            note = (
                f"{number(rows[mode]['records/s']):,.0f} vs "
                f"{number(rows['plain kafka-python']['records/s']):,.0f} records/s"
                if "plain kafka-python" in rows
                else ""
            )
            ratios.append(Ratio("source", label, value, ">= 0.9", value >= 0.9, note=note))
        else:
            ratios.append(Ratio("source", label, value, "-", None))
    data = {
        mode: {"records_per_s": number(r["records/s"]), "ratio": number(r["ratio"])}
        for mode, r in rows.items()
    }
    return ratios, data


_SINK_SUMMARY = re.compile(
    r"^(?P<target>\w+): exactly-once / at-least-once throughput.*$", re.MULTILINE
)
# One "<label> = <value> ... (target <target>: met|NOT met" clause of a summary line; the
# label holds no parenthesis or semicolon, so remarks inside the parentheses never match.
_CLAUSE = re.compile(
    r"(?P<label>[^;()]*?)\s*(?:=|\btakes\b|\badds\b)\s*(?P<value>[+-]?[\d,]*\.?\d+)\s*"
    r"(?P<unit>ms|x)?[^(;]*\(target (?P<target>[^:]+):\s*(?P<met>met|NOT met)"
)


_SINK_PARTS_LINE = re.compile(
    r"consumer\.s3\.layout=parts: item bytes through the driver = (?P<bytes>[\d,]+); "
    r"throughput (?P<ratio>[\d.]+) x"
)


def parse_sink(text: str) -> tuple[list[Ratio], dict[str, Any]]:
    """The per-target summary lines (``file: exactly-once / at-least-once throughput = ...
    (target >= 0.95: met); ...``): every clause with a target becomes a row."""
    ratios: list[Ratio] = []
    data: dict[str, Any] = {}
    for line in _SINK_SUMMARY.finditer(text):
        target = line["target"]
        body = line[0][len(target) + 1 :]
        for m in _CLAUSE.finditer(body):
            label = m["label"].strip().rstrip(",")
            value = number(m["value"])
            unit = m["unit"] or ("B" if "bytes" in label else "x")
            ratios.append(
                Ratio(
                    "sink",
                    f"{target}: {label}",
                    value,
                    m["target"].strip(),
                    m["met"] == "met",
                    unit=unit,
                )
            )
            data.setdefault(target, {})[label] = value
    if not ratios:
        raise ValueError("no 'exactly-once / at-least-once' summary line in the output")
    parts = _SINK_PARTS_LINE.search(text)
    if parts is not None:
        moved = int(parts["bytes"].replace(",", ""))
        ratios.append(
            Ratio(
                "sink",
                "s3 (consumer.s3.layout=parts): item bytes through the driver",
                moved,
                "0",
                moved == 0,
                unit="B",
                note=f"throughput {parts['ratio']} x at-least-once",
            )
        )
        data["s3_layout_parts"] = {"driver_bytes": moved, "throughput_ratio": float(parts["ratio"])}
    rows = table_rows(text, "sink")
    rates = {r["sink"]: number(r["records/s"]) for r in rows}
    for ratio in ratios:
        target = ratio.measure.split(":")[0]
        eo, alo = rates.get(f"{target} exactly-once"), rates.get(f"{target} at-least-once")
        if ratio.measure.endswith("throughput") and eo is not None and alo is not None:
            ratio.note = f"{eo:,.0f} vs {alo:,.0f} records/s"
    data["runs"] = {
        r["sink"]: {"records_per_s": number(r["records/s"]), "vs_alo": number(r["vs ALO"])}
        for r in rows
    }
    for r in rows:
        if "parquet" in r["sink"]:
            ratios.append(
                Ratio(
                    "sink",
                    f"{r['sink']} / at-least-once (reference)",
                    number(r["vs ALO"]),
                    "-",
                    None,
                )
            )
    return ratios, data


_TARGET_LINE = re.compile(
    r"^(?P<label>.+?)\s*=\s*(?P<value>[+-]?[\d,]*\.?\d+)\s*(?P<unit>x|ms|s|bytes|B)?\s*"
    r"\(target\s*(?P<target>[^:)]+?)\s*:\s*(?P<met>met|NOT met)\)",
    re.MULTILINE,
)


def parse_targets(name: str, text: str) -> list[Ratio]:
    """Generic: every ``<label> = <value> (target <t>: met|NOT met)`` clause."""
    out = []
    for m in _TARGET_LINE.finditer(text):
        unit = m["unit"] or "x"
        out.append(
            Ratio(
                name,
                m["label"].strip(),
                number(m["value"]),
                m["target"].strip(),
                m["met"] == "met",
                unit="B" if unit == "bytes" else unit,
            )
        )
    return out


def parse_snapshot(text: str) -> tuple[list[Ratio], dict[str, Any]]:
    ratios = parse_targets("snapshot", text)
    if not ratios:
        raise ValueError("no '<measure> = <value> (target ...: met)' line in the output")
    data: dict[str, Any] = {"runs": table_rows(text, "run")}
    if "\nrecovery " in text:
        recovery = table_rows(text, "recovery")
        data["recovery"] = recovery
        for row in recovery:
            ratios.append(
                Ratio(
                    "snapshot",
                    f"recovery, {row['recovery']}: kill -> first bundle",
                    number(row["kill -> first bundle s"]),
                    "-",
                    None,
                    unit="s",
                    note=f"recover(): {row.get('action', '?')} in {row.get('recover() s', '?')} s",
                )
            )
    return ratios, data


def parse_scaling(json_path: Path) -> tuple[list[Ratio], dict[str, Any]]:
    points = json.loads(json_path.read_text())
    ratios = []
    clients = list(dict.fromkeys(p.get("client", "kafka-python") for p in points))
    for axis, client in [("partitions", c) for c in clients] + [("cores", None)]:
        chosen = sorted(
            (
                p
                for p in points
                if p["axis"] == axis and client in (None, p.get("client", "kafka-python"))
            ),
            key=lambda p: p[axis],
        )
        if len(chosen) < 2:
            continue
        base = chosen[0]["records"] / chosen[0]["triggers_s"]
        by = "" if client in (None, "kafka-python") else f", {client}"
        for p in chosen[1:]:
            rate = p["records"] / p["triggers_s"]
            ratios.append(
                Ratio(
                    "scaling",
                    f"{p[axis]} {axis} / {chosen[0][axis]} {axis}{by}",
                    rate / base,
                    "-",
                    None,
                    note=f"{rate:,.0f} records/s in triggers",
                )
            )
    return ratios, {"points": points}


# --- running ---------------------------------------------------------------------------


def run_module(name: str, module: str, args: Sequence[str], env: dict[str, str]) -> Outcome:
    command = [sys.executable, "-m", module, *args]
    print(f"\n=== {name}: {' '.join(command[1:])}", flush=True)
    began = time.monotonic()
    proc = subprocess.Popen(
        command, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    lines = []
    shown = SparkLogFilter()
    for line in proc.stdout:
        lines.append(line)
        if shown(line):
            print("  " + line, end="", flush=True)
    code = proc.wait()
    if code != 0:
        # The filter may have hidden why it failed: its last lines, as they were.
        print(f"  --- {name} exited with {code}; its last lines:", flush=True)
        for line in lines[-FAILURE_TAIL:]:
            print("  " + line, end="", flush=True)
    outcome = Outcome(name, command, time.monotonic() - began, code, "".join(lines))
    outcome.load = load_average()
    return outcome


#: How many of a failed benchmark's last output lines are echoed unfiltered.
FAILURE_TAIL = 40
#: A log4j line of Spark's or the JVM's: ``26/11/29 16:47:19 ERROR Utils: ...``.
_LOG_LINE = re.compile(r"^\d\d/\d\d/\d\d \d\d:\d\d:\d\d (TRACE|DEBUG|INFO|WARN|ERROR|FATAL) ")
#: A line that continues a logged Java exception: its headline, frames, causes, elisions.
_TRACE_LINE = re.compile(
    r"^(\s+at |\s+\.\.\. \d+ (more|common frames)|Caused by: |Suppressed: |\s+Suppressed: "
    r"|[\w$.]+(Exception|Error|Throwable)(: |$))"
)


class SparkLogFilter:
    """Which of a benchmark's output lines to echo: its own lines, not Spark's logs.

    A log4j line is dropped, and so is every line that continues it as a Java stack trace
    (a query stopped by the benchmark logs a ``TaskKilledException`` with ~30 frames), as
    well as the JVM's and Spark's start-up chatter. The full output is kept in the
    :class:`Outcome`, and a failed benchmark's tail is echoed unfiltered (``run_module``).
    Call it once per line, in order: whether a line continues a trace depends on the last.
    """

    def __init__(self) -> None:
        self._in_log = False

    def __call__(self, line: str) -> bool:
        if _LOG_LINE.match(line):
            self._in_log = True
            return False
        if self._in_log and _TRACE_LINE.match(line):
            return False
        self._in_log = False
        return not (
            " WARN " in line
            or "log4j" in line
            or "setLogLevel" in line
            or line.startswith("Setting default log level")
            or line.startswith("WARNING: Using incubator modules")
        )


@contextmanager
def s3_endpoint(given: str | None) -> Iterator[str]:
    if given:
        yield given
        return
    from benchmarks.sink_bench import s3_endpoint as start_s3

    with start_s3(None) as server:
        yield str(server.endpoint)


def _json_results(path: Path) -> Callable[[Outcome], tuple[list[Ratio], dict[str, Any]]]:
    return lambda _o: read_results(path)


def _scaling(points: Path, results: Path) -> tuple[list[Ratio], dict[str, Any]]:
    curve, data = parse_scaling(points)
    target, _ = read_results(results)
    return target + curve, data


def run_all(args: argparse.Namespace) -> list[Outcome]:
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    outcomes = []
    with ExitStack() as stack:
        bootstrap = stack.enter_context(kafka_bootstrap(args.bootstrap))
        endpoint = stack.enter_context(s3_endpoint(args.s3_endpoint))
        env = dict(os.environ, GTB_KAFKA_BOOTSTRAP=bootstrap, GTB_S3_ENDPOINT=endpoint)
        if args.zk_hosts:
            env["GTB_ZK_HOSTS"] = args.zk_hosts
        env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO_ROOT), env.get("PYTHONPATH", "")) if p
        )
        env.setdefault("PYSPARK_PYTHON", sys.executable)
        parsers: dict[str, Callable[[Outcome], tuple[list[Ratio], dict[str, Any]]]] = {
            "fixed_cost": _json_results(out / "fixed_cost.json"),
            "scaling": lambda o: _scaling(out / "scaling.json", out / "scaling_target.json"),
            "source": lambda o: parse_source(o.output),
            "demo": _json_results(out / "demo.json"),
            "sink": lambda o: parse_sink(o.output),
            "recovery": _json_results(out / "recovery.json"),
            "snapshot": lambda o: parse_snapshot(o.output),
            "postgres": _json_results(out / "postgres.json"),
            "latency": _json_results(out / "latency.json"),
        }
        extras = {
            "fixed_cost": ["--json", str(out / "fixed_cost.json")],
            "scaling": [
                "--json",
                str(out / "scaling.json"),
                "--results",
                str(out / "scaling_target.json"),
            ],
            "demo": ["--json", str(out / "demo.json")],
            "recovery": ["--json", str(out / "recovery.json")],
            "snapshot": ["--out", str(out)],
            "postgres": ["--json", str(out / "postgres.json")],
            "latency": ["--json", str(out / "latency.json"), "--out", str(out)],
        }
        for name in ORDER:
            if name in args.skip:
                continue
            if name not in SIZES[args.size]:
                print(f"\n=== {name}: not run at size {args.size}", flush=True)
                continue
            module = MODULES[name]
            extra = list(SIZES[args.size][name]) + extras.get(name, [])
            outcome = run_module(name, module, extra, env)
            if outcome.returncode != 0:
                outcome.error = f"exit code {outcome.returncode}"
            else:
                try:
                    outcome.ratios, outcome.data = parsers[name](outcome)
                except (ValueError, KeyError, IndexError, OSError) as err:
                    outcome.error = f"could not read its results: {err}"
            outcomes.append(outcome)
    return outcomes


# --- reporting -------------------------------------------------------------------------


def is_target(r: Ratio) -> bool:
    """Is ``r`` one of the performance targets (else an extra measurement)?"""
    return any(r.benchmark == b and r.measure.startswith(m) for b, m in TARGETS)


def _order(r: Ratio) -> int:
    return next(
        i for i, (b, m) in enumerate(TARGETS) if r.benchmark == b and r.measure.startswith(m)
    )


def summary_table(outcomes: Sequence[Outcome]) -> list[list[str]]:
    """The performance targets in their order (and any failed benchmark), then every other row;
    each row ends with the load average when its benchmark ended."""
    targets: list[tuple[int, list[str]]] = []
    others: list[list[str]] = []
    for o in outcomes:
        if o.error is not None:
            targets.append(
                (len(TARGETS), [o.name, "FAILED: " + o.error, "-", "-", "-", o.load, ""])
            )
            continue
        for r in o.ratios:
            cells = r.cells()
            row = [*cells[:5], o.load, cells[5]]
            if is_target(r):
                targets.append((_order(r), row))
            else:
                others.append(row)
    rows = [row for _, row in sorted(targets, key=lambda t: t[0])]
    if others:
        rows.append(["", "other measurements", "", "", "", "", ""])
        rows += others
    return rows


def write_results(outcomes: Sequence[Outcome], out: Path, args: argparse.Namespace) -> Path:
    doc = {
        "machine": {"cores": os.cpu_count(), "load_average": load_average()},
        "size": args.size,
        "benchmarks": [
            {
                "name": o.name,
                "command": o.command[1:],
                "seconds": round(o.seconds, 1),
                "load_average": o.load,
                "error": o.error,
                "ratios": [asdict(r) for r in o.ratios],
                "data": o.data,
            }
            for o in outcomes
        ],
    }
    path = out / "benchmarks.json"
    path.write_text(json.dumps(doc, indent=2))
    return path


def _short(r: Ratio, width: int = 75) -> str:
    """A plot label: the measure (prefixed by its benchmark unless it starts with it)."""
    measure = r.measure.strip()
    label = measure if measure.startswith(r.benchmark) else f"{r.benchmark}: {measure}"
    return label if len(label) <= width else label[: width - 3] + "..."


def plot_results(outcomes: Sequence[Outcome], out: Path) -> list[Path]:
    from matplotlib.figure import Figure  # no pyplot: no global backend

    written = []
    ratios = [
        r
        for o in outcomes
        for r in o.ratios
        if r.unit == "x" and r.value is not None and r.target[:2] in (">=", "<=")
    ]
    if ratios:
        fig = Figure(figsize=(12, 0.5 * len(ratios) + 1.6))
        ax = fig.subplots()
        labels = [_short(r) for r in ratios]
        colours = ["#2ca02c" if r.met else "#d62728" for r in ratios]
        ys = list(range(len(ratios)))[::-1]
        values = [max(r.value or 0.0, 1e-3) for r in ratios]
        ax.barh(ys, values, color=colours)
        for y, r, v in zip(ys, ratios, values, strict=True):
            target = float(r.target.split()[-1].rstrip("x"))
            ax.plot([target, target], [y - 0.4, y + 0.4], color="black", linewidth=2)
            ax.annotate(f"{v:.2f}", (v, y), xytext=(3, -3), textcoords="offset points", fontsize=8)
        ax.set_yticks(ys, labels, fontsize=8)
        # Ratios from 0.05 to 25 and more: a log scale keeps both ends readable.
        ax.set_xscale("log")
        bounds = values + [float(r.target.split()[-1].rstrip("x")) for r in ratios]
        ax.set_xlim(min(bounds) / 1.5, max(bounds) * 2)
        ax.set_xlabel(
            "ratio, log scale (black bar: the target; '>=' targets: higher is better, "
            "'<=' targets: lower is better)"
        )
        ax.set_title(f"gtbarrier benchmarks: ratios vs targets ({os.cpu_count()} cores)")
        fig.tight_layout()
        path = out / "ratios.png"
        fig.savefig(path, dpi=110)
        written.append(path)
    points = [p for o in outcomes if o.name == "scaling" for p in o.data.get("points", [])]
    if points:
        fig = Figure(figsize=(11, 4))
        axes = fig.subplots(1, 2)
        for ax, axis, label in (
            (axes[0], "partitions", "Kafka partitions"),
            (axes[1], "cores", "Spark cores (local[N])"),
        ):
            clients = list(dict.fromkeys(p.get("client", "kafka-python") for p in points))
            for client in clients if axis == "partitions" else clients[:1]:
                chosen = sorted(
                    (
                        p
                        for p in points
                        if p["axis"] == axis and p.get("client", "kafka-python") == client
                    ),
                    key=lambda p: p[axis],
                )
                xs = [p[axis] for p in chosen]
                by = f" ({client})" if len(clients) > 1 else ""
                ax.plot(
                    xs,
                    [p["records"] / p["triggers_s"] for p in chosen],
                    marker="o",
                    label="inside triggers" + by,
                )
                ax.plot(
                    xs,
                    [p["records"] / p["wall_s"] for p in chosen],
                    marker="s",
                    linestyle="--",
                    label="wall time" + by,
                )
            if axis == "partitions":
                ax.set_xscale("log", base=2)
            ax.set_xticks(xs, [str(x) for x in xs])
            ax.set_xlabel(label)
            ax.set_ylabel("records/s")
            ax.set_ylim(bottom=0)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=8)
        batches = sorted(int(p.get("batches", 0)) for p in points)[len(points) // 2]
        fig.suptitle(f"gtkafka -> noop throughput (Trigger.AvailableNow, about {batches} batches)")
        fig.tight_layout()
        path = out / "scaling.png"
        fig.savefig(path, dpi=110)
        written.append(path)
    return written


def print_summary(outcomes: Sequence[Outcome]) -> None:
    total = sum(o.seconds for o in outcomes)
    print(
        f"\n=== gtbarrier benchmarks: {os.cpu_count()} cores, {total / 60:.1f} min, "
        f"load average now {load_average()}"
    )
    header = ["benchmark", "measure", "value", "target", "", "load average", "note"]
    rows = [header, *summary_table(outcomes)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    for n, row in enumerate(rows):
        if row[1] == "other measurements":
            print(f"\n{row[1]}:")
            continue
        cells = [
            c.rjust(w) if i == 2 else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        print("  ".join(cells).rstrip())
        if n == 0:
            print("  ".join("-" * w for w in widths))


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--size",
        choices=sorted(SIZES),
        default="default",
        help="default (about 21 min on 2 cores), small (about 5 min) or tiny "
        "(the notebooks' test run)",
    )
    parser.add_argument("--small", action="store_true", help="the same as --size small")
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO_ROOT / "results",
        help="where benchmarks.json and the plots go (results/)",
    )
    parser.add_argument("--skip", default="", help=f"comma list of {', '.join(ORDER)}")
    parser.add_argument("--bootstrap", default=os.environ.get("GTB_KAFKA_BOOTSTRAP"))
    parser.add_argument("--s3-endpoint", default=os.environ.get("GTB_S3_ENDPOINT"))
    parser.add_argument(
        "--zk-hosts",
        default=os.environ.get("GTB_ZK_HOSTS"),
        help="ZooKeeper for the recovery and latency benchmarks (default: started there)",
    )
    args = parser.parse_args(argv)
    if args.small:
        args.size = "small"
    args.skip = {s.strip() for s in args.skip.split(",") if s.strip()}
    unknown = args.skip - set(ORDER)
    if unknown:
        parser.error(f"--skip: unknown benchmark(s) {sorted(unknown)}; known: {ORDER}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    outcomes = run_all(args)
    print_summary(outcomes)
    path = write_results(outcomes, args.out, args)
    for written in [path, *plot_results(outcomes, args.out)]:
        print(f"wrote {written}")
    failed = [o.name for o in outcomes if o.error is not None]
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
