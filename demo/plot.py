"""The demo's figure: throughput, snapshots, the crash and the recovery, GT_last advancing.

:func:`plot_run` draws it from the progress events (:mod:`demo.progress`) into a PNG:

* top: records per second of each micro-batch over wall-clock time, per driver, with
  accepted snapshots as dotted lines, the SIGKILL as a red line and the recovery (from
  the kill to the first new bundle delivered) shaded;
* bottom: the barrier's ``GT_last`` (the last epoch the consumer acknowledged) as a step
  line, and the epochs replayed after the restart that the barrier dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from matplotlib.figure import Figure  # no pyplot: no global backend, safe in notebooks

DRIVER_COLOURS = {1: "#1f77b4", 2: "#2ca02c", 3: "#9467bd", 4: "#8c564b"}


def plot_run(events: Sequence[dict[str, Any]], path: Path, *, total_records: int) -> Path:  # noqa: PLR0912, PLR0915 - one figure, panel by panel
    """Draw the run described by ``events`` into ``path`` (PNG); return ``path``."""
    if not events:
        raise ValueError("no progress events to plot")
    t0 = min(e["t"] for e in events)

    def at(e: dict[str, Any]) -> float:
        return float(e["t"]) - float(t0)

    drivers = sorted({int(e["driver"]) for e in events if e["driver"]})
    fig = Figure(figsize=(11, 7.5))
    top, bottom = fig.subplots(2, 1, sharex=True, gridspec_kw={"height_ratios": [3, 2]})
    title = f"gtbarrier demo: {total_records:,} records, exactly once through a driver crash"
    fig.suptitle(title, fontsize=13)

    for d in drivers:
        batches = [e for e in events if e["driver"] == d and e["event"] == "batch" and e["rows"]]
        xs = [at(e) for e in batches]
        ys = [e["rows"] / max(e["duration_ms"], 1) * 1000 for e in batches]
        colour = DRIVER_COLOURS.get(d, "black")
        top.plot(
            xs,
            ys,
            marker="o",
            markersize=3,
            linewidth=1.2,
            color=colour,
            label=f"driver {d}: records/s per micro-batch",
        )

    snapshots = [e for e in events if e["event"] == "snapshot"]
    for i, e in enumerate(snapshots):
        for ax in (top, bottom):
            ax.axvline(
                at(e),
                color="grey",
                linestyle=":",
                linewidth=1,
                label="snapshot accepted" if i == 0 and ax is top else None,
            )

    kill = next((e for e in events if e["event"] == "kill"), None)
    if kill is not None:
        gt_at_kill = int(kill["gt_last"])
        resumed = next(
            (
                e
                for e in events
                if e["event"] == "commit"
                and e["driver"] != 1
                and e["action"] == "delivered"
                and int(e["epoch"]) > gt_at_kill
            ),
            None,
        )
        for ax in (top, bottom):
            ax.axvline(
                at(kill),
                color="#d62728",
                linewidth=2,
                label="SIGKILL driver 1, checkpoint deleted" if ax is top else None,
            )
            if resumed is not None:
                ax.axvspan(
                    at(kill),
                    at(resumed),
                    color="#d62728",
                    alpha=0.08,
                    label=f"recovery ({at(resumed) - at(kill):.1f} s)" if ax is top else None,
                )

    # What the restarted driver did during the recovery, at the bottom of the top panel.
    steps = {
        "driver_started": "driver {d} starts",
        "spark_ready": "Spark up",
        "recovered": "recover(): {action}",
        "query_started": "query starts",
    }
    marks: list[tuple[float, str]] = []
    span = max(at(e) for e in events) or 1.0
    for e in events:
        label = steps.get(e["event"])
        if label is None or e["driver"] == 1:
            continue
        text = label.format(d=e["driver"], action=e.get("action", ""))
        if marks and at(e) - marks[-1][0] < 0.015 * span:  # too close to read apart
            marks[-1] = (marks[-1][0], f"{marks[-1][1]}, {text}")
        else:
            marks.append((at(e), text))
    for x, text in marks:
        top.axvline(x, color="#7f7f7f", linewidth=0.8, ymax=0.12)
        top.annotate(
            text,
            (x, 0),
            xytext=(2, 14),
            textcoords="offset points",
            rotation=90,
            fontsize=7,
            color="#444444",
            va="bottom",
        )

    top.set_ylabel("Kafka records / s")
    top.set_ylim(bottom=0, top=max(top.get_ylim()[1], 1) * 1.05)
    top.grid(alpha=0.3)
    _legend_above(top)

    gts = sorted(
        ((at(e), int(e["gt_last"])) for e in events if e["event"] == "gt_last"),
        key=lambda p: p[0],
    )
    if gts:
        xs, ys = _monotone_steps(gts)
        end = max(at(e) for e in events)
        bottom.step(
            [*xs, end],
            [*ys, ys[-1]],
            where="post",
            color="black",
            linewidth=1.5,
            label="GT_last (last epoch the consumer acknowledged)",
        )
    dropped = [e for e in events if e["event"] == "commit" and e["action"] == "dropped"]
    if dropped:
        bottom.scatter(
            [at(e) for e in dropped],
            [int(e["epoch"]) for e in dropped],
            marker="x",
            color="#ff7f0e",
            zorder=3,
            label="replayed epoch dropped at the barrier",
        )
    for i, e in enumerate(snapshots):
        bottom.scatter(
            [at(e)],
            [int(e["epoch"])],
            marker="D",
            s=18,
            color="grey",
            zorder=3,
            label="snapshot epoch (resume point)" if i == 0 else None,
        )
    bottom.set_ylabel("epoch")
    bottom.set_xlabel("seconds since the demo started")
    bottom.grid(alpha=0.3)
    _legend_above(bottom)

    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    return path


def _legend_above(ax: Any) -> None:
    """The legend in a row above the panel, where it hides no data."""
    ax.legend(
        loc="lower left",
        bbox_to_anchor=(0, 1.01, 1, 0.1),
        mode="expand",
        ncol=3,
        fontsize=8,
        frameon=False,
        borderaxespad=0,
    )


def _monotone_steps(points: Sequence[tuple[float, int]]) -> tuple[list[float], list[int]]:
    """GT_last never moves backwards: keep only the points where it rises."""
    xs: list[float] = []
    ys: list[int] = []
    for x, y in points:
        if not ys or y > ys[-1]:
            xs.append(x)
            ys.append(y)
    return xs, ys
