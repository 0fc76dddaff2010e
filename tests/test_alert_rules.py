"""docs/alerts.yml, checked and unit-tested by Prometheus's own ``promtool`` (Debian's
``prometheus`` package, installed by ``scripts/setup.sh``): the rules parse, every case of
``tests/alerts_test.yml`` holds (stuck fires and resolves, an idle or sparse pipeline does
not, one alert per pipeline scraped twice...), and every metric a rule names is one the
endpoints serve."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from state.metrics.definitions import SERIES_NAMES

ROOT = Path(__file__).resolve().parents[1]
RULES = ROOT / "docs" / "alerts.yml"
CASES = ROOT / "tests" / "alerts_test.yml"


def promtool() -> str:
    found = shutil.which("promtool")
    if found is None:
        pytest.fail("promtool not found: scripts/setup.sh installs Debian's prometheus package")
    return found


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [promtool(), *args],
        check=False,
        cwd=CASES.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_rules_parse() -> None:
    done = run("check", "rules", str(RULES))
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS: 7 rules found" in done.stdout


def test_every_case_holds() -> None:
    done = run("test", "rules", CASES.name)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "SUCCESS" in done.stdout


def test_every_alert_has_a_case_that_fires_it() -> None:
    rules = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    cases = yaml.safe_load(CASES.read_text())["tests"]
    fired = {
        check["alertname"]
        for case in cases
        for check in case["alert_rule_test"]
        if check.get("exp_alerts")
    }
    assert fired == {rule["alert"] for rule in rules}


def test_every_metric_a_rule_names_is_served() -> None:
    rules = yaml.safe_load(RULES.read_text())["groups"][0]["rules"]
    named = {m for rule in rules for m in re.findall(r"\bgtbarrier_[a-z_]+\b", rule["expr"])}
    assert named and named <= SERIES_NAMES, sorted(named - SERIES_NAMES)
