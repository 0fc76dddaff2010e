"""docs/grafana-dashboard.json is well-formed and names only metrics gtbarrier serves."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from state.metrics.definitions import SERIES_NAMES

DASHBOARD = Path(__file__).resolve().parents[1] / "docs" / "grafana-dashboard.json"
METRIC = re.compile(r"\bgtbarrier_[A-Za-z0-9_]+")
# Every metric the operations guide promises, by the series a dashboard would use.
REQUIRED = {
    "gtbarrier_gt_last",
    "gtbarrier_bundles_delivered_total",
    "gtbarrier_microbatch_duration_seconds_bucket",
    "gtbarrier_source_offsets_behind",
    "gtbarrier_snapshot_age_seconds",
    "gtbarrier_deadletter_rows_total",
    "gtbarrier_owner_generation",
    "gtbarrier_planned_epoch",
    "gtbarrier_delivered_epoch",
    "gtbarrier_inflight_epoch",
    "gtbarrier_inflight_age_seconds",
    "gtbarrier_last_progress_timestamp_seconds",
    "gtbarrier_source_end_offset",
    "gtbarrier_up",
    "gtbarrier_scrape_errors_total",
}


def _dashboard() -> dict[str, Any]:
    data: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return data


def _expressions(dashboard: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in dashboard["panels"] for t in p["targets"]]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            exprs.append(var["definition"])
    return exprs


def test_the_dashboard_is_well_formed() -> None:
    dashboard = _dashboard()
    assert dashboard["title"] and dashboard["uid"]
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    for panel in dashboard["panels"]:
        assert panel["title"] and panel["type"] and panel["targets"], panel
        assert {"x", "y", "w", "h"} <= set(panel["gridPos"])
        refs = [t["refId"] for t in panel["targets"]]
        assert len(refs) == len(set(refs)), panel["title"]


def test_every_expression_names_only_metrics_that_exist() -> None:
    named: set[str] = set()
    for expr in _expressions(_dashboard()):
        found = set(METRIC.findall(expr))
        assert found, f"{expr!r} names no gtbarrier metric"
        assert found <= SERIES_NAMES, f"{expr!r} names {sorted(found - SERIES_NAMES)}"
        assert expr.count("(") == expr.count(")") and expr.count("{") == expr.count("}"), expr
        named |= found
    assert named >= REQUIRED, sorted(REQUIRED - named)
