"""What a chaos run reports: a line per round while it runs, the table at the end, the
results JSON and a PNG (each round's timeline with its faults, and faults by kind)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from integration_tests.chaos.rounds import RoundResult
from integration_tests.chaos.variants import SETTING_FAULT


@dataclass(frozen=True)
class RunSummary:
    seed: int
    rounds: int
    passed: int
    faults: int
    by_kind: dict[str, int]
    skipped: int
    records: int
    lost: int
    duplicated: int
    differing: int
    order_errors: int
    seconds: float
    load: tuple[float, float, float]  # min, mean, max of the 1-minute load average
    failures: list[str]
    poisoned: int = 0  # rounds with poison rows
    switched: int = 0  # ... of them switched from errors.tolerance=none to all
    dead_letters: int = 0  # rows in the dead letters, every round
    settings_changed: int = 0  # rounds whose consumer setting changed between driver starts
    sparse: int = 0  # rounds with sparse output
    stored_epochs_max: int = 0  # the most epochs a sparse round stored at its end
    driver_reads: int = 0  # rounds whose source read on the driver (readMode=driver)

    @property
    def clean(self) -> bool:
        return self.passed == self.rounds


def _kind_label(kind: str, params: dict[str, Any]) -> str:
    return f"{kind}:{params['step']}" if "step" in params else kind


def summarize(
    seed: int, results: list[RoundResult], seconds: float, loads: list[float]
) -> RunSummary:
    fired = [f for r in results for f in r.fired]
    by_kind = Counter(f.kind for f in fired)
    verdicts = [r.verdict for r in results if r.verdict is not None]
    failures = [
        f"round {r.plan.round_id} (--seed {seed} --first-round {r.plan.index} --rounds 1): "
        f"{r.status}, {r.plan.describe()}; faults "
        + ", ".join(f"{_kind_label(f.kind, f.params)}" for f in r.faults)
        + "; "
        + "; ".join((r.verdict.problems if r.verdict else []) + r.notes)
        + f" (logs: {r.logs})"
        for r in results
        if r.status != "pass"
    ]
    return RunSummary(
        seed=seed,
        rounds=len(results),
        passed=sum(1 for r in results if r.status == "pass"),
        faults=len(fired),
        by_kind=dict(sorted(by_kind.items())),
        skipped=sum(1 for r in results for f in r.faults if not f.fired),
        records=sum(v.records for v in verdicts),
        lost=sum(v.lost for v in verdicts),
        duplicated=sum(v.duplicated for v in verdicts),
        differing=sum(v.differing for v in verdicts),
        order_errors=sum(v.order_errors for v in verdicts),
        seconds=round(seconds, 1),
        load=(min(loads), sum(loads) / len(loads), max(loads)) if loads else (0.0, 0.0, 0.0),
        failures=failures,
        poisoned=sum(1 for r in results if r.plan.poison is not None),
        switched=sum(1 for r in results if r.switched),
        dead_letters=sum(v.dead_letters for v in verdicts),
        settings_changed=sum(1 for r in results for f in r.fired if f.kind == SETTING_FAULT),
        sparse=sum(1 for r in results if r.plan.sparse is not None),
        stored_epochs_max=max(
            (v.stored_epochs for v in verdicts if v.stored_epochs is not None), default=0
        ),
        driver_reads=sum(1 for r in results if r.plan.read_mode == "driver"),
    )


def round_line(r: RoundResult) -> str:
    v = r.verdict
    counts = (
        f"records {v.records}, lost {v.lost}, duplicated {v.duplicated}, differing {v.differing}"
        if v is not None
        else "no verdict"
    )
    if v is not None and r.plan.poison is None and r.plan.setting is not None:
        counts += f", dead letters {v.dead_letters}"
    if v is not None and r.plan.sparse is not None:
        counts += f", {v.stored_epochs} epochs stored (at most {r.plan.sparse.bound()})"
    if v is not None and r.plan.poison is not None:
        switched = ", switched none -> all" if r.switched else ""
        counts += f", dead letters {v.dead_letters}{switched}"
    faults = ", ".join(
        _kind_label(f.kind, f.params) + ("" if f.fired else " (not injected)") for f in r.faults
    )
    reads = " (read on the driver)" if r.plan.read_mode == "driver" else ""
    return (
        f"[{r.plan.round_id}] {r.status.upper():7} {r.seconds:6.1f}s {r.plan.query} -> "
        f"{r.consumer}{reads}: {faults}; {counts}; {r.driver_starts} driver start(s)"
    )


def table(s: RunSummary) -> str:
    """The end-of-run table (plain text)."""
    kinds = Counter[str]()
    steps: dict[str, Counter[str]] = {}
    for label, n in s.by_kind.items():
        kind, _, step = label.partition(":")
        kinds[kind] += n
        if step:
            steps.setdefault(kind, Counter())[step] += n
    rows = [
        ("seed", str(s.seed)),
        ("rounds", f"{s.rounds} ({s.passed} passed, {s.rounds - s.passed} failed)"),
        (
            "faults injected",
            f"{s.faults}" + (f" ({s.skipped} drawn but not injected)" if s.skipped else ""),
        ),
    ]
    for kind, n in sorted(kinds.items()):
        detail = ""
        if kind in steps:
            detail = " (" + ", ".join(f"{k} {v}" for k, v in sorted(steps[kind].items())) + ")"
        rows.append((f"  {kind}", f"{n}{detail}"))
    rows += [
        ("records", f"{s.records:,}"),
        (
            "poison rounds",
            f"{s.poisoned} ({s.switched} switched from errors.tolerance=none)",
        ),
        ("dead letters", f"{s.dead_letters} rows"),
        ("setting changes", f"{s.settings_changed} (rounds whose refused set changed)"),
        (
            "sparse rounds",
            f"{s.sparse} (at most {s.stored_epochs_max} epochs stored at a round's end)",
        ),
        ("rounds read on the driver", f"{s.driver_reads} (gtkafka readMode=driver)"),
        ("lost", str(s.lost)),
        ("duplicated", str(s.duplicated)),
        ("differing", str(s.differing)),
        ("order errors", str(s.order_errors)),
        ("duration", f"{s.seconds / 60:.1f} min"),
        ("load average (1 min)", f"{s.load[0]:.1f} min, {s.load[1]:.1f} mean, {s.load[2]:.1f} max"),
        ("verdict", "PASS" if s.clean else "FAIL"),
    ]
    width = max(len(k) for k, _ in rows)
    return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)


def write_json(
    path: Path, summary: RunSummary, results: list[RoundResult], options: dict[str, Any]
) -> None:
    def result(r: RoundResult) -> dict[str, Any]:
        raw = asdict(r)
        raw["plan"] = asdict(r.plan)
        return raw

    path.write_text(
        json.dumps(
            {
                "options": options,
                "summary": asdict(summary),
                "rounds": [result(r) for r in results],
            },
            indent=1,
            default=str,
        )
    )


def write_plot(
    path: Path, summary: RunSummary, results: list[RoundResult], starts: list[float]
) -> None:
    """Each round as a bar over the run's time, faults as markers; faults by kind."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    kinds = sorted({f.kind for r in results for f in r.faults})
    cmap = plt.get_cmap("tab20")
    colour = {k: cmap(i % 20) for i, k in enumerate(kinds)}
    fig, (ax, bars) = plt.subplots(
        1,
        2,
        figsize=(15, max(4.0, 0.28 * len(results) + 2)),
        gridspec_kw={"width_ratios": [3, 1]},
    )
    status_colour = {"pass": "#9bd49b", "fail": "#e06666", "timeout": "#f6b26b", "error": "#b4a7d6"}
    seen: set[str] = set()
    for y, (r, start) in enumerate(zip(results, starts, strict=True)):
        ax.barh(
            y,
            r.seconds / 60,
            left=start / 60,
            color=status_colour.get(r.status, "grey"),
            edgecolor="none",
            height=0.7,
        )
        for f in r.faults:
            label = f.kind if f.kind not in seen else None
            seen.add(f.kind)
            ax.plot(
                (start + f.at) / 60,
                y,
                marker="o" if f.fired else "x",
                color=colour[f.kind],
                markersize=6,
                label=label,
                linestyle="none",
            )
    ax.set_yticks(range(len(results)))
    ax.set_yticklabels(
        [f"{r.plan.round_id} {r.plan.query[:4]}/{r.plan.consumer}" for r in results], fontsize=7
    )
    ax.invert_yaxis()
    ax.set_xlabel("minutes since the run started")
    ax.set_title(
        f"chaos run, seed {summary.seed}: {summary.rounds} rounds, {summary.faults} "
        f"faults, lost {summary.lost}, duplicated {summary.duplicated}, "
        f"differing {summary.differing}",
        fontsize=10,
    )
    # Rounds run one after another from the top left (the y axis is inverted) to the
    # bottom right: the top right corner is the part of the plot that no bar covers.
    ax.legend(fontsize=7, loc="upper right", ncols=2)
    counts = Counter(f.kind for r in results for f in r.fired)
    names = sorted(counts)
    bars.barh(names, [counts[n] for n in names], color=[colour[n] for n in names])
    bars.invert_yaxis()
    bars.set_title("faults injected, by kind", fontsize=10)
    bars.tick_params(axis="y", labelsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
